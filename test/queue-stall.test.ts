// The queue provider when a worker stalls: a worker process frozen (SIGSTOP) past its lock duration
// comes back to find its job lock gone. Every worker and redis-server here is a real process.
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { queueProvider, text, type SessionEvent, type SubagentRunEndInfo } from 'subagent-host';
import { QUEUE_PROTOCOL_VERSION, stringify, usageOf } from 'subagent-host/internals';
import { queueSuite, type WorkerProcess } from './queue-helpers.js';

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
  const suite = queueSuite();

  async function worker(queue: string): Promise<WorkerProcess> {
    return suite.worker(['--queue', queue, '--lock-duration-ms', '1000', '--concurrency', '2', '--pool-threads', '2']);
  }

  function gated(queue: string) {
    const gate = join(dir, `${queue}-gate`);
    const running = join(dir, `${queue}-running`);
    const steps = [{ toolCalls: [{ name: 'gate', input: { path: gate, runningMark: running } }] }, { text: 'through the gate' }];
    const run = suite.host.subagents.start('queue', {
      label: 'stalled',
      prompt: [text('work')],
      parent: suite.parent,
      signal: new AbortController().signal,
      agentOptions: { model: { kind: 'scripted', steps }, toolModules: [GATE_TOOLS] },
    });
    return { run, open: () => writeFileSync(gate, ''), running: () => existsSync(running) };
  }

  /** A gated child on queue `queue` (lock 1 s, 2 attempts), running on the worker it returns. */
  async function gatedRunning(queue: string) {
    suite.host.subagents.registerProvider(queueProvider(suite.host, { connection: suite.redis.url, queue, lockDurationMs: 1000, attempts: 2 }));
    const first = await worker(queue);
    const child = gated(queue);
    const run = await child.run;
    await waitFor(child.running);
    return { first, child, run };
  }

  /**
   * A child on queue `queue` that ignores its stop, on a worker whose cancel grace is longer than the
   * test (its thread is kept until the child is released), once it has claimed its gate.
   */
  async function deafChild(queue: string, lockDurationMs: number) {
    suite.host.subagents.registerProvider(queueProvider(suite.host, { connection: suite.redis.url, queue, lockDurationMs }));
    const only = await suite.worker(['--queue', queue, '--lock-duration-ms', String(lockDurationMs), '--cancel-grace-ms', '120000', '--concurrency', '1']);
    const file = (name: string) => join(dir, `${queue}-${name}`);
    const input = { claim: file('claim'), release: file('release'), released: file('released'), path: file('gate'), runningMark: file('running'), abortedMark: file('aborted') };
    const steps = [{ toolCalls: [{ name: 'claim-gate', input }] }, { text: 'released' }];
    const run = await suite.host.subagents.start('queue', { label: queue, prompt: [text('work')], parent: suite.parent, signal: new AbortController().signal, agentOptions: { model: { kind: 'scripted', steps }, toolModules: [GATE_TOOLS] } });
    await waitFor(() => existsSync(input.claim));
    return { only, run, release: () => writeFileSync(input.release, '') };
  }

  /** Freezes `stalled` until Redis has let its job lock on `run` lapse, then wakes it. */
  async function stall(stalled: WorkerProcess, queue: string, run: string): Promise<void> {
    stalled.child.kill('SIGSTOP');
    const client = suite.redis.client();
    try {
      await waitFor(async () => (await client.exists(`bull:${queue}:${run}:lock`)) === 0);
    } finally {
      stalled.child.kill('SIGCONT');
      await client.quit();
    }
  }

  it('a worker that comes back from a stall past its lock stops its child without settling the run: the child restarts while attempts remain', async () => {
    const ends: SubagentRunEndInfo[] = [];
    suite.host.subagents.on('subagent/end', (end) => void ends.push(end));
    const { first: only, child, run } = await gatedRunning('come-back');
    await stall(only, 'come-back', run.id);
    // The stalled attempt is stopped where it ran; the run waits for the queue's verdict, not its end.
    const restarted = waitFor(() => attempts(suite.host.sessions.get(run.id)!.events).length === 2).then(() => 'restarted');
    expect(await Promise.race([restarted, run.result.then((result) => `settled ${result.stopReason}: ${result.diagnostic}`)])).toBe('restarted');
    child.open();
    const result = await run.result;
    expect(result).toMatchObject({ output: [text('through the gate')], stopReason: 'completed' });
    const events = suite.host.sessions.get(run.id)!.events;
    expect(attempts(events)).toEqual([[1, only.pid], [2, only.pid]]);
    const restartAt = events.findIndex((e, i) => i > 0 && e.type === 'queue/attempt');
    expect(events[restartAt - 1]).toMatchObject({ type: 'turn/end' });
    expect(usageOf(events)).toEqual(result.usage);
    expect(ends).toEqual([expect.objectContaining({ id: run.id, stopReason: 'completed', usage: result.usage })]);
    expect(await suite.host.subagents.listChildren(suite.parent.id)).toEqual([expect.objectContaining({ id: run.id, usage: result.usage })]);
    await run.dispose();
  }, 60_000);

  it('a stalled worker that comes back after its child was restarted elsewhere is not heard: the run settles once, with the attempt that completed', async () => {
    const ends: SubagentRunEndInfo[] = [];
    suite.host.subagents.on('subagent/end', (end) => void ends.push(end));
    const { first, child, run } = await gatedRunning('stale');
    first.child.kill('SIGSTOP');
    try {
      const second = await worker('stale');
      await waitFor(() => attempts(suite.host.sessions.get(run.id)!.events).length === 2);
      expect(attempts(suite.host.sessions.get(run.id)!.events)).toEqual([[1, first.pid], [2, second.pid]]);
    } finally {
      first.child.kill('SIGCONT');
    }
    child.open();
    const result = await run.result;
    expect(result).toMatchObject({ output: [text('through the gate')], stopReason: 'completed' });
    expect(ends).toEqual([expect.objectContaining({ id: run.id, stopReason: 'completed', usage: result.usage })]);
    expect(attempts(suite.host.sessions.get(run.id)!.events)).toHaveLength(2);
    await run.dispose();
    // Nothing of the child is left in Redis once it is disposed, whatever the stale worker did.
    expect((await suite.redis.keys()).filter((key) => key.includes(run.id))).toEqual([]);
  }, 60_000);

  it('a child whose job a worker holds when its host restarts it is queued again once that worker lets go of the job, not lost', async () => {
    const { first, child, run } = await gatedRunning('retaken');
    first.child.kill('SIGSTOP');
    try {
      // The queue fails the job, and a worker takes it at once (as one takes a job its stall check put
      // back, to fail it): the host restarts the child while that worker holds the job for a moment.
      const client = suite.redis.client();
      const at = String(Date.now());
      const taken = `redis.call('LREM', KEYS[1], 0, ARGV[1]); redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1]);
        redis.call('HSET', KEYS[3], 'failedReason', 'job stalled more than allowable limit', 'finishedOn', ARGV[2]);
        redis.call('SET', KEYS[4], 'another-worker', 'PX', 1500)`;
      await client.eval(taken, 4, 'bull:retaken:active', 'bull:retaken:failed', `bull:retaken:${run.id}`, `bull:retaken:${run.id}:lock`, run.id, at);
      await client.quit();
      child.open();
      const second = await worker('retaken');
      await expect(run.result).resolves.toMatchObject({ output: [text('through the gate')], stopReason: 'completed' });
      expect(attempts(suite.host.sessions.get(run.id)!.events)).toEqual([[1, first.pid], [2, second.pid]]);
      await run.dispose();
    } finally {
      first.child.kill('SIGCONT');
    }
  }, 60_000);

  it('a run whose end reached its host while its worker still held the job: dispose removes the job once the worker lets go of it', async () => {
    suite.host.subagents.registerProvider(queueProvider(suite.host, { connection: suite.redis.url, queue: 'held', lockDurationMs: 3000 }));
    const only = await suite.worker(['--queue', 'held', '--lock-duration-ms', '3000', '--concurrency', '1']);
    const child = gated('held');
    const run = await child.run;
    await waitFor(child.running);
    // The worker stops between sending its child's end and finishing the job (frozen here, so it
    // holds the job's lock until it lapses): the end is on the host's reply stream as it sends it.
    only.child.kill('SIGSTOP');
    try {
      const client = suite.redis.client();
      const [reply] = await client.keys('bull:held:sah:reply:*');
      const end = { run: run.id, protocol: QUEUE_PROTOCOL_VERSION, kind: 'end', attempt: 1, result: { output: [text('ended')], stopReason: 'completed' } };
      await client.xadd(reply!, '*', 'e', stringify(end));
      await client.quit();
      await expect(run.result).resolves.toMatchObject({ output: [text('ended')], stopReason: 'completed' });
      await run.dispose();
      expect((await suite.redis.keys()).filter((key) => key.includes(run.id))).toEqual([]);
    } finally {
      only.child.kill('SIGCONT');
    }
  }, 60_000);

  it('a run disposed while a live worker goes on holding its job (its child deaf to the stop): dispose ends after the lock duration and a margin, and tells the host’s logger', async () => {
    const { run, release } = await deafChild('kept', 2000);
    // A reply the host cannot read fails the run and tells the worker to stop the child, which does not stop.
    const client = suite.redis.client();
    const [reply] = await client.keys('bull:kept:sah:reply:*');
    await client.xadd(reply!, '*', 'e', stringify({ run: run.id, protocol: QUEUE_PROTOCOL_VERSION, kind: 'bogus', attempt: 1 }));
    await expect(run.result).rejects.toMatchObject({ code: 'CORRUPT_DATA' });
    await run.dispose();
    expect(suite.warnings).toContain(`queue provider queue: child ${run.id} was disposed while a queue worker still held its job; the job leaves the queue when that worker finishes it`);
    expect(await client.exists(`bull:kept:${run.id}:lock`)).toBe(1);
    // Once its child ends, the worker finishes the job, and it leaves the queue.
    release();
    await waitFor(async () => (await suite.redis.keys()).every((key) => !key.includes(run.id)));
    await client.quit();
  }, 60_000);

  it('a child running for several lock durations on a live worker keeps its job lock: it completes in its one attempt', async () => {
    const { first: only, child, run } = await gatedRunning('long');
    const client = suite.redis.client();
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
    expect(attempts(suite.host.sessions.get(run.id)!.events)).toEqual([[1, only.pid]]);
    await run.dispose();
  }, 60_000);

  it('a worker whose child lost its job lock says so once, however long the child takes to stop', async () => {
    const { only, run, release } = await deafChild('deaf', 1000);
    const client = suite.redis.client();
    await client.del(`bull:deaf:${run.id}:lock`);
    await client.quit();
    // The host finds the job without its lock twice and gives up on it; the child is still deaf to its stop.
    await expect(run.result).resolves.toMatchObject({ stopReason: 'error' });
    await waitFor(() => only.stderr.includes(`job ${run.id} lost its lock`));
    // Its host removes the job while the child still runs.
    await run.dispose();
    release();
    // Its attempt ends: the next child runs only once the worker is done with the job (one at a time).
    const next = await suite.host.subagents.start('queue', { label: 'next', prompt: [text('work')], parent: suite.parent, signal: new AbortController().signal });
    await expect(next.result).resolves.toMatchObject({ stopReason: 'completed' });
    // The job whose lock is gone is left as it is: BullMQ is not asked to finish it, which it cannot do.
    expect(only.stderr.split('\n').filter((line) => line.includes(run.id) || line.includes('worker error'))).toEqual([
      expect.stringContaining(`job ${run.id} lost its lock: stopping its child`),
    ]);
    await next.dispose();
  }, 60_000);
});
