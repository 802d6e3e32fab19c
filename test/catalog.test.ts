// The catalog through the public service: listChildren / listDescendants over stored projections
// (SQLite file and memory backends), live sessions overriding stored ones, read failures and
// cancellation. Seam-spec §8.11 Z1–Z16 adapted to a host that always has projections and a store.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  DESCRIPTOR_EVENT,
  createHost,
  inProcessProvider,
  memoryPersistence,
  sqlitePersistence,
  text,
  type CatalogRecord,
  type Host,
  type SessionEvent,
  type SessionHeader,
  type SessionPersistence,
  type SubagentDescendantListEntry,
  type SubagentListEntry,
} from 'subagent-host';
import { hostParts } from 'subagent-host/internals';
import { deferred, tempFiles } from './helpers.js';

const { file: newFile } = tempFiles('subagent-catalog-');

const oneShot = (label?: string) => ({ version: 2, mode: 'one-shot', provider: 'in-process', ...(label === undefined ? {} : { label }) });
const continuable = (label: string) => ({ version: 2, mode: 'continuable', provider: 'in-process', label });

/** A session to build: a child of `parent` with origin subagent unless `ordinary`. */
interface Spec { id: string; parent?: string; createdAt?: number; ordinary?: boolean; descriptors?: unknown[]; seedLength?: number }

const headerOf = (spec: Spec): SessionHeader => ({
  id: spec.id,
  createdAt: spec.createdAt ?? 1000,
  ...(spec.parent === undefined ? {} : { parentSession: spec.parent }),
  ...(spec.ordinary === true || spec.parent === undefined ? {} : { origin: 'subagent' as const }),
  ...(spec.seedLength === undefined ? {} : { seedLength: spec.seedLength }),
});

const descriptorEvents = (descriptors: readonly unknown[], from = 0): SessionEvent[] =>
  descriptors.map((data, index) => ({ seq: from + index, time: 2000 + from + index, type: DESCRIPTOR_EVENT, data }));

/** Stored-only sessions, written through the persistence API; their appends commit as one batch. */
async function persist(persistence: SessionPersistence, specs: readonly Spec[]): Promise<void> {
  const appends: Promise<void>[] = [];
  for (const spec of specs) {
    await persistence.create(headerOf(spec));
    if (spec.descriptors?.length) appends.push(persistence.append(spec.id, descriptorEvents(spec.descriptors)));
  }
  await persistence.flush();
  await Promise.all(appends);
}

/** A live session without an agent, with `spec.descriptors` appended. */
function live(host: Host, spec: Spec) {
  const session = hostParts(host).sessions.create(headerOf(spec));
  for (const data of spec.descriptors ?? []) session.append(DESCRIPTOR_EVENT, data);
  return session;
}

type Activity = 'running' | 'inactive';
const child = (id: string, mode: 'one-shot' | 'continuable', label: string | undefined, activity: Activity, hasChildren = false, createdAt = 1000): SubagentListEntry => ({
  kind: 'child',
  id,
  mode,
  ...(label === undefined ? {} : { label }),
  activity,
  hasChildren,
  createdAt,
  usage: { inputTokens: 0, outputTokens: 0, totalTokens: 0, requests: 0, turns: 0, toolCalls: 0, wallMs: 0 },
});
// Every session here spends nothing, so a child's tree total is its own usage.
const at = (entry: SubagentListEntry, parentId: string, depth: number): SubagentDescendantListEntry =>
  entry.kind === 'child' ? { ...entry, treeUsage: entry.usage, parentId, depth } : { ...entry, parentId, depth };

/** `records` as a backend that does not read projections with its enumeration returns them. */
const unlisted = (records: CatalogRecord[]): CatalogRecord[] => records.map(({ header, hasSubagentChildren }) => ({ header, hasSubagentChildren }));

/**
 * A persistence that forwards to `inner`, counts reads and lets a test hold or fail them. Its
 * records carry no listed projections (unless `keepListed`), so the catalog reads `projections()`.
 */
interface Probe {
  persistence: SessionPersistence;
  recordReads: number;
  loads: number;
  projectionReads: string[][];
  beforeRecords?: (() => Promise<void>) | undefined;
  beforeProjections?: (() => Promise<void>) | undefined;
  afterProjections?: (() => void) | undefined;
}

