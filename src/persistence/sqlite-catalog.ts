// Catalog reads of the SQLite store: children and descendants, with their lineage fact and their
// projection rows, from one query each; stored projection states read without replaying logs. A
// state row found missing or damaged is rebuilt from its log once and written back.
import type Database from 'better-sqlite3';
import { z } from 'zod';
import type { CatalogHeader, CatalogRecord, StoredProjections } from '../runtime/session-persistence.js';
import type { SessionId } from '../seam/content.js';
import { isSubagentError } from '../seam/errors.js';
import type { ProjectionStates } from './projection-states.js';
import { decodeStates, decodeViews, encodeStates, initialStates, stepStates, viewsOf } from './projection-states.js';
import { decodeCatalogHeader, decodeEvent } from './sqlite-schema.js';
import { assertContiguous } from './validate.js';

// Catalog statements run in raw mode: better-sqlite3 then builds an array per row instead of an
// object with named keys. Each column costs about a millisecond per 10,000 rows, so they read only
// what the catalog needs: id, created_at, origin, next_seq, projections, and then has_children
// (children: their parent is the parameter) or parent_session (descendants).
type Values = unknown[];
const COLUMNS = 'id, created_at, origin, next_seq, projections';
const NEXT_SEQ = 3;
const PROJECTIONS = 4;
const LAST = 5;

const stateRowSchema = z.object({
  id: z.string(),
  next_seq: z.int().nonnegative(),
  projections: z.string().nullable(),
});

/**
 * The projections of the rows an enumeration read, decoded there (the catalog asks for them next,
 * in the same order): this saves a second query, and the rows themselves die young. `stored[i]` is
 * undefined where decoding failed; those ids are queried again, so a rebuild (a write) happens only
 * when asked for. Valid only while the database is unchanged since just before the enumeration
 * (`total_changes()` counts this connection's writes, `data_version` other connections'), and only
 * until the current macrotask ends: the catalog's reads follow its enumeration within microtasks.
 */
interface Prefetch {
  stamp: string;
  ids: SessionId[];
  stored: (StoredProjections | undefined)[];
  /** Entries before this one were served or skipped. */
  next: number;
}

/** Stored projections decoded from a row's `projections` value; undefined when they must be read again (and maybe rebuilt). */
function storedOf(text: unknown): StoredProjections | undefined {
  const views = typeof text === 'string' ? decodeViews(text) : undefined;
  return views === undefined ? undefined : { ok: true, views };
}

/** The catalog statements of one database connection. */
export class SqliteCatalog {
  readonly #children: Database.Statement<[string], Values>;
  readonly #descendants: Database.Statement<[{ root: string }], Values>;
  readonly #states: Database.Statement<[string], Values>;
  readonly #stamp: Database.Statement<[], Values>;
  readonly #events: Database.Statement<[string]>;
  readonly #writeBack: Database.Statement<[string, string, number]>;
  #prefetch: Prefetch | undefined;

