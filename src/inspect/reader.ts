// Read-only queries of a subagent-host database for the inspector: roots, the tree below a root with
// what each child's log says (activity, stop reason, timing, usage), and one session's log. The
// handle is opened read-only, so another process keeps writing (WAL) while the page watches.
import fs from 'node:fs';
import Database from 'better-sqlite3';
import { SubagentError } from '../seam/errors.js';
import { headOf } from '../seam/parse.js';
import { inheritedCount } from '../seam/session-types.js';
import { SCHEMA_VERSION, notOurSchema } from '../persistence/sqlite-migrate.js';
import { decodeEvent, decodeSession, missingAddonError, readonlyFolderError } from '../persistence/sqlite-schema.js';
import { labelOf } from '../persistence/state-columns.js';
import { storageFailure } from '../persistence/sqlite.js';
import type { ChildNode, RootSummary, TranscriptResponse, UsageTotals } from './api-types.js';
import { entryOf } from './transcript.js';
import { TranscriptBuilder, type EventRow } from './transcript-builder.js';

const ROOTS_SHOWN = 200;
const TITLE_CHARS = 120;

/**
 * One message's count at `path` as the usage fold takes it (src/seam/usage.ts): NULL without a
 * usage record; a finite non-negative number rounded, anything else (a string, a negative) 0.
 * Below one half it is 0, as `Math.round` has it: SQLite's `round` adds one half first, which
 * takes the largest number below it (0.49999999999999994) to 1.
 */
function tokensAt(path: string): string {
  return `CASE WHEN json_type(data, '$.usage') IN ('object', 'array') THEN
     CASE WHEN json_type(data, '${path}') IN ('integer', 'real') AND json_extract(data, '${path}') BETWEEN 0.5 AND 1.7976931348623157e308
       THEN round(json_extract(data, '${path}')) ELSE 0 END END`;
}

/**
 * The token totals of session `s`'s own assistant messages (a fork's seed left out), as JSON `{in,
 * out}`, counted as the listings count them. Summed as reals, which cannot overflow as a sum of
 * integers does (an error), then capped to a safe integer.
 */
function usageOf(s: string): string {
  const total = (path: string): string => `CAST(min(${Number.MAX_SAFE_INTEGER}, sum(${tokensAt(path)})) AS INTEGER)`;
  return `(SELECT json_object('in', ${total('$.usage.inputTokens')}, 'out', ${total('$.usage.outputTokens')})
     FROM events e WHERE e.session_id = ${s}.id AND e.seq >= coalesce(${s}.seed_length, 0) AND e.type = 'assistant/message' AND json_valid(data))`;
}

// Per descendant: its row, plus the few facts of its log the tree shows, each one indexed probe
// (events are keyed by session and seq) rather than a read of the whole log. The root is never its
// own descendant: parent links that lead back to it (a session its own parent, a damaged file)
// would make the walk below endless, and every such loop passes through the root.
const TREE = `
WITH RECURSIVE tree(id, depth) AS (
  SELECT id, 1 FROM sessions WHERE parent_session = @root AND id <> @root
  UNION ALL
  SELECT c.id, tree.depth + 1 FROM sessions c JOIN tree ON c.parent_session = tree.id WHERE c.id <> @root
)
SELECT s.id, s.parent_session AS parent, s.origin, s.created_at AS createdAt, s.next_seq AS events, s.seed_length AS seedLength,
  s.identity_mode AS mode, s.identity_label AS label, s.timing_settled AS settled, tree.depth,
  (SELECT time FROM events e WHERE e.session_id = s.id ORDER BY seq DESC LIMIT 1) AS lastTime,
  (SELECT max(seq) FROM events e WHERE e.session_id = s.id AND e.type = 'turn/start') AS startSeq,
  (SELECT seq || ' ' || time || ' ' || data FROM events e WHERE e.session_id = s.id AND e.type = 'turn/end'
     ORDER BY seq DESC LIMIT 1) AS lastEnd,
  (SELECT data FROM events e WHERE e.session_id = s.id AND e.seq >= coalesce(s.seed_length, 0) AND e.type = 'subagent/descriptor'
     ORDER BY seq DESC LIMIT 1) AS descriptor,
  ${usageOf('s')} AS usage
FROM tree JOIN sessions s ON s.id = tree.id
ORDER BY s.created_at, s.create_order`;

