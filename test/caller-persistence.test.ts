// A caller's SessionPersistence that misbehaves: what it throws (also synchronously, also a
// non-Error) reaches the caller as PERSISTENCE_UNAVAILABLE, what it returns out of contract (a log
// of another session, events out of order, records of another parent or twice over) as CORRUPT_DATA,
// a slow append is waited for, not polled, and one whose writes never answer holds only what
// waits for a flush (disposals, close()), never a turn beyond a cancel's grace.
import { setImmediate as nextTurn } from 'node:timers/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { createHost, inProcessProvider, memoryPersistence, subagentTool, text, type CatalogRecord, type Host, type SessionEvent, type SessionPersistence, type TurnEndReason } from 'subagent-host';
import { dataOf, deferred, runNodeScript, untilCancelled } from './helpers.js';

const hosts: Host[] = [];
afterEach(async () => {
  await Promise.all(hosts.splice(0).map((host) => host.close()));
});

type Overrides = { [K in keyof SessionPersistence]?: (inner: SessionPersistence, ...args: Parameters<SessionPersistence[K]>) => unknown };

/** A caller's store over `inner`, each method replaced by its override when it has one. */
function callerStore(inner: SessionPersistence, overrides: Overrides = {}): SessionPersistence {
  const store: Record<string, unknown> = {};
  for (const method of ['create', 'append', 'load', 'list', 'childRecords', 'descendantRecords', 'projections', 'flush', 'close'] as const) {
    const override = overrides[method] as ((inner: SessionPersistence, ...args: unknown[]) => unknown) | undefined;
    store[method] = override ? (...args: unknown[]) => override(inner, ...args) : (...args: unknown[]) => (inner[method] as (...values: unknown[]) => unknown)(...args);
  }
  return store as unknown as SessionPersistence;
}

async function open(persistence: SessionPersistence): Promise<Host> {
  const host = await createHost({ persistence, providers: false, pool: { minThreads: 0 } });
  hosts.push(host);
  host.subagents.registerProvider(inProcessProvider(host));
  return host;
}

/** A memory store holding top-level session `p` (one turn), its continuable child `c` and session `other`. */
async function storedTree(): Promise<SessionPersistence> {
  const inner = memoryPersistence();
  const host = await open(inner);
  const parent = await host.createAgent({ sessionId: 'p' });
  await host.subagents.startContinuable({ provider: 'in-process', label: 'c', childId: 'c', request: { prompt: [text('go')], parent } });
  await (await host.createAgent({ sessionId: 'other' })).whenIdle();
  parent.followup([text('hi')]);
  await parent.whenIdle();
  await host.close();
  return inner;
}

/** `records` with each one replaced by `change(record)`. */
async function reshaped(records: Promise<CatalogRecord[]>, change: (record: CatalogRecord) => unknown): Promise<unknown[]> {
  return (await records).map(change);
}