function instrument(inner: SessionPersistence, keepListed = false): Probe {
  const records = (read: CatalogRecord[]): CatalogRecord[] => (keepListed ? read : unlisted(read));
  const probe: Probe = { recordReads: 0, loads: 0, projectionReads: [], persistence: inner };
  probe.persistence = {
    create: (header) => inner.create(header),
    append: (id, events) => inner.append(id, events),
    load: (id) => {
      probe.loads += 1;
      return inner.load(id);
    },
    list: (filter) => inner.list(filter),
    flush: () => inner.flush(),
    close: () => inner.close(),
    async childRecords(parentId) {
      probe.recordReads += 1;
      await probe.beforeRecords?.();
      return records(await inner.childRecords(parentId));
    },
    async descendantRecords(rootId) {
      probe.recordReads += 1;
      await probe.beforeRecords?.();
      return records(await inner.descendantRecords(rootId));
    },
    async projections(ids) {
      probe.projectionReads.push([...ids]);
      await probe.beforeProjections?.();
      const found = await inner.projections(ids);
      probe.afterProjections?.();
      return found;
    },
  };
  return probe;
}

const backends = [
  { name: 'an SQLite file', open: () => sqlitePersistence(newFile()) },
  { name: 'memory', open: () => memoryPersistence() },
];

