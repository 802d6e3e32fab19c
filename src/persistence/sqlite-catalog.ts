// Catalog reads of the SQLite store: children and descendants, with their lineage fact and what a
// listing shows of their stored projections, from one query each (a listing is one snapshot and
// replays no log). A session whose states are not stored is rebuilt from its log once, when
// `projections()` reads it, and written back.
import type Database from 'better-sqlite3';
import { z } from 'zod';
import type { CatalogHeader, CatalogRecord, StoredProjections } from '../runtime/session-persistence.js';
import type { SessionId } from '../seam/content.js';
import { isSubagentError } from '../seam/errors.js';
import type { ProjectionStates } from './projection-states.js';
import { initialStates, stepStates, viewsOf } from './projection-states.js';
import { decodeCatalogHeader, decodeEvent } from './sqlite-schema.js';
import { LISTED_SELECT, MODE_CODE, STATE_COLUMNS, listedFromRow, stateValues, statesFromRow } from './state-columns.js';
import { assertContiguous } from './validate.js';

// Catalog statements run in raw mode: better-sqlite3 then builds an array per row instead of an
// object with named keys. Each value costs about half a millisecond per 10,000 rows, so they read
// only what a listing shows: id, created_at, the row's flags, then parent_session (descendants
// only), then the listed projections.
type Values = unknown[];

/**
 * The small facts of a row, packed by SQLite into one integer: bit 0 origin 'subagent', bit 1 has
 * subagent children (`lineage`), bits 2–3 the identity's {@link MODE_CODE}. NULL when origin or
 * next_seq is not a value this store writes: the row is read again and the schema names the column.
 */
const flags = (lineage: string): string =>
  `CASE WHEN next_seq >= 0 AND (origin IS NULL OR origin = 'subagent')
     THEN (origin IS NOT NULL) + 2 * ${lineage} + 4 * (${MODE_CODE}) END`;
const FLAGS = 2;
const ORIGIN = 1;
const HAS_CHILDREN = 2;

const stateRowSchema = z.object({ id: z.string(), next_seq: z.int().nonnegative() });

/** The catalog statements of one database connection. */
export class SqliteCatalog {
  readonly #children: Database.Statement<[string], Values>;
  readonly #descendants: Database.Statement<[{ root: string }], Values>;
  readonly #header: Database.Statement<[unknown], Values>;
  readonly #states: Database.Statement<[string], Values>;
  readonly #events: Database.Statement<[string]>;
  readonly #writeBack: Database.Statement<unknown[]>;

  constructor(db: Database.Database) {
    // subagent_children is kept by a trigger (sqlite-migrate.ts): a value, not a probe per row.
    this.#children = db
      .prepare<[string], Values>(
        `SELECT id, created_at, ${flags('subagent_children')}, ${LISTED_SELECT}
         FROM sessions WHERE parent_session = ? ORDER BY created_at, create_order`,
      )
      .raw(true);
    // A session has one parent, so a walk down parent links meets each session once, except that a
    // cycle leads back to the root: UNION ALL (no dedupe) is exact when the root is not expanded
    // again. The walk carries rowids only; each row is read once, in creation order, at the end.
    this.#descendants = db
      .prepare<[{ root: string }], Values>(
        `WITH RECURSIVE tree(rid, id) AS (
           SELECT rowid, id FROM sessions WHERE parent_session = @root
           UNION ALL
           SELECT c.rowid, c.id FROM sessions c JOIN tree ON c.parent_session = tree.id WHERE tree.id <> @root
         )
         SELECT s.id, s.created_at, ${flags('0')}, s.parent_session, ${LISTED_SELECT}
         FROM tree CROSS JOIN sessions s ON s.rowid = tree.rid
         ORDER BY s.created_at, s.create_order`,
      )
      .raw(true);
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
    return this.#children.all(parentId).map((row) => this.#recordOf(row, parentId, 3, undefined));
  }

  descendantRecords(rootId: SessionId): CatalogRecord[] {
    const records = this.#descendants.all({ root: rootId }).map((row) => this.#recordOf(row, row[3], 4, false));
    // Every subagent child of a session below the root is itself below the root (the root's own
    // children included), so the rows alone answer "has subagent children".
    const parents = new Set<SessionId>();
    records.forEach(({ header }) => {
      if (header.origin === 'subagent' && header.parentSession !== undefined) parents.add(header.parentSession);
    });
    records.forEach((record) => (record.hasSubagentChildren = parents.has(record.header.id)));
    return records;
  }

  projections(ids: readonly SessionId[]): Map<SessionId, StoredProjections> {
    const found = new Map<SessionId, StoredProjections>();
    if (ids.length > 0) this.#states.all(JSON.stringify(ids)).forEach((row) => this.#read(found, row));
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
   * The record of a listed row whose listed projections start at `at`; `hasChildren` undefined
   * takes it from the flags.
   */
  #recordOf(row: Values, parentSession: unknown, at: number, hasChildren: boolean | undefined): CatalogRecord {
    const packed = row[FLAGS];
    if (typeof packed !== 'number') return { header: this.#refused(row[0]), hasSubagentChildren: false };
    const header = decodeCatalogHeader(row[0], row[1], parentSession, packed & ORIGIN ? 'subagent' : null);
    const hasSubagentChildren = hasChildren ?? (packed & HAS_CHILDREN) !== 0;
    const listed = listedFromRow(row, at, packed >> 2);
    // One literal per shape: no property is added later.
    return listed === undefined ? { header, hasSubagentChildren } : { header, hasSubagentChildren, listed };
  }

  /** The header of a row its flags refused, through the schema: `CORRUPT_DATA` naming the column. */
  #refused(id: unknown): CatalogHeader {
    const [rowId, createdAt, parentSession, origin, nextSeq] = this.#header.get(id) ?? [id];
    return decodeCatalogHeader(rowId, createdAt, parentSession, origin, nextSeq);
  }

  /** Adds the projections of one state row to `found`, rebuilding them when they are not stored. */
  #read(found: Map<SessionId, StoredProjections>, row: Values): void {
    const [id, nextSeq] = row;
    if (typeof id !== 'string' || !Number.isSafeInteger(nextSeq) || (nextSeq as number) < 0) {
      // Not a row this store writes: the schema decides (and names the column).
      stateRowSchema.parse({ id, next_seq: nextSeq });
    }
    const session = id as SessionId;
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
    this.#writeBack.run(...stateValues(states), session, nextSeq);
    found.set(session, { ok: true, views: viewsOf(states) });
  }
}
