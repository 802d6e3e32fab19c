// The provider contract's tests of children whose session lives in `host.sessions` (local and ACP
// mirrors): failure diagnostics, lineage, the complete log, flushing on dispose, and fork seeding.
import { expect, it } from 'vitest';
import {
  delegationDepthOf,
  text,
  type Agent,
  type Host,
  type ScriptedStep,
  type SessionPersistence,
  type SubagentResult,
  type SubagentRun,
  type SubagentStartRequest,
} from 'subagent-host';
import { types } from './helpers.js';

export const ECHO_MODEL = new URL('./fixtures/echo-model.mjs', import.meta.url).href;
/** Exports one tool, `shout`, that upper-cases `value`. */
export const TOOL_MODULE = new URL('./fixtures/tool-module.mjs', import.meta.url).href;

/** Request options making the child's model follow `steps` (a serializable ModelSpec). */
export function scripted(...steps: ScriptedStep[]): Pick<SubagentStartRequest, 'agentOptions'> {
  return { agentOptions: { model: { kind: 'scripted', steps } } };
}

/** The current test's host and parent (read at test time) and its request helpers. */
export interface ContractContext {
  readonly host: Host;
  readonly parent: Agent;
  readonly persistence: SessionPersistence;
  readonly provider: string;
  start(request?: Partial<SubagentStartRequest>): Promise<SubagentRun>;
  settle(request?: Partial<SubagentStartRequest>): Promise<SubagentResult>;
}

/** Declares the tests for local (`local`), mirrored (`mirror`) and forking (`fork`) providers. */
export function localContract(ctx: ContractContext, options: { local: boolean; mirror?: boolean; fork?: boolean }): void {
  if (options.local) {
    // The failure table: a child whose model fails, or whose own code throws, settles error with
    // `CODE: message` (the error's message, never its stack).
    it('settles error with the code and message of a failing model', async () => {
      const result = await ctx.settle(scripted({ finish: 'error', text: 'partial' }));
      expect(result).toEqual({ output: [text('partial')], stopReason: 'error', diagnostic: 'SCRIPTED_ERROR: the scripted model was told to fail', usage: expect.objectContaining({ turns: 1 }) });
    });

    it('settles error with code and message, no stack, when the child’s own model code throws', async () => {
      const model = { kind: 'module' as const, specifier: ECHO_MODEL, export: 'createThrowingModel' };
      const result = await ctx.settle({ agentOptions: { model } });
      expect(result).toEqual({ output: [text('about to fail')], stopReason: 'error', diagnostic: 'MODEL_FAILURE: Error: the adapter exploded', usage: expect.objectContaining({ turns: 1 }) });
    });
  }

  if (options.local || options.mirror) {
    it('publishes the child session with lineage before start resolves', async () => {
      const deep = await ctx.host.createAgent({ agentOptions: { subagentDepth: 2 } });
      const run = await ctx.start({ ...scripted({ finish: 'hang' }), parent: deep });
      expect(run.localAgent?.id).toBe(options.local ? run.id : undefined);
      expect(ctx.host.sessions.get(run.id)?.header).toMatchObject({
        parentSession: deep.id,
        origin: 'subagent',
        delegationDepth: delegationDepthOf(deep) + 1,
      });
      run.cancel();
      await run.result;
      await run.dispose();
    });

    it('holds the complete child log, descriptor inside its first turn, when result settles', async () => {
      const run = await ctx.start(scripted({ text: 'logged' }));
      await run.result;
      const events = ctx.host.sessions.get(run.id)?.events ?? [];
      const own = types(events.slice(ctx.host.sessions.get(run.id)?.header.seedLength ?? 0));
      const descriptorAt = own.indexOf('subagent/descriptor');
      expect(own.indexOf('turn/start')).toBeLessThan(descriptorAt);
      expect(own.indexOf('turn/end')).toBeGreaterThan(descriptorAt);
      expect(own.at(-1)).toBe('turn/end');
      expect(events.find((e) => e.type === 'subagent/descriptor')?.data).toEqual({ version: 2, mode: 'one-shot', provider: ctx.provider, label: 'contract' });
      await run.dispose();
    });

    it('flushes the child log to persistence on dispose; listChildren finds the child afterwards', async () => {
      const run = await ctx.start(scripted({ text: 'kept' }));
      await run.result;
      const live = [...(ctx.host.sessions.get(run.id)?.events ?? [])];
      await run.dispose();
      const stored = await ctx.persistence.load(run.id);
      expect(stored?.header).toMatchObject({ id: run.id, parentSession: ctx.parent.id, origin: 'subagent' });
      expect(stored?.events).toEqual(live);
      expect(types(stored?.events ?? []).at(-1)).toBe('turn/end');
      const children = await ctx.host.subagents.listChildren(ctx.parent.id);
      expect(children.filter((row) => row.kind === 'child' && row.id === run.id)).toHaveLength(1);
    });
  }

  if (options.fork) {
    const historyEcho = { agentOptions: { model: { kind: 'module' as const, specifier: ECHO_MODEL, export: 'createHistoryEchoModel' } } };

    it("seeds the child with the parent's completed turns; its model sees them", async () => {
      const parentEvents = [...ctx.parent.session.events];
      expect(types(parentEvents).at(-1)).toBe('turn/end');
      const run = await ctx.start({ ...historyEcho, prompt: [text('what was the word?')] });
      const result = await run.result;
      const child = ctx.host.sessions.get(run.id)!;
      expect(child.header.seedLength).toBe(parentEvents.length);
      expect(child.events.slice(0, parentEvents.length)).toEqual(parentEvents);
      expect(child.events.map((event) => event.seq)).toEqual(child.events.map((_, i) => i));
      expect(result).toEqual({
        output: [text('user: remember the word kiwi | assistant: echo: remember the word kiwi | user: what was the word?')],
        stopReason: 'completed',
        // The child's own turn only: the inherited prefix is not its usage.
        usage: expect.objectContaining({ turns: 1, requests: 1 }),
      });
      await run.dispose();
    });

    it('forks a parent without a completed turn as a spawn: no seed, no seedLength', async () => {
      const fresh = await ctx.host.createAgent();
      const run = await ctx.start({ ...historyEcho, parent: fresh, prompt: [text('hi')] });
      await expect(run.result).resolves.toEqual({ output: [text('user: hi')], stopReason: 'completed', usage: expect.objectContaining({ turns: 1 }) });
      const child = ctx.host.sessions.get(run.id)!;
      expect('seedLength' in child.header).toBe(false);
      expect(types(child.events).filter((type) => type === 'turn/end')).toHaveLength(1);
      await run.dispose();
    });
  }
}