describe.each(backends)('catalog over $name', ({ open }) => {
  let inner: SessionPersistence;
  let probe: Probe;
  let host: Host;
  let store: SessionPersistence;
  const children = (id: string, signal?: AbortSignal) => host.subagents.listChildren(id, signal);
  const descendants = (id: string, signal?: AbortSignal) => host.subagents.listDescendants(id, signal);

  beforeEach(async () => {
    inner = open();
    probe = instrument(inner);
    store = probe.persistence;
    host = await createHost({ persistence: store, providers: false, pool: { minThreads: 0 } });
  });
  afterEach(async () => {
    await host.close();
    await inner.close();
  });

  /** Runs `check` with a second host over the same store that lists only what the store enumerates. */
  async function withListingHost(check: (listing: Host, probe: Probe) => Promise<void>): Promise<void> {
    const listedProbe = instrument(inner, true);
    const listing = await createHost({ persistence: listedProbe.persistence, providers: false, pool: { minThreads: 0 } });
    try {
      await check(listing, listedProbe);
    } finally {
      await listing.close();
    }
  }

  it('Z1: lists a live child with a descriptor as running', async () => {
    live(host, { id: 'c', parent: 'p', descriptors: [continuable('scout')] });
    expect(await children('p')).toStrictEqual([child('c', 'continuable', 'scout', 'running')]);
  });

  it('Z3: lists settled children inactive, a label only when given, under a stored-only parent', async () => {
    await persist(store, [
      { id: 'p' },
      { id: 'a', parent: 'p', createdAt: 1, descriptors: [continuable('alpha')] },
      { id: 'b', parent: 'p', createdAt: 2, descriptors: [oneShot()] },
      { id: 'c', parent: 'p', createdAt: 3, descriptors: [oneShot('gamma')] },
    ]);
    expect(await children('p')).toStrictEqual([
      child('a', 'continuable', 'alpha', 'inactive', false, 1),
      child('b', 'one-shot', undefined, 'inactive', false, 2),
      child('c', 'one-shot', 'gamma', 'inactive', false, 3),
    ]);
    expect(await children('a')).toEqual([]);
    expect(await children('nobody')).toEqual([]);
  });

  it('lists a child that left the live store from the projections its appends stored', async () => {
    live(host, { id: 'c', parent: 'p', descriptors: [oneShot('first'), oneShot('second')] });
    await hostParts(host).sessions.remove('c');
    expect(await children('p')).toStrictEqual([child('c', 'one-shot', 'second', 'inactive')]);
    expect(probe.loads).toBe(0);
  });

  it('Z4: orders by createdAt, then creation sequence (never id); excludes ordinary forks', async () => {
    await persist(store, [
      { id: 'z', parent: 'p', createdAt: 5, descriptors: [oneShot('z')] },
      { id: 'y', parent: 'p', createdAt: 5, descriptors: [oneShot('y')] },
      { id: 'x', parent: 'p', createdAt: 3, descriptors: [oneShot('x')] },
      { id: 'o', parent: 'p', createdAt: 1, ordinary: true, descriptors: [oneShot('fork')] },
    ]);
    live(host, { id: 'l', parent: 'p', createdAt: 5, descriptors: [oneShot('l')] });
    live(host, { id: 'k', parent: 'p', createdAt: 5, descriptors: [oneShot('k')] });
    expect((await children('p')).map((row) => [row.id, row.kind === 'child' && row.activity])).toEqual([
      ['x', 'inactive'],
      ['z', 'inactive'],
      ['y', 'inactive'],
      ['l', 'running'],
      ['k', 'running'],
    ]);
  });

  it('lets a live session override its stored record: running, and its live log wins', async () => {
    await persist(store, [{ id: 'c', parent: 'p', descriptors: [continuable('old')] }]);
    expect(await children('p')).toStrictEqual([child('c', 'continuable', 'old', 'inactive')]);
    await host.agents.resume({ sessionId: 'c' });
    hostParts(host).sessions.get('c')?.append(DESCRIPTOR_EVENT, continuable('new'));
    expect(await children('p')).toStrictEqual([child('c', 'continuable', 'new', 'running')]);
  });

  it('Z5: omits a live child without a valid descriptor; the later of two descriptors wins', async () => {
    live(host, { id: 'window', parent: 'p' });
    live(host, { id: 'broken', parent: 'p', descriptors: [continuable('fine'), { version: 2, mode: 'continuable' }] });
    live(host, { id: 'twice', parent: 'p', descriptors: [continuable('one'), continuable('two')] });
    await persist(store, [
      { id: 'settled-broken', parent: 'p', createdAt: 2000, descriptors: [continuable('fine'), { version: 2, mode: 'x' }] },
      { id: 'settled-twice', parent: 'p', createdAt: 2000, descriptors: [oneShot('one'), oneShot('two')] },
    ]);
    expect(await children('p')).toStrictEqual([
      child('twice', 'continuable', 'two', 'running'),
      { kind: 'diagnostic', id: 'settled-broken', reason: 'corrupt' },
      child('settled-twice', 'one-shot', 'two', 'inactive', false, 2000),
    ]);
  });

  it('Z9: a settled malformed, unknown-version or descriptor-less child is corrupt; unmounted providers still list', async () => {
    await persist(store, [
      { id: 'malformed', parent: 'p', descriptors: [{ version: 2, mode: 'one-shot', provider: 'x', persona: 'no' }] },
      { id: 'future', parent: 'p', descriptors: [{ version: 3, mode: 'one-shot', provider: 'x' }] },
      { id: 'bare', parent: 'p' },
      { id: 'gone', parent: 'p', descriptors: [{ version: 2, mode: 'one-shot', provider: 'unregistered', label: 'still here' }] },
    ]);
    expect(await children('p')).toStrictEqual([
      { kind: 'diagnostic', id: 'malformed', reason: 'corrupt' },
      { kind: 'diagnostic', id: 'future', reason: 'corrupt' },
      { kind: 'diagnostic', id: 'bare', reason: 'corrupt' },
      child('gone', 'one-shot', 'still here', 'inactive'),
    ]);
  });

  // The reference lists such a fork as its ancestor: a one-shot fork of a continuable child then
  // showed as a continuable child with that child's label and spend until its own descriptor came.
  it("Z9: a fork is not listed under the ancestor descriptor in its seed, live or stored, until its own descriptor", async () => {
    // A fork of a continuable child: its seed holds that child's descriptor; `session/end-seed` follows it.
    hostParts(host).sessions.create(headerOf({ id: 'f', parent: 'p', seedLength: 1 }), descriptorEvents([continuable('ancestor')]));
    expect(await children('p')).toStrictEqual([]);
    await hostParts(host).sessions.remove('f');
    await withListingHost(async (listing) => {
      expect(await listing.subagents.listChildren('p')).toStrictEqual([]);
      await store.append('f', descriptorEvents([oneShot('own')], 2));
      await store.flush();
      expect(await listing.subagents.listChildren('p')).toStrictEqual([child('f', 'one-shot', 'own', 'inactive')]);
    });
  });

  it('Z6/Z11: reads each cold child once from stored projections, live children and grandchildren never', async () => {
    await persist(store, [
      { id: 'a', parent: 'p', createdAt: 1, descriptors: [oneShot('a')] },
      { id: 'a1', parent: 'a', descriptors: [] },
      { id: 'b', parent: 'p', createdAt: 2, descriptors: [oneShot('b')] },
      { id: 'b1', parent: 'b', ordinary: true },
      { id: 'c', parent: 'p', createdAt: 3, descriptors: [oneShot('c')] },
    ]);
    live(host, { id: 'c1', parent: 'c', descriptors: [oneShot('c1')] });
    live(host, { id: 'd', parent: 'p', createdAt: 4, descriptors: [oneShot('d')] });
    expect(await children('p')).toStrictEqual([
      child('a', 'one-shot', 'a', 'inactive', true, 1),
      child('b', 'one-shot', 'b', 'inactive', false, 2),
      child('c', 'one-shot', 'c', 'inactive', true, 3),
      child('d', 'one-shot', 'd', 'running', false, 4),
    ]);
    expect(probe.projectionReads).toEqual([['a', 'b', 'c']]);
    expect(probe.loads).toBe(0);
  });

  it('from what the store enumerated, omits a child with no events of its own yet (its creation window, as another process sees it)', async () => {
    await withListingHost(async (listing) => {
      await persist(store, [
        { id: 'a', parent: 'p', createdAt: 1, descriptors: [oneShot('a')] },
        { id: 'new', parent: 'p', createdAt: 2 },
        { id: 'new-fork', parent: 'p', createdAt: 3, seedLength: 1 },
        { id: 'begun', parent: 'p', createdAt: 4 },
      ]);
      // The fork's seed (a top-level parent's turn: no descriptor) and its end marker, then nothing of its own.
      await store.append('new-fork', [
        { seq: 0, time: 1, type: 'turn/start', data: { turn: 1 } },
        { seq: 1, time: 1, type: 'session/end-seed', data: {} },
      ]);
      // A log that began without a descriptor is corrupt.
      await store.append('begun', [{ seq: 0, time: 1, type: 'turn/start', data: { turn: 1 } }]);
      await store.flush();
      const a = child('a', 'one-shot', 'a', 'inactive', false, 1);
      const begun = { kind: 'diagnostic', id: 'begun', reason: 'corrupt' } as const;
      expect(await listing.subagents.listChildren('p')).toStrictEqual([a, begun]);
      expect(await listing.subagents.listDescendants('p')).toStrictEqual([at(a, 'p', 1), at(begun, 'p', 1)]);
      await store.append('new', descriptorEvents([oneShot('now')]));
      await store.flush();
      expect((await listing.subagents.listChildren('p')).map((row) => row.id)).toStrictEqual(['a', 'new', 'begun']);
    });
  });

  it('lists cold children from what the store enumerated, with no projection read', async () => {
    await withListingHost(async (listing, listedProbe) => {
      await persist(store, [
        { id: 'a', parent: 'p', createdAt: 1, descriptors: [oneShot('a')] },
        { id: 'a1', parent: 'a', descriptors: [continuable('a1')] },
        { id: 'k', parent: 'p', createdAt: 2, descriptors: [{ version: 2, mode: 'continuable' }] },
      ]);
      const a = child('a', 'one-shot', 'a', 'inactive', true, 1);
      expect(await listing.subagents.listChildren('p')).toStrictEqual([a, { kind: 'diagnostic', id: 'k', reason: 'corrupt' }]);
      expect(await listing.subagents.listDescendants('p')).toStrictEqual([
        at(a, 'p', 1),
        at(child('a1', 'continuable', 'a1', 'inactive'), 'a', 2),
        at({ kind: 'diagnostic', id: 'k', reason: 'corrupt' }, 'p', 1),
      ]);
      expect(listedProbe.projectionReads).toEqual([]);
    });
  });

  it('Z8: a failed read lists its children unavailable, and the next listing reads them again', async () => {
    await persist(store, [{ id: 'c', parent: 'p', descriptors: [oneShot('c')] }]);
    live(host, { id: 'l', parent: 'p', createdAt: 2000, descriptors: [oneShot('l')] });
    probe.beforeProjections = () => {
      probe.beforeProjections = undefined;
      return Promise.reject(new Error('disk unplugged'));
    };
    expect(await children('p')).toStrictEqual([
      { kind: 'diagnostic', id: 'c', reason: 'unavailable' },
      child('l', 'one-shot', 'l', 'running', false, 2000),
    ]);
    expect(await children('p')).toStrictEqual([child('c', 'one-shot', 'c', 'inactive'), child('l', 'one-shot', 'l', 'running', false, 2000)]);
  });

  it('Z10: a failed enumeration rejects the listing PERSISTENCE_UNAVAILABLE with its error as cause', async () => {
    const failure = new Error('enumeration failed');
    probe.beforeRecords = () => Promise.reject(failure);
    const unavailable = { name: 'SubagentError', code: 'PERSISTENCE_UNAVAILABLE', cause: failure };
    await expect(children('p')).rejects.toMatchObject(unavailable);
    await expect(descendants('p')).rejects.toMatchObject(unavailable);
  });

  describe('Z12: cancellation', () => {
    let controller: AbortController;
    beforeEach(async () => {
      controller = new AbortController();
      await persist(store, [{ id: 'c', parent: 'p', descriptors: [oneShot('c')] }]);
    });

    it('rejects a pre-aborted listing before any read', async () => {
      controller.abort(new Error('stop'));
      await expect(children('p', controller.signal)).rejects.toMatchObject({ code: 'CANCELLED', cause: controller.signal.reason });
      await expect(descendants('p', controller.signal)).rejects.toMatchObject({ code: 'CANCELLED' });
      expect(probe.recordReads).toBe(0);
    });

    it.each([
      ['during the enumeration', (p: Probe, c: AbortController) => (p.beforeRecords = async () => c.abort())],
      ['during a projection read', (p: Probe, c: AbortController) => (p.beforeProjections = async () => c.abort())],
      ['right after a projection read resolves', (p: Probe, c: AbortController) => (p.afterProjections = () => c.abort())],
      [
        'while a projection read fails',
        (p: Probe, c: AbortController) =>
          (p.beforeProjections = async () => {
            c.abort();
            throw new Error('failed because aborted');
          }),
      ],
    ])('rejects CANCELLED, never a partial result, when aborted %s', async (_when, arm) => {
      arm(probe, controller);
      await expect(children('p', controller.signal)).rejects.toMatchObject({ code: 'CANCELLED' });
      controller = new AbortController();
      arm(probe, controller);
      await expect(descendants('p', controller.signal)).rejects.toMatchObject({ code: 'CANCELLED' });
    });

    it('rejects at once when aborted while a read hangs', async () => {
      const gate = deferred();
      probe.beforeRecords = () => gate.promise;
      const listing = children('p', controller.signal);
      controller.abort();
      await expect(listing).rejects.toMatchObject({ code: 'CANCELLED' });
      gate.resolve();
    });
  });

  it('Z13: lists descendants in pre-order with parentId and depth', async () => {
    await persist(store, [
      { id: 'r' },
      { id: 'A', parent: 'r', createdAt: 1, descriptors: [continuable('A')] },
      { id: 'B', parent: 'r', createdAt: 3, descriptors: [continuable('B')] },
      { id: 'G', parent: 'A', createdAt: 2, descriptors: [oneShot('G')] },
    ]);
    expect(await descendants('r')).toStrictEqual([
      at(child('A', 'continuable', 'A', 'inactive', true, 1), 'r', 1),
      at(child('G', 'one-shot', 'G', 'inactive', false, 2), 'A', 2),
      at(child('B', 'continuable', 'B', 'inactive', false, 3), 'r', 1),
    ]);
  });

  it('Z14: omits a creation-window node but lists its subtree; a corrupt node stays in place', async () => {
    await persist(store, [
      { id: 'k', parent: 'r', createdAt: 2 },
      { id: 'kk', parent: 'k', createdAt: 3, descriptors: [oneShot('kk')] },
    ]);
    live(host, { id: 'w', parent: 'r', createdAt: 1 });
    live(host, { id: 'g', parent: 'w', createdAt: 1, descriptors: [oneShot('g')] });
    expect(await descendants('r')).toStrictEqual([
      at(child('g', 'one-shot', 'g', 'running', false, 1), 'w', 2),
      { kind: 'diagnostic', id: 'k', reason: 'corrupt', parentId: 'r', depth: 1 },
      at(child('kk', 'one-shot', 'kk', 'inactive', false, 3), 'k', 2),
    ]);
  });

  it('Z15: ends a parent cycle without listing the root again', async () => {
    await persist(store, [
      { id: 'r', parent: 'b', descriptors: [oneShot('r')] },
      { id: 'a', parent: 'r', descriptors: [oneShot('a')] },
      { id: 'b', parent: 'a', descriptors: [oneShot('b')] },
    ]);
    expect((await descendants('r')).map((row) => [row.id, row.depth])).toEqual([
      ['a', 1],
      ['b', 2],
    ]);
  });

  it('Z15: walks a 10,000-deep ordinary chain to its leaf', async () => {
    const specs: Spec[] = [{ id: 'n0' }];
    for (let i = 1; i < 10_000; i++) specs.push({ id: `n${i}`, parent: `n${i - 1}`, ordinary: true });
    specs.push({ id: 'leaf', parent: 'n9999', descriptors: [oneShot('leaf')] });
    await persist(store, specs);
    expect(await descendants('n0')).toStrictEqual([at(child('leaf', 'one-shot', 'leaf', 'inactive'), 'n9999', 10_000)]);
  }, 60_000);

  it('Z16: walks through an ordinary fork; lists a one-shot before its continuable child', async () => {
    await persist(store, [
      { id: 'f', parent: 'r', createdAt: 1, ordinary: true },
      { id: 'fc', parent: 'f', createdAt: 2, descriptors: [continuable('fc')] },
      { id: 'o', parent: 'r', createdAt: 3, descriptors: [oneShot()] },
      { id: 'oc', parent: 'o', createdAt: 4, descriptors: [continuable('oc')] },
    ]);
    expect(await descendants('r')).toStrictEqual([
      at(child('fc', 'continuable', 'fc', 'inactive', false, 2), 'f', 2),
      at(child('o', 'one-shot', undefined, 'inactive', true, 3), 'r', 1),
      at(child('oc', 'continuable', 'oc', 'inactive', false, 4), 'o', 2),
    ]);
  });
});

