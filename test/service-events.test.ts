// Lifecycle events of one-shot runs: ordering around start(), parent scoping, run ids, end payloads
// and listener containment (seam-spec S6–S11).
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { text, type Agent, type Host, type SubagentEvents, type SubagentRun } from 'subagent-host';
import { deferred } from './helpers.js';
import { fakeProvider, fakeRun, testHost, type FakeProvider, type FakeRun, type TestHost } from './fake-provider.js';

let t: TestHost;
let heard: unknown[][];
let offs: (() => void)[];

beforeEach(async () => {
  t = await testHost();
  heard = [];
  offs = [
    t.host.subagents.on('subagent/start', (e) => void heard.push(['start', e]), { parent: t.parent.id }),
    t.host.subagents.on('subagent/end', (e) => void heard.push(['end', e]), { parent: t.parent.id }),
  ];
});

afterEach(async () => {
  offs.forEach((off) => off());
  await t.host.close();
  expect(t.host.subagents.activeRuns).toBe(0);
  expect(t.host.subagents.listenerCount).toBe(0);
});

function startInfo(index = 0): SubagentEvents['subagent/start'] {
  return heard.filter(([name]) => name === 'start')[index]![1] as SubagentEvents['subagent/start'];
}

/** Registers a provider that resolves `run` (or a fresh fake run) and starts it once. */
async function startWith(run?: FakeRun): Promise<{ run: SubagentRun; raw: FakeRun }> {
  const provider = fakeProvider('fake', run ? { start: () => Promise.resolve(run) } : {});
  if (!t.host.subagents.getProvider('fake')) t.host.subagents.registerProvider(provider);
  const wrapped = await t.host.subagents.start('fake', t.request());
  return { run: wrapped, raw: run ?? provider.runs[0]! };
}

