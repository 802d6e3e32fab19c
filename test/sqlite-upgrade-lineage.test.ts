// A file of schema version 3 (no lineage keys) is upgraded in place when opened: every row gets the
// key its insert would have written, and listing shows what the memory store shows, from every root.
import Database from 'better-sqlite3';
import { expect, it } from 'vitest';
import { DESCRIPTOR_EVENT, memoryPersistence, sqlitePersistence } from 'subagent-host';
import { closeAfterEach, tempFiles } from './helpers.js';
import { FOREST, UNKEYED, listEveryRoot, storeForest } from './lineage-forest.js';

const { file: newFile } = tempFiles('subagent-upgrade-lineage-');
const track = closeAfterEach();

const STATES = [
  "identity_mode TEXT CHECK (identity_mode IN ('one-shot', 'continuable'))",
  'identity_label TEXT',
  'identity_seq INTEGER',
  ...['timing_settled', 'timing_since', 'timing_through', 'timing_pending'].map((name) => `${name} REAL`),
  'timing_seen INTEGER',
  ...['usage_input', 'usage_output', 'usage_requests', 'usage_turns', 'usage_tools', 'usage_seen'].map((name) => `${name} INTEGER`),
  ...['usage_since', 'usage_through', 'usage_pending'].map((name) => `${name} REAL`),
];

// The schema of version 3, as that release created it (its CHECK constraints aside).
const V3_SCHEMA = `
  CREATE TABLE sessions (id TEXT PRIMARY KEY NOT NULL, created_at REAL NOT NULL, create_order INTEGER NOT NULL UNIQUE,
    cwd TEXT, parent_session TEXT, origin TEXT, delegation_depth INTEGER, seed_length INTEGER,
    next_seq INTEGER NOT NULL DEFAULT 0, ${STATES.join(', ')},
    subagent_children INTEGER NOT NULL DEFAULT 0 CHECK (subagent_children IN (0, 1))) STRICT;
  CREATE INDEX sessions_by_creation ON sessions(created_at, create_order);
  CREATE TABLE events (session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE, seq INTEGER NOT NULL,
    type TEXT NOT NULL, time REAL NOT NULL, data TEXT NOT NULL, PRIMARY KEY (session_id, seq)) STRICT;
  CREATE INDEX sessions_subagents_by_parent ON sessions(parent_session) WHERE origin = 'subagent';
  CREATE INDEX sessions_by_parent ON sessions(parent_session, created_at, create_order, id);
  CREATE TRIGGER sessions_mark_parent AFTER INSERT ON sessions WHEN NEW.origin = 'subagent' AND NEW.parent_session IS NOT NULL
  BEGIN
    UPDATE sessions SET subagent_children = 1 WHERE id = NEW.parent_session AND subagent_children = 0;
  END;
`;

/** The forest as version 3 stored it: states NULL (rebuilt from the log on first read). */
function writeV3(file: string): void {
  const db = new Database(file);
  db.exec(V3_SCHEMA);
  const session = db.prepare(
    `INSERT INTO sessions (id, created_at, create_order, parent_session, origin, next_seq, subagent_children)
     VALUES (@id, @createdAt, (SELECT coalesce(max(create_order), 0) + 1 FROM sessions), @parent, @origin, 1,
             EXISTS (SELECT 1 FROM sessions c WHERE c.parent_session = @id AND c.origin = 'subagent'))`,
  );
  const event = db.prepare('INSERT INTO events VALUES (?, 0, ?, 1000, ?)');
  for (const { id, parent, createdAt, ordinary } of FOREST) {
    session.run({ id, createdAt, parent: parent ?? null, origin: ordinary || parent === undefined ? null : 'subagent' });
    event.run(id, DESCRIPTOR_EVENT, JSON.stringify({ version: 2, mode: 'one-shot', provider: 'in-process', label: `task ${id}` }));
  }
  db.pragma('user_version = 3');
  db.close();
}

const keys = (file: string): [string, string | null][] =>
  track(new Database(file, { readonly: true }))
    .prepare<[], [string, string | null]>('SELECT s.id, l.key FROM sessions s LEFT JOIN session_lineage l ON l.session = s.create_order ORDER BY s.id')
    .raw()
    .all();

/** `file` holds the lineage keys of a file this version wrote the same forest into. */
async function expectKeysOfWrittenForest(file: string): Promise<void> {
  const written = newFile();
  const writer = sqlitePersistence(written);
  await storeForest(writer);
  await writer.close();
  expect(keys(file)).toStrictEqual(keys(written));
}

it('upgrades a version-3 file on open: the keys its inserts would have written, the same listings', { timeout: 60_000 }, async () => {
  const file = newFile();
  writeV3(file);
  const memory = track(memoryPersistence());
  await storeForest(memory);
  const expected = await listEveryRoot(memory);
  expect(await listEveryRoot(track(sqlitePersistence(file)))).toStrictEqual(expected);
  // Reopened, the upgraded file lists the same again.
  expect(await listEveryRoot(track(sqlitePersistence(file)))).toStrictEqual(expected);

  await expectKeysOfWrittenForest(file);
  const db = track(new Database(file, { readonly: true }));
  expect(db.pragma('user_version', { simple: true })).toBe(5);
  expect(new Set(db.prepare('SELECT id FROM sessions WHERE create_order NOT IN (SELECT session FROM session_lineage)').pluck().all())).toStrictEqual(new Set(UNKEYED));
});

// Stored after the upgrade: under a parent keyed by it, and as parents of sessions it keyed under
// a missing parent (one of them on a cycle).
const LATER = [
  { id: 'new-under-a', createdAt: 7, parentSession: 'a', origin: 'subagent' as const },
  { id: 'gone', createdAt: 38, parentSession: 'top', origin: 'subagent' as const },
  { id: 'p', createdAt: 60, parentSession: 'c2', origin: 'subagent' as const },
];

