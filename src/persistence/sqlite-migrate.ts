// The versioned schema of the SQLite file and the upgrades between versions, each run inside the
// transaction that opens the file. Version 3 moved the projection states from one JSON column into
// typed columns; the JSON decoder lives on here only to carry a version-2 file's states across.
// Version 4 added each row's lineage key (lineage.ts); version 5 the sessions left to key by a writer
// that keys none (an earlier version's host still running on an upgraded file).
import type Database from 'better-sqlite3';
import { z } from 'zod';
import { SubagentError, describeError } from '../seam/errors.js';
import type { SubagentUsageState } from '../seam/usage.js';
import type { ProjectionStates } from './projection-states.js';
import { LINEAGE_SCHEMA, PENDING_SCHEMA, backfillLineage, rekeyPending } from './lineage.js';
import { STATE_COLUMNS, stateValues } from './state-columns.js';

/** `PRAGMA user_version` of the schema below; any other non-zero version is refused. */
export const SCHEMA_VERSION = 5;

// REAL times keep any finite number exactly; create_order breaks created_at ties in creation order.
const V1 = `
CREATE TABLE sessions (
  id TEXT PRIMARY KEY NOT NULL,
  created_at REAL NOT NULL,
  create_order INTEGER NOT NULL UNIQUE,
  cwd TEXT,
  parent_session TEXT,
  origin TEXT,
  delegation_depth INTEGER,
  seed_length INTEGER,
  next_seq INTEGER NOT NULL DEFAULT 0
) STRICT;
CREATE INDEX sessions_by_parent ON sessions(parent_session, created_at, create_order);
CREATE INDEX sessions_by_creation ON sessions(created_at, create_order);
CREATE TABLE events (
  session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
  seq INTEGER NOT NULL,
  type TEXT NOT NULL,
  time REAL NOT NULL,
  data TEXT NOT NULL,
  PRIMARY KEY (session_id, seq)
) STRICT;
`;

// Version 2 added the projection states each append keeps current, as JSON text (NULL: rebuilt
// from the log on first read), and an index answering "has subagent children" with one probe.
const V2 = `
ALTER TABLE sessions ADD COLUMN projections TEXT;
CREATE INDEX sessions_subagents_by_parent ON sessions(parent_session) WHERE origin = 'subagent';
`;

const COUNT = 'BETWEEN 0 AND 9007199254740991';
const FINITE = 'abs(%) <= 1.7976931348623157e308';
const CHECKS: Record<(typeof STATE_COLUMNS)[number], string> = {
  identity_mode: "TEXT CHECK (identity_mode IN ('one-shot', 'continuable'))",
  identity_label: 'TEXT',
  identity_seq: `INTEGER CHECK (identity_seq ${COUNT})`,
  timing_settled: 'REAL',
  timing_since: 'REAL',
  timing_through: 'REAL',
  timing_pending: 'REAL',
  timing_seen: 'INTEGER CHECK (timing_seen IN (0, 1))',
  usage_input: `INTEGER CHECK (usage_input ${COUNT})`,
  usage_output: `INTEGER CHECK (usage_output ${COUNT})`,
  usage_requests: `INTEGER CHECK (usage_requests ${COUNT})`,
  usage_turns: `INTEGER CHECK (usage_turns ${COUNT})`,
  usage_tools: `INTEGER CHECK (usage_tools ${COUNT})`,
  usage_seen: 'INTEGER CHECK (usage_seen IN (0, 1))',
  usage_since: 'REAL',
  usage_through: 'REAL',
  usage_pending: 'REAL',
};

function columnDefinition(name: (typeof STATE_COLUMNS)[number]): string {
  const definition = CHECKS[name];
  return definition === 'REAL' ? `REAL CHECK (${FINITE.replace('%', name)})` : definition;
}

