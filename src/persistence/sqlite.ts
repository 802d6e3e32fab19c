// SQLite SessionPersistence on better-sqlite3: write-behind appends batched into one transaction,
// seq-checked at call time against a bounded cache of recent sessions' next seq and again at commit.
import type Database from 'better-sqlite3';
import { z } from 'zod';
import type {
  CatalogRecord,
  SessionPersistence,
  StoredProjections,
  StoredSession,
} from '../runtime/session-persistence.js';
import { QUEUED_APPENDS } from '../runtime/session-persistence.js';
import type { SessionId } from '../seam/content.js';
import { SubagentError, describeError, isSubagentError } from '../seam/errors.js';
import { MAX_TIMER_MS, parseOrThrow } from '../seam/parse.js';
import type { SessionEvent, SessionHeader } from '../seam/session-types.js';
import { initialStates, lazyEvent, stepStates } from './projection-states.js';
import { LineageWriter } from './lineage.js';
import { closersFor } from './repair.js';
import { SeqCache } from './seq-cache.js';
import { SqliteCatalog } from './sqlite-catalog.js';
import { SESSION_COLUMNS, decodeEvent, decodeSession, fileInPlace, openDatabase } from './sqlite-schema.js';
import { NO_STATES, STATE_COLUMNS, stateValues } from './state-columns.js';
import type { EncodedEvent } from './validate.js';
import {
  assertContiguous,
  assertIdList,
  closedError,
  duplicateSession,
  encodeEvents,
  parseHeader,
  unknownSession,
} from './validate.js';
import type { PendingBatch } from './write-queue.js';
import { WriteQueue } from './write-queue.js';

/** Options of {@link sqlitePersistence}. */
export interface SqlitePersistenceOptions {
  /**
   * How long appended events wait to be batched with later appends before they are committed.
   * `flush()` commits at once. A crash loses at most this window of unflushed appends.
   * @default 10
   */
  flushIntervalMs?: number;
  /**
   * How long a write waits for another connection's lock before failing with `SQLITE_BUSY`.
   * A flush (and `close()`) waits on timers; the other calls' wait blocks the calling thread
   * (better-sqlite3 is synchronous). Background commits do not wait: they are retried later.
   * @default 5000
   */
  busyTimeoutMs?: number;
  /**
   * SQLite's `synchronous` setting. `'full'` fsyncs the write-ahead log at every commit: a flushed
   * event survives a process crash and a power loss or OS crash. `'normal'` (opt-in) only writes it
   * to the OS at a commit and fsyncs at checkpoints: a flushed event still survives a crash or
   * SIGKILL of the process, but a power loss or OS crash may lose the last commits (the file stays
   * consistent). It makes each commit, and so each acknowledged message, cheaper.
   * @default 'full'
   */
  synchronous?: 'full' | 'normal';
}


const optionsSchema = z.strictObject({
  flushIntervalMs: z.number().min(0).max(MAX_TIMER_MS).optional(),
  busyTimeoutMs: z.int().min(0).max(MAX_TIMER_MS).optional(),
  synchronous: z.enum(['full', 'normal']).optional(),
});

interface HeaderParams {
  id: string;
  createdAt: number;
  cwd: string | null;
  parentSession: string | null;
  origin: string | null;
  delegationDepth: number | null;
  seedLength: number | null;
}

type Batches = readonly PendingBatch<EncodedEvent>[];

/** Another connection holds the lock. */
function lockBusy(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && code.startsWith('SQLITE_BUSY');
}

/** What better-sqlite3 throws (a RangeError without a code) for a value SQLite refuses to bind as SQLITE_TOOBIG. */
const BIND_TOO_BIG = 'The bound string, buffer, or bigint is too big';

/** SQLite refused a row itself (a constraint, a value too big): writing it again cannot succeed. */
function rowRefused(error: unknown): boolean {
  if (error instanceof RangeError && error.message === BIND_TOO_BIG) return true;
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && (code.startsWith('SQLITE_CONSTRAINT') || code === 'SQLITE_TOOBIG' || code === 'SQLITE_MISMATCH');
}