interface TreeRow {
  id: string;
  parent: string;
  origin: string | null;
  createdAt: number;
  events: number;
  seedLength: number | null;
  /** Stored projection columns; settled is NULL when the states are not stored. */
  mode: string | null;
  label: string | null;
  settled: number | null;
  depth: number;
  lastTime: number | null;
  startSeq: number | null;
  lastEnd: string | null;
  descriptor: string | null;
  usage: string | null;
}

/** Parses JSON text from a row, or undefined: a damaged row shows as a problem, never a crash. */
function parse(text: string | null): unknown {
  if (text === null) return undefined;
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}

function usageTotals(text: string | null): UsageTotals | undefined {
  const value = parse(text) as { in?: unknown; out?: unknown } | undefined;
  // Both sums are null when no assistant message reports usage; a usage always has both counts.
  if (typeof value?.in !== 'number' || typeof value.out !== 'number') return undefined;
  return { inputTokens: value.in, outputTokens: value.out };
}

/**
 * A child still being created (stored, no events of its own yet: its descriptor comes with its first
 * turn). Left out, as the catalog leaves it out, rather than shown as a log without a descriptor.
 */
function creating(row: TreeRow): boolean {
  return row.origin === 'subagent' && row.events <= inheritedCount({ seedLength: row.seedLength ?? 0 });
}

/** The tree node of one row; the log facts come from the row's sub-queries. */
function nodeOf(row: TreeRow): ChildNode {
  const node: ChildNode = { id: row.id, parentId: row.parent, depth: row.depth, createdAt: row.createdAt, activity: 'inactive', events: row.events };
  if (row.lastTime !== null) node.lastEventAt = row.lastTime;
  if (row.settled !== null) {
    node.busyMs = row.settled;
    const label = labelOf(row.label);
    if (row.mode === 'one-shot' || row.mode === 'continuable') {
      node.mode = row.mode;
      if (typeof label === 'string') node.label = label;
    }
  }
  const descriptor = parse(row.descriptor) as { provider?: unknown; mode?: unknown; label?: unknown } | undefined;
  if (typeof descriptor?.provider === 'string') node.provider = descriptor.provider;
  // Stored projections may be absent (rebuilt by the next writer); the last descriptor says the same.
  if (node.mode === undefined && (descriptor?.mode === 'one-shot' || descriptor?.mode === 'continuable')) {
    node.mode = descriptor.mode;
    if (typeof descriptor.label === 'string') node.label = descriptor.label;
  }
  if (row.origin === 'subagent' && node.mode === undefined) node.problem = 'no readable descriptor';

  // "<seq> <time> <json>" of the last turn/end: one sub-query instead of three.
  const match = row.lastEnd === null ? null : /^(\d+) (\S+) (.*)$/s.exec(row.lastEnd);
  const endSeq = match === null ? -1 : Number(match[1]);
  const reason = match === null ? undefined : (parse(match[3]!) as { reason?: { kind?: unknown } } | undefined)?.reason?.kind;
  if (typeof reason === 'string') node.stopReason = reason;
  // Open while a turn started after the last end, or while nothing has ended yet (a queued child
  // has no turn yet; a child that ended before its first turn has its log closed by its provider).
  const open = (row.startSeq ?? -1) > endSeq || match === null;
  if (open) node.activity = 'running';
  else node.settledAt = Number(match[2]);
  const usage = usageTotals(row.usage);
  if (usage !== undefined) node.usage = usage;
  return node;
}

/** Why SQLite could not open the file at `path` to read it (a directory, say): `PERSISTENCE_UNAVAILABLE`. */
export function openFailure(path: string, error: unknown): SubagentError {
  return (
    missingAddonError(error) ??
    readonlyFolderError(path, error) ??
    new SubagentError('PERSISTENCE_UNAVAILABLE', `cannot open ${path} (${String(error)}); pass --db FILE`, { cause: error })
  );
}

