// The in-process provider: the shared provider contract for spawn and fork variants, plus what only
// an in-thread child shows (fork seeding, leak checks on the host after disposal).
import { getEventListeners } from 'node:events';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createHost, inProcessProvider, text, type Agent, type Host } from 'subagent-host';
import { providerContract } from './provider-contract.js';
import { tempFiles } from './helpers.js';

const ALL = { outputSchema: true, depthLimit: true, toolFilter: true, persona: true, budget: true };

providerContract('in-process', {
  capabilities: ALL,
  local: true,
  async setup(persistence) {
    const host = await createHost({ providers: false, persistence });
    host.subagents.registerProvider(inProcessProvider(host));
    return { host, provider: 'in-process' };
  },
});

providerContract('in-process fork', {
  capabilities: ALL,
  local: true,
  fork: true,
  async setup(persistence) {
    const host = await createHost({ providers: false, persistence });
    host.subagents.registerProvider(inProcessProvider(host, { fork: true }));
    return { host, provider: 'in-process-fork' };
  },
});

describe('in-process provider', () => {
  let host: Host;
  let parent: Agent;

  beforeEach(async () => {
    host = await createHost({ providers: false });
    host.subagents.registerProvider(inProcessProvider(host));
    host.subagents.registerProvider(inProcessProvider(host, { fork: true }));
    parent = await host.createAgent();
  });

  afterEach(() => host.close());

  it('declares spawn and fork by inheritsParentContext under default names', () => {
    expect(host.subagents.list()).toEqual(['in-process', 'in-process-fork']);
    expect(host.subagents.getProvider('in-process')?.inheritsParentContext).toBe(false);
    expect(host.subagents.getProvider('in-process-fork')?.inheritsParentContext).toBe(true);
  });

  it("seeds a fork with the parent's completed turns and returns only the child's own output", async () => {
    parent.followup([text('remember the word kiwi')]);
    await parent.whenIdle();
    const parentEvents = [...parent.session.events];
    const run = await host.subagents.start('in-process-fork', {
      prompt: [text('what was the word?')],
      parent,
      signal: new AbortController().signal,
      agentOptions: { model: { kind: 'scripted', steps: [{ text: 'kiwi' }] } },
    });
    const result = await run.result;
    const child = host.sessions.get(run.id);
    expect(child?.header.seedLength).toBe(parentEvents.length);
    expect(child?.events.slice(0, parentEvents.length)).toEqual(parentEvents);
    expect(result).toEqual({ output: [text('kiwi')], stopReason: 'completed', usage: expect.objectContaining({ turns: 1 }) });
    await run.dispose();
  });

  it('forks a parent without a completed turn as a spawn (no seedLength)', async () => {
    const run = await host.subagents.start('in-process-fork', { prompt: [text('hi')], parent, signal: new AbortController().signal });
    await expect(run.result).resolves.toEqual({ output: [text('echo: hi')], stopReason: 'completed', usage: expect.objectContaining({ turns: 1 }) });
    const header = host.sessions.get(run.id)?.header;
    expect(header).toBeDefined();
    expect(header && 'seedLength' in header).toBe(false);
    expect(host.sessions.get(run.id)?.events[0]?.type).toBe('inbox/accepted');
    await run.dispose();
  });

  it('spawns a fresh child even when the parent has completed turns', async () => {
    parent.followup([text('earlier')]);
    await parent.whenIdle();
    const run = await host.subagents.start('in-process', { prompt: [text('hi')], parent, signal: new AbortController().signal });
    await expect(run.result).resolves.toEqual({ output: [text('echo: hi')], stopReason: 'completed', usage: expect.objectContaining({ turns: 1 }) });
    expect(host.sessions.get(run.id)?.header.seedLength).toBeUndefined();
    await run.dispose();
  });

  it('gives a child its parent’s working folder and token limit unless the request overrides the limit', async () => {
    const rooted = await host.createAgent({ header: { cwd: '/srv/project' }, agentOptions: { maxTokens: 321 } });
    const start = (agentOptions?: { maxTokens: number }) =>
      host.subagents.start('in-process', { prompt: [text('hi')], parent: rooted, signal: new AbortController().signal, ...(agentOptions ? { agentOptions } : {}) });
    const inherited = await start();
    const overridden = await start({ maxTokens: 99 });
    expect(inherited.localAgent?.session.header.cwd).toBe('/srv/project');
    expect(inherited.localAgent?.options.maxTokens).toBe(321);
    expect(overridden.localAgent?.options.maxTokens).toBe(99);
    await Promise.all([inherited.result, overridden.result]);
    await Promise.all([inherited.dispose(), overridden.dispose()]);
  });

  it('after dispose() and host.close() holds no child agent and no listener', async () => {
    const controller = new AbortController();
    const heard: string[] = [];
    const off = host.subagents.on('subagent/end', (e) => void heard.push(e.stopReason), { parent: parent.id });
    const run = await host.subagents.start('in-process', {
      prompt: [text('hang on')],
      parent,
      signal: controller.signal,
      agentOptions: { model: { kind: 'scripted', steps: [{ finish: 'hang' }] } },
    });
    expect(host.agents.list().map((a) => a.id)).toEqual([parent.id, run.id]);
    await run.dispose();
    await expect(run.result).resolves.toMatchObject({ stopReason: 'aborted' });
    expect(host.agents.list().map((a) => a.id)).toEqual([parent.id]);
    expect(getEventListeners(controller.signal, 'abort')).toEqual([]);
    off();
    await host.close();
    expect(heard).toEqual(['aborted']);
    expect(host.agents.list()).toEqual([]);
    expect(host.subagents.listenerCount).toBe(0);
    expect(host.subagents.activeRuns).toBe(0);
  });

  it('puts one listener on a signal shared by many children, and aborting it cancels them all', async () => {
    const controller = new AbortController();
    const warnings: Error[] = [];
    const onWarning = (warning: Error) => void warnings.push(warning);
    process.on('warning', onWarning);
    try {
      const hanging = { model: { kind: 'scripted' as const, steps: [{ finish: 'hang' as const }] } };
      const runs = await Promise.all(
        Array.from({ length: 24 }, (_, i) => host.subagents.start('in-process', { prompt: [text(`child ${i}`)], parent, signal: controller.signal, agentOptions: hanging })),
      );
      // Node warns (MaxListenersExceededWarning) past 10 listeners on one signal.
      expect(getEventListeners(controller.signal, 'abort')).toHaveLength(1);
      controller.abort();
      expect((await Promise.all(runs.map((run) => run.result))).map((result) => result.stopReason)).toEqual(runs.map(() => 'aborted'));
      await Promise.all(runs.map((run) => run.dispose()));
      expect(getEventListeners(controller.signal, 'abort')).toEqual([]);
      // A warning is emitted on a later tick.
      await new Promise((resolve) => setImmediate(resolve));
      expect(warnings.filter((warning) => warning.name === 'MaxListenersExceededWarning')).toEqual([]);
    } finally {
      process.off('warning', onWarning);
    }
  });

  it('keeps one listener on a shared signal while its children come and go, and none after', async () => {
    const controller = new AbortController();
    const first = await host.subagents.start('in-process', { prompt: [text('one')], parent, signal: controller.signal });
    const hanging = await host.subagents.start('in-process', {
      prompt: [text('two')],
      parent,
      signal: controller.signal,
      agentOptions: { model: { kind: 'scripted', steps: [{ finish: 'hang' }] } },
    });
    await first.result;
    await first.dispose();
    expect(getEventListeners(controller.signal, 'abort')).toHaveLength(1);
    hanging.cancel();
    await expect(hanging.result).resolves.toMatchObject({ stopReason: 'aborted' });
    await hanging.dispose();
    expect(getEventListeners(controller.signal, 'abort')).toEqual([]);
    // The signal still works for a child started after all that.
    const third = await host.subagents.start('in-process', {
      prompt: [text('three')],
      parent,
      signal: controller.signal,
      agentOptions: { model: { kind: 'scripted', steps: [{ finish: 'hang' }] } },
    });
    controller.abort();
    await expect(third.result).resolves.toMatchObject({ stopReason: 'aborted' });
    await third.dispose();
  });

  it('leaves the caller signal without listeners once a run completes', async () => {
    const controller = new AbortController();
    const run = await host.subagents.start('in-process', { prompt: [text('x')], parent, signal: controller.signal });
    await run.result;
    await run.dispose();
    expect(getEventListeners(controller.signal, 'abort')).toEqual([]);
  });
});

