// `ls --follow`: re-prints the listing whenever another process commits to the database, until every
// descendant is inactive or SIGINT/SIGTERM/SIGHUP arrives. Activity comes from each child's log (an
// open turn is running), read through a read-only handle, since this process runs none of the
// children it lists.
// The path is followed, not the file first opened: an empty file (a host creating it), a session not
// stored yet, or a file deleted, replaced or emptied while watched is waited for.
import fs from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import type { InspectReader } from '../inspect/reader.js';

/** How often `data_version` is polled: cheap, one pragma on a read-only handle. */
const POLL_MS = 250;

interface Listed {
  kind: string;
  id: string;
  activity?: 'running' | 'inactive';
}

/** One open database file: its log reader and its listing of a session. */
export interface Listing<E extends Listed> {
  readonly reader: InspectReader;
  /** Whether the session is stored. */
  has(): Promise<boolean>;
  /** The session's entries, as the catalog lists them. */
  list(): Promise<E[]>;
  close(): Promise<void>;
}

/** The descendants of `rootId` whose log shows them running (an open turn, or none ended yet). */
function runningBelow(reader: InspectReader, rootId: string): Set<string> {
  return new Set(reader.tree(rootId).filter((node) => node.activity === 'running').map((node) => node.id));
}

/** `entries` with each child's activity as its log shows it (an open turn is running). */
export function activityFromLog<E extends Listed>(reader: InspectReader, rootId: string, entries: E[], running = runningBelow(reader, rootId)): E[] {
  return entries.map((entry) => (entry.kind === 'child' ? { ...entry, activity: running.has(entry.id) ? 'running' : 'inactive' } : entry));
}

/**
 * The file at `path` as one file (inode numbers are reused at once, birth times are not), marked
 * while it is empty; undefined when it is missing.
 */
function fileState(path: string): string | undefined {
  const stat = fs.statSync(path, { throwIfNoEntry: false });
  return stat === undefined ? undefined : `${stat.dev}:${stat.ino}:${stat.birthtimeMs}:${stat.size === 0 ? 'empty' : 'written'}`;
}

/**
 * Prints `print(entries)` each time the database at `file` changes; resolves once no descendant of
 * the session runs while the session itself is between turns, or when SIGINT, SIGTERM or SIGHUP
 * arrives (each a normal end of watching). While the file is missing or empty or does not hold the session,
 * or is a file put in its place that cannot be read yet, `waiting` goes to stderr once and the watch goes on.
 * @throws SubagentError what `open` throws for a file, found at the start, that is not a readable database of ours.
 */
export async function follow<E extends Listed>(options: {
  file: string;
  rootId: string;
  open: () => Promise<Listing<E>>;
  print: (entries: E[]) => string;
  waiting: string;
}): Promise<void> {
  const { file, rootId, open, print } = options;
  const stop = new AbortController();
  const onSignal = (): void => stop.abort();
  // SIGHUP (its terminal closed) too: killed by it, the open store would leave its -wal/-shm files behind.
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  process.once('SIGHUP', onSignal);
  let source: Listing<E> | undefined;
  try {
    let state: string | undefined;
    let seen: number | undefined;
    let last: string | undefined;
    let printed = false;
    let waiting = false;
    /** The file as found at the start: one that cannot be read is an error; one that came later may still be being copied in. */
    let first = true;
    const wait = (): void => {
      if (!waiting) process.stderr.write(options.waiting);
      waiting = true;
      // The listing after the wait is printed, even when it reads as the last one did.
      last = undefined;
    };
    while (!stop.signal.aborted) {
      const now = fileState(file);
      if (now !== state) {
        // Another file, or the same one emptied or written: read afresh.
        await source?.close();
        source = undefined;
        seen = undefined;
        state = now;
        if (now?.endsWith(':written') === true) {
          try {
            source = await open();
          } catch (error) {
            if (first) throw error;
            // Read again at the next poll (a copy in place, cp or scp, writes its pages in turn).
            state = undefined;
          }
        }
      }
      first = false;
      try {
        const version = source?.reader.version();
        if (source === undefined) wait();
        else if (version !== seen) {
          seen = version;
          if (!(await source.has())) wait();
          else {
            waiting = false;
            const listed = await source.list();
            const running = runningBelow(source.reader, rootId);
            const entries = activityFromLog(source.reader, rootId, listed, running);
            const text = print(entries);
            // Only a changed listing is printed again; a blank line separates successive listings.
            if (text !== last) process.stdout.write(`${printed ? '\n' : ''}${text}`);
            printed = true;
            last = text;
            // Its parent still in a turn may start children yet, and a child whose own children still
            // run is told when they settle and may run again (also when only its children are
            // listed): only the whole tree quiet ends the watch, and only on a listing of one state
            // (after a commit between the listing and the log reads, the next poll lists again).
            const quiet = running.size === 0 && !source.reader.turnOpen(rootId);
            if (quiet && source.reader.version() === seen) return;
          }
        }
      } catch (error) {
        // A file emptied or replaced under the handle fails its reads: the next poll opens the new one.
        if (fileState(file) === state) throw error;
      }
      await sleep(POLL_MS, undefined, { signal: stop.signal }).catch(() => undefined);
    }
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    process.off('SIGHUP', onSignal);
    await source?.close();
  }
}
