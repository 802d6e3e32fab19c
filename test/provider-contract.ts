// The provider contract: what every SubagentProvider must do, seen only through the public API
// (host.subagents.start with a parent from host.createAgent()). Each provider's test file runs it.
import { getEventListeners } from 'node:events';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  delegationDepthOf,
  memoryPersistence,
  text,
  type Agent,
  type Host,
  type SessionEvent,
  type SessionPersistence,
  type ScriptedStep,
  type SubagentCapabilities,
  type SubagentResult,
  type SubagentStartRequest,
} from 'subagent-host';
import { recordingTool, types } from './helpers.js';

/** What a provider's test file hands the contract. */
export interface ProviderContractOptions {
  /** The capabilities the provider declares (checked against its registration). */
  capabilities: SubagentCapabilities;
  /** True when runs carry a `localAgent` and the child's session lives in `host.sessions`. */
  local: boolean;
  /** True when the child's session lives in `host.sessions` without a `localAgent` (an ACP mirror). */
  mirror?: boolean;
  /** True for a forking provider: the parent completes a turn first, and the child must be seeded with it. */
  fork?: boolean;
  /** The resources the provider created that are still alive (threads, ports, processes); empty after `host.close()`. */
  leftovers?(host: Host): unknown[];
  /** A fresh host, created with `persistence`, with the provider registered under `provider`; called before each test. */
  setup(persistence: SessionPersistence): Promise<{ host: Host; provider: string; teardown?: () => Promise<void> }>;
}

/**
 * A memory store that is fully write-behind: appends are buffered and reach the store only on
 * `flush()` (the durability barrier of the SessionPersistence contract), so a dispose that does not
 * flush leaves the stored log behind the live one.
 */
function writeBehindPersistence(): SessionPersistence {
  const inner = memoryPersistence();
  const buffered: [string, SessionEvent[]][] = [];
  const flush = async () => {
    for (const [id, events] of buffered.splice(0)) await inner.append(id, events);
    await inner.flush();
  };
  return {
    create: (header) => inner.create(header),
    append: async (id, events) => void buffered.push([id, [...events]]),
    load: (id) => inner.load(id),
    list: (filter) => inner.list(filter),
    childRecords: (id) => inner.childRecords(id),
    descendantRecords: (id) => inner.descendantRecords(id),
    projections: (ids) => inner.projections(ids),
    flush,
    close: async () => {
      await flush();
      await inner.close();
    },
  };
}

const ECHO_MODEL = new URL('./fixtures/echo-model.mjs', import.meta.url).href;

/** Request options making the child's model follow `steps` (a serializable ModelSpec). */
function scripted(...steps: ScriptedStep[]): Pick<SubagentStartRequest, 'agentOptions'> {
  return { agentOptions: { model: { kind: 'scripted', steps } } };
}

function expectDeeplyFrozen(value: unknown): void {
  if (value === null || typeof value !== 'object') return;
  expect(Object.isFrozen(value)).toBe(true);
  for (const child of Object.values(value)) expectDeeplyFrozen(child);
}

