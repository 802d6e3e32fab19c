// `ls --follow`: re-prints the listing whenever another process commits to the database, until every
// child is inactive or SIGINT arrives. Activity comes from each child's log (an open turn is running),
// read through a read-only handle, since this process runs none of the children it lists.
import { setTimeout as sleep } from 'node:timers/promises';
import { InspectReader } from '../inspect/reader.js';

/** How often `data_version` is polled: cheap, one pragma on a read-only handle. */
const POLL_MS = 250;

interface Listed {
  kind: string;
  id: string;
  activity?: 'running' | 'inactive';
}

/** `entries` with each child's activity as its log shows it (an open turn is running). */
export function activityFromLog<E extends Listed>(reader: InspectReader, rootId: string, entries: E[]): E[] {
  const running = new Set(reader.tree(rootId).filter((node) => node.activity === 'running').map((node) => node.id));
  return entries.map((entry) => (entry.kind === 'child' ? { ...entry, activity: running.has(entry.id) ? 'running' : 'inactive' } : entry));
}

/** `list()`'s entries with their activity read from the children's logs in `file`. */
export async function listOnce<E extends Listed>(file: string, rootId: string, list: () => Promise<E[]>): Promise<E[]> {
  const reader = new InspectReader(file);
  try {
    return activityFromLog(reader, rootId, await list());
  } finally {
    reader.close();
  }
}

/**
 * Calls `list` and prints its text each time the database changes; resolves once a listing has no
 * running child while the session itself is between turns, or when SIGINT arrives (both are a
 * normal end of watching).
 */
export async function follow<E extends Listed>(
  file: string,
  rootId: string,
  list: () => Promise<E[]>,
  print: (entries: E[]) => string,
): Promise<void> {
  const reader = new InspectReader(file);
  const stop = new AbortController();
  const onSigint = (): void => stop.abort();
  process.once('SIGINT', onSigint);
  try {
    let seen: number | undefined;
    let last = '';
    while (!stop.signal.aborted) {
      const version = reader.version();
      if (version !== seen) {
        seen = version;
        const entries = activityFromLog(reader, rootId, await list());
        const text = print(entries);
        // Only a changed listing is printed again; a blank line separates successive listings.
        if (text !== last) process.stdout.write(`${last === '' ? '' : '\n'}${text}`);
        last = text;
        // Its parent still in a turn may start children yet: only both quiet end the watch, and only
        // on a listing of one state (after a commit between the listing and the log reads, the next
        // poll lists again).
        const quiet = !entries.some((entry) => entry.activity === 'running') && !reader.turnOpen(rootId);
        if (quiet && reader.version() === seen) return;
      }
      await sleep(POLL_MS, undefined, { signal: stop.signal }).catch(() => undefined);
    }
  } finally {
    process.off('SIGINT', onSigint);
    reader.close();
  }
}
