// Catalog reads of the SQLite store: children and descendants with their lineage fact from one
// indexed query each, and stored projection states read without replaying logs. A state row found
// missing or damaged is rebuilt from its log once and written back.
import type Database from 'better-sqlite3';
import { z } from 'zod';
import type { CatalogRecord, StoredProjections } from '../runtime/session-persistence.js';
import type { SessionId } from '../seam/content.js';
import { isSubagentError } from '../seam/errors.js';
import type { ProjectionStates } from './projection-states.js';
import { decodeStates, encodeStates, initialStates, stepStates, viewsOf } from './projection-states.js';
import { SESSION_COLUMNS, decodeEvent, decodeSession } from './sqlite-schema.js';
import { assertContiguous } from './validate.js';

// One probe of the partial index per row.
const HAS_CHILDREN =
  "EXISTS (SELECT 1 FROM sessions c WHERE c.parent_session = s.id AND c.origin = 'subagent') AS has_children";

const stateRowSchema = z.object({
  id: z.string(),
  next_seq: z.int().nonnegative(),
  projections: z.string().nullable(),
});

function toRecord(row: unknown): CatalogRecord {
  const { header } = decodeSession(row);
  return { header, hasSubagentChildren: (row as { has_children?: unknown }).has_children === 1 };
}

/** The catalog statements of one database connection. */
export class SqliteCatalog {
  readonly #children: Database.Statement<[string]>;
  readonly #descendants: Database.Statement<[string]>;
  readonly #states: Database.Statement<[string]>;
  readonly #events: Database.Statement<[string]>;
  readonly #writeBack: Database.Statement<[string, string, number]>;

  constructor(db: Database.Database) {
    this.#children = db.prepare(
      `SELECT ${SESSION_COLUMNS}, ${HAS_CHILDREN} FROM sessions s
       WHERE s.parent_session = ? ORDER BY s.created_at, s.create_order`,
    );
    // UNION (not UNION ALL) keeps each id once, which is what ends a parent cycle.
    this.#descendants = db.prepare(
      `WITH RECURSIVE tree(id) AS (
         SELECT id FROM sessions WHERE parent_session = ?
         UNION
         SELECT c.id FROM sessions c JOIN tree ON c.parent_session = tree.id
       )
       SELECT ${SESSION_COLUMNS}, ${HAS_CHILDREN} FROM sessions s
       WHERE s.id IN (SELECT id FROM tree) ORDER BY s.created_at, s.create_order`,
    );
    this.#states = db.prepare(
      'SELECT id, next_seq, projections FROM sessions WHERE id IN (SELECT value FROM json_each(?))',
    );
    this.#events = db.prepare('SELECT seq, type, time, data FROM events WHERE session_id = ? ORDER BY seq');
    // Conditional on next_seq: a rebuild raced by a commit is simply not kept.
    this.#writeBack = db.prepare('UPDATE sessions SET projections = ? WHERE id = ? AND next_seq = ?');
  }

  childRecords(parentId: SessionId): CatalogRecord[] {
    return this.#children.all(parentId).map(toRecord);
  }

  descendantRecords(rootId: SessionId): CatalogRecord[] {
    return this.#descendants.all(rootId).map(toRecord);
  }

  projections(ids: readonly SessionId[]): Map<SessionId, StoredProjections> {
    const found = new Map<SessionId, StoredProjections>();
    if (ids.length === 0) return found;
    for (const raw of this.#states.all(JSON.stringify(ids))) {
      const row = stateRowSchema.parse(raw);
      let states = decodeStates(row.projections);
      if (states === undefined) {
        try {
          states = this.rebuild(row.id, row.next_seq);
        } catch (error) {
          if (!isSubagentError(error, 'CORRUPT_DATA')) throw error;
          found.set(row.id, { ok: false, error });
          continue;
        }
        this.#writeBack.run(encodeStates(states), row.id, row.next_seq);
      }
      found.set(row.id, { ok: true, views: viewsOf(states) });
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
}
