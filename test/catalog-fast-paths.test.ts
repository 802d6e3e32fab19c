// The SQLite catalog's fast paths keep listing exact: a listing is one read of the store (what is
// written after it shows in the next listing, from this connection or another), labels any string
// can be are listed exactly, and header rows the schema refuses are still refused.
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
])('lists what its one read saw, and a write by %s after it in the next listing', async (_who, write) => {
  const file = newFile();
  await seeded(file);
  const inner = track(sqlitePersistence(file));
  let writes = 0;
  const host = track(
    await createHost({ persistence: withGap(inner, () => (writes++ === 0 ? write(inner, file) : Promise.resolve())), providers: false, pool: { minThreads: 0 } }),
  );
  expect(await host.subagents.listChildren('p')).toStrictEqual([row('old')]);
  expect(await host.subagents.listChildren('p')).toStrictEqual([row('new')]);
});

it('lists what its one read saw in a descendant listing too', async () => {
  const file = newFile();
  await seeded(file);
  const inner = track(sqlitePersistence(file));
  let writes = 0;
  const host = track(
    await createHost({ persistence: withGap(inner, () => (writes++ === 0 ? relabel(inner) : Promise.resolve())), providers: false, pool: { minThreads: 0 } }),
  );
  const placed = (label: string) => ({ ...row(label), treeUsage: NO_USAGE, parentId: 'p', depth: 1 });
  expect(await host.subagents.listDescendants('p')).toStrictEqual([placed('old')]);
  expect(await host.subagents.listDescendants('p')).toStrictEqual([placed('new')]);
});

it.each([
  ['escaping in JSON', 'quote " back\\slash\nline \u2028 \u0001 😀'],
  ['more than UTF-8 holds (a lone surrogate)', 'lone \ud800 \udc00 end'],
  ['to be told from an escaped one', '\u0000{"not":"json"}'],
])('lists labels that need %s exactly', async (_what, label) => {
  const file = newFile();
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
