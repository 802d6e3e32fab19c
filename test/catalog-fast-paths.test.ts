// The SQLite catalog's fast paths keep listing exact: projection rows read with the enumeration are
// not served once anything was written since (by this connection or another), stored rows in any
// form the schema accepts are read as written, and rows the schema refuses are still refused.
import Database from 'better-sqlite3';
import { expect, it } from 'vitest';
import { DESCRIPTOR_EVENT, createHost, sqlitePersistence, type SessionPersistence } from 'subagent-host';
import { closeAfterEach, tempFiles } from './helpers.js';

const { file: newFile } = tempFiles('subagent-fast-paths-');
const track = closeAfterEach();

const descriptor = (label: string) => ({ version: 2, mode: 'continuable', provider: 'in-process', label });
const NO_USAGE = { inputTokens: 0, outputTokens: 0, totalTokens: 0, requests: 0, turns: 0, toolCalls: 0, wallMs: 0 };
const row = (label: string) => ({ kind: 'child', id: 'c', mode: 'continuable', label, activity: 'inactive', hasChildren: false, createdAt: 2, usage: NO_USAGE });

/** A file holding parent `p` and its child `c`, labelled `old`. */
async function seeded(file: string): Promise<void> {
  const writer = sqlitePersistence(file);
  await writer.create({ id: 'p', createdAt: 1 });
  await writer.create({ id: 'c', createdAt: 2, parentSession: 'p', origin: 'subagent' });
  await writer.append('c', [{ seq: 0, time: 10, type: DESCRIPTOR_EVENT, data: descriptor('old') }]);
  await writer.close();
}

/** `inner`, running `between` after each enumeration and before the projection read that follows it. */
function withGap(inner: SessionPersistence, between: () => Promise<void>): SessionPersistence {
  return {
    create: (header) => inner.create(header),
    append: (id, events) => inner.append(id, events),
    load: (id) => inner.load(id),
    list: (filter) => inner.list(filter),
    flush: () => inner.flush(),
    close: () => inner.close(),
    async childRecords(parentId) {
      const records = await inner.childRecords(parentId);
      await between();
      return records;
    },
    async descendantRecords(rootId) {
      const records = await inner.descendantRecords(rootId);
      await between();
      return records;
    },
    projections: (ids) => inner.projections(ids),
  };
}

// Committed at once (no write-behind timer), so the listing goes on within the same macrotask.
const relabel = async (persistence: SessionPersistence): Promise<void> => {
  const appended = persistence.append('c', [{ seq: 1, time: 20, type: DESCRIPTOR_EVENT, data: descriptor('new') }]);
  await persistence.flush();
  await appended;
};

it.each([
  ['this connection', (inner: SessionPersistence, _file: string) => relabel(inner)],
  ['another connection', (_inner: SessionPersistence, file: string) => relabel(track(sqlitePersistence(file)))],
])('reads projections as of the read when %s wrote after the enumeration', async (_who, write) => {
  const file = newFile();
  await seeded(file);
  const inner = track(sqlitePersistence(file));
  const host = track(
    await createHost({ persistence: withGap(inner, () => write(inner, file)), providers: false, pool: { minThreads: 0 } }),
  );
  expect(await host.subagents.listChildren('p')).toStrictEqual([row('new')]);
});

it('reads projections as of the read in a descendant listing too', async () => {
  const file = newFile();
  await seeded(file);
  const inner = track(sqlitePersistence(file));
  const host = track(await createHost({ persistence: withGap(inner, () => relabel(inner)), providers: false, pool: { minThreads: 0 } }));
  expect(await host.subagents.listDescendants('p')).toStrictEqual([{ ...row('new'), parentId: 'p', depth: 1 }]);
});

it('reads a stored row in another key order and layout as written, without rewriting it', async () => {
  const file = newFile();
  await seeded(file);
  const stored = JSON.stringify(
    {
      subagentTiming: { descriptorSeen: true, settledMs: 0, version: 2 },
      subagentUsage: [1, 0, 0, 0, 0, 0, true, 10, 10, null],
      subagent: { identity: { seq: 0, label: 'as written', mode: 'continuable' }, version: 2 },
    },
    null,
    2,
  );
  const db = track(new Database(file));
  db.prepare("UPDATE sessions SET projections = ? WHERE id = 'c'").run(stored);
  const host = track(await createHost({ persistence: { sqlite: file }, providers: false, pool: { minThreads: 0 } }));
  expect(await host.subagents.listChildren('p')).toStrictEqual([row('as written')]);
  expect(db.prepare("SELECT projections FROM sessions WHERE id = 'c'").pluck().get()).toBe(stored);
});

it('lists labels that need escaping in JSON exactly', async () => {
  const file = newFile();
  const label = 'quote " back\\slash\nline \u2028 \u0001 😀 \ud800';
  const writer = track(sqlitePersistence(file));
  await writer.create({ id: 'p', createdAt: 1 });
  await writer.create({ id: 'c', createdAt: 2, parentSession: 'p', origin: 'subagent' });
  await writer.append('c', [{ seq: 0, time: 10, type: DESCRIPTOR_EVENT, data: descriptor(label) }]);
  await writer.flush();
  const host = track(await createHost({ persistence: { sqlite: file }, providers: false, pool: { minThreads: 0 } }));
  expect(await host.subagents.listChildren('p')).toStrictEqual([row(label)]);
});

it.each([
  ['an origin', "origin = 'bogus'"],
  ['a seq count', 'next_seq = -1'],
])('rejects a listing over a header row with %s the schema refuses', async (_what, damage) => {
  const file = newFile();
  await seeded(file);
  track(new Database(file)).prepare(`UPDATE sessions SET ${damage} WHERE id = 'c'`).run();
  const host = track(await createHost({ persistence: { sqlite: file }, providers: false, pool: { minThreads: 0 } }));
  await expect(host.subagents.listChildren('p')).rejects.toMatchObject({ code: 'CORRUPT_DATA' });
  await expect(host.subagents.listDescendants('p')).rejects.toMatchObject({ code: 'CORRUPT_DATA' });
});
