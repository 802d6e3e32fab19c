// The provider contract: what every SubagentProvider must do, seen only through the public API
// (host.subagents.start with a parent from host.createAgent()). Each provider's test file runs it.
import { getEventListeners } from 'node:events';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  delegationDepthOf,
  text,
  type Agent,
  type Host,
  type SessionPersistence,
  type SubagentCapabilities,
  type SubagentResult,
  type SubagentStartRequest,
} from 'subagent-host';
import { recordingTool, writeBehindPersistence } from './helpers.js';
import { ECHO_MODEL, TOOL_MODULE, localContract, scripted, type ContractContext } from './provider-contract-local.js';

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
  leftovers?(host: Host): unknown[] | Promise<unknown[]>;
  /** A fresh host, created with `persistence`, with the provider registered under `provider`; called before each test. */
  setup(persistence: SessionPersistence): Promise<{ host: Host; provider: string; teardown?: () => Promise<void> }>;
}

function expectDeeplyFrozen(value: unknown): void {
  if (value === null || typeof value !== 'object') return;
  expect(Object.isFrozen(value)).toBe(true);
  for (const child of Object.values(value)) expectDeeplyFrozen(child);
}

/** Declares the contract suite for one provider. */
export function providerContract(label: string, options: ProviderContractOptions): void {
  const { capabilities, local } = options;
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

    const context: ContractContext = {
      get host() {
        return host;
      },
      get parent() {
        return parent;
      },
      get persistence() {
        return persistence;
      },
      get provider() {
        return provider;
      },
      start,
      settle,
    };

    function liveIds(): { sessions: string[]; agents: string[] } {
      return { sessions: host.sessions.list().map((s) => s.header.id), agents: host.agents.list().map((a) => a.id) };
    }

    it('is registered with the declared capabilities', () => {
      expect(host.subagents.getProvider(provider)?.capabilities).toEqual(capabilities);
    });

    it('returns the output of a completed child', async () => {
      await expect(settle(scripted({ text: 'the answer is 42' }))).resolves.toEqual({ output: [text('the answer is 42')], stopReason: 'completed', usage: expect.objectContaining({ turns: 1 }) });
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

    localContract(context, options);

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

      it('reads an output schema pattern with Unicode semantics, as JSON Schema does', async () => {
        const named = { type: 'object', properties: { name: { type: 'string', pattern: '^\\p{L}+$' } }, required: ['name'] };
        const result = await settle({ ...scripted({ toolCalls: [{ name: 'structured_output', input: { name: 'Zoë' } }] }), outputSchema: named });
        expect(result).toMatchObject({ structured: { name: 'Zoë' }, stopReason: 'completed' });
      });

      // Constraints beside a $ref and in a subschema without a type are enforced as JSON Schema reads them.
      it('captures the first structured_output call that meets constraints beside a $ref and in a typeless subschema', async () => {
        const shaped = {
          type: 'object',
          $defs: { N: { type: 'number' } },
          properties: { n: { $ref: '#/$defs/N', maximum: 3 }, o: { properties: { k: { type: 'string' } }, required: ['k'] } },
          required: ['n', 'o'],
        };
        const calls = [{ n: 4, o: { k: 'x' } }, { n: 3, o: {} }, { n: 3, o: { k: 'x' } }];
        const result = await settle({ ...scripted(...calls.map((input) => ({ toolCalls: [{ name: 'structured_output', input }] }))), outputSchema: shaped });
        expect(result).toMatchObject({ structured: { n: 3, o: { k: 'x' } }, stopReason: 'completed', usage: expect.objectContaining({ toolCalls: 3 }) });
      });

      if (local) {
        it('rejects DUPLICATE_TOOL before any child exists when a host tool already has the capture tool’s name', async () => {
          host.tools.register({ ...recordingTool('structured_output') });
          const before = liveIds();
          await expect(start({ ...scripted({ text: 'never' }), outputSchema: schema })).rejects.toMatchObject({
            code: 'DUPLICATE_TOOL',
            message: "the child's outputSchema adds the capture tool structured_output, but a host tool is named structured_output: rename it, or hide it from the child with toolFilter { deny: ['structured_output'] }",
          });
          expect(liveIds()).toEqual(before);
          // Denied to the child, the host tool no longer clashes.
          const result = await settle({ ...scripted({ toolCalls: [{ name: 'structured_output', input: { answer: 1 } }] }), outputSchema: schema, toolFilter: { deny: ['structured_output'] } });
          expect(result).toMatchObject({ structured: { answer: 1 }, stopReason: 'completed' });
        });
      }

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

      if (local) {
        it('lets a tool module’s tool take the name of a host tool the filter hides', async () => {
          const probe = recordingTool('shout');
          host.tools.register(probe);
          const run = await start({
            agentOptions: { model: { kind: 'scripted', steps: [{ toolCalls: [{ name: 'shout', input: { value: 'hi' } }] }, { text: 'done' }] }, toolModules: [TOOL_MODULE] },
            toolFilter: { deny: ['shout'] },
          });
          try {
            await expect(run.result).resolves.toMatchObject({ output: [text('done')], stopReason: 'completed' });
            // The module's tool ran, in the child; the host's never did.
            const results = host.sessions.get(run.id)!.events.filter((e) => e.type === 'tool/result');
            expect(results.map((e) => (e.data as { content: unknown }).content)).toEqual([[text('HI')]]);
            expect(probe.calls).toEqual([]);
          } finally {
            await run.dispose();
          }
        });
      }

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
        expect(result).toEqual({ output: [text('system: You are terse.')], stopReason: 'completed', usage: expect.objectContaining({ turns: 1 }) });
      });
    }
  });
}