describe('lifecycle events', () => {
  it('S6: emits nothing while the provider starts, start before start() resolves, end later with the same runId', async () => {
    const called = deferred();
    const release = deferred<SubagentRun>();
    t.host.subagents.registerProvider(
      fakeProvider('slow', {
        start: () => {
          called.resolve();
          return release.promise;
        },
      }),
    );
    const order: string[] = [];
    offs.push(t.host.subagents.on('subagent/start', () => void order.push('start')));
    offs.push(t.host.subagents.on('subagent/end', () => void order.push('end')));
    const starting = t.host.subagents.start('slow', t.request()).then((run) => {
      order.push('resolved');
      return run;
    });
    await called.promise;
    expect(order).toEqual([]);
    const raw = fakeRun('c1');
    release.resolve(raw);
    const run = await starting;
    expect(order).toEqual(['start', 'resolved']);
    raw.settle.resolve({ output: [text('hi')], stopReason: 'completed' });
    await run.result;
    await run.dispose();
    expect(order).toEqual(['start', 'resolved', 'end']);
    const [start, end] = heard.map(([, e]) => e as SubagentEvents['subagent/end']);
    expect(end?.runId).toBe(start?.runId);
    expect(heard.map(([name]) => name)).toEqual(['start', 'end']);
  });

  it('scoped listeners hear only their own parent runs', async () => {
    const other: string[] = [];
    offs.push(t.host.subagents.on('subagent/start', () => void other.push('start'), { parent: 'another-parent' }));
    offs.push(t.host.subagents.on('subagent/end', () => void other.push('end'), { parent: 'another-parent' }));
    const { run } = await startWith();
    await run.dispose();
    expect(other).toEqual([]);
    expect(heard.map(([name]) => name)).toEqual(['start', 'end']);
  });

  it('S7: mints a distinct runId for runs with identical ids', async () => {
    t.host.subagents.registerProvider(fakeProvider('same', { start: () => Promise.resolve(fakeRun('same-id')) }));
    const a = await t.host.subagents.start('same', t.request());
    const b = await t.host.subagents.start('same', t.request());
    expect(a.id).toBe(b.id);
    expect(startInfo(0).runId).not.toBe(startInfo(1).runId);
    await Promise.all([a.dispose(), b.dispose()]);
  });

  it('S8: end carries lastAssistantMessage, and omits the key for empty output', async () => {
    const runs = [fakeRun('a'), fakeRun('b')];
    t.host.subagents.registerProvider(fakeProvider('two', { start: () => Promise.resolve(runs.shift()!) }));
    const [first, second] = runs as [FakeRun, FakeRun];
    const a = await t.host.subagents.start('two', t.request());
    const b = await t.host.subagents.start('two', t.request());
    first.settle.resolve({ output: [text('answer')], stopReason: 'completed' });
    second.settle.resolve({ output: [], stopReason: 'completed' });
    await Promise.all([a.dispose(), b.dispose()]);
    const ends = heard.filter(([name]) => name === 'end').map(([, e]) => e as SubagentEvents['subagent/end']);
    expect(ends[0]).toMatchObject({ id: 'a', stopReason: 'completed', lastAssistantMessage: [text('answer')] });
    expect(ends[1]).toEqual({ runId: startInfo(1).runId, provider: 'two', id: 'b', local: false, stopReason: 'completed' });
  });

  it('S9: a rejected result ends with error and no message, and still rejects for the caller', async () => {
    const raw = fakeRun('a');
    const { run } = await startWith(raw);
    const failure = new Error('transport died');
    raw.settle.reject(failure);
    await expect(run.result).rejects.toBe(failure);
    await run.dispose();
    const end = heard.find(([name]) => name === 'end')?.[1];
    expect(end).toEqual({ runId: startInfo().runId, provider: 'fake', id: 'a', local: false, stopReason: 'error' });
  });

  it('S10: an already-settled result still gives start before end; the run keeps id and localAgent', async () => {
    const child = await t.host.createAgent();
    const raw = fakeRun(child.id, { localAgent: child });
    raw.settle.resolve({ output: [text('early')], stopReason: 'completed' });
    const { run } = await startWith(raw);
    expect(heard.map(([name]) => name)).toEqual(['start']);
    expect(run.id).toBe(child.id);
    expect(run.localAgent).toBe(child);
    expect(startInfo()).toEqual({ runId: expect.any(String), provider: 'fake', id: child.id, local: true });
    await run.result;
    expect(heard.map(([name]) => name)).toEqual(['start', 'end']);
    await run.dispose();
  });

  it('S11: a run outlives the unregistration of its provider and ends under its original name', async () => {
    const raw = fakeRun('a');
    const provider = fakeProvider('gone', { start: () => Promise.resolve(raw) });
    const unregister = t.host.subagents.registerProvider(provider);
    const run = await t.host.subagents.start('gone', t.request());
    unregister();
    raw.settle.resolve({ output: [], stopReason: 'completed' });
    await expect(run.result).resolves.toEqual({ output: [], stopReason: 'completed' });
    await run.dispose();
    expect(heard.map(([, e]) => (e as { provider: string }).provider)).toEqual(['gone', 'gone']);
  });

  it('orders registration, start, resolution, end and removal', async () => {
    const order: string[] = [];
    offs.push(
      t.host.subagents.on('subagent/provider-added', () => void order.push('provider-added')),
      t.host.subagents.on('subagent/provider-removed', () => void order.push('provider-removed')),
      t.host.subagents.on('subagent/start', () => void order.push('start')),
      t.host.subagents.on('subagent/end', () => void order.push('end')),
    );
    const raw = fakeRun('a');
    const unregister = t.host.subagents.registerProvider(fakeProvider('p', { start: () => Promise.resolve(raw) }));
    const run = await t.host.subagents.start('p', t.request());
    order.push('started');
    raw.settle.resolve({ output: [], stopReason: 'completed' });
    await run.result;
    order.push('result');
    await run.dispose();
    order.push('disposed');
    unregister();
    expect(order).toEqual(['provider-added', 'start', 'started', 'end', 'result', 'disposed', 'provider-removed']);
  });

  it('lets a listener subscribe and unsubscribe during delivery without disturbing that delivery', async () => {
    const order: string[] = [];
    const offLate: (() => void)[] = [];
    const offSelf = t.host.subagents.on('subagent/start', () => {
      order.push('first');
      offSelf();
      offLate.push(t.host.subagents.on('subagent/start', () => void order.push('late start')));
      offLate.push(t.host.subagents.on('subagent/end', () => void order.push('late end')));
    });
    offs.push(t.host.subagents.on('subagent/start', () => void order.push('second')));
    const { run } = await startWith();
    await run.dispose();
    offLate.forEach((off) => off());
    expect(order).toEqual(['first', 'second', 'late end']);
  });

  it('does not call a listener that an earlier listener of the same delivery unsubscribed', async () => {
    const order: string[] = [];
    let offSecond = (): void => undefined;
    offs.push(
      t.host.subagents.on('subagent/start', () => {
        order.push('first');
        offSecond();
      }),
    );
    offSecond = t.host.subagents.on('subagent/start', () => void order.push('second'));
    const { run } = await startWith();
    await run.dispose();
    expect(order).toEqual(['first']);
  });

  it('hands every listener the same frozen payload: one cannot change what the next hears', async () => {
    const seen: string[] = [];
    const frozen: boolean[] = [];
    for (const event of ['subagent/start', 'subagent/end'] as const) {
      offs.push(
        t.host.subagents.on(event, (payload) => {
          frozen.push(Object.isFrozen(payload));
          (payload as { id: string }).id = 'changed';
        }),
        t.host.subagents.on(event, (payload) => void seen.push(`${event} ${payload.id}`)),
      );
    }
    const { run, raw } = await startWith();
    raw.settle.resolve({ output: [text('done')], stopReason: 'completed' });
    await run.result;
    await run.dispose();
    expect(frozen).toEqual([true, true]);
    expect(seen).toEqual([`subagent/start ${run.id}`, `subagent/end ${run.id}`]);
    expect(heard.map(([, payload]) => (payload as { id: string }).id)).toEqual([run.id, run.id]);
  });

  it('contains failing start/end listeners, logs one warning each, and runs their peers', async () => {
    const unprintable = {
      toString() {
        throw new Error('cannot render');
      },
    };
    const peers: string[] = [];
    for (const event of ['subagent/start', 'subagent/end'] as const) {
      offs.push(
        t.host.subagents.on(event, () => {
          throw new Error('sync');
        }),
        t.host.subagents.on(event, () => Promise.reject(new Error('async'))),
        t.host.subagents.on(event, () => {
          throw unprintable;
        }),
        t.host.subagents.on(event, () => void peers.push(event)),
      );
    }
    const { run, raw } = await startWith();
    raw.settle.resolve({ output: [], stopReason: 'completed' });
    await expect(run.result).resolves.toEqual({ output: [], stopReason: 'completed' });
    await run.dispose();
    await t.warned(6);
    expect(peers).toEqual(['subagent/start', 'subagent/end']);
    expect(t.warnings).toHaveLength(6);
  });
});