/**
 * A storage failure as callers see it: `CORRUPT_DATA` for a damaged file (no retry mends it),
 * else `PERSISTENCE_UNAVAILABLE` (another connection's lock held past `busyTimeoutMs`, a full disk).
 */
export function storageFailure(error: unknown, operation: string): SubagentError {
  if (isSubagentError(error)) return error;
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code === 'string' && (code.startsWith('SQLITE_CORRUPT') || code === 'SQLITE_NOTADB')) {
    return new SubagentError('CORRUPT_DATA', `SQLite could not ${operation}: the database file is damaged (${describeError(error)}); restore it from a backup or use a new file`, { cause: error });
  }
  return new SubagentError('PERSISTENCE_UNAVAILABLE', `SQLite could not ${operation}: ${describeError(error)}`, { cause: error });
}

class SqlitePersistence implements SessionPersistence {
  readonly [QUEUED_APPENDS] = true;
  readonly #db: Database.Database;
  /**
   * The busy timeout of calls that wait for a lock on the thread ({@link #storing}); at other times the
   * connection's is 0, so background commits and flushes never block it (they retry on timers).
   */
  readonly #busyTimeoutMs: number;
  readonly #queue: WriteQueue<EncodedEvent>;
  /**
   * Next seq of recently written sessions, counting queued events; dropped when a commit finds it
   * stale. Bounded, so a long-lived store does not keep an entry for every session it ever wrote.
   */
  readonly #nextSeqs = new SeqCache();
  /**
   * Sessions a commit found appended to by another writer: their appends are refused until they are
   * loaded again, since a later event could otherwise land after that writer's as if it continued them.
   */
  readonly #stale = new Set<SessionId>();
  #closing: Promise<void> | undefined;

  readonly #insertSession: Database.Statement<[HeaderParams], number>;
  readonly #storeSession: Database.Transaction<(params: HeaderParams) => boolean>;
  readonly #selectSession: Database.Statement<[string]>;
  readonly #selectNextSeq: Database.Statement<[string], number>;
  readonly #selectState: Database.Statement<[string], unknown[]>;
  readonly #selectEvents: Database.Statement<[string]>;
  /** A session's row and its events, read in one transaction: another writer's commit between them is not seen. */
  readonly #readLog: Database.Transaction<(id: string) => { row: unknown; events: unknown[] }>;
  readonly #listAll: Database.Statement<[]>;
  readonly #listChildren: Database.Statement<[string]>;
  readonly #advance: Database.Statement<unknown[]>;
  readonly #catalog: SqliteCatalog;
  readonly #insertEvent: Database.Statement<[string, number, string, number, string]>;
  readonly #writeBatches: Database.Transaction<(batches: Batches) => Map<SessionId, Error>>;

