// The lineage key of a session: its parent's key plus a segment that sorts in creation order, so the
// keys of a session's descendants share its key as prefix and sort in pre-order (siblings by
// created_at, then create_order). A listing of descendants is then one range scan of an index. The
// keys live in their own table, by create_order: in `sessions` they would widen every row a
// listing of children reads.
import type Database from 'better-sqlite3';

/**
 * Characters of one segment: the created_at key (16 hex digits, {@link createdKey}) then
 * create_order (16 hex digits). Every character is below '~' and none is '.'.
 */
export const SEGMENT = 32;

/**
 * Rows deeper than this below the top of their lineage keep no key (their keys would grow with the
 * square of a chain's length); a listing that reaches one walks parent links instead.
 */
export const MAX_DEPTH = 32;

/**
 * The SQL of the key prefix of the children of a session whose row is missing (`id` is the SQL of
 * its id): '~', the hex of the id's UTF-8 bytes, '.'. It sorts after every segment, and no such
 * prefix is a prefix of another.
 */
export const orphanPrefix = (id: string): string => `'~' || hex(${id}) || '.'`;

/** The depth of a key: its segments after the orphan prefix, if any. */
const depthSql = (key: string): string => `(length(${key}) - instr(${key}, '.')) / ${SEGMENT}`;

/** The depth of a key read back from the store. */
export const depthOf = (key: string): number => (key.length - key.indexOf('.') - 1) / SEGMENT;

const view = new DataView(new ArrayBuffer(8));
const hex = (word: number): string => word.toString(16).toUpperCase().padStart(8, '0');

/**
 * The first half of a segment: the bits of `createdAt` as 16 hex digits that sort as the numbers
 * do (the sign bit flipped for positive numbers, every bit for negative ones; −0 as 0).
 */
export function createdKey(createdAt: number): string {
  view.setFloat64(0, createdAt === 0 ? 0 : createdAt);
  const high = view.getUint32(0);
  const low = view.getUint32(4);
  return high >= 0x80000000 ? hex(~high >>> 0) + hex(~low >>> 0) : hex((high | 0x80000000) >>> 0) + hex(low);
}

/**
 * The SQL of a new session's key: `created` is its {@link createdKey}, `order` its create_order.
 * Under a missing parent, the parent's orphan prefix; NULL when the session would close a parent
 * cycle or hang below one (the parent's key starts with this session's orphan prefix, or it has
 * none), or would be deeper than {@link MAX_DEPTH}.
 */
function newKeySql(id: string, parentId: string, created: string, order: string): string {
  const segment = `${created} || printf('%016X', ${order})`;
  const pending = orphanPrefix(id);
  // '' stands for "no key" inside the subquery, whose NULL means the parent row is missing.
  const underParent = `(SELECT CASE
      WHEN l.key >= ${pending} AND l.key < ${pending} || '~' THEN ''
      WHEN ${depthSql('l.key')} < ${MAX_DEPTH} THEN l.key || ${segment}
      ELSE '' END
    FROM sessions p LEFT JOIN session_lineage l ON l.session = p.create_order WHERE p.id = ${parentId})`;
  return `CASE
    WHEN ${parentId} IS NULL THEN ${segment}
    WHEN ${parentId} = ${id} THEN NULL
    ELSE nullif(coalesce(${underParent}, ${orphanPrefix(parentId)} || ${segment}), '')
  END`;
}

/** The table of the keys; `session` is the create_order of a session that has a key. */
export const LINEAGE_SCHEMA = `
CREATE TABLE session_lineage (session INTEGER PRIMARY KEY, key TEXT NOT NULL) STRICT;
CREATE INDEX session_lineage_by_key ON session_lineage(key);
`;

/**
 * Version 5: every session inserted is listed in `lineage_pending` by a trigger, and
 * {@link LineageWriter} takes its own out once it has stored the key. A writer that keys nothing (a
 * host of an earlier version still running on the file after a newer one upgraded it) leaves its
 * sessions there: listings then walk parent links, and the next store to open the file keys them
 * ({@link rekeyPending}).
 */
export const PENDING_SCHEMA = `
CREATE TABLE lineage_pending (session INTEGER PRIMARY KEY) STRICT;
CREATE TRIGGER sessions_lineage_pending AFTER INSERT ON sessions
BEGIN
  INSERT OR IGNORE INTO lineage_pending (session) VALUES (NEW.create_order);
END;
`;

/**
 * 1 when some session a writer left pending has no key: the keys may then miss sessions that a
 * range scan must list (a pending session with a key was keyed by a writer of version 4, as this one
 * would have).
 */
export const UNKEYED_PENDING_SQL = `SELECT EXISTS (SELECT 1 FROM lineage_pending p WHERE NOT EXISTS (SELECT 1 FROM session_lineage l WHERE l.session = p.session))`;

