// A file of schema version 2 (projection states as JSON text) is upgraded in place when opened: its
// stored states are carried into typed columns as written (not replayed), rows it cannot carry are
// rebuilt from their logs, and listing shows the same rows before and after a reopen.
import Database from 'better-sqlite3';
import { expect, it } from 'vitest';
import { DESCRIPTOR_EVENT, createHost, sqlitePersistence } from 'subagent-host';
import { closeAfterEach, tempFiles } from './helpers.js';

const { file: newFile } = tempFiles('subagent-upgrade-');
const track = closeAfterEach();

// The schema of version 2, as that release created it.
const V2_SCHEMA = `
  CREATE TABLE sessions (id TEXT PRIMARY KEY NOT NULL, created_at REAL NOT NULL, create_order INTEGER NOT NULL UNIQUE,
    cwd TEXT, parent_session TEXT, origin TEXT, delegation_depth INTEGER, seed_length INTEGER,
    next_seq INTEGER NOT NULL DEFAULT 0, projections TEXT) STRICT;
  CREATE INDEX sessions_by_parent ON sessions(parent_session, created_at, create_order);
  CREATE INDEX sessions_by_creation ON sessions(created_at, create_order);
  CREATE TABLE events (session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE, seq INTEGER NOT NULL,
    type TEXT NOT NULL, time REAL NOT NULL, data TEXT NOT NULL, PRIMARY KEY (session_id, seq)) STRICT;
  CREATE INDEX sessions_subagents_by_parent ON sessions(parent_session) WHERE origin = 'subagent';
`;

const descriptor = (mode: string, label?: string) => JSON.stringify({ version: 2, mode, provider: 'in-process', ...(label === undefined ? {} : { label }) });
const NO_USAGE = { inputTokens: 0, outputTokens: 0, totalTokens: 0, requests: 0, turns: 0, toolCalls: 0, wallMs: 0 };

/** What version 2 wrote for a child whose one turn ran from 10 to 30 and spent 7 + 3 tokens. */
const CANONICAL =
  '{"subagent":{"version":2,"identity":{"mode":"continuable","label":"kept","seq":1}},' +
  '"subagentTiming":{"version":2,"settledMs":20,"descriptorSeen":true},"subagentUsage":[1,7,3,1,1,0,true,10,30,null]}';
/** The same kind of states in another key order and layout (version 2 accepted any). */
const REORDERED = JSON.stringify(
  {
    subagentUsage: [1, 1, 1, 0, 0, 0, true, 5, 9, null],
    subagentTiming: { descriptorSeen: true, settledMs: 0, version: 2 },
    subagent: { identity: { seq: 0, mode: 'one-shot' }, version: 2 },
  },
  null,
  2,
);

function writeV2(file: string): void {
  const db = new Database(file);
  db.exec(V2_SCHEMA);
  const session = db.prepare('INSERT INTO sessions (id, created_at, create_order, parent_session, origin, next_seq, projections) VALUES (?, ?, ?, ?, ?, ?, ?)');
  const event = db.prepare('INSERT INTO events VALUES (?, ?, ?, ?, ?)');
  session.run('p', 1, 1, null, null, 0, null);
  // Carried: its log is damaged, so a replay would list it corrupt.
  session.run('kept', 2, 2, 'p', 'subagent', 3, CANONICAL);
  event.run('kept', 0, 'turn/start', 10, '{broken');
  event.run('kept', 1, DESCRIPTOR_EVENT, 20, descriptor('continuable', 'kept'));
  event.run('kept', 2, 'turn/end', 30, '{}');
  session.run('reordered', 3, 3, 'p', 'subagent', 1, REORDERED);
  event.run('reordered', 0, DESCRIPTOR_EVENT, 5, descriptor('one-shot'));
  // Not carried (damaged, or never stored): rebuilt from the log on first read.
  session.run('damaged', 4, 4, 'p', 'subagent', 1, '{"subagent":');
  event.run('damaged', 0, DESCRIPTOR_EVENT, 40, descriptor('one-shot', 'rebuilt'));
  session.run('grandchild', 5, 5, 'kept', 'subagent', 1, null);
  event.run('grandchild', 0, DESCRIPTOR_EVENT, 50, descriptor('one-shot', 'deep'));
  db.pragma('user_version = 2');
  db.close();
}

