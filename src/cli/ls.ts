// `subagent-host ls SESSION [--db FILE] [--tree] [--json]`: the subagent children (or, with --tree,
// every descendant) of a session stored in a subagent-host SQLite database, one per line or as JSON.
import fs from 'node:fs';
import Database from 'better-sqlite3';
import { SubagentError } from '../seam/errors.js';
import type { SubagentDescendantListEntry, SubagentListEntry } from '../seam/types.js';
import { visible } from '../seam/visible.js';
import { sqlitePersistence } from '../persistence/sqlite.js';
import { SCHEMA_VERSION, notOurSchema } from '../persistence/sqlite-migrate.js';
import { InspectReader, openFailure } from '../inspect/reader.js';
import { createSubagentCatalog } from '../service/catalog.js';
import { activityFromLog, follow, type Listing } from './ls-follow.js';
import { parseCommand, usageError as commandUsageError } from './args.js';

/** Where `ls` looks without `--db`: `$SUBAGENT_HOST_DB`, else this file in the working directory. */
export const DEFAULT_DB = 'subagent-host.db';

const USAGE = `usage: subagent-host ls SESSION [--db FILE] [--tree] [--json] [--follow]

Lists the subagent children of SESSION, one per line: id, mode, activity, "+" when the child has
children of its own ("-" otherwise), tokens spent, label. Unreadable children show as "[corrupt]" or
"[unavailable]".

  --db FILE   the database (default: $SUBAGENT_HOST_DB, else ./${DEFAULT_DB})
  --tree      list every descendant, indented by depth; tokens are subtree totals
  --json      print the entries as a JSON array instead
  --follow    re-print whenever the database changes (another process may be writing it), with
              activity read from each child's log, until every descendant is inactive and
              SESSION is between turns; waits for an empty file or a SESSION not stored yet; Ctrl-C stops`;

type Entry = SubagentListEntry | SubagentDescendantListEntry;

/** The first column: the id, indented by depth under --tree. */
function name(entry: Entry): string {
  return `${'depth' in entry ? '  '.repeat(entry.depth - 1) : ''}${entry.id}`;
}

/** Tokens of a child entry: its own, or with `subtree` its tree total as the listing stored it. */
function tokensOf(entry: Entry, subtree: boolean): number {
  if (entry.kind !== 'child') return 0;
  return subtree && 'treeUsage' in entry ? entry.treeUsage.totalTokens : entry.usage.totalTokens;
}

/** One aligned line per entry; the label comes last because it may contain spaces. */
function table(entries: readonly Entry[], subtree: boolean): string {
  const width = entries.reduce((widest, entry) => Math.max(widest, visible(name(entry)).length), 0);
  const digits = entries.reduce((widest, entry) => Math.max(widest, String(tokensOf(entry, subtree)).length), 0);
  return entries
    .map((entry) => {
      const first = visible(name(entry)).padEnd(width);
      if (entry.kind === 'diagnostic') return `${first}  [${entry.reason}]\n`;
      const children = entry.hasChildren ? '+' : '-';
      const spent = String(tokensOf(entry, subtree)).padStart(digits);
      return `${`${first}  ${entry.mode.padEnd(11)}  ${entry.activity.padEnd(8)}  ${children}  ${spent}  ${visible(entry.label ?? '')}`.trimEnd()}\n`;
    })
    .join('');
}

/**
 * `CORRUPT_DATA` for an SQLite file subagent-host did not write (schema version 0), or one that
 * claims this schema with other tables: opening it as a store would write into it (our tables, WAL
 * mode) before it could refuse it. Earlier versions of ours are upgraded by the store.
 */