describe("a caller's SessionPersistence", () => {
  const unavailable = (message: string) => ({ name: 'SubagentError', code: 'PERSISTENCE_UNAVAILABLE', message: expect.stringContaining(message) });
  const corrupt = (message: string) => ({ name: 'SubagentError', code: 'CORRUPT_DATA', message: expect.stringContaining(message) });

  it.each<[string, Overrides, object]>([
    ['throws synchronously', { load: () => { throw new Error('disk gone'); } }, unavailable("load() failed: Error: disk gone")],
    ['rejects with a string', { load: () => Promise.reject('offline') }, unavailable('load() failed: offline')],
    ['returns no { header, events }', { load: async () => ({}) }, corrupt('returned no { header, events }')],
    ['returns the log of another session', { load: (inner) => inner.load('other') }, corrupt('returned the log of session other')],
    ['returns its events out of order', { load: async (inner, id) => { const stored = (await inner.load(id))!; return { ...stored, events: stored.events.reverse() }; } }, corrupt('events[0]')],
    ['returns an event twice', { load: async (inner, id) => { const stored = (await inner.load(id))!; return { ...stored, events: [...stored.events, stored.events.at(-1)] }; } }, corrupt('events[')],
    ['returns a header without its creation time', { load: async (inner, id) => { const stored = (await inner.load(id))!; return { ...stored, header: { ...stored.header, createdAt: 'today' } }; } }, corrupt('a header without a numeric createdAt')],
  ])('fails a resume typed when its load %s', async (_label, overrides, error) => {
    const host = await open(callerStore(await storedTree(), overrides));
    await expect(host.agents.resume({ sessionId: 'p' })).rejects.toMatchObject(error);
    expect(host.agents.get('other')).toBeUndefined();
  });

  it.each<[string, Overrides, object]>([
    ['throws synchronously', { childRecords: () => { throw new Error('index gone'); }, descendantRecords: () => { throw new Error('index gone'); } }, unavailable('Records() failed: Error: index gone')],
    ['rejects with undefined', { childRecords: () => Promise.reject(undefined), descendantRecords: () => Promise.reject(undefined) }, unavailable('Records() failed: undefined')],
    ['returns no array', { childRecords: async () => undefined, descendantRecords: async () => null }, corrupt('returned no array of catalog records')],
    ['returns a record twice', { childRecords: async (inner, id) => [...(await inner.childRecords(id)), ...(await inner.childRecords(id))], descendantRecords: async (inner, id) => [...(await inner.descendantRecords(id)), ...(await inner.descendantRecords(id))] }, corrupt('of session c once more')],
    ['returns a record whose header has no id', { childRecords: (inner, id) => reshaped(inner.childRecords(id), (record) => ({ ...record, header: { ...record.header, id: '' } })), descendantRecords: (inner, id) => reshaped(inner.descendantRecords(id), (record) => ({ ...record, header: { ...record.header, id: '' } })) }, corrupt('with a header that is not a session header')],
    ['returns a record whose listed projections have an unknown mode', { childRecords: (inner, id) => reshaped(inner.childRecords(id), (record) => ({ ...record, listed: { ...record.listed, mode: 'resident' } })), descendantRecords: (inner, id) => reshaped(inner.descendantRecords(id), (record) => ({ ...record, listed: { ...record.listed, mode: 'resident' } })) }, corrupt('with listed projections that are no { mode, label, usage }')],
    ['returns a record whose listed usage has a negative token count', { childRecords: (inner, id) => reshaped(inner.childRecords(id), (record) => ({ ...record, listed: { ...record.listed, usage: { ...record.listed!.usage, inputTokens: -500 } } })), descendantRecords: (inner, id) => reshaped(inner.descendantRecords(id), (record) => ({ ...record, listed: { ...record.listed, usage: { ...record.listed!.usage, inputTokens: -500 } } })) }, corrupt('with listed projections that are no { mode, label, usage }')],
    ['returns a record whose listed usage has a fractional tool call count', { childRecords: (inner, id) => reshaped(inner.childRecords(id), (record) => ({ ...record, listed: { ...record.listed, usage: { ...record.listed!.usage, toolCalls: 0.5 } } })), descendantRecords: (inner, id) => reshaped(inner.descendantRecords(id), (record) => ({ ...record, listed: { ...record.listed, usage: { ...record.listed!.usage, toolCalls: 0.5 } } })) }, corrupt('with listed projections that are no { mode, label, usage }')],
    ['returns a record at depth 0', { childRecords: (inner, id) => reshaped(inner.childRecords(id), (record) => ({ ...record, depth: 0 })), descendantRecords: (inner, id) => reshaped(inner.descendantRecords(id), (record) => ({ ...record, depth: 0 })) }, corrupt('with a depth that is not a whole number ≥ 1')],
  ])('fails a listing typed when its enumeration %s', async (_label, overrides, error) => {
    const host = await open(callerStore(await storedTree(), overrides));
    await expect(host.subagents.listChildren('p')).rejects.toMatchObject(error);
    await expect(host.subagents.listDescendants('p')).rejects.toMatchObject(error);
  });

  it("refuses children of another parent from childRecords, and a sessionId check on a projections() that is no Map", async () => {
    const host = await open(callerStore(await storedTree(), { childRecords: (inner) => inner.childRecords('p').then((records) => records.map((record) => ({ ...record, header: { ...record.header, parentSession: 'x' } }))), projections: async () => ({}) }));
    await expect(host.subagents.listChildren('p')).rejects.toMatchObject(corrupt('which is not a child of p'));
    await expect(host.createAgent({ sessionId: 'new' })).rejects.toMatchObject(corrupt('returned no Map'));
  });

  // Before, a flush re-flushed the store every event-loop turn while an append was pending, each
  // turn keeping a reaction on the pending writes: a hung store spun a core and exhausted the heap.
  // It polls for a few turns (a commit's next link comes soon), then waits for the next write.
  it('commits an append the store queues only after an await of its own, once the flush is past its polls', async () => {
    const inner = memoryPersistence();
    const queued: (() => Promise<void>)[] = [];
    const host = await open(
      callerStore(inner, {
        // Queued 50 ms after it is handed over, committed only by a flush: no later write hands the flush a reason to go on.
        append: async (store, id, events) => {
          await new Promise((resolve) => setTimeout(resolve, 50));
          await new Promise<void>((resolve) => queued.push(() => store.append(id, events).then(resolve)));
        },
        flush: async (store) => {
          for (const commit of queued.splice(0)) await commit();
          await store.flush();
        },
      }),
    );
    const agent = await host.createAgent({ sessionId: 'late' });
    agent.followup([text('hi')]);
    await agent.whenIdle();
    await host.sessions.flush('late');
    expect((await inner.load('late'))?.events).toEqual(agent.session.events);
  });

  it('has every event durable once a flush or an acknowledgement resolves, with an append that resolves as soon as it is queued', async () => {
    const queued: (() => Promise<void>)[] = [];
    const committed = new Map<string, SessionEvent[]>();
    let committing = Promise.resolve();
    const host = await open(
      callerStore(memoryPersistence(), {
        // Write-behind: the append resolves once queued; only the store's flush commits it, in order.
        append: async (store, id, events) => {
          queued.push(async () => {
            await store.append(id, events);
            committed.set(id, [...(committed.get(id) ?? []), ...events]);
          });
        },
        flush: (store) => {
          const batch = queued.splice(0);
          committing = committing.then(async () => {
            for (const commit of batch) await commit();
          });
          return committing.then(() => store.flush());
        },
      }),
    );
    const parent = await host.createAgent({ sessionId: 'behind' });
    parent.followup([text('hi')]);
    await parent.whenIdle();
    await host.sessions.flush('behind');
    expect(committed.get('behind')?.length).toBe(parent.session.events.length);
    const { childId, messageId } = await host.subagents.startContinuable({ provider: 'in-process', label: 'c', request: { prompt: [text('go')], parent } });
    const accepted = committed.get(childId)?.filter((event) => event.type === 'inbox/accepted');
    expect(accepted?.map((event) => (event.data as { id: string }).id)).toContain(messageId);
  });

  it('is polled a bounded number of times, then flushed again only when another write is handed to it, while a slow append is pending', async () => {
    let release: (() => void) | undefined;
    let flushes = 0;
    const inner = memoryPersistence();
    const host = await open(
      callerStore(inner, {
        append: async (store, id, events) => {
          if (release === undefined) await new Promise<void>((resolve) => (release = resolve));
          await store.append(id, events);
        },
        flush: (store) => {
          flushes++;
          return store.flush();
        },
      }),
    );
    const agent = await host.createAgent({ sessionId: 'slow' });
    agent.followup([text('hi')]);
    await agent.whenIdle();
    let flushed = false;
    const flush = host.sessions.flush('slow').then(() => (flushed = true));
    for (let turn = 0; turn < 50 && release === undefined; turn++) await nextTurn();
    const before = flushes;
    for (let turn = 0; turn < 500; turn++) await nextTurn();
    const [pending, during] = [!flushed, flushes - before];
    release!();
    await flush;
    expect(pending).toBe(true);
    expect(during).toBeLessThanOrEqual(40);
    expect((await inner.load('slow'))?.events).toEqual(agent.session.events);
  });

  it('leaves no timer holding the process once close() resolved, after its flush waited out backed-off polls of a slow append', async () => {
    // In a process of its own: what keeps its event loop alive right after close() is read there.
    const script = new URL('./fixtures/flush-linger.mjs', import.meta.url).pathname;
    const { code, out, err } = await runNodeScript(script, [new URL('../dist/src/index.js', import.meta.url).href, '40']);
    expect({ code, err }).toEqual({ code: 0, err: '' });
    const { flushes, resources } = JSON.parse(out) as { flushes: number; resources: string[] };
    expect(flushes).toBeGreaterThanOrEqual(40);
    expect(resources.filter((name) => name === 'Timeout')).toEqual([]);
  });
});

