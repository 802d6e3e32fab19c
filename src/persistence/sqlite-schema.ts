// The SQLite file: opening it (mode 0600, WAL, pragmas, schema upgrades in sqlite-migrate.ts), and
// decoding rows back into headers and events with zod, since stored data is a trust boundary.
import fs from 'node:fs';
import { basename, dirname, resolve } from 'node:path';
import Database from 'better-sqlite3';
import { z } from 'zod';
import type { SessionId } from '../seam/content.js';
import { SubagentError, describeError } from '../seam/errors.js';
import type { SessionEvent, SessionHeader } from '../seam/session-types.js';
import type { CatalogHeader } from '../runtime/session-persistence.js';
import { migrate } from './sqlite-migrate.js';
import { buildHeader, corrupt, describeIssues, fromJson } from './validate.js';

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
 * origin and next_seq columns (next_seq omitted where the query itself checked it); throws
 * `CORRUPT_DATA` like {@link decodeSession}. A row as this store writes it passes a hand check that
 * accepts what the schema accepts, without the schema's cost; the schema describes any other row.
 */
export function decodeCatalogHeader(
  id: unknown,
  createdAt: unknown,
  parentSession: unknown,
  origin: unknown,
  nextSeq: unknown = 0,
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
  // The schema refuses every row the hand check refuses (zod's numbers are finite, its ints safe): it names the column.
  const { error } = catalogRowSchema.safeParse({ id, created_at: createdAt, parent_session: parentSession, origin, next_seq: nextSeq });
  throw corrupt(String(id), `its header row is invalid (${describeIssues(error!, 'sessions')})`, error);
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

/**
 * The error for a WAL file SQLite cannot open because it may not create the `-shm` file beside it
 * (a folder this process may not write, a read-only mount), or undefined for any other error. SQLite
 * says "attempt to write a readonly database" or "unable to open database file", which read as a
 * lock or corruption.
 */
export function readonlyFolderError(path: string, error: unknown): SubagentError | undefined {
  if (!isCode(error, 'SQLITE_READONLY_DIRECTORY', 'SQLITE_CANTOPEN') || !readableFile(path) || folderWritable(path)) return undefined;
  return new SubagentError(
    'PERSISTENCE_UNAVAILABLE',
    `cannot open ${path}: SQLite must create ${basename(path)}-shm beside it and its folder is not writable by this process; run as a user who may write that folder, or copy the file to one`,
    { cause: error },
  );
}

/**
 * The error for a better-sqlite3 whose native addon does not load (its install script never ran, as
 * under npm's `allowScripts` or `--ignore-scripts`, or built it for another Node.js), or undefined
 * when it loads and `error` is about the file. Its own message, a dozen paths it tried, reads as if
 * the file were the problem.
 */
export function missingAddonError(error: unknown): SubagentError | undefined {
  try {
    new Database(':memory:').close();
    return undefined;
  } catch {
    const said = (error instanceof Error ? error.message : String(error)).split('\n', 1)[0]!.replace(/\s*Tried:$/, '');
    return new SubagentError(
      'PERSISTENCE_UNAVAILABLE',
      `better-sqlite3 cannot load its native addon (${said}), so no SQLite file can be opened: its install script did not run (npm 11 runs it once allowed: npm install-scripts approve better-sqlite3) or built it for another Node.js version; then run npm rebuild better-sqlite3`,
      { cause: error },
    );
  }
}

/**
 * The error for an existing file this process may not write (its mode, an immutable flag, a
 * read-only mount), or undefined. SQLite opens such a file read-only without a word: a host on it
 * would start, then fail every write with "attempt to write a readonly database".
 */
export function unwritableFileError(path: string): SubagentError | undefined {
  if (path === ':memory:') return undefined;
  if (path.includes('\0')) return new SubagentError('INVALID_OPTIONS', `path ${JSON.stringify(path)} cannot be a file: it has a NUL character`);
  try {
    fs.accessSync(path, fs.constants.W_OK);
    return undefined;
  } catch (error) {
    // A missing file is created by the open, which says why it cannot be.
    if (isCode(error, 'ENOENT')) return undefined;
    return new SubagentError(
      'PERSISTENCE_UNAVAILABLE',
      `cannot store sessions in ${path}: this process may not write it (${describeError(error)}); run as a user who may write it, or use another file`,
      { cause: error },
    );
  }
}

/** A regular file this process may read (one it may not is another message: SQLite's own). */
function readableFile(path: string): boolean {
  try {
    fs.accessSync(path, fs.constants.R_OK);
    return fs.statSync(path).isFile();
  } catch {
    return false;
  }
}

function folderWritable(path: string): boolean {
  try {
    fs.accessSync(dirname(path), fs.constants.W_OK);
    return true;
  } catch {
    return false;
  }
}

/**
 * A check, run as each write transaction begins, that `path` still names the file the store opened:
 * in WAL mode SQLite goes on committing to a deleted file without a word (lost once the store
 * closes), and to a replaced one through the `-wal` file the new file shares by name (which then
 * shows this store's sessions in place of the new file's). A no-op for `':memory:'`.
 * @throws SubagentError `PERSISTENCE_UNAVAILABLE` once the file is gone or another file took its path.
 */
export function fileInPlace(path: string): () => void {
  if (path === ':memory:') return () => undefined;
  const absolute = resolve(path);
  const opened = fs.statSync(absolute);
  return () => {
    const now = fs.statSync(absolute, { throwIfNoEntry: false });
    if (now?.ino === opened.ino && now.dev === opened.dev) return;
    throw new SubagentError(
      'PERSISTENCE_UNAVAILABLE',
      `${absolute} was ${now === undefined ? 'deleted' : 'replaced by another file'} while this store had it open, so nothing more is written ` +
        `(${now === undefined ? 'no later open would find it' : 'it would land in the -wal file the new file shares'}); close this store (its host) and open the file again`,
    );
  };
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

/**
 * Refuses a path that is no regular file (a directory, /dev/null, a FIFO) before SQLite opens it: it
 * would take a device for an empty database and write its rollback journal beside it (/dev/null-journal).
 */
function refuseNonFile(path: string): void {
  let regular: boolean;
  try {
    regular = fs.statSync(path).isFile();
  } catch {
    return; // gone again since it was made: SQLite's own open says why
  }
  if (!regular) throw new SubagentError('INVALID_OPTIONS', `path "${path}" cannot be opened: it is not a regular file`);
}

const pause = new Int32Array(new SharedArrayBuffer(4));

/**
 * Runs `step` again while SQLite answers `SQLITE_BUSY` without waiting on its busy handler, until
 * `deadline` (a `performance.now()` time: a stepped wall clock neither cuts nor stretches the wait).
 * It does so where waiting could deadlock: switching a new file to WAL upgrades a read
 * lock, which fails at once while another process opening the same new file holds one, and a
 * file's last connection locks it while it removes the WAL. Processes that open one new store
 * together (a demo and `ls`, two hosts) would otherwise fail with "database is locked".
 */
function untilUnlocked<T>(deadline: number, step: () => T): T {
  for (let wait = 1; ; wait = Math.min(wait * 2, 50)) {
    try {
      return step();
    } catch (error) {
      const code = (error as { code?: unknown } | null)?.code;
      if (typeof code !== 'string' || !code.startsWith('SQLITE_BUSY') || performance.now() >= deadline) throw error;
    }
    Atomics.wait(pause, 0, 0, Math.min(wait, Math.max(1, deadline - performance.now())));
  }
}

/**
 * Opens (creating if needed) the store at `path`, or an in-memory one for `':memory:'`.
 * @throws SubagentError `CORRUPT_DATA` for a file that is not a store of this schema version,
 * `INVALID_OPTIONS` for a path that cannot be opened, `PERSISTENCE_UNAVAILABLE` for a store that is
 * locked or that SQLite cannot set up, and when better-sqlite3's native addon does not load.
 */
export function openDatabase<T>(
  path: string,
  busyTimeoutMs: number,
  synchronous: 'full' | 'normal',
  build: (db: Database.Database) => T,
): T {
  if (path !== ':memory:') {
    createPrivateFile(path);
    refuseNonFile(path);
  }
  let db: Database.Database;
  try {
    db = new Database(path, { timeout: busyTimeoutMs });
  } catch (error) {
    throw missingAddonError(error) ?? new SubagentError('INVALID_OPTIONS', `path "${path}" cannot be opened: ${String(error)}`, { cause: error });
  }
  try {
    db.pragma(`synchronous = ${synchronous === 'normal' ? 'NORMAL' : 'FULL'}`);
    db.pragma('foreign_keys = ON');
    db.pragma(`busy_timeout = ${busyTimeoutMs}`);
    const deadline = performance.now() + busyTimeoutMs;
    untilUnlocked(deadline, () => migrate(db, path));
    // Built (its statements compiled against the tables) before the file is switched to WAL: a file
    // refused by either check (another program's database) is left as it was.
    const built = untilUnlocked(deadline, () => build(db));
    untilUnlocked(deadline, () => db.pragma('journal_mode = WAL'));
    // From now on only the store's calls that wait on the thread set a busy timeout (around themselves).
    db.pragma('busy_timeout = 0');
    return built;
  } catch (error) {
    db.close();
    if (error instanceof SubagentError) throw error;
    const readonlyFolder = readonlyFolderError(path, error);
    if (readonlyFolder) throw readonlyFolder;
    if (isCode(error, 'SQLITE_NOTADB', 'SQLITE_CORRUPT')) {
      throw new SubagentError('CORRUPT_DATA', `"${path}" is not a readable SQLite database. Use a new file.`, {
        cause: error,
      });
    }
    // Locked by another connection beyond the busy timeout, or refused by the disk (full, I/O, read-only).
    throw new SubagentError(
      'PERSISTENCE_UNAVAILABLE',
      `"${path}" cannot be opened as a store (${String(error)}); if another process holds it locked, close that or raise busyTimeoutMs`,
      { cause: error },
    );
  }
}