  /** `inPlace` throws once the file is no longer the one opened (see {@link fileInPlace}): no write goes to it then. */
  constructor(db: Database.Database, flushIntervalMs: number, busyTimeoutMs: number, inPlace: () => void) {
    this.#db = db;
    this.#busyTimeoutMs = busyTimeoutMs;
    this.#queue = new WriteQueue((batches) => this.#commit(batches), flushIntervalMs, { patienceMs: busyTimeoutMs, busy: lockBusy });
    // A new session has the states of an empty log. Its subagent_children is set here for children
    // stored before it; the trigger of the schema sets its parent's.
    const initial = stateValues(initialStates()).map((value) => (value === null ? 'NULL' : String(value)));
    this.#insertSession = db.prepare<[HeaderParams], number>(
      `INSERT INTO sessions (id, created_at, create_order, cwd, parent_session, origin, delegation_depth, seed_length,
                             subagent_children, ${STATE_COLUMNS.join(', ')})
       VALUES (@id, @createdAt, (SELECT coalesce(max(create_order), 0) + 1 FROM sessions),
               @cwd, @parentSession, @origin, @delegationDepth, @seedLength,
               EXISTS (SELECT 1 FROM sessions c WHERE c.parent_session = @id AND c.origin = 'subagent'), ${initial.join(', ')})
       ON CONFLICT (id) DO NOTHING RETURNING create_order`,
    ).pluck(true);
    // The session and its lineage key (lineage.ts) are stored together.
    const lineage = new LineageWriter(db);
    this.#storeSession = db.transaction((params: HeaderParams) => {
      inPlace();
      const order = this.#insertSession.get(params);
      if (order === undefined) return false;
      lineage.store(params.id, params.parentSession, params.createdAt, order);
      return true;
    });
    this.#selectSession = db.prepare(`SELECT ${SESSION_COLUMNS} FROM sessions WHERE id = ?`);
    this.#selectNextSeq = db.prepare<[string], number>('SELECT next_seq FROM sessions WHERE id = ?').pluck();
    this.#selectState = db.prepare<[string], unknown[]>(`SELECT next_seq, ${STATE_COLUMNS.join(', ')} FROM sessions WHERE id = ?`).raw(true);
    this.#catalog = new SqliteCatalog(db);
    this.#selectEvents = db.prepare('SELECT seq, type, time, data FROM events WHERE session_id = ? ORDER BY seq');
    this.#readLog = db.transaction((id: string) => {
      const row: unknown = this.#selectSession.get(id);
      return { row, events: row === undefined ? [] : this.#selectEvents.all(id) };
    });
    this.#listAll = db.prepare(`SELECT ${SESSION_COLUMNS} FROM sessions ORDER BY created_at, create_order`);
    this.#listChildren = db.prepare(
      `SELECT ${SESSION_COLUMNS} FROM sessions WHERE parent_session = ? ORDER BY created_at, create_order`,
    );
    // The conditional update is the commit-time seq check: it fails if another writer moved on.
    // The projection states move with next_seq, in the same transaction as the events.
    this.#advance = db.prepare(
      `UPDATE sessions SET next_seq = ?, ${STATE_COLUMNS.map((name) => `${name} = ?`).join(', ')} WHERE id = ? AND next_seq = ?`,
    );
    this.#insertEvent = db.prepare('INSERT INTO events (session_id, seq, type, time, data) VALUES (?, ?, ?, ?, ?)');
    // Each session's batch is a savepoint of the commit: a row SQLite refuses drops that session's
    // batch alone, never the other sessions' (a retry could not store it either).
    const writeBatch = db.transaction(({ sessionId, firstSeq, items }: PendingBatch<EncodedEvent>): Error | undefined => {
      const stored = this.#selectState.get(sessionId);
      const states = stored === undefined || stored[0] !== firstSeq ? undefined : this.#catalog.statesOf(sessionId, stored, 1, firstSeq);
      // An unreadable log leaves the states NULL; reading them then reports the log corrupt.
      const next = states === undefined ? NO_STATES : stateValues(stepStates(states, items.map(lazyEvent)));
      if (this.#advance.run(firstSeq + items.length, ...next, sessionId, firstSeq).changes !== 1) return this.#staleError(sessionId, firstSeq);
      for (const event of items) this.#insertEvent.run(sessionId, event.seq, event.type, event.time, event.data);
      return undefined;
    });
    this.#writeBatches = db.transaction((batches: Batches) => {
      inPlace();
      const refused = new Map<SessionId, Error>();
      for (const batch of batches) {
        try {
          const error = writeBatch(batch);
          if (error !== undefined) refused.set(batch.sessionId, error);
        } catch (error) {
          if (!rowRefused(error)) throw error;
          refused.set(
            batch.sessionId,
            new SubagentError('PERSISTENCE_UNAVAILABLE', `SQLite refused the events of session "${batch.sessionId}" (${describeError(error)}); they were not stored`, { cause: error }),
          );
        }
      }
      return refused;
    });
  }

  async create(header: SessionHeader): Promise<void> {
    this.#assertOpen('create a session');
    const clean = parseHeader(header);
    const stored = this.#storing(() => this.#storeSession.immediate({
      id: clean.id,
      createdAt: clean.createdAt,
      cwd: clean.cwd ?? null,
      parentSession: clean.parentSession ?? null,
      origin: clean.origin ?? null,
      delegationDepth: clean.delegationDepth ?? null,
      seedLength: clean.seedLength ?? null,
    }), 'create a session');
    if (!stored) throw duplicateSession(clean.id);
    this.#nextSeqs.set(clean.id, 0);
  }

  async append(id: SessionId, events: readonly SessionEvent[]): Promise<void> {
    this.#assertOpen('append events');
    if (this.#stale.has(id)) {
      throw new SubagentError(
        'SEQ_MISMATCH',
        `Session "${id}" was appended to by another writer since this store last loaded it; load it again before appending (until then its appends are refused, so none lands after that writer's events).`,
      );
    }
    const nextSeq = this.#nextSeqOf(id);
    const encoded = encodeEvents(id, nextSeq, events);
    if (encoded.length === 0) return;
    this.#nextSeqs.set(id, nextSeq + encoded.length);
    return this.#queue.enqueue(id, nextSeq, encoded);
  }

  async load(id: SessionId): Promise<StoredSession | undefined> {
    this.#assertOpen('load a session');
    if (this.#queue.has(id)) this.#commitQueued('load a session');
    const read = this.#storing(() => this.#readLog.deferred(id), 'load a session');
    if (read.row === undefined) return undefined;
    const { header, nextSeq } = decodeSession(read.row);
    const events = read.events.map((eventRow) => decodeEvent(id, eventRow));
    assertContiguous(id, events, nextSeq);
    const closers = closersFor(id, events);
    if (closers.length > 0) {
      const refused = this.#storing(() => this.#commit([{ sessionId: id, firstSeq: nextSeq, items: encodeEvents(id, nextSeq, closers) }]), 'load a session');
      const error = refused.get(id);
      if (error !== undefined) throw error;
      events.push(...closers);
    }
    this.#nextSeqs.set(id, events.length);
    this.#stale.delete(id);
    return { header, events };
  }

  async list(filter?: { parentSession?: SessionId }): Promise<SessionHeader[]> {
    this.#assertOpen('list sessions');
    const parent = filter?.parentSession;
    const rows = this.#storing(() => (parent === undefined ? this.#listAll.all() : this.#listChildren.all(parent)), 'list sessions');
    return rows.map((row) => decodeSession(row).header);
  }

  // Records carry their listed projections, so queued appends are committed first: the listing
  // then shows what load() would return.
  async childRecords(parentId: SessionId): Promise<CatalogRecord[]> {
    this.#assertOpen('list sessions');
    this.#commitQueued('list sessions');
    return this.#storing(() => this.#catalog.childRecords(parentId), 'list sessions');
  }

  async descendantRecords(rootId: SessionId): Promise<CatalogRecord[]> {
    this.#assertOpen('list sessions');
    this.#commitQueued('list sessions');
    return this.#storing(() => this.#catalog.descendantRecords(rootId), 'list sessions');
  }

  async projections(ids: readonly SessionId[]): Promise<Map<SessionId, StoredProjections>> {
    this.#assertOpen('read projections');
    assertIdList(ids);
    // Queued appends of these sessions are committed first, so the states match what load() returns.
    if (ids.some((id) => this.#queue.has(id))) this.#commitQueued('read projections');
    return this.#storing(() => this.#catalog.projections(ids), 'read projections');
  }

  async flush(): Promise<void> {
    this.#assertOpen('flush');
    await this.#queue.flush().catch((error: unknown) => {
      throw storageFailure(error, 'flush');
    });
  }

  close(): Promise<void> {
    this.#closing ??= this.#shutdown();
    return this.#closing;
  }

  async #shutdown(): Promise<void> {
    try {
      await this.#queue.close((error) => storageFailure(error, 'close'));
    } finally {
      this.#db.close();
    }
  }

  /** Commits what is queued. A failed commit leaves it queued for the next one. */
  #commitQueued(operation: string): void {
    this.#storing(() => this.#queue.commit(), operation);
  }

  /**
   * `write()`'s value, waiting up to `busyTimeoutMs` on the thread for another connection's lock; a
   * storage failure thrown as `PERSISTENCE_UNAVAILABLE` naming `operation`.
   */
  #storing<T>(write: () => T, operation: string): T {
    this.#db.pragma(`busy_timeout = ${this.#busyTimeoutMs}`);
    try {
      return write();
    } catch (error) {
      throw storageFailure(error, operation);
    } finally {
      this.#db.pragma('busy_timeout = 0');
    }
  }

  #assertOpen(operation: string): void {
    if (this.#closing !== undefined) throw closedError(operation);
  }

  #nextSeqOf(id: SessionId): number {
    const cached = this.#nextSeqs.get(id) ?? this.#queue.queuedEnd(id);
    if (cached !== undefined) return cached;
    const stored = this.#storing(() => this.#selectNextSeq.get(id), 'append events');
    if (stored === undefined) throw unknownSession(id);
    this.#nextSeqs.set(id, stored);
    return stored;
  }

  /** One IMMEDIATE transaction; sessions found stale are skipped, and their cache entry dropped. */
  #commit(batches: Batches): Map<SessionId, Error> {
    const refused = this.#writeBatches.immediate(batches);
    for (const [id, error] of refused) {
      this.#nextSeqs.delete(id);
      if (isSubagentError(error, 'SEQ_MISMATCH')) this.#stale.add(id);
    }
    return refused;
  }

  #staleError(id: SessionId, firstSeq: number): SubagentError {
    const stored = this.#selectNextSeq.get(id);
    if (stored === undefined) return unknownSession(id);
    return new SubagentError(
      'SEQ_MISMATCH',
      `Session "${id}" was appended to by another writer: its next seq is ${stored}, not ${firstSeq}. ` +
        'The queued events were dropped; reload the session before appending again.',
    );
  }
}

