// SessionPersistence contract, run against every backend, then the SQLite-only behaviour: reopening
// a file, write conflicts, corrupt rows and schema versions, and retry after a failed commit.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import fc from 'fast-check';
import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';
import { memoryPersistence, sqlitePersistence } from 'subagent-host';
import type { SessionEvent, SessionHeader, SessionPersistence } from 'subagent-host';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'subagent-persistence-'));
let files = 0;
const newFile = (): string => path.join(tmp, `store-${files++}.db`);

const opened: SessionPersistence[] = [];
function track(persistence: SessionPersistence): SessionPersistence {
  opened.push(persistence);
  return persistence;
}

afterEach(async () => {
  vi.useRealTimers();
  await Promise.all(opened.splice(0).map((persistence) => persistence.close()));
});
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));

const header = (id: string, extra: Partial<SessionHeader> = {}): SessionHeader => ({ id, createdAt: 1000, ...extra });
const ev = (seq: number, type = 'test/note', data: unknown = { n: seq }): SessionEvent => ({
  seq,
  time: 5000 + seq,
  type,
  data,
});
const log = (...parts: [string, unknown][]): SessionEvent[] => parts.map(([type, data], seq) => ev(seq, type, data));
const toolCall = (id: string, name: string) => ({ type: 'tool_call', id, name, input: { path: 'a' } });
const synthetic = (seq: number, time: number, callId: string, name: string, code: string): SessionEvent => ({
  seq,
  time,
  type: 'tool/result',
  data: { turn: 1, step: 0, callId, name, content: [{ type: 'text', text: expect.any(String) }], isError: true, code },
});
const turnEnd = (seq: number, time: number): SessionEvent => ({
  seq,
  time,
  type: 'turn/end',
  data: { turn: 1, reason: { kind: 'interrupted' } },
});

async function seeded(persistence: SessionPersistence, events: SessionEvent[], id = 's'): Promise<void> {
  await persistence.create(header(id));
  await persistence.append(id, events);
  await persistence.flush();
}

const backends = [
  { name: 'memory', open: () => memoryPersistence() },
  { name: 'sqlite file', open: () => sqlitePersistence(newFile()) },
  { name: 'sqlite :memory:', open: () => sqlitePersistence(':memory:') },
];