function refuseForeign(file: string): void {
  let db: Database.Database;
  try {
    db = new Database(file, { fileMustExist: true });
  } catch (error) {
    // A directory, say: nothing to list, as `inspect` says (the store's open would call it a bad option).
    throw openFailure(file, error);
  }
  let version: unknown;
  try {
    db.pragma('query_only = ON');
    version = db.pragma('user_version', { simple: true });
    if (version === 0) throw new SubagentError('CORRUPT_DATA', notOurSchema(db, file, version));
  } catch (error) {
    if (error instanceof SubagentError) throw error;
    // Not readable as SQLite: the store's own open says why.
  } finally {
    db.close();
  }
  // The reader checks the tables of a current file without writing: CORRUPT_DATA when they differ.
  if (version === SCHEMA_VERSION) new InspectReader(file).close();
}

const usageError = (message: string): number => commandUsageError('ls', USAGE, message);

/** Runs `ls`; returns the exit code (2 for bad arguments). */
export async function run(args: string[]): Promise<number> {
  const parsed = parseCommand('ls', USAGE, {
    args,
    allowPositionals: true,
    options: {
      db: { type: 'string' },
      tree: { type: 'boolean', default: false },
      json: { type: 'boolean', default: false },
      follow: { type: 'boolean', default: false },
    },
  });
  if (typeof parsed === 'number') return parsed;
  const { values, positionals } = parsed;
  const [sessionId, ...extra] = positionals;
  if (sessionId === undefined || sessionId === '') return usageError('SESSION is required');
  if (extra.length > 0) return usageError(`unexpected argument '${extra[0]}'`);
  if (values.db === '') return usageError('--db needs a file path');

  const file = values.db ?? (process.env.SUBAGENT_HOST_DB || DEFAULT_DB);
  // Opening would create a database in a missing file; a mistyped path should say so instead.
  if (!fs.existsSync(file)) throw new SubagentError('PERSISTENCE_UNAVAILABLE', `no database at ${file}; pass --db FILE`);
  const print = (entries: Entry[]): string => (values.json ? `${JSON.stringify(entries, null, 2)}\n` : table(entries, values.tree));
  const open = (): Promise<Listing<Entry>> => openListing(file, sessionId, values.tree);
  if (values.follow) {
    // Following a session with no child yet says so (plain `ls` prints nothing for it).
    await follow({
      file,
      rootId: sessionId,
      open,
      print: (entries) => (entries.length === 0 && !values.json ? 'no subagent children yet\n' : print(entries)),
      waiting: `subagent-host ls: no session "${visible(sessionId)}" in ${visible(file)} yet; waiting for it (Ctrl-C stops)\n`,
    });
    return 0;
  }
  // An empty file is one a host is creating (it never turns into a database here): no sessions yet.
  const listing = fs.statSync(file).size === 0 ? undefined : await open();
  try {
    if (listing === undefined || !(await listing.has())) {
      throw new SubagentError('UNKNOWN_SESSION', `no session "${sessionId}" in ${file}${listing === undefined ? ' (the file is empty: it holds no sessions yet)' : ''}`);
    }
    process.stdout.write(print(activityFromLog(listing.reader, sessionId, await listing.list())));
    return 0;
  } finally {
    await listing?.close();
  }
}

/**
 * The listing of `sessionId` (its children, or with `tree` its descendants) in the non-empty
 * database `file`, with a read-only reader of its logs.
 * @throws SubagentError `CORRUPT_DATA` for a file that is not ours, as the store's open does.
 */
export async function openListing(file: string, sessionId: string, tree: boolean): Promise<Listing<Entry>> {
  refuseForeign(file);
  // The store first: it upgrades an earlier release's file, which the reader would refuse.
  const persistence = sqlitePersistence(file);
  const reader = new InspectReader(file);
  // No live sessions: this process runs none, so every child is listed from storage, its activity
  // read from its log (another process may be running it).
  const catalog = createSubagentCatalog({ persistence, sessions: { get: () => undefined, list: () => [] } });
  return {
    reader,
    has: async () => (await persistence.projections([sessionId])).has(sessionId),
    list: async (): Promise<Entry[]> => (tree ? catalog.listDescendants(sessionId) : catalog.listChildren(sessionId)),
    close: async () => {
      reader.close();
      await persistence.close();
    },
  };
}