// Version 3: the states in typed columns (all NULL: rebuilt from the log on first read), and
// "has subagent children" kept in the parent's row by a trigger, so listing reads it as a value.
// A session created after its subagent children computes its own flag as it is inserted. The
// by-parent index also holds the id, so a walk down parent links reads no table row.
const V3 = `
DROP INDEX sessions_by_parent;
CREATE INDEX sessions_by_parent ON sessions(parent_session, created_at, create_order, id);
${STATE_COLUMNS.map((name) => `ALTER TABLE sessions ADD COLUMN ${name} ${columnDefinition(name)};`).join('\n')}
ALTER TABLE sessions ADD COLUMN subagent_children INTEGER NOT NULL DEFAULT 0 CHECK (subagent_children IN (0, 1));
UPDATE sessions SET subagent_children = EXISTS (SELECT 1 FROM sessions c WHERE c.parent_session = sessions.id AND c.origin = 'subagent');
CREATE TRIGGER sessions_mark_parent AFTER INSERT ON sessions WHEN NEW.origin = 'subagent' AND NEW.parent_session IS NOT NULL
BEGIN
  UPDATE sessions SET subagent_children = 1 WHERE id = NEW.parent_session AND subagent_children = 0;
END;
`;

const span = z.strictObject({ since: z.number(), through: z.number() });
const seq = z.int().nonnegative();
const count = z.int().nonnegative();

// The JSON layout of version 2. A row it refuses keeps NULL states and is rebuilt from its log.
const v2States = z.strictObject({
  subagent: z.strictObject({
    version: z.literal(2),
    identity: z
      .discriminatedUnion('mode', [
        z.strictObject({ mode: z.literal('one-shot'), label: z.string().exactOptional(), seq }),
        z.strictObject({ mode: z.literal('continuable'), label: z.string(), seq }),
      ])
      .nullable(),
  }),
  subagentTiming: z.strictObject({
    version: z.literal(2),
    settledMs: z.number(),
    active: span.exactOptional(),
    pendingTurnStart: z.number().exactOptional(),
    descriptorSeen: z.boolean(),
  }),
  subagentUsage: z
    .tuple([z.literal(1), count, count, count, count, count, z.boolean(), z.number().nullable(), z.number().nullable(), z.number().nullable()])
    .transform(([version, inputTokens, outputTokens, requests, turns, toolCalls, descriptorSeen, since, through, pending]) => {
      const state: SubagentUsageState = { version, inputTokens, outputTokens, requests, turns, toolCalls, descriptorSeen };
      if (since !== null) state.since = since;
      if (through !== null) state.through = through;
      if (pending !== null) state.pendingTurnStart = pending;
      return state;
    }),
});

function v2StatesOf(text: string): ProjectionStates | undefined {
  try {
    const result = v2States.safeParse(JSON.parse(text));
    return result.success ? result.data : undefined;
  } catch {
    return undefined;
  }
}

/** Version 2 → 3: the schema, then each JSON state row carried into the typed columns. */
function upgradeToV3(db: Database.Database): void {
  db.exec(V3);
  const update = db.prepare(`UPDATE sessions SET ${STATE_COLUMNS.map((name) => `${name} = ?`).join(', ')} WHERE rowid = ?`);
  const rows = db.prepare<[], [number, string]>('SELECT rowid, projections FROM sessions WHERE projections IS NOT NULL').raw(true).all();
  for (const [rowid, text] of rows) {
    const states = v2StatesOf(text);
    if (states !== undefined) update.run(...stateValues(states), rowid);
  }
  db.exec('ALTER TABLE sessions DROP COLUMN projections');
}

/**
 * Version 3 or 4 → 5: the tables of lineage keys and of sessions left to key, with every session's
 * key (written again in a version-4 file: a version-3 host may have stored sessions in it unkeyed).
 */
function upgradeToV5(db: Database.Database, version: number): void {
  if (version <= 3) db.exec(LINEAGE_SCHEMA);
  else db.exec('DELETE FROM session_lineage');
  db.exec(PENDING_SCHEMA);
  backfillLineage(db);
}

/**
 * Keys the sessions that a host of an earlier version, still running on the file after it was
 * upgraded, stored without a key. Only a cache of what listings read (they walk parent links
 * meanwhile): it never waits for another writer's lock, and a file this process may not write, or a
 * full disk, leaves them as they are.
 */