/**
 * Runs `body` on a host whose logger is `warn`, with a fake provider registered; resolves with the
 * unhandled rejections seen meanwhile.
 */
async function withLogger(warn: () => void, body: (host: Host, parent: Agent, provider: FakeProvider) => Promise<void>): Promise<unknown[]> {
  const { createHost } = await import('subagent-host');
  const host = await createHost({ providers: false, logger: { warn } });
  const unhandled: unknown[] = [];
  const onUnhandled = (reason: unknown) => void unhandled.push(reason);
  process.on('unhandledRejection', onUnhandled);
  try {
    const parent = await host.createAgent();
    const provider = fakeProvider('fake');
    host.subagents.registerProvider(provider);
    await body(host, parent, provider);
  } finally {
    process.off('unhandledRejection', onUnhandled);
    await host.close();
  }
  return unhandled;
}

describe('a logger that throws', () => {
  it('keeps an async logger’s rejection from becoming an unhandled rejection', async () => {
    let warned = 0;
    // `warn(): void` takes an async function too: its rejection is the host's to contain.
    const warn = (() => {
      warned++;
      return Promise.reject(new Error('logger down'));
    }) as () => void;
    const unhandled = await withLogger(warn, async (host, parent, provider) => {
      host.subagents.on('subagent/end', () => {
        throw new Error('listener failed');
      });
      const run = await host.subagents.start('fake', { prompt: [text('go')], parent, signal: new AbortController().signal });
      provider.runs[0]!.settle.resolve({ output: [], stopReason: 'completed' });
      await expect(run.result).resolves.toMatchObject({ stopReason: 'completed' });
      await run.dispose();
      await new Promise((resolve) => setTimeout(resolve, 20));
    });
    expect(warned).toBeGreaterThan(0);
    expect(unhandled).toEqual([]);
  });

  it('fails neither the start nor the end: the run is the caller’s, its end is heard, nothing is left unhandled', async () => {
    const warn = () => {
      throw new Error('logger down');
    };
    const unhandled = await withLogger(warn, async (host, parent, provider) => {
      const ends: string[] = [];
      host.subagents.on('subagent/start', () => {
        throw new Error('listener failed');
      });
      host.subagents.on('subagent/end', (payload) => {
        ends.push(payload.stopReason);
        throw new Error('listener failed');
      });
      const run = await host.subagents.start('fake', { prompt: [text('go')], parent, signal: new AbortController().signal });
      provider.runs[0]!.settle.resolve({ output: [], stopReason: 'completed' });
      await expect(run.result).resolves.toMatchObject({ stopReason: 'completed' });
      await run.dispose();
      await new Promise((resolve) => setImmediate(resolve));
      expect(ends).toEqual(['completed']);
      expect(host.subagents.activeRuns).toBe(0);
    });
    expect(unhandled).toEqual([]);
  });
});
