// Descendants are listed from each session's stored lineage key: from every root of a forest that
// stores sessions out of creation order, before their parents, under parents never stored, on
// parent cycles and past the keyed depth, a reopened SQLite file lists what the memory store lists.
import Database from 'better-sqlite3';
import { expect, it } from 'vitest';
import { createHost, memoryPersistence, sqlitePersistence } from 'subagent-host';
import { closeAfterEach, tempFiles } from './helpers.js';
import { UNKEYED, listEveryRoot, storeForest } from './lineage-forest.js';

const { file: newFile } = tempFiles('subagent-listing-lineage-');
const track = closeAfterEach();

it('lists every root of the forest as the memory store does, from keys where the rows have them', { timeout: 60_000 }, async () => {
  const file = newFile();
  const writer = sqlitePersistence(file);
  await storeForest(writer);
  await writer.close();
  const memory = track(memoryPersistence());
  await storeForest(memory);
  const expected = await listEveryRoot(memory);
  expect(await listEveryRoot(track(sqlitePersistence(file)))).toStrictEqual(expected);

  const db = track(new Database(file, { readonly: true }));
  const unkeyed = db.prepare('SELECT id FROM sessions WHERE create_order NOT IN (SELECT session FROM session_lineage)').pluck().all();
  expect(new Set(unkeyed)).toStrictEqual(new Set(UNKEYED));
});

it('lists descendants depth first, siblings in creation order, whatever order they were stored in', async () => {
  const file = newFile();
  const writer = sqlitePersistence(file);
  await storeForest(writer);
  await writer.close();
  const host = track(await createHost({ persistence: { sqlite: file }, providers: false, pool: { minThreads: 0 } }));
  const rows = await host.subagents.listDescendants('top');
  expect(rows.map((row) => [row.id, row.parentId, row.depth])).toEqual([
    ['neg', 'top', 1],
    ['a', 'top', 1],
    ['a-1', 'a', 2],
    ['a-2', 'a-1', 3],
    ['a-3', 'a-2', 4],
    ['a-4', 'a-3', 5],
    ['a2', 'top', 1],
    // 'ord' is an ordinary session: walked through, not listed.
    ['ord-sub', 'ord', 2],
    ['b', 'top', 1],
    ['frac2', 'b', 2],
    ['frac', 'b', 2],
    ['late', 'b', 2],
    ['kid', 'late', 3],
    ['kid-1', 'kid', 4],
  ]);
  const gone = await host.subagents.listDescendants('gone');
  expect(gone.map((row) => [row.id, row.depth])).toEqual([['gone-2', 1], ['gone-1', 1], ['gone-1-1', 2]]);
  const cycle = await host.subagents.listDescendants('c1');
  expect(cycle.map((row) => [row.id, row.depth])).toEqual([['c2', 1], ['c3', 2], ['c2-leaf', 2]]);
});