describe("a caller's SessionPersistence whose writes never answer (until the test lets them)", () => {
  /** A host over a store whose appends and flushes wait for `release()`; `abandonGraceMs` 200. */
  async function hungHost() {
    const gate = deferred();
    const inner = memoryPersistence();
    const store = callerStore(inner, {
      append: (store, id, events) => gate.promise.then(() => store.append(id, events)),
      flush: (store) => gate.promise.then(() => store.flush()),
    });
    const { tool, entered } = untilCancelled('wait');
    const host = await createHost({ persistence: store, providers: false, pool: { minThreads: 0 }, abandonGraceMs: 200, tools: [tool] });
    hosts.push(host);
    host.subagents.registerProvider(inProcessProvider(host));
    return { host, entered, release: () => gate.resolve() };
  }

  /** Whether `promise` is still pending after a few hundred milliseconds (past the grace). */
  async function stillPendingAfterTheGrace(promise: Promise<unknown>): Promise<boolean> {
    let settled = false;
    void promise.then(
      () => (settled = true),
      () => (settled = true),
    );
    await new Promise((resolve) => setTimeout(resolve, 400));
    return !settled;
  }

  it('lets a cancelled in-process child calling a tool settle aborted, while close() waits for the store', { timeout: 10_000 }, async () => {
    const { host, entered, release } = await hungHost();
    const parent = await host.createAgent({});
    const controller = new AbortController();
    const run = await host.subagents.start('in-process', {
      prompt: [text('go')],
      parent,
      signal: controller.signal,
      agentOptions: { model: { kind: 'scripted', steps: [{ toolCalls: [{ name: 'wait', input: {} }] }] } },
    });
    await entered;
    controller.abort();
    expect((await run.result).stopReason).toBe('aborted');
    // A close flushes every session: it waits for the store, as the README says.
    const closing = host.close();
    expect(await stillPendingAfterTheGrace(closing)).toBe(true);
    release();
    await closing;
  });

  it("ends a parent's foreground subagent call ABANDONED after the grace once cancelled: the call waits for its run's dispose, a flush", { timeout: 10_000 }, async () => {
    const { host, release } = await hungHost();
    subagentTool(host, { provider: 'in-process' });
    const childEnded = deferred();
    host.subagents.on('subagent/end', () => childEnded.resolve());
    const parent = await host.createAgent({ agentOptions: { model: { kind: 'scripted', steps: [{ toolCalls: [{ name: 'subagent', input: { description: 'd', prompt: 'p' } }] }, { text: 'done' }] } } });
    parent.followup([text('go')]);
    // The child has answered; the call still waits for the child's log to be flushed.
    await childEnded.promise;
    expect(await stillPendingAfterTheGrace(parent.whenIdle())).toBe(true);
    parent.cancel();
    await parent.whenIdle();
    expect(dataOf<{ code?: string }>(parent.session.events, 'tool/result').map((result) => result.code)).toEqual(['ABANDONED']);
    expect(dataOf<{ reason: TurnEndReason }>(parent.session.events, 'turn/end').map((end) => end.reason)).toEqual([{ kind: 'aborted', cause: { kind: 'user' } }]);
    release();
    await host.close();
  });
});