/** A read-only view of one database file. */
export class InspectReader {
  readonly #path: string;
  readonly #db: Database.Database;
  readonly #roots: Database.Statement<[number], { id: string; createdAt: number; events: number; children: number; first: string | null }>;
  readonly #root: Database.Statement<[string], { id: string; createdAt: number; events: number; children: number; first: string | null }>;
  readonly #tree: Database.Statement<[{ root: string }], TreeRow>;
  readonly #session: Database.Statement<[string]>;
  readonly #usage: Database.Statement<[string], string | null>;
  readonly #events: Database.Statement<[string, number], EventRow>;
  readonly #event: Database.Statement<[string, number], EventRow>;
  readonly #version: Database.Statement<[], number>;
  readonly #openTurn: Database.Statement<{ id: string }, number>;

  /**
   * @throws SubagentError `PERSISTENCE_UNAVAILABLE` when `path` does not exist or cannot be opened,
   * `CORRUPT_DATA` when it is not a subagent-host database of this schema version.
   */
  constructor(path: string) {
    this.#path = path;
    try {
      // Read-write handle refusing writes: a read-only handle leaves -wal/-shm files behind on close.
      this.#db = new Database(path, { fileMustExist: true });
      this.#db.pragma('query_only = ON');
    } catch (error) {
      throw openFailure(path, error);
    }
    let version: unknown;
    try {
      version = this.#db.pragma('user_version', { simple: true });
    } catch (error) {
      this.#db.close();
      throw readonlyFolderError(path, error) ?? new SubagentError('CORRUPT_DATA', `${path} is not a readable SQLite database`, { cause: error });
    }
    if (version !== SCHEMA_VERSION) {
      const message = notOurSchema(this.#db, path, version);
      this.#db.close();
      throw new SubagentError('CORRUPT_DATA', message);
    }
    const rootColumns = `id, created_at AS createdAt, next_seq AS events,
      (SELECT count(*) FROM sessions c WHERE c.parent_session = s.id) AS children,
      (SELECT data FROM events e WHERE e.session_id = s.id AND e.type = 'user/message' ORDER BY seq LIMIT 1) AS first`;
    try {
      this.#roots = this.#db.prepare(
        `SELECT ${rootColumns} FROM sessions s WHERE parent_session IS NULL ORDER BY created_at DESC, create_order DESC LIMIT ?`,
      );
      this.#root = this.#db.prepare(`SELECT ${rootColumns} FROM sessions s WHERE id = ?`);
      this.#tree = this.#db.prepare(TREE);
      this.#session = this.#db.prepare('SELECT id, created_at, cwd, parent_session, origin, delegation_depth, seed_length, next_seq FROM sessions WHERE id = ?');
      this.#usage = this.#db.prepare<[string], string | null>(`SELECT ${usageOf('s')} FROM sessions s WHERE id = ?`).pluck();
      this.#events = this.#db.prepare('SELECT seq, type, time, data FROM events WHERE session_id = ? AND seq > ? ORDER BY seq');
      this.#event = this.#db.prepare('SELECT seq, type, time, data FROM events WHERE session_id = ? AND seq = ?');
      this.#version = this.#db.prepare<[], number>('PRAGMA data_version').pluck();
      this.#openTurn = this.#db
        .prepare<{ id: string }, number>(
          `SELECT coalesce((SELECT max(seq) FROM events WHERE session_id = @id AND type = 'turn/start'), -1)
             > coalesce((SELECT max(seq) FROM events WHERE session_id = @id AND type = 'turn/end'), -1)`,
        )
        .pluck();
    } catch (error) {
      this.#db.close();
      throw new SubagentError('CORRUPT_DATA', `${path} claims schema version ${SCHEMA_VERSION} but its tables differ: it was not written by subagent-host`, { cause: error });
    }
  }