/**
 * Keys the sessions another writer left pending (in a write transaction): when all of them have
 * keys, they only leave the table; otherwise every key is written again, as {@link backfillLineage}
 * writes them.
 */
export function rekeyPending(db: Database.Database): void {
  if (db.prepare(UNKEYED_PENDING_SQL).pluck().get() === 1) {
    db.exec('DELETE FROM session_lineage');
    backfillLineage(db);
  }
  db.exec('DELETE FROM lineage_pending');
}

interface NewKey {
  id: string;
  parentId: string | null;
  createdKey: string;
  order: number;
}

/** Writes the key of each new session, in the transaction that stores the session. */
export class LineageWriter {
  readonly #keyOf: Database.Statement<[NewKey], [string | null, number]>;
  readonly #insert: Database.Statement<[number, string]>;
  readonly #adopt: Database.Statement<[{ id: string; key: string; depth: number }]>;
  readonly #drop: Database.Statement<[{ id: string }]>;
  readonly #keyed: Database.Statement<[number]>;

  constructor(db: Database.Database) {
    const orphan = orphanPrefix('@id');
    this.#keyOf = db
      .prepare<[NewKey], [string | null, number]>(
        `SELECT ${newKeySql('@id', '@parentId', '@createdKey', '@order')},
           EXISTS (SELECT 1 FROM session_lineage WHERE key > ${orphan} AND key < ${orphan} || '~')`,
      )
      .raw(true);
    this.#insert = db.prepare('INSERT INTO session_lineage (session, key) VALUES (?, ?)');
    // A session stored after its children adopts them: the keys under its orphan prefix move under
    // its own key; those it has none for (no key, or past the depth) are dropped.
    this.#adopt = db.prepare(
      `UPDATE session_lineage SET key = @key || substr(key, length(${orphan}) + 1)
       WHERE key > ${orphan} AND key < ${orphan} || '~' AND @depth + (length(key) - length(${orphan})) / ${SEGMENT} <= ${MAX_DEPTH}`,
    );
    this.#drop = db.prepare(`DELETE FROM session_lineage WHERE key > ${orphan} AND key < ${orphan} || '~'`);
    this.#keyed = db.prepare('DELETE FROM lineage_pending WHERE session = ?');
  }

  /** Keys the session `id` just stored with create_order `order`. */
  store(id: string, parentId: string | null, createdAt: number, order: number): void {
    const [key, adopts] = this.#keyOf.get({ id, parentId, createdKey: createdKey(createdAt), order })!;
    this.#keyed.run(order);
    if (key !== null) this.#insert.run(order, key);
    if (adopts === 0) return;
    if (key !== null) this.#adopt.run({ id, key, depth: depthOf(key) });
    this.#drop.run({ id });
  }
}

type Row = [session: number, id: string, parentId: string | null, createdAt: number, order: string, orphan: string | null];

/**
 * Writes every session's key as {@link LineageWriter} would have left it: the key follows the
 * parent links up to a session without a parent or with a missing parent row; a row on a cycle or
 * below one, or deeper than {@link MAX_DEPTH}, keeps NULL.
 */
export function backfillLineage(db: Database.Database): void {
  const rows = db
    .prepare<[], Row>(`SELECT create_order, id, parent_session, created_at, printf('%016X', create_order), ${orphanPrefix('parent_session')} FROM sessions`)
    .raw(true)
    .all();
  const indexOf = new Map(rows.map((row, index) => [row[1], index]));
  // undefined: not reached yet; null: no key.
  const keys = new Array<string | null | undefined>(rows.length);
  const onPath = new Uint8Array(rows.length);
  const insert = db.prepare('INSERT INTO session_lineage (session, key) VALUES (?, ?)');
  for (let start = 0; start < rows.length; start++) {
    // Up the parent links to a row with a known key, the top, a missing parent or a cycle.
    const path: number[] = [];
    let base: string | null = '';
    for (let at: number | undefined = start; at !== undefined; ) {
      const known = keys[at];
      if (known !== undefined) {
        base = known;
        break;
      }
      if (onPath[at] === 1) {
        base = null;
        break;
      }
      onPath[at] = 1;
      path.push(at);
      const [, , parentId, , , orphan] = rows[at]!;
      if (parentId === null) break;
      at = indexOf.get(parentId);
      if (at === undefined) base = orphan;
    }
    // Down again, each row's key from its parent's.
    for (let i = path.length - 1; i >= 0; i--) {
      const at = path[i]!;
      const [session, , , createdAt, order] = rows[at]!;
      const key = base === null || depthOf(base) >= MAX_DEPTH ? null : base + createdKey(createdAt) + order;
      keys[at] = key;
      onPath[at] = 0;
      if (key !== null) insert.run(session, key);
      base = key;
    }
  }
}