function keyPending(db: Database.Database): void {
  let pending: unknown;
  try {
    pending = db.prepare('SELECT EXISTS (SELECT 1 FROM lineage_pending)').pluck().get();
  } catch {
    return; // Not our tables: the store's statements say so.
  }
  if (pending !== 1) return;
  withoutWaiting(db, () => {
    try {
      db.transaction(() => rekeyPending(db)).immediate();
    } catch (error) {
      const code = (error as { code?: unknown } | null)?.code;
      if (typeof code !== 'string' || !/^SQLITE_(BUSY|READONLY|FULL)/.test(code)) throw error;
    }
  });
}

/** Runs `write` (a cache write) with no wait for another writer's lock; the connection's busy timeout is restored after. */
export function withoutWaiting(db: Database.Database, write: () => void): void {
  const waits = db.pragma('busy_timeout', { simple: true }) as number;
  db.pragma('busy_timeout = 0');
  try {
    write();
  } finally {
    db.pragma(`busy_timeout = ${waits}`);
  }
}

/** Why a file whose `user_version` is not ours cannot be read, and what to do about it. */
export function notOurSchema(db: Database.Database, path: string, version: unknown): string {
  if (version === 0) {
    let tables: unknown = 0;
    try {
      tables = db.prepare('SELECT count(*) FROM sqlite_schema').pluck().get();
    } catch {
      // Unreadable: reported as not ours below.
    }
    return tables === 0 ? `${path} is not a subagent-host database (it is empty)` : `${path} is an SQLite database that subagent-host did not create`;
  }
  if (typeof version === 'number' && version > SCHEMA_VERSION) {
    return `${path} was written by a newer subagent-host (schema version ${version}); this build reads version ${SCHEMA_VERSION}`;
  }
  if (typeof version === 'number' && version > 0) {
    return `${path} has schema version ${version}; this build reads version ${SCHEMA_VERSION}: open it once with \`subagent-host ls\` to upgrade it`;
  }
  return `${path} is not a subagent-host database (schema version ${String(version)})`;
}

const upgradable = (version: unknown): version is number => typeof version === 'number' && version >= 0 && version < SCHEMA_VERSION;

function unknownVersion(path: string, version: unknown): SubagentError {
  return new SubagentError(
    'CORRUPT_DATA',
    `"${path}" has schema version ${String(version)}; this build reads version ${SCHEMA_VERSION}. ` +
      'Open it with the subagent-host release that wrote it, or use a new file.',
  );
}

/** Creates the schema in an empty database, or upgrades an older one, or refuses another. */
export function migrate(db: Database.Database, path: string): void {
  // A store of this version needs no write: no write lock (a reader such as `ls` must not wait on a
  // writer), unless an older host left sessions to key, which waits for none. Nor does refusing a
  // newer one, which a newer host may be writing meanwhile.
  const found = db.pragma('user_version', { simple: true });
  if (found === SCHEMA_VERSION) {
    keyPending(db);
    return;
  }
  if (!upgradable(found)) throw unknownVersion(path, found);
  // IMMEDIATE takes the write lock first, so two processes opening a new file cannot both create.
  db.transaction(() => {
    const stored = db.pragma('user_version', { simple: true });
    if (stored === SCHEMA_VERSION) return;
    if (!upgradable(stored)) throw unknownVersion(path, stored);
    let version = stored;
    if (version === 0) {
      const tables = db.prepare('SELECT count(*) FROM sqlite_schema').pluck().get();
      if (tables !== 0) {
        throw new SubagentError('CORRUPT_DATA', `"${path}" is an SQLite database that subagent-host did not create. Use a new file.`);
      }
      db.exec(V1);
      version = 1;
    }
    try {
      if (version === 1) db.exec(V2);
      if (version <= 2) upgradeToV3(db);
      upgradeToV5(db, version);
    } catch (error) {
      // An upgrade that finds no table, index or column of ours (SQL errors, not a lock or the disk):
      // the file claims our schema without holding it. Rolled back, it stays as it was.
      if ((error as { code?: unknown } | null)?.code !== 'SQLITE_ERROR') throw error;
      throw new SubagentError('CORRUPT_DATA', `"${path}" claims schema version ${version} of subagent-host but its tables differ (${describeError(error)}). Use a new file.`, { cause: error });
    }
    db.pragma(`user_version = ${SCHEMA_VERSION}`);
  }).immediate();
}
