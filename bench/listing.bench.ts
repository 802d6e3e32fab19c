// Listing from SQLite in a new host: 10,000 cold children of one parent, and a 10,000-node tree.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createHost, sqlitePersistence, type SessionEvent, type SessionHeader } from '../src/index.js';
import { sampled, type Row, type Suite } from './lib.js';

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

export const listingSuite: Suite = {
  name: 'listing',
  async run() {
    const dir = mkdtempSync(join(tmpdir(), 'subagent-listing-'));
    const path = join(dir, 'listing.db');
    try {
      const flatRoot = await seed(path, 'flat');
      const treeRoot = await seed(path, 'tree');
      const cold = (list: (host: Awaited<ReturnType<typeof createHost>>) => Promise<unknown[]>) => async () => {
        const host = await createHost({ persistence: { sqlite: path }, providers: false, pool: { minThreads: 0 } });
        const t0 = performance.now();
        const rows = await list(host);
        const ms = performance.now() - t0;
        if (rows.length !== CHILDREN) throw new Error(`listed ${rows.length} of ${CHILDREN}`);
        await host.close();
        return ms;
      };
      const rows: Row[] = [
        await sampled('listing/list-children-10k-cold', 10, cold((host) => host.subagents.listChildren(flatRoot))),
        await sampled('listing/list-descendants-10k', 10, cold((host) => host.subagents.listDescendants(treeRoot))),
      ];
      return rows;
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  },
};