describe('in-process child of a host that closes while it starts', () => {
  const files = tempFiles('in-process-close-');

  // close() lands at every point of the start, from before the provider runs to after the
  // child's first turn began: a child cut off before that turn must not be stored as corrupt, and a
  // start that rejects CLOSED (it never started) leaves no child listed.
  it.each(['in-process', 'in-process-fork'])('%s: a start rejected CLOSED leaves no child listed; a started one is listed as an ended child, never corrupt', async (provider) => {
    for (let ticks = 0; ticks <= 60; ticks++) {
      const file = files.file();
      const host = await createHost({ providers: false, persistence: { sqlite: file } });
      host.subagents.registerProvider(inProcessProvider(host, { fork: provider === 'in-process-fork' }));
      const parent = await host.createAgent();
      const starting = host.subagents.start(provider, { prompt: [text('go')], parent, signal: new AbortController().signal });
      for (let i = 0; i < ticks; i++) await Promise.resolve();
      const closing = host.close();
      const outcome = await starting.then(
        (run) => run.result.then((result) => result.stopReason),
        (error: { code?: string }) => error.code,
      );
      await closing;
      const again = await createHost({ providers: false, persistence: { sqlite: file } });
      try {
        // The tick count and the start's outcome name a failing case.
        const rows = (await again.subagents.listChildren(parent.id)).map((row) => (row.kind === 'child' ? row.activity : row.reason));
        expect({ ticks, outcome, rows }).toEqual({ ticks, outcome, rows: outcome === 'CLOSED' ? [] : ['inactive'] });
      } finally {
        await again.close();
      }
    }
  }, 60_000);
});
