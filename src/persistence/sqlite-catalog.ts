// Catalog reads of the SQLite store: children and descendants, with their lineage fact and what a
// listing shows of their stored projections, from one query each (a listing is one snapshot and
// replays no log). A session whose states are not stored is rebuilt from its log once, when
// `projections()` reads it, and written back.
import type Database from 'better-sqlite3';
import type { CatalogHeader, CatalogRecord, StoredProjections } from '../runtime/session-persistence.js';
import type { SessionId } from '../seam/content.js';
import { isSubagentError } from '../seam/errors.js';
import type { ProjectionStates } from './projection-states.js';
import { initialStates, stepStates, viewsOf } from './projection-states.js';
import { decodeCatalogHeader, decodeEvent } from './sqlite-schema.js';
import { withoutWaiting } from './sqlite-migrate.js';
import { MAX_DEPTH, SEGMENT, UNKEYED_PENDING_SQL, depthOf, orphanPrefix } from './lineage.js';
import { PACKED_TOKENS, WALL_TIME, flagsOf, packedFacts, unpackListed } from './listing-columns.js';
import { LISTED_SELECT, STATE_COLUMNS, listedFromRow, stateValues, statesFromRow } from './state-columns.js';
import { assertContiguous, corrupt } from './validate.js';

// Catalog statements run in raw mode: better-sqlite3 then builds an array per row instead of an
// object with named keys. Each value costs about half a millisecond per 10,000 rows, so they read
// only what a listing shows, packed (listing-columns.ts): id, created_at, the packed facts, then
// the depth (descendants only), then the packed tokens, wall time and label.
type Values = unknown[];

/**
 * The children of one parent as a listing reads them: id, created_at, the packed facts (with
 * the has-subagent-children bit), the packed tokens, wall time and label, in creation order.
 */
export const CHILDREN_SELECT = `SELECT id, created_at, ${packedFacts('subagent_children')}, ${PACKED_TOKENS}, ${WALL_TIME}, identity_label
         FROM sessions WHERE parent_session = ? ORDER BY created_at, create_order`;

const FACTS = 2;
const DEPTH = 3;
const ORIGIN = 1;
const HAS_CHILDREN = 2;

/** The catalog statements of one database connection. */
/** States rebuilt from a log while reading: the session, its states, and the next_seq they are of. */
type Rebuilt = [SessionId, ProjectionStates, number];

export class SqliteCatalog {
  readonly #db: Database.Database;
  readonly #children: Database.Statement<[string], Values>;
  readonly #rootKey: Database.Statement<[string], Values>;
  readonly #orphanKey: Database.Statement<[string], string>;
  readonly #unkeyed: Database.Statement<[], number>;
  readonly #subtree: Database.Statement<[{ key: string; base: number; deepest: number }], Values>;
  readonly #walk: Database.Statement<[{ root: string }], Values>;
  readonly #header: Database.Statement<[unknown], Values>;
  readonly #unpacked: Database.Statement<[unknown], Values>;
  readonly #ownEventless: Database.Statement<[unknown], number>;
  /** Runs a read in one transaction: the enumeration and any row read again are one snapshot. */
  readonly #snapshot: Database.Transaction<(read: () => CatalogRecord[]) => CatalogRecord[]>;
  readonly #readStates: Database.Transaction<(ids: string, found: Map<SessionId, StoredProjections>, rebuilt: Rebuilt[]) => void>;
  readonly #states: Database.Statement<[string], Values>;
  readonly #events: Database.Statement<[string]>;
  readonly #writeBack: Database.Statement<unknown[]>;

