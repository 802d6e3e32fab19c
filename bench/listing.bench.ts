// Listing from SQLite in a new host: 10,000 cold children of one parent, and a 10,000-node tree;
// beside the children row, its floor: the same rows read bare through a new better-sqlite3
// connection, sampled in the same loop.
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { createHost, sqlitePersistence, type SessionEvent, type SessionHeader } from '../src/index.js';
import { CHILDREN_SELECT } from '../src/persistence/sqlite-catalog.js';
import { rowOf, sampled, removeTempDir, suiteTempDir, type Row, type Suite } from './lib.js';

const CHILDREN = 10_000;

function childEvents(label: string, t: number): SessionEvent[] {
  return [
    { seq: 0, time: t, type: 'turn/start', data: { turn: 1 } },
    { seq: 1, time: t, type: 'subagent/descriptor', data: { version: 2, mode: 'one-shot', provider: 'spawn', label } },
    { seq: 2, time: t + 5, type: 'turn/end', data: { turn: 1, reason: { kind: 'completed' } } },
  ];
}

/** Writes a root with `count` children (flat) or a 10-ary tree of `count` nodes. */
async function seed(path: string, shape: 'flat' | 'tree'): Promise<string> {
  const store = sqlitePersistence(path);
  const t = Date.now();
  const root: SessionHeader = { id: `root-${shape}`, createdAt: t };
  await store.create(root);
  const ids = [root.id];
  // Appends are write-behind: queue them all, then one flush commits them in batches.
  const writes: Promise<void>[] = [];
  for (let i = 0; i < CHILDREN; i++) {
    const parent = shape === 'flat' ? root.id : ids[Math.floor(i / 10)]!;
    const header: SessionHeader = { id: `${shape}-${i}`, createdAt: t + i, parentSession: parent, origin: 'subagent', delegationDepth: 1 };
    ids.push(header.id);
    await store.create(header);
    writes.push(store.append(header.id, childEvents(`child ${i}`, t + i)));
  }
  await store.flush();
  await Promise.all(writes);
  await store.close();
  return root.id;
}

/** Minor page faults of this process so far (first touches of memory; costly on a VM). */
const faults = (): number => process.resourceUsage().minorPageFault;

/**
 * The floor of a cold children listing: a new connection to the same file runs the catalog's own
 * SELECT (the listed values, packed by SQLite) and better-sqlite3 builds its arrays; no record or
 * entry is built. Returns the ms of the read.
 */
function bareChildrenRead(path: string, parentId: string): { ms: number; faults: number } {
  const db = new Database(path, { readonly: true });
  try {
    const select = db.prepare(CHILDREN_SELECT).raw(true);
    const f0 = faults();
    const t0 = performance.now();
    const rows = db.transaction(() => select.all(parentId))();
    const ms = performance.now() - t0;
    if (rows.length !== CHILDREN) throw new Error(`read ${rows.length} of ${CHILDREN}`);
    return { ms, faults: faults() - f0 };
  } finally {
    db.close();
  }
}

const median = (values: number[]): number => [...values].sort((a, b) => a - b)[values.length >> 1] ?? 0;

export const listingSuite: Suite = {
  name: 'listing',
  async run() {
    const dir = suiteTempDir('subagent-listing-');
    const path = join(dir, 'listing.db');
    try {
      const flatRoot = await seed(path, 'flat');
      const treeRoot = await seed(path, 'tree');
      let faulted = 0;
      const cold = (list: (host: Awaited<ReturnType<typeof createHost>>) => Promise<unknown[]>) => async () => {
        const host = await createHost({ persistence: { sqlite: path }, providers: false, pool: { minThreads: 0 } });
        const f0 = faults();
        const t0 = performance.now();
        const rows = await list(host);
        const ms = performance.now() - t0;
        faulted = faults() - f0;
        if (rows.length !== CHILDREN) throw new Error(`listed ${rows.length} of ${CHILDREN}`);
        await host.close();
        return ms;
      };
      // The children row and its floor alternate, each first every other time, so both meet the
      // same states of the process (memory another sample just freed is reused without faults).
      const listChildren = cold((host) => host.subagents.listChildren(flatRoot));
      const ours: number[] = [];
      const bare: number[] = [];
      const oursFaults: number[] = [];
      const bareFaults: number[] = [];
      for (let i = 0; i < 12; i++) {
        const first = i % 2 === 0 ? bareChildrenRead(path, flatRoot) : undefined;
        const ms = await listChildren();
        const read = first ?? bareChildrenRead(path, flatRoot);
        // The first two of each are warm-up.
        if (i < 2) continue;
        bare.push(read.ms);
        bareFaults.push(read.faults);
        ours.push(ms);
        oursFaults.push(faulted);
      }
      const floor = rowOf('listing/floor-sqlite-children-10k', bare);
      floor.note = `the catalog's SELECT on a new connection, arrays only; ${median(bareFaults)} page faults`;
      const children = rowOf('listing/list-children-10k-cold', ours);
      children.note = `${median(oursFaults)} page faults`;
      const rows: Row[] = [floor, children, await sampled('listing/list-descendants-10k', 10, cold((host) => host.subagents.listDescendants(treeRoot)))];
      return rows;
    } finally {
      removeTempDir(dir);
    }
  },
};