describe('catalog of children started through the service', () => {
  // A worker child's first events (its descriptor among them) cross from its thread after start
  // resolves: it was listed by no listing in between, nor to a subagent/start listener.
  it.each(['spawn', 'fork'])('lists a one-shot %s child, running with its label, as soon as it is published', async (provider) => {
    const host = await createHost({ persistence: { sqlite: newFile() }, pool: { maxThreads: 1 } });
    try {
      const parent = await host.createAgent();
      const heard: unknown[] = [];
      host.subagents.on('subagent/start', (info) => {
        heard.push(host.subagents.listChildren(parent.id).then((rows) => rows.map((row) => [row.id === info.id, row.kind === 'child' && row.activity])));
      });
      const run = await host.subagents.start(provider, { label: 'scout', prompt: [text('hi')], parent, signal: new AbortController().signal });
      const row = { kind: 'child', id: run.id, mode: 'one-shot', label: 'scout', activity: 'running', hasChildren: false, createdAt: expect.any(Number), usage: expect.any(Object) };
      expect(await host.subagents.listChildren(parent.id)).toStrictEqual([row]);
      expect(await host.subagents.listDescendants(parent.id)).toStrictEqual([{ ...row, parentId: parent.id, depth: 1, treeUsage: expect.any(Object) }]);
      expect(await Promise.all(heard)).toStrictEqual([[[true, 'running']]]);
      expect((await run.result).stopReason).toBe('completed');
      await run.dispose();
      expect(await host.subagents.listChildren(parent.id)).toStrictEqual([{ ...row, activity: 'inactive', usage: expect.objectContaining({ turns: 1 }) }]);
    } finally {
      await host.close();
    }
  });

  it('lists a child running while resident, then inactive, also from a reopened database', async () => {
    const file = newFile();
    const host = await createHost({ persistence: { sqlite: file }, providers: false, pool: { minThreads: 0 } });
    host.subagents.registerProvider(inProcessProvider(host));
    const parent = await host.createAgent();
    const start = (label?: string) =>
      host.subagents.start('in-process', { prompt: [text('hi')], parent, signal: new AbortController().signal, ...(label === undefined ? {} : { label }) });
    const scout = await start('scout');
    const plain = await start();
    await Promise.all([scout.result, plain.result]);
    const rows = (activity: Activity) => [
      { kind: 'child', id: scout.id, mode: 'one-shot', label: 'scout', activity, hasChildren: false, createdAt: expect.any(Number), usage: expect.objectContaining({ turns: 1, requests: 1 }) },
      { kind: 'child', id: plain.id, mode: 'one-shot', activity, hasChildren: false, createdAt: expect.any(Number), usage: expect.objectContaining({ turns: 1, requests: 1 }) },
    ];
    expect(await host.subagents.listChildren(parent.id)).toStrictEqual(rows('running'));
    await scout.dispose();
    await plain.dispose();
    expect(await host.subagents.listChildren(parent.id)).toStrictEqual(rows('inactive'));
    await host.close();

    const reopened = await createHost({ persistence: { sqlite: file }, providers: false, pool: { minThreads: 0 } });
    try {
      expect(await reopened.subagents.listChildren(parent.id)).toStrictEqual(rows('inactive'));
      expect(await reopened.subagents.listDescendants(parent.id)).toStrictEqual(
        rows('inactive').map((row) => ({ ...row, treeUsage: row.usage, parentId: parent.id, depth: 1 })),
      );
    } finally {
      await reopened.close();
    }
  });
});
