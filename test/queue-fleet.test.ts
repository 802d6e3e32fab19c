// The queue provider across two `subagent-host worker` processes on one private redis-server:
// placement over both, complete ordered logs, the catalog, cancellation, and clean teardown.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Queue } from 'bullmq';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHost, queueProvider, text, type Agent, type Host, type SessionEvent, type SubagentStartRequest } from 'subagent-host';
import { CLI } from './acp-helpers.js';
import { types } from './helpers.js';
import { startRedis, startWorker, type RedisServer, type WorkerProcess } from './queue-helpers.js';

const GATE_TOOLS = new URL('./fixtures/gate-tools.mjs', import.meta.url).href;
const QUEUE = 'fleet';
// No test here loses a worker, so a lapsed job lock could only mean a worker starved of CPU for that
// long, which BullMQ would fail as stalled (maxStalledCount 0): the lock outlasts any such stall.
// Lost workers and lapsed locks are tested in queue-failures.test.ts.
const LOCK_MS = 30_000;

let redis: RedisServer;
let workers: WorkerProcess[] = [];
const dir = mkdtempSync(join(tmpdir(), 'queue-fleet-'));

beforeAll(async () => {
  redis = await startRedis();
  const args = ['--queue', QUEUE, '--concurrency', '10', '--pool-threads', '2', '--lock-duration-ms', String(LOCK_MS)];
  workers = await Promise.all([startWorker(redis.url, args), startWorker(redis.url, args)]);
}, 30_000);

afterAll(async () => {
  await Promise.all(workers.map((worker) => worker.stop()));
  await redis?.stop();
  rmSync(dir, { recursive: true, force: true });
}, 30_000);

function gated(gate: string, label: string): Partial<SubagentStartRequest> {
  const steps = [{ toolCalls: [{ name: 'gate', input: { path: gate } }] }, { text: `done ${label}` }];
  return { label, agentOptions: { model: { kind: 'scripted', steps }, toolModules: [GATE_TOOLS] } };
}

function attempts(events: readonly SessionEvent[]): { pid: number; threadId: number; attempt: number }[] {
  return events.filter((event) => event.type === 'queue/attempt').map((event) => event.data as { pid: number; threadId: number; attempt: number });
}