/**
 * A SessionPersistence stored in the SQLite file at `path` (created with mode 0600 if new), or in
 * memory for `':memory:'`. Appends are write-behind: batched for `flushIntervalMs`, then committed
 * in one transaction; `flush()` commits at once. Call `close()` to commit and release the file.
 * @throws SubagentError `INVALID_OPTIONS` for an empty path, one with a NUL, or bad options, `CORRUPT_DATA` when
 * the file is not a store of this schema version.
 */
export function sqlitePersistence(path: string, options: SqlitePersistenceOptions = {}): SessionPersistence {
  // No file has a NUL in its path (Node refuses one, which read as a file this process may not write).
  if (typeof path !== 'string' || path === '' || path.includes('\0')) {
    throw new SubagentError('INVALID_OPTIONS', 'path must be a non-empty file path without NUL characters, or ":memory:".');
  }
  const { flushIntervalMs = 10, busyTimeoutMs = 5000, synchronous = 'full' } = parseOrThrow(optionsSchema, options, 'INVALID_OPTIONS', 'sqlitePersistence options');
  return openDatabase(path, busyTimeoutMs, synchronous, (db) => {
    const inPlace = fileInPlace(path);
    try {
      return new SqlitePersistence(db, flushIntervalMs, busyTimeoutMs, inPlace);
    } catch (error) {
      // A file that says it is of this schema version but whose tables are not (its statements do not compile).
      throw new SubagentError('CORRUPT_DATA', `"${path}" claims this store's schema but its tables differ (${describeError(error)}). Use a new file.`, { cause: error });
    }
  });
}
