// The check `demo` and `acp` make of a `--db` file before they start: that it opens (made, or
// upgraded) and that this process may write it.
import Database from 'better-sqlite3';
import { sqlitePersistence } from '../persistence/sqlite.js';
import { describeError, isSubagentError } from '../seam/errors.js';

/** Why `db` cannot hold sessions, or undefined when it can. */
export async function unusableDatabase(db: string): Promise<string | undefined> {
  try {
    await sqlitePersistence(db).close();
  } catch (error) {
    if (isSubagentError(error)) return `${error.code}: ${error.message}`;
    return `cannot use ${db}: ${describeError(error)}`;
  }
  return writeRefusal(db);
}

/**
 * Why this process may not write `db`, or undefined: SQLite opens a file it may only read as
 * read-only without a word, so a write (rolled back) asks.
 */
function writeRefusal(db: string): string | undefined {
  let probe: Database.Database | undefined;
  try {
    probe = new Database(db, { fileMustExist: true });
    const version = Number(probe.pragma('user_version', { simple: true }));
    probe.exec('BEGIN IMMEDIATE');
    try {
      probe.pragma(`user_version = ${version}`);
    } finally {
      probe.exec('ROLLBACK');
    }
    return undefined;
  } catch (error) {
    return `cannot use ${db}: SQLite may not write it (${describeError(error)})`;
  } finally {
    probe?.close();
  }
}