describe.each(backends)('$name persistence contract', ({ open }) => {
  const make = (): SessionPersistence => track(open());

  it('round-trips headers and events through create, append and load', async () => {
    const p = make();
    const full = header('full', { cwd: '/w', parentSession: 'root', origin: 'subagent', delegationDepth: 0, seedLength: 2 });
    await p.create(full);
    await p.append('full', [ev(0), ev(1, 'user/message', { id: 'm', content: [{ type: 'text', text: 'hi' }] })]);
    await p.append('full', [ev(2, 'custom', [1, 'two', null, { deep: true }])]);
    const loaded = await p.load('full');
    expect(loaded).toStrictEqual({
      header: full,
      events: [ev(0), ev(1, 'user/message', { id: 'm', content: [{ type: 'text', text: 'hi' }] }), ev(2, 'custom', [1, 'two', null, { deep: true }])],
    });
  });

  it('returns headers without the optional fields that were absent', async () => {
    const p = make();
    await p.create({ id: 'bare', createdAt: 1.5 });
    expect(await p.list()).toStrictEqual([{ id: 'bare', createdAt: 1.5 }]);
    expect((await p.load('bare'))?.header).toStrictEqual({ id: 'bare', createdAt: 1.5 });
  });

  it('round-trips any JSON event data', async () => {
    const p = make();
    let n = 0;
    await fc.assert(
      fc.asyncProperty(fc.jsonValue(), async (data) => {
        const id = `json-${n++}`;
        await p.create(header(id));
        await p.append(id, [ev(0, 'custom', data)]);
        const loaded = await p.load(id);
        expect(loaded?.events[0]?.data).toStrictEqual(JSON.parse(JSON.stringify(data)));
      }),
      { numRuns: 60 },
    );
  });

  it('returns undefined when loading an unknown session', async () => {
    expect(await make().load('nope')).toBeUndefined();
  });

  it('lists in creation order, createdAt first and ties by creation sequence', async () => {
    const p = make();
    await p.create(header('a', { createdAt: 2 }));
    await p.create(header('b', { createdAt: 1 }));
    await p.create(header('c', { createdAt: 2, parentSession: 'a' }));
    await p.create(header('d', { createdAt: 1, parentSession: 'a' }));
    await p.create(header('e', { createdAt: 3, parentSession: 'b' }));
    expect((await p.list()).map((h) => h.id)).toEqual(['b', 'd', 'a', 'c', 'e']);
    expect((await p.list({ parentSession: 'a' })).map((h) => h.id)).toEqual(['d', 'c']);
    expect(await p.list({ parentSession: 'zzz' })).toEqual([]);
  });

  it.each([
    ['empty id', { id: '', createdAt: 1 }],
    ['non-finite createdAt', { id: 'x', createdAt: Number.NaN }],
    ['mistyped optional field', { id: 'x', createdAt: 1, delegationDepth: -1 }],
    ['unknown field', { id: 'x', createdAt: 1, colour: 'red' }],
  ])('rejects a header with %s as INVALID_OPTIONS', async (_name, bad) => {
    const p = make();
    await expect(p.create(bad as SessionHeader)).rejects.toMatchObject({ code: 'INVALID_OPTIONS' });
    expect(await p.list()).toEqual([]);
  });

  it('rejects a second create with the same id as DUPLICATE_SESSION', async () => {
    const p = make();
    await p.create(header('s'));
    await expect(p.create(header('s', { createdAt: 9 }))).rejects.toMatchObject({ code: 'DUPLICATE_SESSION' });
    expect(await p.list()).toStrictEqual([header('s')]);
  });

  it('rejects appends to an unknown session as UNKNOWN_SESSION', async () => {
    await expect(make().append('ghost', [ev(0)])).rejects.toMatchObject({ code: 'UNKNOWN_SESSION' });
  });

  it.each([
    ['a wrong first seq', [ev(1)]],
    ['a gap', [ev(0), ev(2)]],
    ['a duplicated seq in one batch', [ev(0), ev(0)]],
  ])('rejects %s as SEQ_MISMATCH and writes nothing', async (_name, events) => {
    const p = make();
    await p.create(header('s'));
    await expect(p.append('s', events)).rejects.toMatchObject({ code: 'SEQ_MISMATCH' });
    await p.append('s', [ev(0)]);
    expect((await p.load('s'))?.events).toEqual([ev(0)]);
  });

  it('rejects re-appending an already stored seq as SEQ_MISMATCH', async () => {
    const p = make();
    await p.create(header('s'));
    const first = p.append('s', [ev(0), ev(1)]);
    await expect(p.append('s', [ev(1)])).rejects.toMatchObject({ code: 'SEQ_MISMATCH' });
    await first;
    expect((await p.load('s'))?.events).toEqual([ev(0), ev(1)]);
  });

  it.each([
    ['undefined data', { ...ev(0), data: undefined }],
    ['BigInt data', ev(0, 'custom', { big: 1n })],
    ['an empty type', ev(0, '')],
  ])('rejects an event with %s as CORRUPT_DATA and writes nothing', async (_name, bad) => {
    const p = make();
    await p.create(header('s'));
    await expect(p.append('s', [ev(0), { ...bad, seq: 1 }])).rejects.toMatchObject({ code: 'CORRUPT_DATA' });
    expect((await p.load('s'))?.events).toEqual([]);
  });

  it('keeps stored data apart from objects the caller passed in or got back', async () => {
    const p = make();
    const created = header('s', { cwd: '/a' });
    await p.create(created);
    const data = { list: [1] };
    const appended = p.append('s', [ev(0, 'custom', data)]);
    data.list.push(2);
    created.cwd = '/b';
    await appended;
    const loaded = await p.load('s');
    (loaded?.events[0]?.data as { list: number[] }).list.push(3);
    if (loaded) loaded.header.cwd = '/c';
    expect(await p.load('s')).toStrictEqual({ header: header('s', { cwd: '/a' }), events: [ev(0, 'custom', { list: [1] })] });
    expect(await p.list()).toStrictEqual([header('s', { cwd: '/a' })]);
  });

  it('flush commits queued appends without waiting for the batch timer and leaves no timer', async () => {
    vi.useFakeTimers();
    const p = make();
    await p.create(header('s'));
    const appended = [p.append('s', [ev(0)]), p.append('s', [ev(1), ev(2)])];
    await p.flush();
    expect(vi.getTimerCount()).toBe(0);
    await Promise.all(appended);
    expect((await p.load('s'))?.events).toHaveLength(3);
  });

  it('projections and load read appends still queued for the batch timer, and appends continue after them', async () => {
    vi.useFakeTimers();
    const p = make();
    await p.create(header('s'));
    const descriptor = ev(0, 'subagent/descriptor', { version: 2, mode: 'continuable', provider: 'in-process', label: 'queued' });
    // Each read commits what is queued, so each is checked after appends of its own.
    const appended = [p.append('s', [descriptor, ev(1)])];
    const read = (await p.projections(['s'])).get('s');
    expect(read).toMatchObject({ ok: true, views: { subagent: { mode: 'continuable', label: 'queued' } } });
    appended.push(p.append('s', [ev(2)]));
    expect((await p.load('s'))?.events).toStrictEqual([descriptor, ev(1), ev(2)]);
    appended.push(p.append('s', [ev(3)]));
    await p.flush();
    await Promise.all(appended);
    expect((await p.load('s'))?.events.map((event) => event.seq)).toStrictEqual([0, 1, 2, 3]);
    expect((await p.projections(['s'])).get('s')).toStrictEqual(read);
  });

  it('close is idempotent and every later call rejects with CLOSED', async () => {
    const p = make();
    await p.create(header('s'));
    const pending = p.append('s', [ev(0)]);
    const closing = p.close();
    expect(p.close()).toBe(closing);
    await closing;
    await pending;
    await expect(p.create(header('t'))).rejects.toMatchObject({ code: 'CLOSED' });
    await expect(p.append('s', [ev(1)])).rejects.toMatchObject({ code: 'CLOSED' });
    await expect(p.load('s')).rejects.toMatchObject({ code: 'CLOSED' });
    await expect(p.list()).rejects.toMatchObject({ code: 'CLOSED' });
    await expect(p.flush()).rejects.toMatchObject({ code: 'CLOSED' });
  });

  describe('crash repair on load', () => {
    const opening = (): [string, unknown][] => [
      ['turn/start', { turn: 1 }],
      ['step/start', { turn: 1, step: 0 }],
    ];
    const asking = (...calls: ReturnType<typeof toolCall>[]): [string, unknown] => [
      'assistant/message',
      { turn: 1, step: 0, id: 'm1', content: [{ type: 'text', text: 'working' }, ...calls] },
    ];

    it('answers a tool call that never started with TOOL_NOT_STARTED, then closes the step and turn', async () => {
      const p = make();
      await seeded(p, log(...opening(), asking(toolCall('c1', 'read'))));
      expect((await p.load('s'))?.events.slice(3)).toEqual([
        synthetic(3, 5002, 'c1', 'read', 'TOOL_NOT_STARTED'),
        { seq: 4, time: 5002, type: 'step/end', data: { turn: 1, step: 0 } },
        turnEnd(5, 5002),
      ]);
    });

    it('answers a tool call whose tool/call was logged with TOOL_OUTCOME_UNKNOWN', async () => {
      const p = make();
      const events = log(
        ...opening(),
        asking(toolCall('c1', 'read'), toolCall('c2', 'write')),
        ['tool/call', { turn: 1, step: 0, callId: 'c2', name: 'write', input: { path: 'a' } }],
      );
      await seeded(p, events);
      expect((await p.load('s'))?.events.slice(4)).toEqual([
        synthetic(4, 5003, 'c1', 'read', 'TOOL_NOT_STARTED'),
        synthetic(5, 5003, 'c2', 'write', 'TOOL_OUTCOME_UNKNOWN'),
        { seq: 6, time: 5003, type: 'step/end', data: { turn: 1, step: 0 } },
        turnEnd(7, 5003),
      ]);
    });

    it('adds no result for a tool call that was answered', async () => {
      const p = make();
      const events = log(
        ...opening(),
        asking(toolCall('c1', 'read')),
        ['tool/call', { turn: 1, step: 0, callId: 'c1', name: 'read', input: {} }],
        ['tool/result', { turn: 1, step: 0, callId: 'c1', name: 'read', content: [] }],
        ['step/end', { turn: 1, step: 0 }],
      );
      await seeded(p, events);
      expect((await p.load('s'))?.events.slice(6)).toEqual([turnEnd(6, 5005)]);
    });

    it('closes an open step that made no tool calls', async () => {
      const p = make();
      await seeded(p, log(...opening()));
      expect((await p.load('s'))?.events.slice(2)).toEqual([
        { seq: 2, time: 5001, type: 'step/end', data: { turn: 1, step: 0 } },
        turnEnd(3, 5001),
      ]);
    });

    it('leaves a log that ends outside a turn untouched', async () => {
      const p = make();
      const events = log(...opening(), ['step/end', { turn: 1, step: 0 }], ['turn/end', { turn: 1, reason: { kind: 'completed' } }], [
        'user/message',
        { id: 'u', content: [] },
      ]);
      await seeded(p, events);
      expect((await p.load('s'))?.events).toEqual(events);
    });

    it('persists the closers, so a second load matches and appends continue after them', async () => {
      const p = make();
      await seeded(p, log(...opening()));
      const first = await p.load('s');
      expect(first?.events).toHaveLength(4);
      expect(await p.load('s')).toEqual(first);
      await expect(p.append('s', [ev(2)])).rejects.toMatchObject({ code: 'SEQ_MISMATCH' });
      await p.append('s', [ev(4, 'turn/start', { turn: 2 }), ev(5, 'turn/end', { turn: 2, reason: { kind: 'completed' } })]);
      expect((await p.load('s'))?.events.map((e) => e.seq)).toEqual([0, 1, 2, 3, 4, 5]);
    });

    it('rejects a log whose turn/start data is malformed as CORRUPT_DATA', async () => {
      const p = make();
      await seeded(p, log(['turn/start', { turn: 'one' }]));
      await expect(p.load('s')).rejects.toMatchObject({ code: 'CORRUPT_DATA' });
    });
  });
});
