// Continuation: a follow-up to a resident continuable child (a spawn child resident in its worker
// thread, also on a store opened with `synchronous: 'normal'`, and an in-process one), and to an
// evicted one whose log has about 1,000 events (cold resume from SQLite), each timed from the call
// to the epoch's end. Beside them, the floor of an acknowledged follow-up: one durable SQLite commit.
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { createHost, inProcessProvider, spawnProvider, text, type Agent, type Host } from '../src/index.js';
import { rowOf, sampled, removeTempDir, suiteTempDir, type Row, type Suite } from './lib.js';

const LOG_EVENTS = 1000;

async function open(path: string, lingerMs: number, synchronous: 'full' | 'normal' = 'full'): Promise<Host> {
  const host = await createHost({ persistence: { sqlite: path, synchronous }, providers: false, pool: { minThreads: 1 }, continuation: { lingerMs } });
  host.subagents.registerProvider(inProcessProvider(host));
  host.subagents.registerProvider(spawnProvider(host));
  await host.pool.warm();
  return host;
}

/** Resolves at the next `subagent/end` of `childId`. */
function nextEnd(host: Host, childId: string): Promise<void> {
  return new Promise((resolve) => {
    const off = host.subagents.on('subagent/end', (end) => {
      if (end.id !== childId) return;
      off();
      resolve();
    });
  });
}

/**
 * The least a follow-up waits before it is acknowledged: raw better-sqlite3 committing one row the
 * size of an `inbox/accepted` event, in WAL mode with `synchronous` FULL (the store's default), on a
 * file beside the store's.
 */
function durableCommit(path: string): { commit: () => number; close: () => void } {
  const db = new Database(path);
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = FULL');
  db.exec('CREATE TABLE events (session TEXT NOT NULL, seq INTEGER NOT NULL, data TEXT NOT NULL, PRIMARY KEY (session, seq))');
  const insert = db.prepare('INSERT INTO events (session, seq, data) VALUES (?, ?, ?)');
  const data = JSON.stringify({ type: 'inbox/accepted', data: { id: 'm'.repeat(36), content: [{ type: 'text', text: 'again' }], source: { kind: 'user' } } });
  let seq = 0;
  const commit = db.transaction(() => insert.run('worker-child', seq++, data));
  return {
    commit: () => {
      const t0 = performance.now();
      commit();
      return performance.now() - t0;
    },
    close: () => db.close(),
  };
}

/** Milliseconds from `followup` to the end of the epoch it started. */
async function timedFollowup(host: Host, parent: Agent, childId: string): Promise<number> {
  const ended = nextEnd(host, childId);
  const t0 = performance.now();
  await host.subagents.followup(parent, childId, [text('again')]);
  await ended;
  const ms = performance.now() - t0;
  await parent.whenIdle();
  return ms;
}

async function start(host: Host, parent: Agent, provider: string, childId: string): Promise<void> {
  const started = nextEnd(host, childId);
  await host.subagents.startContinuable({ provider, label: 'bench', childId, request: { prompt: [text('hi')], parent } });
  await started;
}

/** The resident spawn row again, on a store that fsyncs at checkpoints only (`synchronous: 'normal'`). */
async function residentOnNormal(path: string): Promise<Row> {
  const host = await open(path, 60_000, 'normal');
  try {
    const parent = await host.createAgent({ sessionId: 'parent' });
    await start(host, parent, 'spawn', 'worker-child');
    const row = await sampled('continuation/followup-resident-sync-normal', 50, () => timedFollowup(host, parent, 'worker-child'), 5);
    row.note = "spawn child resident in its thread, SQLite synchronous: 'normal'";
    return row;
  } finally {
    await host.close();
  }
}

async function evicted(host: Host, childId: string): Promise<void> {
  while (host.sessions.get(childId)) await new Promise((resolve) => setTimeout(resolve, 1));
}

export const continuationSuite: Suite = {
  name: 'continuation',
  async run() {
    const dir = suiteTempDir('subagent-continuation-');
    const path = join(dir, 'continuation.db');
    try {
      const resident = await open(path, 60_000);
      const parent = await resident.createAgent({ sessionId: 'parent' });
      await start(resident, parent, 'spawn', 'worker-child');
      // The floor is sampled right after each follow-up, on the disk as the follow-ups leave it.
      const floor = durableCommit(join(dir, 'floor.db'));
      const commits: number[] = [];
      const followups = await sampled('continuation/followup-resident', 50, async () => {
        const ms = await timedFollowup(resident, parent, 'worker-child');
        commits.push(floor.commit());
        return ms;
      }, 5);
      floor.close();
      const commitFloor = rowOf('continuation/floor-durable-commit', commits.slice(5));
      commitFloor.note = 'raw better-sqlite3: one event-sized row, WAL, synchronous FULL, sampled after each followup-resident sample';
      followups.note = 'spawn child resident in its thread';
      const rows: Row[] = [followups];
      await start(resident, parent, 'in-process', 'child');
      rows.push(await sampled('continuation/followup-resident-in-process', 50, () => timedFollowup(resident, parent, 'child'), 5));
      rows[1]!.note = 'in-process child';
      while (resident.sessions.get('child')!.events.length < LOG_EVENTS) await timedFollowup(resident, parent, 'child');
      await resident.close();
      // Measured with one host at a time: its row goes beside the resident spawn row.
      rows.splice(1, 0, await residentOnNormal(join(dir, 'normal.db')));

      const cold = await open(path, 0);
      const resumed = (await cold.agents.resume({ sessionId: 'parent' })).agent;
      const sample = async () => {
        await evicted(cold, 'child');
        return timedFollowup(cold, resumed, 'child');
      };
      const row = await sampled('continuation/cold-resume-1000', 20, sample, 2);
      row.note = `log ≥ ${LOG_EVENTS} events, SQLite`;
      rows.push(row, commitFloor);
      await cold.close();
      return rows;
    } finally {
      removeTempDir(dir);
    }
  },
};