/** Declares the contract suite for one provider. */
export function providerContract(label: string, options: ProviderContractOptions): void {
  const { capabilities, local } = options;
  const sessionLocal = local || options.mirror === true;
  const capabilityCases: [keyof SubagentCapabilities, string, Partial<SubagentStartRequest>][] = [
    ['outputSchema', 'outputSchema', { outputSchema: { type: 'object', properties: {} } }],
    ['depthLimit', 'maxDepth', { maxDepth: 3 }],
    ['toolFilter', 'toolFilter', { toolFilter: { deny: [] } }],
    ['persona', 'persona', { persona: 'terse' }],
  ];

  describe(`provider contract: ${label}`, () => {
    let host: Host;
    let provider: string;
    let teardown: (() => Promise<void>) | undefined;
    let parent: Agent;
    let persistence: SessionPersistence;

    beforeEach(async () => {
      persistence = writeBehindPersistence();
      ({ host, provider, teardown } = await options.setup(persistence));
      parent = await host.createAgent();
      if (options.fork) {
        parent.followup([text('remember the word kiwi')]);
        await parent.whenIdle();
      }
    });

    afterEach(async () => {
      await host.close();
      await teardown?.();
      await persistence.close();
    });

    function start(request: Partial<SubagentStartRequest> = {}) {
      return host.subagents.start(provider, { label: 'contract', prompt: [text('do the task')], parent, signal: new AbortController().signal, ...request });
    }

    async function settle(request: Partial<SubagentStartRequest> = {}): Promise<SubagentResult> {
      const run = await start(request);
      try {
        return await run.result;
      } finally {
        await run.dispose();
      }
    }

    function liveIds(): { sessions: string[]; agents: string[] } {
      return { sessions: host.sessions.list().map((s) => s.header.id), agents: host.agents.list().map((a) => a.id) };
    }

    it('is registered with the declared capabilities', () => {
      expect(host.subagents.getProvider(provider)?.capabilities).toEqual(capabilities);
    });

    it('returns the output of a completed child', async () => {
      await expect(settle(scripted({ text: 'the answer is 42' }))).resolves.toEqual({ output: [text('the answer is 42')], stopReason: 'completed' });
    });

    it('resolves a deeply frozen result', async () => {
      const result = await settle(scripted({ text: 'frozen' }));
      expectDeeplyFrozen(result);
    });

    it('emits start then end, scoped to the parent, with one run id', async () => {
      const heard: unknown[] = [];
      const offs = [
        host.subagents.on('subagent/start', (e) => void heard.push(['start', e.runId, e.id, e.local]), { parent: parent.id }),
        host.subagents.on('subagent/end', (e) => void heard.push(['end', e.runId, e.id, e.stopReason]), { parent: parent.id }),
        host.subagents.on('subagent/start', () => void heard.push('other parent'), { parent: 'someone-else' }),
      ];
      const run = await start(scripted({ text: 'done' }));
      await run.result;
      await run.dispose();
      offs.forEach((off) => off());
      const runId = (heard[0] as unknown[])[1];
      expect(heard).toEqual([
        ['start', runId, run.id, local],
        ['end', runId, run.id, 'completed'],
      ]);
      expect(host.subagents.listenerCount).toBe(0);
    });

    it.each([
      ['max-tokens', 'max-tokens'],
      ['refusal', 'refusal'],
      ['error', 'error'],
    ] as const)('maps a %s finish to stopReason %s', async (finish, stopReason) => {
      const result = await settle(scripted({ finish, text: 'partial' }));
      expect(result.stopReason).toBe(stopReason);
      expect(result.output).toEqual([text('partial')]);
      if (stopReason === 'error') expect(typeof result.diagnostic).toBe('string');
    });

    it('settles aborted when cancel() is called', async () => {
      const run = await start(scripted({ finish: 'hang' }));
      run.cancel();
      await expect(run.result).resolves.toMatchObject({ stopReason: 'aborted' });
      await run.dispose();
    });

    it('settles aborted when the signal aborts after start', async () => {
      const controller = new AbortController();
      const run = await start({ ...scripted({ finish: 'hang' }), signal: controller.signal });
      controller.abort(new Error('stop'));
      await expect(run.result).resolves.toMatchObject({ stopReason: 'aborted' });
      await run.dispose();
    });

    it('rejects CANCELLED and leaves no child when the signal was aborted before start', async () => {
      const before = liveIds();
      const reason = new Error('too late');
      await expect(start({ signal: AbortSignal.abort(reason) })).rejects.toMatchObject({ code: 'CANCELLED', cause: reason });
      expect(liveIds()).toEqual(before);
    });

    it('either rejects CANCELLED with no child or settles aborted when the signal aborts during start', async () => {
      const before = liveIds();
      const controller = new AbortController();
      const starting = start({ ...scripted({ finish: 'hang' }), signal: controller.signal });
      controller.abort(new Error('stop'));
      const outcome = await starting.then(
        async (run) => {
          const result = await run.result;
          await run.dispose();
          return result.stopReason;
        },
        (error: { code?: unknown }) => error.code,
      );
      expect(['CANCELLED', 'aborted']).toContain(outcome);
      expect(liveIds()).toEqual(before);
    });

    it('disposes idempotently and leaves nothing behind after host.close()', async () => {
      const controller = new AbortController();
      const run = await start({ ...scripted({ text: 'done' }), signal: controller.signal });
      await run.result;
      const first = run.dispose();
      expect(run.dispose()).toBe(first);
      await Promise.all([first, run.dispose()]);
      expect(host.agents.list().map((a) => a.id)).toEqual([parent.id]);
      expect(host.subagents.activeRuns).toBe(0);
      expect(getEventListeners(controller.signal, 'abort')).toEqual([]);
      await host.close();
      expect(host.agents.list()).toEqual([]);
      expect(host.sessions.list()).toEqual([]);
      expect(host.subagents.listenerCount).toBe(0);
      expect(host.subagents.activeRuns).toBe(0);
      // Ports and processes report their end asynchronously; what never ends keeps the list non-empty.
      await expect.poll(() => options.leftovers?.(host) ?? [], { timeout: 10_000 }).toEqual([]);
    });

    it('host.close() ends and disposes a run its caller never disposed', async () => {
      const run = await start(scripted({ finish: 'hang' }));
      await host.close();
      await expect(run.result).resolves.toMatchObject({ stopReason: 'aborted' });
      expect(host.agents.list()).toEqual([]);
      expect(host.subagents.activeRuns).toBe(0);
    });

    if (sessionLocal) {
      it('publishes the child session with lineage before start resolves', async () => {
        const deep = await host.createAgent({ agentOptions: { subagentDepth: 2 } });
        const run = await start({ ...scripted({ finish: 'hang' }), parent: deep });
        expect(run.localAgent?.id).toBe(local ? run.id : undefined);
        expect(host.sessions.get(run.id)?.header).toMatchObject({
          parentSession: deep.id,
          origin: 'subagent',
          delegationDepth: delegationDepthOf(deep) + 1,
        });
        run.cancel();
        await run.result;
        await run.dispose();
      });

      it('holds the complete child log, descriptor inside its first turn, when result settles', async () => {
        const run = await start(scripted({ text: 'logged' }));
        await run.result;
        const events = host.sessions.get(run.id)?.events ?? [];
        const own = types(events.slice(host.sessions.get(run.id)?.header.seedLength ?? 0));
        const descriptorAt = own.indexOf('subagent/descriptor');
        expect(own.indexOf('turn/start')).toBeLessThan(descriptorAt);
        expect(own.indexOf('turn/end')).toBeGreaterThan(descriptorAt);
        expect(own.at(-1)).toBe('turn/end');
        expect(events.find((e) => e.type === 'subagent/descriptor')?.data).toEqual({ version: 2, mode: 'one-shot', provider, label: 'contract' });
        await run.dispose();
      });

      it('flushes the child log to persistence on dispose; listChildren finds the child afterwards', async () => {
        const run = await start(scripted({ text: 'kept' }));
        await run.result;
        const live = [...(host.sessions.get(run.id)?.events ?? [])];
        await run.dispose();
        const stored = await persistence.load(run.id);
        expect(stored?.header).toMatchObject({ id: run.id, parentSession: parent.id, origin: 'subagent' });
        expect(stored?.events).toEqual(live);
        expect(types(stored?.events ?? []).at(-1)).toBe('turn/end');
        const children = await host.subagents.listChildren(parent.id);
        expect(children.filter((row) => row.kind === 'child' && row.id === run.id)).toHaveLength(1);
      });
    }

    if (options.fork) {
      const historyEcho = { agentOptions: { model: { kind: 'module' as const, specifier: ECHO_MODEL, export: 'createHistoryEchoModel' } } };

      it("seeds the child with the parent's completed turns; its model sees them", async () => {
        const parentEvents = [...parent.session.events];
        expect(types(parentEvents).at(-1)).toBe('turn/end');
        const run = await start({ ...historyEcho, prompt: [text('what was the word?')] });
        const result = await run.result;
        const child = host.sessions.get(run.id)!;
        expect(child.header.seedLength).toBe(parentEvents.length);
        expect(child.events.slice(0, parentEvents.length)).toEqual(parentEvents);
        expect(child.events.map((event) => event.seq)).toEqual(child.events.map((_, i) => i));
        expect(result).toEqual({
          output: [text('user: remember the word kiwi | assistant: echo: remember the word kiwi | user: what was the word?')],
          stopReason: 'completed',
        });
        await run.dispose();
      });

      it('forks a parent without a completed turn as a spawn: no seed, no seedLength', async () => {
        const fresh = await host.createAgent();
        const run = await start({ ...historyEcho, parent: fresh, prompt: [text('hi')] });
        await expect(run.result).resolves.toEqual({ output: [text('user: hi')], stopReason: 'completed' });
        const child = host.sessions.get(run.id)!;
        expect('seedLength' in child.header).toBe(false);
        expect(types(child.events).filter((type) => type === 'turn/end')).toHaveLength(1);
        await run.dispose();
      });
    }

    for (const [capability, field, extra] of capabilityCases) {
      if (capabilities[capability]) continue;
      it(`rejects ${field} with UNSUPPORTED_CAPABILITY and starts nothing`, async () => {
        const before = liveIds();
        await expect(start(extra)).rejects.toMatchObject({ code: 'UNSUPPORTED_CAPABILITY' });
        expect(liveIds()).toEqual(before);
      });
    }

    if (capabilities.outputSchema) {
      const schema = { type: 'object', properties: { answer: { type: 'number' } }, required: ['answer'], additionalProperties: false };

      it('captures the first structured_output call as result.structured', async () => {
        const result = await settle({ ...scripted({ toolCalls: [{ name: 'structured_output', input: { answer: 42 } }] }), outputSchema: schema });
        expect(result).toMatchObject({ structured: { answer: 42 }, stopReason: 'completed' });
        expectDeeplyFrozen(result);
      });

      it('settles error when the child never calls structured_output', async () => {
        const result = await settle({ ...scripted({ text: 'plain words' }), outputSchema: schema });
        expect(result.stopReason).toBe('error');
        expect(result.structured).toBeUndefined();
      });
    }

    if (capabilities.depthLimit) {
      it('rejects DEPTH_EXCEEDED before any child exists', async () => {
        const before = liveIds();
        await expect(start({ maxDepth: delegationDepthOf(parent) })).rejects.toMatchObject({ code: 'DEPTH_EXCEEDED' });
        expect(liveIds()).toEqual(before);
      });

      it('starts a child whose depth is within maxDepth', async () => {
        await expect(settle({ ...scripted({ text: 'ok' }), maxDepth: delegationDepthOf(parent) + 1 })).resolves.toMatchObject({ stopReason: 'completed' });
      });
    }

    if (capabilities.toolFilter) {
      const calls = (name: string) => scripted({ toolCalls: [{ name, input: { value: 'x' } }] }, { text: 'done' });

      it('lets an unfiltered child call a host tool', async () => {
        const probe = recordingTool('contract_probe');
        host.tools.register(probe);
        await expect(settle(calls('contract_probe'))).resolves.toMatchObject({ output: [text('done')], stopReason: 'completed' });
        expect(probe.calls).toEqual([{ value: 'x' }]);
      });

      it('never executes a host tool the filter denies', async () => {
        const probe = recordingTool('contract_probe');
        host.tools.register(probe);
        const result = await settle({ ...calls('contract_probe'), toolFilter: { deny: ['contract_probe'] } });
        expect(result).toMatchObject({ output: [text('done')], stopReason: 'completed' });
        expect(probe.calls).toEqual([]);
      });

      it('rejects INVALID_REQUEST for an unknown tool name and starts nothing', async () => {
        const before = liveIds();
        await expect(start({ toolFilter: { allow: ['no_such_tool'] } })).rejects.toMatchObject({ code: 'INVALID_REQUEST' });
        expect(liveIds()).toEqual(before);
      });
    }

    if (capabilities.persona) {
      it("makes the persona the child's system prompt", async () => {
        const model = { kind: 'module' as const, specifier: ECHO_MODEL, export: 'createSystemEchoModel' };
        const result = await settle({ agentOptions: { model }, persona: 'You are terse.' });
        expect(result).toEqual({ output: [text('system: You are terse.')], stopReason: 'completed' });
      });
    }
  });
}