it('keys sessions stored after the upgrade as a file written by this version does', async () => {
  const file = newFile();
  writeV3(file);
  const upgraded = track(sqlitePersistence(file));
  const memory = track(memoryPersistence());
  await storeForest(memory);
  for (const persistence of [upgraded, memory]) {
    for (const header of LATER) {
      await persistence.create(header);
      await persistence.append(header.id, [{ seq: 0, time: 1, type: DESCRIPTOR_EVENT, data: { version: 2, mode: 'one-shot', provider: 'in-process' } }]);
    }
  }
  await upgraded.flush();
  expect(await listEveryRoot(upgraded)).toStrictEqual(await listEveryRoot(memory));
  const written = newFile();
  const writer = sqlitePersistence(written);
  await storeForest(writer);
  for (const header of LATER) await writer.create(header);
  await writer.close();
  expect(keys(file)).toStrictEqual(keys(written));
  expect(track(new Database(file, { readonly: true })).prepare('SELECT count(*) FROM lineage_pending').pluck().get()).toBe(0);
});

it('keys again, upgrading a version-4 file, the sessions a version-3 host stored in it without keys', { timeout: 60_000 }, async () => {
  const file = newFile();
  const writer = sqlitePersistence(file);
  await storeForest(writer);
  await writer.close();
  // The file as version 4 left it, with two sessions a version-3 host stored below 'top' meanwhile.
  const db = new Database(file);
  db.exec('DROP TRIGGER sessions_lineage_pending; DROP TABLE lineage_pending');
  db.pragma('user_version = 4');
  const older = [
    { id: 'older', parentSession: 'top', createdAt: 1 },
    { id: 'older-kid', parentSession: 'older', createdAt: 2 },
  ];
  const data = { version: 2, mode: 'one-shot', provider: 'in-process', label: 'older' };
  for (const { id, parentSession, createdAt } of older) {
    db.prepare(
      `INSERT INTO sessions (id, created_at, create_order, parent_session, origin, next_seq)
       VALUES (?, ?, (SELECT coalesce(max(create_order), 0) + 1 FROM sessions), ?, 'subagent', 1)`,
    ).run(id, createdAt, parentSession);
    db.prepare('INSERT INTO events VALUES (?, 0, ?, 1000, ?)').run(id, DESCRIPTOR_EVENT, JSON.stringify(data));
  }
  db.close();
  const memory = track(memoryPersistence());
  await storeForest(memory);
  for (const header of older) {
    await memory.create({ ...header, origin: 'subagent' });
    await memory.append(header.id, [{ seq: 0, time: 1000, type: DESCRIPTOR_EVENT, data }]);
  }
  expect(await listEveryRoot(track(sqlitePersistence(file)))).toStrictEqual(await listEveryRoot(memory));
  expect(keys(file).filter(([, key]) => key === null).map(([id]) => id).sort()).toStrictEqual([...UNKEYED].sort());
});

// A host of version 3 that had the file open before another upgraded it goes on storing sessions
// with its own INSERT, which writes no lineage key: listings must still show them.
it('lists the sessions a still-running host of version 3 stores after the upgrade, and keys them when the file is next opened', { timeout: 60_000 }, async () => {
  const file = newFile();
  const older = track(new Database(file));
  older.exec(V3_SCHEMA);
  older.pragma('user_version = 3');
  older.pragma('journal_mode = WAL');
  const session = older.prepare(
    `INSERT INTO sessions (id, created_at, create_order, parent_session, origin, next_seq, subagent_children)
     VALUES (@id, @createdAt, (SELECT coalesce(max(create_order), 0) + 1 FROM sessions), @parent, @origin, 1,
             EXISTS (SELECT 1 FROM sessions c WHERE c.parent_session = @id AND c.origin = 'subagent'))
     ON CONFLICT (id) DO NOTHING`,
  );
  const event = older.prepare('INSERT INTO events VALUES (?, 0, ?, 1000, ?)');
  const upgraded = track(sqlitePersistence(file));
  // Every other session is stored by the older host, the rest by this version, in FOREST's order.
  for (const [at, { id, parent, createdAt, ordinary }] of FOREST.entries()) {
    const origin = ordinary || parent === undefined ? null : 'subagent';
    const data = { version: 2, mode: 'one-shot', provider: 'in-process', label: `task ${id}` };
    if (at % 2 === 0) {
      older.transaction(() => {
        session.run({ id, createdAt, parent: parent ?? null, origin });
        event.run(id, DESCRIPTOR_EVENT, JSON.stringify(data));
      })();
    } else {
      await upgraded.create({ id, createdAt, ...(parent === undefined ? {} : { parentSession: parent }), ...(origin === null ? {} : { origin }) });
      await upgraded.append(id, [{ seq: 0, time: 1000, type: DESCRIPTOR_EVENT, data }]);
    }
  }
  await upgraded.flush();
  const memory = track(memoryPersistence());
  await storeForest(memory);
  const expected = await listEveryRoot(memory);
  expect(await listEveryRoot(upgraded)).toStrictEqual(expected);
  // A store opened while the older host holds the write lock keys nothing, and waits for nothing.
  older.exec('BEGIN IMMEDIATE');
  expect(await listEveryRoot(track(sqlitePersistence(file)))).toStrictEqual(expected);
  older.exec('ROLLBACK');
  older.close();
  await upgraded.close();

  // Opened again by this version, the file gets the keys a file it wrote whole has.
  expect(await listEveryRoot(track(sqlitePersistence(file)))).toStrictEqual(expected);
  await expectKeysOfWrittenForest(file);
});
