// Projections stored beside each session's log: seam-spec P2–P4 read back from both backends after
// incremental appends (and a reopen), damaged rows rebuilt from the log, a corrupt log reported as
// corrupt by the catalog, and a version-1 SQLite file upgraded in place (version 2: see
// sqlite-upgrade.test.ts).
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import {
  DESCRIPTOR_EVENT,
  createHost,
  memoryPersistence,
  sqlitePersistence,
  type ProjectionViews,
  type SessionEvent,
  type SessionPersistence,
} from 'subagent-host';
import { closeAfterEach, tempFiles } from './helpers.js';

const NO_USAGE = { inputTokens: 0, outputTokens: 0, totalTokens: 0, requests: 0, turns: 0, toolCalls: 0, wallMs: 0 };

const { file: newFile } = tempFiles('subagent-projections-');
const track = closeAfterEach();

const label = (name: string) => ({ version: 2, mode: 'continuable', provider: 'in-process', label: name });
/** A log from [type, time, data?] triples; `desc` is a valid descriptor. */
function log(...parts: [string, number, unknown?][]): SessionEvent[] {
  return parts.map(([type, time, data], seq) =>
    type === 'desc' ? { seq, time, type: DESCRIPTOR_EVENT, data: data ?? label('x') } : { seq, time, type, data: data ?? {} },
  );
}

/** Appends `events` in batches of 1, 2, 3, … (so the fold runs across commits), then reads the views. */
async function storedViews(persistence: SessionPersistence, events: SessionEvent[], id = 's'): Promise<ProjectionViews> {
  await persistence.create({ id, createdAt: 1 });
  for (let start = 0, size = 1; start < events.length; start += size, size++) {
    await persistence.append(id, events.slice(start, start + size));
  }
  const read = (await persistence.projections([id])).get(id);
  if (read?.ok !== true) throw new Error(`no stored projections for ${id}`);
  return read.views;
}

const backends = [
  { name: 'an SQLite file', open: () => sqlitePersistence(newFile()) },
  { name: 'memory', open: () => memoryPersistence() },
];

describe.each(backends)('stored projections over $name', ({ open }) => {
  it('P1: an empty log stores timing {settledMs: 0} and identity null', async () => {
    expect(await storedViews(track(open()), [])).toStrictEqual({ subagent: null, subagentTiming: { settledMs: 0 }, subagentUsage: NO_USAGE });
  });

  it('P2: timing restarts at each descriptor and sums the turns after it', async () => {
    const events = log(['turn/start', 100], ['desc', 110], ['turn/end', 300], ['turn/start', 1000], ['desc', 1100], ['turn/end', 4100], ['turn/start', 10000], ['turn/end', 12000]);
    expect((await storedViews(track(open()), events)).subagentTiming).toStrictEqual({ settledMs: 5100 });
  });

  it('P2: timing clamps a clock step backwards and extends the open turn to the latest event', async () => {
    const events = log(['turn/start', 1000], ['desc', 1100], ['turn/end', 900], ['turn/start', 2000], ['assistant/chunk', 2500]);
    expect((await storedViews(track(open()), events)).subagentTiming).toStrictEqual({ settledMs: 0, active: { since: 2000, through: 2500 } });
  });

  it('P3: a turn that ended before the descriptor is not counted', async () => {
    const events = log(['turn/start', 100], ['turn/end', 200], ['desc', 300]);
    expect((await storedViews(track(open()), events)).subagentTiming).toStrictEqual({ settledMs: 0 });
  });

  it('P4: identity follows the last descriptor; a malformed one clears it to null, kept through JSON', async () => {
    const persistence = track(open());
    const valid = await storedViews(persistence, log(['note', 1], ['desc', 2, label('scout')]), 'a');
    expect(valid.subagent).toStrictEqual({ mode: 'continuable', label: 'scout', seq: 1 });
    const cleared = await storedViews(persistence, log(['desc', 1, label('scout')], ['desc', 2, { version: 2, mode: 'continuable' }]), 'b');
    expect(JSON.parse(JSON.stringify(cleared))).toHaveProperty('subagent', null);
  });

  it('reports only stored ids', async () => {
    const persistence = track(open());
    await persistence.create({ id: 'known', createdAt: 1 });
    expect([...(await persistence.projections(['known', 'unknown'])).keys()]).toEqual(['known']);
  });
});

