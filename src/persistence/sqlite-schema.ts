// The SQLite file: opening it (mode 0600, WAL, pragmas), the versioned schema, and decoding rows
// back into headers and events with zod, since stored data is a trust boundary.
import fs from 'node:fs';
import Database from 'better-sqlite3';
import { z } from 'zod';
import type { SessionId } from '../seam/content.js';
import { SubagentError } from '../seam/errors.js';
import type { SessionEvent, SessionHeader } from '../seam/session-types.js';
import type { CatalogHeader } from '../runtime/session-persistence.js';
import { buildHeader, corrupt, describeIssues, fromJson } from './validate.js';

/** `PRAGMA user_version` of the schema below; any other non-zero version is refused. */
export const SCHEMA_VERSION = 2;

// Version 2 adds the projection states each append keeps current (NULL: rebuilt from the log on
// first read) and an index answering "has subagent children" with one probe.
const V2 = `
ALTER TABLE sessions ADD COLUMN projections TEXT;
CREATE INDEX sessions_subagents_by_parent ON sessions(parent_session) WHERE origin = 'subagent';
`;

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

/** Columns of `sessions` in the order every header query selects them. */
export const SESSION_COLUMNS =
  'id, created_at, cwd, parent_session, origin, delegation_depth, seed_length, next_seq';

const sessionRowSchema = z.object({
  id: z.string().min(1),
  created_at: z.number(),
  cwd: z.string().nullable(),
  parent_session: z.string().min(1).nullable(),
  origin: z.literal('subagent').nullable(),
  delegation_depth: z.int().nonnegative().nullable(),
  seed_length: z.int().nonnegative().nullable(),
  next_seq: z.int().nonnegative(),
});

const eventRowSchema = z.object({
  seq: z.int().nonnegative(),
  type: z.string().min(1),
  time: z.number(),
  data: z.string(),
});

/** A decoded `sessions` row. */
export interface SessionRecord {
  header: SessionHeader;
  nextSeq: number;
}

/** Decodes a `sessions` row; throws `CORRUPT_DATA` naming the session and column. */
export function decodeSession(row: unknown): SessionRecord {
  const result = sessionRowSchema.safeParse(row);
  if (!result.success) {
    const id = (row as { id?: unknown } | undefined)?.id;
    throw corrupt(String(id), `its header row is invalid (${describeIssues(result.error, 'sessions')})`, result.error);
  }
  const stored = result.data;
  const header = buildHeader({
    id: stored.id,
    createdAt: stored.created_at,
    cwd: stored.cwd,
    parentSession: stored.parent_session,
    origin: stored.origin,
    delegationDepth: stored.delegation_depth,
    seedLength: stored.seed_length,
  });
  return { header, nextSeq: stored.next_seq };
}

const isCount = (value: unknown): value is number => Number.isSafeInteger(value) && (value as number) >= 0;

const catalogRowSchema = sessionRowSchema.pick({ id: true, created_at: true, parent_session: true, origin: true, next_seq: true });

/**
 * The catalog's header of a `sessions` row from the values of its id, created_at, parent_session,
 * origin and next_seq columns; throws `CORRUPT_DATA` like {@link decodeSession}. A row as this store
 * writes it passes a hand check that accepts a subset of what the schema accepts; any other row goes
 * through the schema, which decides.
 */
export function decodeCatalogHeader(
  id: unknown,
  createdAt: unknown,
  parentSession: unknown,
  origin: unknown,
  nextSeq: unknown,
): CatalogHeader {
  if (
    typeof id === 'string' &&
    id !== '' &&
    typeof createdAt === 'number' &&
    Number.isFinite(createdAt) &&
    (parentSession === null || (typeof parentSession === 'string' && parentSession !== '')) &&
    (origin === null || origin === 'subagent') &&
    isCount(nextSeq)
  ) {
    return catalogHeader(id, createdAt, parentSession, origin);
  }
  const row = { id, created_at: createdAt, parent_session: parentSession, origin, next_seq: nextSeq };
  const result = catalogRowSchema.safeParse(row);
  if (!result.success) {
    throw corrupt(String(id), `its header row is invalid (${describeIssues(result.error, 'sessions')})`, result.error);
  }
  return catalogHeader(result.data.id, result.data.created_at, result.data.parent_session, result.data.origin);
}