const child = (id: string, mode: string, label: string | undefined, createdAt: number, usage = NO_USAGE, hasChildren = false) => ({
  kind: 'child',
  id,
  mode,
  ...(label === undefined ? {} : { label }),
  activity: 'inactive',
  hasChildren,
  createdAt,
  usage,
});
const keptUsage = { inputTokens: 7, outputTokens: 3, totalTokens: 10, requests: 1, turns: 1, toolCalls: 0, wallMs: 20 };
const reorderedUsage = { ...NO_USAGE, inputTokens: 1, outputTokens: 1, totalTokens: 2, wallMs: 4 };
const CHILDREN = [
  child('kept', 'continuable', 'kept', 2, keptUsage, true),
  child('reordered', 'one-shot', undefined, 3, reorderedUsage),
  child('damaged', 'one-shot', 'rebuilt', 4),
];
const DESCENDANTS = [
  { ...CHILDREN[0], treeUsage: keptUsage, parentId: 'p', depth: 1 },
  { ...child('grandchild', 'one-shot', 'deep', 5), treeUsage: NO_USAGE, parentId: 'kept', depth: 2 },
  { ...CHILDREN[1], treeUsage: reorderedUsage, parentId: 'p', depth: 1 },
  { ...CHILDREN[2], treeUsage: NO_USAGE, parentId: 'p', depth: 1 },
];

async function listings(file: string): Promise<[unknown, unknown]> {
  const host = await createHost({ persistence: { sqlite: file }, providers: false, pool: { minThreads: 0 } });
  try {
    return [await host.subagents.listChildren('p'), await host.subagents.listDescendants('p')];
  } finally {
    await host.close();
  }
}

it('upgrades a version-2 file on open and lists the same rows, also after a reopen', async () => {
  const file = newFile();
  writeV2(file);
  expect(await listings(file)).toStrictEqual([CHILDREN, DESCENDANTS]);
  expect(await listings(file)).toStrictEqual([CHILDREN, DESCENDANTS]);
  const db = track(new Database(file, { readonly: true }));
  expect(db.pragma('user_version', { simple: true })).toBe(5);
  const columns = db.prepare("SELECT name FROM pragma_table_info('sessions')").pluck().all();
  expect(columns).not.toContain('projections');
  expect(columns).toContain('usage_input');
  // The damaged row was rebuilt from its log by the first listing, and written back.
  expect(db.prepare("SELECT identity_label, subagent_children FROM sessions WHERE id = 'damaged'").raw().get()).toEqual(['rebuilt', 0]);
  expect(db.prepare("SELECT subagent_children FROM sessions WHERE id = 'kept'").pluck().get()).toBe(1);
});

it('keeps appending to an upgraded session from its carried states', async () => {
  const file = newFile();
  writeV2(file);
  const persistence = track(sqlitePersistence(file));
  await persistence.append('reordered', [{ seq: 1, time: 20, type: 'assistant/message', data: { content: [], usage: { inputTokens: 5, outputTokens: 0 } } }]);
  const read = (await persistence.projections(['reordered'])).get('reordered');
  expect(read).toMatchObject({ ok: true, views: { subagentUsage: { inputTokens: 6, outputTokens: 1, wallMs: 15 } } });
});

it('marks a parent that has subagent children, whichever of the two was stored first', async () => {
  const persistence = track(sqlitePersistence(newFile()));
  await persistence.create({ id: 'top', createdAt: 0 });
  await persistence.create({ id: 'early', createdAt: 1, parentSession: 'later', origin: 'subagent' });
  await persistence.create({ id: 'later', createdAt: 2, parentSession: 'top' });
  await persistence.create({ id: 'plain', createdAt: 3, parentSession: 'top' });
  await persistence.create({ id: 'sub', createdAt: 4, parentSession: 'plain', origin: 'subagent' });
  await persistence.create({ id: 'lonely', createdAt: 5, parentSession: 'top' });
  await persistence.create({ id: 'ordinary', createdAt: 6, parentSession: 'lonely' });
  const records = await persistence.childRecords('top');
  expect(records.map((record) => [record.header.id, record.hasSubagentChildren])).toEqual([
    ['later', true],
    ['plain', true],
    ['lonely', false],
  ]);
});