describe('stored projections in an SQLite file', () => {
  const raw = (file: string) => track(new Database(file));

  async function seeded(file: string): Promise<void> {
    const persistence = sqlitePersistence(file);
    await persistence.create({ id: 'p', createdAt: 1 });
    await persistence.create({ id: 'c', createdAt: 2, parentSession: 'p', origin: 'subagent' });
    await persistence.append('c', log(['turn/start', 10], ['desc', 20, label('kept')], ['turn/end', 30]));
    await persistence.close();
  }

  const listed = async (file: string) => {
    const host = track(await createHost({ persistence: { sqlite: file }, providers: false, pool: { minThreads: 0 } }));
    return host.subagents.listChildren('p');
  };
  // The seeded log: one turn from 10 to 30, no model request.
  const usage = { ...NO_USAGE, turns: 1, wallMs: 20 };
  const row = { kind: 'child', id: 'c', mode: 'continuable', label: 'kept', activity: 'inactive', hasChildren: false, createdAt: 2, usage };

  it('survive a reopen', async () => {
    const file = newFile();
    await seeded(file);
    const reopened = track(sqlitePersistence(file));
    expect((await reopened.projections(['c'])).get('c')).toStrictEqual({
      ok: true,
      views: { subagent: { mode: 'continuable', label: 'kept', seq: 1 }, subagentTiming: { settledMs: 20 }, subagentUsage: usage },
    });
  });

  it('are read without the log: a damaged event row does not change the listing', async () => {
    const file = newFile();
    await seeded(file);
    raw(file).prepare("UPDATE events SET data = '{broken' WHERE session_id = 'c' AND seq = 2").run();
    expect(await listed(file)).toStrictEqual([row]);
  });

  // Every state column; NULL in all of them is a session whose states were never stored.
  const NO_STATES = [
    'identity_mode', 'identity_label', 'identity_seq', 'timing_settled', 'timing_since', 'timing_through', 'timing_pending',
    'timing_seen', 'usage_input', 'usage_output', 'usage_requests', 'usage_turns', 'usage_tools', 'usage_seen', 'usage_since',
    'usage_through', 'usage_pending',
  ].map((column) => `${column} = NULL`).join(', ');

  it.each([
    ['missing', NO_STATES],
    ['partly missing', 'usage_input = NULL'],
    ['an escaped label that is not JSON', "identity_label = char(0) || '{broken'"],
  ])('are rebuilt from the log, and written back, when the stored row is %s', async (_what, damage) => {
    const file = newFile();
    await seeded(file);
    const db = raw(file);
    db.prepare(`UPDATE sessions SET ${damage} WHERE id = 'c'`).run();
    expect(await listed(file)).toStrictEqual([row]);
    expect(db.prepare("SELECT identity_label, usage_input, usage_turns FROM sessions WHERE id = 'c'").raw().get()).toEqual(['kept', 0, 1]);
  });

  it('are rebuilt from the log when an open turn has one bound only', async () => {
    const file = newFile();
    await seeded(file);
    raw(file).prepare("UPDATE sessions SET timing_since = 5 WHERE id = 'c'").run();
    const persistence = track(sqlitePersistence(file));
    expect((await persistence.projections(['c'])).get('c')).toMatchObject({ ok: true, views: { subagentTiming: { settledMs: 20 } } });
  });

  it('refuse values no state has (the schema checks them)', async () => {
    const file = newFile();
    await seeded(file);
    const db = raw(file);
    for (const damage of ["identity_mode = 'bogus'", 'usage_input = -1', 'timing_seen = 2', "usage_turns = 'x'", 'timing_settled = 1e999']) {
      expect(() => db.prepare(`UPDATE sessions SET ${damage} WHERE id = 'c'`).run(), damage).toThrow(/constraint|cannot store/i);
    }
  });

  it('list a child as corrupt when both its stored row and its log are unreadable', async () => {
    const file = newFile();
    await seeded(file);
    const db = raw(file);
    db.prepare(`UPDATE sessions SET ${NO_STATES} WHERE id = 'c'`).run();
    db.prepare("UPDATE events SET data = '{broken' WHERE session_id = 'c' AND seq = 1").run();
    expect(await listed(file)).toStrictEqual([{ kind: 'diagnostic', id: 'c', reason: 'corrupt' }]);
    const persistence = track(sqlitePersistence(file));
    expect((await persistence.projections(['c'])).get('c')).toMatchObject({ ok: false, error: { code: 'CORRUPT_DATA' } });
  });

  it('keep folding after a damaged row: the next append rebuilds it from the log first', async () => {
    const file = newFile();
    await seeded(file);
    raw(file).prepare(`UPDATE sessions SET ${NO_STATES} WHERE id = 'c'`).run();
    const persistence = track(sqlitePersistence(file));
    await persistence.append('c', [{ seq: 3, time: 40, type: DESCRIPTOR_EVENT, data: label('later') }]);
    expect((await persistence.projections(['c'])).get('c')).toMatchObject({ ok: true, views: { subagent: { label: 'later', seq: 3 } } });
  });

  it('upgrade a version-1 file in place', async () => {
    const file = newFile();
    const db = new Database(file);
    db.exec(`
      CREATE TABLE sessions (id TEXT PRIMARY KEY NOT NULL, created_at REAL NOT NULL, create_order INTEGER NOT NULL UNIQUE,
        cwd TEXT, parent_session TEXT, origin TEXT, delegation_depth INTEGER, seed_length INTEGER,
        next_seq INTEGER NOT NULL DEFAULT 0) STRICT;
      CREATE INDEX sessions_by_parent ON sessions(parent_session, created_at, create_order);
      CREATE INDEX sessions_by_creation ON sessions(created_at, create_order);
      CREATE TABLE events (session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE, seq INTEGER NOT NULL,
        type TEXT NOT NULL, time REAL NOT NULL, data TEXT NOT NULL, PRIMARY KEY (session_id, seq)) STRICT;
      INSERT INTO sessions (id, created_at, create_order) VALUES ('p', 1, 1);
      INSERT INTO sessions (id, created_at, create_order, parent_session, origin, next_seq) VALUES ('c', 2, 2, 'p', 'subagent', 1);
      INSERT INTO events VALUES ('c', 0, '${DESCRIPTOR_EVENT}', 20, '${JSON.stringify(label('kept'))}');
    `);
    db.pragma('user_version = 1');
    db.close();
    expect(await listed(file)).toStrictEqual([{ ...row, usage: NO_USAGE }]);
    expect(raw(file).pragma('user_version', { simple: true })).toBe(5);
  });
});