/** Resolves once every job of the queue has been taken by a worker. */
async function allTaken(count: number): Promise<void> {
  const client = redis.client();
  const queue = new Queue(QUEUE, { connection: client });
  try {
    for (;;) {
      const counts = await queue.getJobCounts('active', 'wait');
      if (counts['active'] === count && counts['wait'] === 0) return;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  } finally {
    await queue.close();
    client.disconnect();
  }
}

describe('queue provider on two worker processes', () => {
  let host: Host;
  let parent: Agent;

  function start(request: Partial<SubagentStartRequest>) {
    return host.subagents.start('queue', { prompt: [text('work')], parent, signal: new AbortController().signal, ...request });
  }

  it('spreads 20 children over both workers; each log is complete, in order, and names its worker', async () => {
    const before = await redis.clients();
    host = await createHost();
    host.subagents.registerProvider(queueProvider(host, { connection: redis.url, queue: QUEUE, lockDurationMs: LOCK_MS }));
    parent = await host.createAgent();
    const gate = join(dir, 'open-20');
    const runs = await Promise.all(Array.from({ length: 20 }, (_, i) => start(gated(gate, `child ${i}`))));
    await allTaken(20);
    writeFileSync(gate, '');
    const results = await Promise.all(runs.map((run) => run.result));
    expect(results.map((r) => r.stopReason)).toEqual(Array(20).fill('completed'));
    expect(results.map((r) => r.output)).toEqual(runs.map((_, i) => [text(`done child ${i}`)]));

    // The same child run locally: the remote log has the same events, in the same order.
    const local = await host.subagents.start('spawn', { ...gated(gate, 'child 0'), prompt: [text('work')], parent, signal: new AbortController().signal });
    await local.result;
    const localTypes = types(host.sessions.get(local.id)!.events);
    const perWorker = new Map<number, number>();
    for (const run of runs) {
      const events = host.sessions.get(run.id)!.events;
      expect(events.map((e) => e.seq)).toEqual(events.map((_, i) => i));
      expect(types(events)).toEqual(['queue/attempt', ...localTypes]);
      const [placement] = attempts(events);
      expect(placement).toMatchObject({ attempt: 1, threadId: expect.any(Number) as number });
      perWorker.set(placement!.pid, (perWorker.get(placement!.pid) ?? 0) + 1);
    }
    expect([...perWorker.keys()].sort()).toEqual(workers.map((w) => w.pid).sort());
    expect([...perWorker.values()]).toEqual([10, 10]);
    await local.dispose();

    // The catalog lists the remote children like local ones, before and after dispose.
    const listed = await host.subagents.listChildren(parent.id);
    expect(listed.filter((e) => e.kind === 'child' && e.label?.startsWith('child ')).length).toBe(21);
    await Promise.all(runs.map((run) => run.dispose()));
    const after = await host.subagents.listChildren(parent.id);
    expect(after.map((e) => e.id)).toEqual(listed.map((e) => e.id));

    await host.close();
    const keys = await redis.keys();
    expect(keys.filter((key) => key.includes(':sah:') || runs.some((run) => key.includes(run.id)))).toEqual([]);
    expect(await redis.clients()).toBe(before);
  }, 60_000);

  it('cancels a running remote child and a child no worker has taken yet', async () => {
    host = await createHost({ providers: false });
    host.subagents.registerProvider(queueProvider(host, { connection: redis.url, queue: QUEUE, lockDurationMs: LOCK_MS }));
    parent = await host.createAgent();
    const running = await start({ label: 'hang', agentOptions: { model: { kind: 'scripted', steps: [{ finish: 'hang' }] } } });
    // Running means inside its hanging step, its prompt taken: a cancel that lands between the
    // attempt's start and the first step discards the untaken prompt after the aborted turn's end.
    await waitFor(() => attempts(host.sessions.get(running.id)!.events).length === 1 && types(host.sessions.get(running.id)!.events).includes('step/start'));
    running.cancel();
    await expect(running.result).resolves.toMatchObject({ stopReason: 'aborted' });
    expect(types(host.sessions.get(running.id)!.events).at(-1)).toBe('turn/end');
    expect(host.sessions.get(running.id)!.events.at(-1)!.data).toMatchObject({ reason: { kind: 'aborted' } });
    await running.dispose();

    // A queue nobody serves: the job is removed before any worker sees it.
    const idle = queueProvider(host, { connection: redis.url, queue: 'nobody', name: 'idle', lockDurationMs: LOCK_MS });
    host.subagents.registerProvider(idle);
    const waiting = await host.subagents.start('idle', { label: 'never taken', prompt: [text('work')], parent, signal: new AbortController().signal });
    waiting.cancel();
    await expect(waiting.result).resolves.toMatchObject({ stopReason: 'aborted' });
    const listed = await host.subagents.listChildren(parent.id);
    expect(listed.map((e) => e.kind === 'child' && e.label)).toContain('never taken');
    await waiting.dispose();
    await host.close();
    expect((await redis.keys()).filter((key) => key.includes(':sah:') || key.includes(running.id) || key.includes(waiting.id))).toEqual([]);
  }, 30_000);

  it('persists remote children so `subagent-host ls` lists them after the host is gone', async () => {
    const db = join(dir, 'remote.db');
    host = await createHost({ providers: false, persistence: { sqlite: db } });
    host.subagents.registerProvider(queueProvider(host, { connection: redis.url, queue: QUEUE, lockDurationMs: LOCK_MS }));
    parent = await host.createAgent();
    const run = await start({ label: 'remote one', agentOptions: { model: { kind: 'scripted', steps: [{ text: 'stored' }] } } });
    await expect(run.result).resolves.toMatchObject({ stopReason: 'completed' });
    await run.dispose();
    await host.close();
    const ls = spawnSync(process.execPath, [CLI, 'ls', parent.id, '--db', db, '--json'], { encoding: 'utf8', timeout: 15_000 });
    expect(ls.status).toBe(0);
    expect(JSON.parse(ls.stdout)).toEqual([expect.objectContaining({ id: run.id, label: 'remote one', kind: 'child' })]);
  }, 30_000);
});

async function waitFor(condition: () => boolean): Promise<void> {
  while (!condition()) await new Promise((resolve) => setTimeout(resolve, 10));
}