  constructor(db: Database.Database) {
    this.#db = db;
    // subagent_children is kept by a trigger (sqlite-migrate.ts): a value, not a probe per row.
    this.#children = db.prepare<[string], Values>(CHILDREN_SELECT).raw(true);
    // A session's descendants are the rows whose lineage keys extend its key, in pre-order by key
    // (lineage.ts): one range scan. Keys are ASCII, so octet_length, which counts no characters, is
    // their length. A row at the deepest keyed depth that has children reads -1 as its depth: those
    // children have no key, and the listing walks parent links instead.
    this.#rootKey = db
      .prepare<[string], Values>('SELECT (SELECT key FROM session_lineage WHERE session = s.create_order) FROM sessions s WHERE s.id = ?')
      .raw(true);
    this.#orphanKey = db.prepare<[string], string>(`SELECT ${orphanPrefix('?')}`).pluck(true);
    // Sessions another writer stored without a key (lineage.ts): the keys may miss them.
    this.#unkeyed = db.prepare<[], number>(UNKEYED_PENDING_SQL).pluck(true);
    this.#subtree = db
      .prepare<[{ key: string; base: number; deepest: number }], Values>(
        `SELECT id, created_at, ${packedFacts('0')},
           CASE WHEN octet_length(l.key) < @deepest OR NOT EXISTS (SELECT 1 FROM sessions c WHERE c.parent_session = s.id)
             THEN (octet_length(l.key) - @base) / ${SEGMENT} ELSE -1 END,
           ${PACKED_TOKENS}, ${WALL_TIME}, identity_label
         FROM session_lineage l CROSS JOIN sessions s ON s.create_order = l.session
         WHERE l.key > @key AND l.key < @key || '~' ORDER BY l.key`,
      )
      .raw(true);
    // The walk of rows without keys (on or below a parent cycle, or too deep). A session has one
    // parent, so a walk down parent links meets each session once, except that a cycle leads back
    // to the root: UNION ALL (no dedupe) is exact when the root is not expanded again. The queue is
    // ordered deepest first, then by creation: each session's subtree is taken out whole before its
    // next sibling, so rows come in pre-order and no result row is sorted. The walk reads the
    // by-parent index only; each row is read once, at the end.
    this.#walk = db
      .prepare<[{ root: string }], Values>(
        `WITH RECURSIVE tree(depth, created_at, create_order, rid, id) AS (
           SELECT 1, created_at, create_order, rowid, id FROM sessions WHERE parent_session = @root
           UNION ALL
           SELECT tree.depth + 1, c.created_at, c.create_order, c.rowid, c.id
           FROM sessions c JOIN tree ON c.parent_session = tree.id WHERE tree.id <> @root
           ORDER BY 1 DESC, 2, 3
         )
         SELECT tree.id, tree.created_at, ${packedFacts('0')}, tree.depth, ${PACKED_TOKENS}, ${WALL_TIME}, identity_label
         FROM tree CROSS JOIN sessions s ON s.rowid = tree.rid`,
      )
      .raw(true);
    this.#unpacked = db.prepare<[unknown], Values>(`SELECT ${LISTED_SELECT} FROM sessions WHERE id = ?`).raw(true);
    this.#ownEventless = db.prepare<[unknown], number>('SELECT next_seq <= CASE WHEN seed_length > 0 THEN seed_length + 1 ELSE 0 END FROM sessions WHERE id = ?').pluck(true);
    this.#snapshot = db.transaction((read: () => CatalogRecord[]) => read());
    this.#readStates = db.transaction((ids: string, found: Map<SessionId, StoredProjections>, rebuilt: Rebuilt[]) => {
      this.#states.all(ids).forEach((row) => this.#read(found, row, rebuilt));
    });
    this.#header = db.prepare<[unknown], Values>('SELECT id, created_at, parent_session, origin, next_seq FROM sessions WHERE id = ?').raw(true);
    this.#states = db
      .prepare<[string], Values>(`SELECT id, next_seq, ${STATE_COLUMNS.join(', ')} FROM sessions WHERE id IN (SELECT value FROM json_each(?))`)
      .raw(true);
    this.#events = db.prepare('SELECT seq, type, time, data FROM events WHERE session_id = ? ORDER BY seq');
    // Conditional on next_seq: a rebuild raced by a commit is simply not kept.
    this.#writeBack = db.prepare(`UPDATE sessions SET ${STATE_COLUMNS.map((name) => `${name} = ?`).join(', ')} WHERE id = ? AND next_seq = ?`);
  }

  // The loops below are map/forEach rather than for-of: each runs once per listing over thousands
  // of rows, mostly before it is optimized, and unoptimized for-of allocates per iteration.

  childRecords(parentId: SessionId): CatalogRecord[] {
    return this.#snapshot(() => this.#children.all(parentId).map((row) => this.#recordOf(row, parentId, row[5], undefined, undefined)));
  }

  /** In pre-order (depth first, siblings in creation order), each record with its depth. */
  descendantRecords(rootId: SessionId): CatalogRecord[] {
    // The rows come in pre-order, so a row's parent is the last row one level up, and whether a
    // session has subagent children is known once its subtree has been read. Every subagent child
    // of a session below the root is itself below the root, so the rows alone answer it.
    const path: CatalogRecord[] = [];
    return this.#snapshot(() =>
      (this.#keyed(rootId) ?? this.#walk.all({ root: rootId })).map((row) => {
        const depth = row[DEPTH] as number;
        const parent = depth === 1 ? undefined : path[depth - 2];
        const record = this.#recordOf(row, parent === undefined ? rootId : parent.header.id, row[6], false, depth);
        path[depth - 1] = record;
        if (parent !== undefined && record.header.origin === 'subagent') parent.hasSubagentChildren = true;
        return record;
      }),
    );
  }

  /** The rows below `rootId` by their lineage keys; undefined when some of them have no key. */
  #keyed(rootId: SessionId): Values[] | undefined {
    if (this.#unkeyed.get() === 1) return undefined;
    const found = this.#rootKey.get(rootId);
    const key = found === undefined ? this.#orphanKey.get(rootId) : found[0];
    if (typeof key !== 'string') return undefined;
    const depth = depthOf(key);
    if (depth >= MAX_DEPTH) return undefined;
    const rows = this.#subtree.all({ key, base: key.length, deepest: key.length + (MAX_DEPTH - depth) * SEGMENT });
    return rows.some((row) => row[DEPTH] === -1) ? undefined : rows;
  }

  projections(ids: readonly SessionId[]): Map<SessionId, StoredProjections> {
    const found = new Map<SessionId, StoredProjections>();
    if (ids.length === 0) return found;
    // Each row and the log rebuilt for it are read in one transaction; the rebuilt states are kept
    // after it (a write inside a read transaction could not wait for another writer's lock).
    const rebuilt: Rebuilt[] = [];
    this.#readStates.deferred(JSON.stringify(ids), found, rebuilt);
    if (rebuilt.length === 0) return found;
    // Only a cache, so it never waits for another writer's lock (the caller's busy timeout would
    // block the thread that long for each session).
    withoutWaiting(this.#db, () => {
      for (const [id, states, nextSeq] of rebuilt) {
        try {
          this.#writeBack.run(...stateValues(states), id, nextSeq);
        } catch {
          // Another writer holds the lock (or the file is read-only): a later read rebuilds them.
        }
      }
    });
    return found;
  }

  /**
   * The states stored in `row` from index `at` on ({@link STATE_COLUMNS}), or else rebuilt from the
   * log; undefined when the log is unreadable.
   */
  statesOf(id: SessionId, row: Values, at: number, nextSeq: number): ProjectionStates | undefined {
    const stored = statesFromRow(row, at);
    if (stored !== undefined) return stored;
    try {
      return this.rebuild(id, nextSeq);
    } catch (error) {
      if (isSubagentError(error, 'CORRUPT_DATA')) return undefined;
      throw error;
    }
  }

  /** Folds the whole stored log of `id`; `CORRUPT_DATA` when a row is unreadable or missing. */
  rebuild(id: SessionId, nextSeq: number): ProjectionStates {
    const events = this.#events.all(id).map((row) => decodeEvent(id, row));
    assertContiguous(id, events, nextSeq);
    return stepStates(initialStates(), events);
  }

  /**
   * The record of a listed row (id, created_at, {@link packedFacts}, then from index 3 or 4 on the
   * packed tokens and wall time) with its stored `label`; `hasChildren` undefined takes it from the
   * facts; `depth` is set on descendants.
   */
  #recordOf(row: Values, parentSession: unknown, label: unknown, hasChildren: boolean | undefined, depth: number | undefined): CatalogRecord {
    const facts = row[FACTS];
    if (typeof facts !== 'number') return { header: this.#refused(row[0]), hasSubagentChildren: false };
    const flags = flagsOf(facts);
    const header = decodeCatalogHeader(row[0], row[1], parentSession, flags & ORIGIN ? 'subagent' : null);
    const hasSubagentChildren = hasChildren ?? (flags & HAS_CHILDREN) !== 0;
    const at = hasChildren === undefined ? 3 : 4;
    // A figure too large to pack: this row's listed values are read again, unpacked.
    let listed = unpackListed(facts, row[at], row[at + 1], label) ?? listedFromRow(this.#unpacked.get(row[0]) ?? [], 0, flags >> 2);
    // No identity (rare): a child with no events of its own yet is in its creation window, not corrupt.
    if (listed?.mode === null && this.#ownEventless.get(row[0]) === 1) listed = { ...listed, pending: true };
    // One literal per shape: no property is added later.
    if (depth === undefined) return listed === undefined ? { header, hasSubagentChildren } : { header, hasSubagentChildren, listed };
    return listed === undefined ? { header, hasSubagentChildren, depth } : { header, hasSubagentChildren, listed, depth };
  }

  /** The header of a row its flags refused, through the schema: `CORRUPT_DATA` naming the column. */
  #refused(id: unknown): CatalogHeader {
    const [rowId, createdAt, parentSession, origin, nextSeq] = this.#header.get(id) ?? [id];
    return decodeCatalogHeader(rowId, createdAt, parentSession, origin, nextSeq);
  }

  /** Adds the projections of one state row to `found`, rebuilding them (into `rebuilt`) when they are not stored. */
  #read(found: Map<SessionId, StoredProjections>, row: Values, rebuilt: Rebuilt[]): void {
    const [id, nextSeq] = row;
    // The STRICT table keeps id a string; a next_seq this store never writes makes the row unreadable.
    const session = id as SessionId;
    if (!Number.isSafeInteger(nextSeq) || (nextSeq as number) < 0) {
      found.set(session, { ok: false, error: corrupt(session, `its header row is invalid (next_seq ${String(nextSeq)} is not a count)`) });
      return;
    }
    const stored = statesFromRow(row, 2);
    if (stored !== undefined) {
      found.set(session, { ok: true, views: viewsOf(stored) });
      return;
    }
    let states: ProjectionStates;
    try {
      states = this.rebuild(session, nextSeq as number);
    } catch (error) {
      if (!isSubagentError(error, 'CORRUPT_DATA')) throw error;
      found.set(session, { ok: false, error });
      return;
    }
    rebuilt.push([session, states, nextSeq as number]);
    found.set(session, { ok: true, views: viewsOf(states) });
  }
}
