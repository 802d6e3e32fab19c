// The queue provider when a worker stalls: a worker process frozen (SIGSTOP) past its lock duration
// comes back to find its job lock gone. Every worker and redis-server here is a real process.
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createHost, queueProvider, text, type Agent, type Host, type SessionEvent, type SubagentRunEndInfo } from 'subagent-host';
import { usageOf } from 'subagent-host/internals';
import { startRedis, startWorker, type RedisServer, type WorkerProcess } from './queue-helpers.js';

const GATE_TOOLS = new URL('./fixtures/gate-tools.mjs', import.meta.url).href;
const dir = mkdtempSync(join(tmpdir(), 'queue-stall-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function attempts(events: readonly SessionEvent[]): [number, number][] {
  return events.filter((event) => event.type === 'queue/attempt').map((event) => [(event.data as { attempt: number }).attempt, (event.data as { pid: number }).pid]);
}

async function waitFor(condition: () => boolean | Promise<boolean>): Promise<void> {
  while (!(await condition())) await new Promise((resolve) => setTimeout(resolve, 10));
}

describe('queue provider when a worker stalls', () => {
  let redis: RedisServer;
  let host: Host;
  let parent: Agent;
  const workers: WorkerProcess[] = [];

  beforeAll(async () => {
    redis = await startRedis();
  });
  afterAll(async () => {
    await redis.stop();
  });
  beforeEach(async () => {
    host = await createHost({ providers: false });
    parent = await host.createAgent();
  });
  afterEach(async () => {
    await host.close();
    await Promise.all(workers.splice(0).map((worker) => worker.stop('SIGKILL')));
  });

  async function worker(queue: string): Promise<WorkerProcess> {
    const started = await startWorker(redis.url, ['--queue', queue, '--lock-duration-ms', '1000', '--concurrency', '2', '--pool-threads', '2']);
    workers.push(started);
    return started;
  }

  function gated(queue: string) {
    const gate = join(dir, `${queue}-gate`);
    const running = join(dir, `${queue}-running`);
    const steps = [{ toolCalls: [{ name: 'gate', input: { path: gate, runningMark: running } }] }, { text: 'through the gate' }];
    const run = host.subagents.start('queue', {
      label: 'stalled',
      prompt: [text('work')],
      parent,
      signal: new AbortController().signal,
      agentOptions: { model: { kind: 'scripted', steps }, toolModules: [GATE_TOOLS] },
    });
    return { run, open: () => writeFileSync(gate, ''), running: () => existsSync(running) };
  }

  /** Freezes `stalled` until Redis has let its job lock on `run` lapse, then wakes it. */
  async function stall(stalled: WorkerProcess, queue: string, run: string): Promise<void> {
    stalled.child.kill('SIGSTOP');
    const client = redis.client();
    try {
      await waitFor(async () => (await client.exists(`bull:${queue}:${run}:lock`)) === 0);
    } finally {
      stalled.child.kill('SIGCONT');
      await client.quit();
    }
  }

  it('a worker that comes back from a stall past its lock stops its child without settling the run: the child restarts while attempts remain', async () => {
    host.subagents.registerProvider(queueProvider(host, { connection: redis.url, queue: 'come-back', lockDurationMs: 1000, attempts: 2 }));
    const only = await worker('come-back');
    const ends: SubagentRunEndInfo[] = [];
    host.subagents.on('subagent/end', (end) => void ends.push(end));
    const child = gated('come-back');
    const run = await child.run;
    await waitFor(child.running);
    await stall(only, 'come-back', run.id);
    // The stalled attempt is stopped where it ran; the run waits for the queue's verdict, not its end.
    const restarted = waitFor(() => attempts(host.sessions.get(run.id)!.events).length === 2).then(() => 'restarted');
    expect(await Promise.race([restarted, run.result.then((result) => `settled ${result.stopReason}: ${result.diagnostic}`)])).toBe('restarted');
    child.open();
    const result = await run.result;
    expect(result).toMatchObject({ output: [text('through the gate')], stopReason: 'completed' });
    const events = host.sessions.get(run.id)!.events;
    expect(attempts(events)).toEqual([[1, only.pid], [2, only.pid]]);
    const restartAt = events.findIndex((e, i) => i > 0 && e.type === 'queue/attempt');
    expect(events[restartAt - 1]).toMatchObject({ type: 'turn/end' });
    expect(usageOf(events)).toEqual(result.usage);
    expect(ends).toEqual([expect.objectContaining({ id: run.id, stopReason: 'completed', usage: result.usage })]);
    expect(await host.subagents.listChildren(parent.id)).toEqual([expect.objectContaining({ id: run.id, usage: result.usage })]);
    await run.dispose();
  }, 60_000);

  it('a stalled worker that comes back after its child was restarted elsewhere is not heard: the run settles once, with the attempt that completed', async () => {
    host.subagents.registerProvider(queueProvider(host, { connection: redis.url, queue: 'stale', lockDurationMs: 1000, attempts: 2 }));
    const first = await worker('stale');
    const ends: SubagentRunEndInfo[] = [];
    host.subagents.on('subagent/end', (end) => void ends.push(end));
    const child = gated('stale');
    const run = await child.run;
    await waitFor(child.running);
    first.child.kill('SIGSTOP');
    try {
      const second = await worker('stale');
      await waitFor(() => attempts(host.sessions.get(run.id)!.events).length === 2);
      expect(attempts(host.sessions.get(run.id)!.events)).toEqual([[1, first.pid], [2, second.pid]]);
    } finally {
      first.child.kill('SIGCONT');
    }
    child.open();
    const result = await run.result;
    expect(result).toMatchObject({ output: [text('through the gate')], stopReason: 'completed' });
    expect(ends).toEqual([expect.objectContaining({ id: run.id, stopReason: 'completed', usage: result.usage })]);
    expect(attempts(host.sessions.get(run.id)!.events)).toHaveLength(2);
    await run.dispose();
    // Nothing of the child is left in Redis once it is disposed, whatever the stale worker did.
    expect((await redis.keys()).filter((key) => key.includes(run.id))).toEqual([]);
  }, 60_000);

  it('a child running for several lock durations on a live worker keeps its job lock: it completes in its one attempt', async () => {
    host.subagents.registerProvider(queueProvider(host, { connection: redis.url, queue: 'long', lockDurationMs: 1000, attempts: 2 }));
    const only = await worker('long');
    const child = gated('long');
    const run = await child.run;
    await waitFor(child.running);
    const client = redis.client();
    const lock = `bull:long:${run.id}:lock`;
    // Renewed again and again (its time to live grows back) while the lock duration passes several times.
    let renewals = 0;
    for (let last = await client.pttl(lock); renewals < 4; ) {
      await new Promise((resolve) => setTimeout(resolve, 20));
      const ttl = await client.pttl(lock);
      if (ttl > last) renewals += 1;
      last = ttl;
    }
    await client.quit();
    child.open();
    await expect(run.result).resolves.toMatchObject({ output: [text('through the gate')], stopReason: 'completed' });
    expect(attempts(host.sessions.get(run.id)!.events)).toEqual([[1, only.pid]]);
    await run.dispose();
  }, 60_000);

  it('a worker whose child lost its job lock says so once, however long the child takes to stop', async () => {
    host.subagents.registerProvider(queueProvider(host, { connection: redis.url, queue: 'deaf', lockDurationMs: 1000 }));
    // The child ignores its stop: a grace longer than the test keeps its thread until it is released.
    const only = await startWorker(redis.url, ['--queue', 'deaf', '--lock-duration-ms', '1000', '--cancel-grace-ms', '120000']);
    workers.push(only);
    const file = (name: string) => join(dir, `deaf-${name}`);
    const input = { claim: file('claim'), release: file('release'), released: file('released'), path: file('gate'), runningMark: file('running'), abortedMark: file('aborted') };
    const steps = [{ toolCalls: [{ name: 'claim-gate', input }] }, { text: 'never' }];
    const run = await host.subagents.start('queue', { label: 'deaf', prompt: [text('work')], parent, signal: new AbortController().signal, agentOptions: { model: { kind: 'scripted', steps }, toolModules: [GATE_TOOLS] } });
    await waitFor(() => existsSync(input.claim));
    const client = redis.client();
    await client.del(`bull:deaf:${run.id}:lock`);
    await client.quit();
    // The host finds the job without its lock twice and gives up on it; the child is still deaf to its stop.
    await expect(run.result).resolves.toMatchObject({ stopReason: 'error' });
    await waitFor(() => only.stderr.includes(`job ${run.id} lost its lock`));
    writeFileSync(input.release, '');
    // Its attempt ends: BullMQ cannot finish the job whose lock is gone, and says so.
    await waitFor(() => only.stderr.includes('moveToFinished'));
    expect(only.stderr.split('\n').filter((line) => line.includes(run.id) && /lock/i.test(line) && !line.includes('moveToFinished'))).toEqual([
      expect.stringContaining(`job ${run.id} lost its lock: stopping its child`),
    ]);
    await run.dispose();
  }, 60_000);
});