  /** `query()`, its SQLite failure (a file damaged or replaced in place) turned into a `SubagentError`. */
  #read<T>(query: () => T): T {
    try {
      return query();
    } catch (error) {
      throw storageFailure(error, `read ${this.#path}`);
    }
  }

  /** Whether the session's log has a turn that has not ended (as a running agent's does). */
  turnOpen(id: string): boolean {
    return this.#read(() => this.#openTurn.get({ id })) === 1;
  }

  /** Changes whenever another connection commits (SQLite's `data_version`). */
  version(): number {
    // `PRAGMA data_version` always answers one row.
    return this.#read(() => this.#version.get()) as number;
  }

  roots(): RootSummary[] {
    return this.#read(() => this.#roots.all(ROOTS_SHOWN)).map(summary);
  }

  /** The summary of any stored session, or undefined when there is none with this id. */
  root(id: string): RootSummary | undefined {
    const row = this.#read(() => this.#root.get(id));
    return row === undefined ? undefined : summary(row);
  }

  /** Every descendant of `rootId` in pre-order (creation order among siblings). */
  tree(rootId: string): ChildNode[] {
    const nodes = this.#read(() => this.#tree.all({ root: rootId })).filter((row) => !creating(row)).map(nodeOf);
    const childrenOf = new Map<string, ChildNode[]>();
    for (const node of nodes) {
      const siblings = childrenOf.get(node.parentId);
      if (siblings === undefined) childrenOf.set(node.parentId, [node]);
      else siblings.push(node);
    }
    const order: ChildNode[] = [];
    const stack = [...(childrenOf.get(rootId) ?? [])].reverse();
    for (let node = stack.pop(); node !== undefined; node = stack.pop()) {
      order.push(node);
      // Pushed one by one: spread as arguments, a session's 130,000 children overflowed the stack.
      const children = childrenOf.get(node.id) ?? [];
      for (let index = children.length - 1; index >= 0; index--) stack.push(children[index]!);
    }
    return order;
  }

  /**
   * The transcript entries of one session's events after seq `after` (all without it), at most
   * `limit`, or undefined when there is no such session. Rows are read one at a time and their texts
   * cut as they come (see {@link TranscriptBuilder}); a fork's seed is one entry, so an `after` inside
   * it reads from the start.
   */
  transcript(id: string, page: { after?: number; limit: number }): TranscriptResponse | undefined {
    return this.#read(() => {
      const row = this.#session.get(id);
      if (row === undefined) return undefined;
      const { header } = decodeSession(row);
      const seedLength = header.seedLength ?? 0;
      const from = page.after === undefined || page.after < seedLength - 1 ? -1 : page.after;
      const builder = new TranscriptBuilder(id, header.createdAt, from < 0 ? seedLength : 0);
      let through: number | undefined;
      let more = false;
      for (const event of this.#events.iterate(id, from)) {
        if (builder.full(page.limit)) {
          more = true;
          break;
        }
        builder.add(event);
        through = event.seq;
      }
      const response: TranscriptResponse = { id, createdAt: header.createdAt, entries: builder.finish() };
      if (header.parentSession !== undefined) response.parentId = header.parentSession;
      if (through !== undefined) response.through = through;
      if (more) response.more = true;
      const usage = usageTotals(this.#usage.get(id) ?? null);
      if (usage !== undefined) response.usage = usage;
      return response;
    });
  }

  /**
   * The whole body of the entry of event `seq` ('' for an entry without one), or undefined when the
   * session has no such event or the transcript leaves it out.
   * @throws SubagentError `CORRUPT_DATA` when the row cannot be read.
   */
  entryText(id: string, seq: number): string | undefined {
    const row = this.#read(() => this.#event.get(id, seq));
    const entry = row === undefined ? undefined : entryOf(decodeEvent(id, row));
    return entry === undefined ? undefined : (entry.text ?? '');
  }

  close(): void {
    this.#db.close();
  }
}

/**
 * The reader of the database at `path`, or undefined while the file is empty (0 bytes): a host
 * creating it has not written its schema yet, so it holds no sessions yet.
 * @throws SubagentError as {@link InspectReader}'s constructor does.
 */
export function openReader(path: string): InspectReader | undefined {
  return fs.statSync(path, { throwIfNoEntry: false })?.size === 0 ? undefined : new InspectReader(path);
}

function summary(row: { id: string; createdAt: number; events: number; children: number; first: string | null }): RootSummary {
  const root: RootSummary = { id: row.id, createdAt: row.createdAt, children: row.children, events: row.events };
  const content = (parse(row.first) as { content?: unknown } | undefined)?.content;
  if (Array.isArray(content)) {
    // A block may be anything the row holds (null included): only a text block gives text.
    const text = content.map((block) => ((block as { type?: unknown } | null)?.type === 'text' ? String((block as { text?: unknown }).text) : '')).join(' ').trim();
    if (text !== '') root.title = text.length > TITLE_CHARS ? `${headOf(text, TITLE_CHARS)}…` : text;
  }
  return root;
}