  constructor(db: Database.Database) {
    // One probe of the partial index per row answers has_children.
    this.#children = db
      .prepare<[string], Values>(
        `SELECT ${COLUMNS},
           EXISTS (SELECT 1 FROM sessions c WHERE c.parent_session = s.id AND c.origin = 'subagent')
         FROM sessions s WHERE s.parent_session = ? ORDER BY s.created_at, s.create_order`,
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
         SELECT s.id, s.created_at, s.origin, s.next_seq, s.projections, s.parent_session
         FROM tree CROSS JOIN sessions s ON s.rowid = tree.rid
         ORDER BY s.created_at, s.create_order`,
      )
      .raw(true);
    this.#states = db
      .prepare<[string], Values>('SELECT id, next_seq, projections FROM sessions WHERE id IN (SELECT value FROM json_each(?))')
      .raw(true);
    this.#stamp = db.prepare<[], Values>('SELECT total_changes(), data_version FROM pragma_data_version').raw(true);
    this.#events = db.prepare('SELECT seq, type, time, data FROM events WHERE session_id = ? ORDER BY seq');
    // Conditional on next_seq: a rebuild raced by a commit is simply not kept.
    this.#writeBack = db.prepare('UPDATE sessions SET projections = ? WHERE id = ? AND next_seq = ?');
  }

  // The loops below are map/forEach rather than for-of: each runs once per listing over thousands
  // of rows, mostly before it is optimized, and unoptimized for-of allocates per iteration.

  childRecords(parentId: SessionId): CatalogRecord[] {
    const stamp = this.#currentStamp();
    const rows = this.#children.all(parentId);
    const headers = rows.map((row) => decodeCatalogHeader(row[0], row[1], parentId, row[2], row[NEXT_SEQ]));
    this.#keep(stamp, headers, rows);
    return headers.map((header, index) => ({ header, hasSubagentChildren: rows[index]![LAST] === 1 }));
  }

  descendantRecords(rootId: SessionId): CatalogRecord[] {
    const stamp = this.#currentStamp();
    const rows = this.#descendants.all({ root: rootId });
    const headers = rows.map((row) => decodeCatalogHeader(row[0], row[1], row[LAST], row[2], row[NEXT_SEQ]));
    // Every subagent child of a session below the root is itself below the root (the root's own
    // children included), so the rows alone answer "has subagent children".
    const parents = new Set<SessionId>();
    headers.forEach((header) => {
      if (header.origin === 'subagent' && header.parentSession !== undefined) parents.add(header.parentSession);
    });
    this.#keep(stamp, headers, rows);
    return headers.map((header) => ({ header, hasSubagentChildren: parents.has(header.id) }));
  }

  projections(ids: readonly SessionId[]): Map<SessionId, StoredProjections> {
    const found = new Map<SessionId, StoredProjections>();
    if (ids.length === 0) return found;
    const prefetched = this.#prefetched(ids);
    let rest: readonly SessionId[] = ids;
    if (prefetched !== undefined) {
      const missing: SessionId[] = [];
      prefetched.forEach((stored, index) => {
        const id = ids[index]!;
        if (stored === undefined) missing.push(id);
        else found.set(id, stored);
      });
      rest = missing;
    }
    if (rest.length > 0) {
      for (const row of this.#states.all(JSON.stringify(rest))) this.#read(found, row[0], row[1], row[2]);
    }
    return found;
  }

  /** The states stored in `text`, or else rebuilt from the log; undefined when the log is unreadable. */
  statesOf(id: SessionId, text: string | null, nextSeq: number): ProjectionStates | undefined {
    const stored = decodeStates(text);
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

  /** Changes whenever this connection or another one has written since. */
  #currentStamp(): string {
    const [changes, version] = this.#stamp.get() ?? [];
    return `${String(changes)}/${String(version)}`;
  }

  #keep(stamp: string, headers: readonly CatalogHeader[], rows: readonly Values[]): void {
    const prefetch: Prefetch = {
      stamp,
      ids: headers.map((header) => header.id),
      stored: rows.map((row) => storedOf(row[PROJECTIONS])),
      next: 0,
    };
    this.#prefetch = prefetch;
    setImmediate(() => {
      if (this.#prefetch === prefetch) this.#prefetch = undefined;
    }).unref();
  }

  /**
   * The prefetched entries of `ids` (aligned with them, each served once), or undefined when all
   * must be queried: no prefetch, a stale one, or ids not asked in enumeration order.
   */
  #prefetched(ids: readonly SessionId[]): (StoredProjections | undefined)[] | undefined {
    const prefetch = this.#prefetch;
    if (prefetch === undefined) return undefined;
    if (this.#currentStamp() !== prefetch.stamp) {
      this.#prefetch = undefined;
      return undefined;
    }
    const { ids: order, stored } = prefetch;
    const served = new Array<StoredProjections | undefined>(ids.length);
    let next = prefetch.next;
    for (let index = 0; index < ids.length; index++) {
      while (next < order.length && order[next] !== ids[index]) next++;
      if (next === order.length) {
        this.#prefetch = undefined;
        return undefined;
      }
      served[index] = stored[next];
      // Served once: the entry is released as it goes.
      stored[next++] = undefined;
    }
    prefetch.next = next;
    return served;
  }

  /** Adds the projections of one state row to `found`, rebuilding them when the stored text is unusable. */
  #read(found: Map<SessionId, StoredProjections>, id: unknown, nextSeq: unknown, text: unknown): void {
    if (typeof id !== 'string' || !Number.isSafeInteger(nextSeq) || (nextSeq as number) < 0 || (text !== null && typeof text !== 'string')) {
      // Not a row this store writes: the schema decides (and names the column).
      const row = stateRowSchema.parse({ id, next_seq: nextSeq, projections: text });
      this.#readChecked(found, row.id, row.next_seq, row.projections);
    } else {
      this.#readChecked(found, id, nextSeq as number, text);
    }
  }

  #readChecked(found: Map<SessionId, StoredProjections>, id: SessionId, nextSeq: number, text: string | null): void {
    const views = decodeViews(text);
    if (views !== undefined) {
      found.set(id, { ok: true, views });
      return;
    }
    let states: ProjectionStates;
    try {
      states = this.rebuild(id, nextSeq);
    } catch (error) {
      if (!isSubagentError(error, 'CORRUPT_DATA')) throw error;
      found.set(id, { ok: false, error });
      return;
    }
    this.#writeBack.run(encodeStates(states), id, nextSeq);
    found.set(id, { ok: true, views: viewsOf(states) });
  }
}