function catalogHeader(id: string, createdAt: number, parentSession: string | null, origin: 'subagent' | null): CatalogHeader {
  // One literal per shape: no property is added later.
  if (parentSession === null) return origin === null ? { id, createdAt } : { id, createdAt, origin };
  return origin === null ? { id, createdAt, parentSession } : { id, createdAt, parentSession, origin };
}

/** Decodes an `events` row; throws `CORRUPT_DATA` naming the session and seq. */
export function decodeEvent(id: SessionId, row: unknown): SessionEvent {
  const result = eventRowSchema.safeParse(row);
  if (!result.success) {
    const seq = (row as { seq?: unknown } | undefined)?.seq;
    throw corrupt(id, `event ${String(seq)} is invalid (${describeIssues(result.error, 'events')})`, result.error);
  }
  const { seq, type, time, data } = result.data;
  return { seq, type, time, data: fromJson(id, seq, data) };
}

function isCode(error: unknown, ...codes: string[]): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && codes.includes(code);
}

/** Creates `path` with mode 0600 when it does not exist, so SQLite's WAL files inherit that mode. */
function createPrivateFile(path: string): void {
  try {
    fs.closeSync(fs.openSync(path, 'wx', 0o600));
  } catch (error) {
    if (isCode(error, 'EEXIST')) return;
    throw new SubagentError('INVALID_OPTIONS', `path "${path}" cannot be created: ${String(error)}`, { cause: error });
  }
}

/** Creates the schema in an empty database, or checks the version of an existing one. */
function migrate(db: Database.Database, path: string): void {
  // IMMEDIATE takes the write lock first, so two processes opening a new file cannot both create.
  db.transaction(() => {
    const version = db.pragma('user_version', { simple: true });
    if (version === SCHEMA_VERSION) return;
    if (version === 1) {
      db.exec(V2);
      db.pragma(`user_version = ${SCHEMA_VERSION}`);
      return;
    }
    if (version !== 0) {
      throw new SubagentError(
        'CORRUPT_DATA',
        `"${path}" has schema version ${String(version)}; this build reads version ${SCHEMA_VERSION}. ` +
          'Open it with the subagent-host release that wrote it, or use a new file.',
      );
    }
    const tables = db.prepare('SELECT count(*) FROM sqlite_schema').pluck().get();
    if (tables !== 0) {
      throw new SubagentError(
        'CORRUPT_DATA',
        `"${path}" is an SQLite database that subagent-host did not create. Use a new file.`,
      );
    }
    db.exec(V1);
    db.exec(V2);
    db.pragma(`user_version = ${SCHEMA_VERSION}`);
  }).immediate();
}

/**
 * Opens (creating if needed) the store at `path`, or an in-memory one for `':memory:'`.
 * @throws SubagentError `CORRUPT_DATA` for a file that is not a store of this schema version,
 * `INVALID_OPTIONS` for a path that cannot be opened.
 */
export function openDatabase(path: string, busyTimeoutMs: number): Database.Database {
  if (path !== ':memory:') createPrivateFile(path);
  let db: Database.Database;
  try {
    db = new Database(path, { timeout: busyTimeoutMs });
  } catch (error) {
    throw new SubagentError('INVALID_OPTIONS', `path "${path}" cannot be opened: ${String(error)}`, { cause: error });
  }
  try {
    db.pragma('journal_mode = WAL');
    db.pragma('synchronous = FULL');
    db.pragma('foreign_keys = ON');
    db.pragma(`busy_timeout = ${busyTimeoutMs}`);
    migrate(db, path);
    return db;
  } catch (error) {
    db.close();
    if (error instanceof SubagentError) throw error;
    if (isCode(error, 'SQLITE_NOTADB', 'SQLITE_CORRUPT')) {
      throw new SubagentError('CORRUPT_DATA', `"${path}" is not a readable SQLite database. Use a new file.`, {
        cause: error,
      });
    }
    throw error;
  }
}
