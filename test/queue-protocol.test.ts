// The queue protocol's version across hosts and workers of other versions: a worker refuses a job
// of another version (or one without a version, from an older host) without running it, and a host
// refuses the replies of a worker of another version (or of an older one, which declares none).
// The other side is a raw BullMQ producer or worker on the same queue, as another release would be.
import { Queue, Worker } from 'bullmq';
import { describe, expect, it } from 'vitest';
import { createHost, queueProvider, text, type SubagentStartRequest } from 'subagent-host';
import { QUEUE_PROTOCOL_VERSION, encode, parse, stringify } from 'subagent-host/internals';
import { sharedQueue } from './queue-helpers.js';

const LOCK_MS = 30_000;
const HINT = 'run the same subagent-host version on hosts and workers';

const shared = sharedQueue(['--queue', 'versions', '--lock-duration-ms', String(LOCK_MS)]);

interface Entry {
  run: string;
  protocol?: number;
  kind: string;
  result?: { stopReason: string; diagnostic?: string };
}

describe('queue protocol versions', () => {
  it.each([
    ['a newer host (another version)', { protocol: QUEUE_PROTOCOL_VERSION + 1 }, String(QUEUE_PROTOCOL_VERSION + 1)],
    ['an older host (no version)', {}, '1'],
  ])('a worker refuses a job queued by %s: the child does not run, the host is told why, the worker logs it once', async (_, version, theirs) => {
    const client = shared.redis.client();
    const queue = new Queue('versions', { connection: client, prefix: 'bull' });
    const reply = `bull:versions:sah:reply:test-${theirs}`;
    try {
      const opened = (await client.xadd(reply, '*', 'e', 'open'))!;
      // The task is not looked at: a job of another version may shape it otherwise.
      const task = encode({ prompt: [text('work')], outputSchema: { type: 'object', properties: {} } });
      await queue.add('child', { ...version, task, reply, attempt: 1 }, { jobId: `job-${theirs}`, removeOnComplete: true });
      const read = (await client.xread('BLOCK', 20_000, 'STREAMS', reply, opened)) as [string, [string, string[]][]][] | null;
      const entries = (read?.[0]?.[1] ?? []).map(([, values]) => parse<Entry>(values[1]!));
      // Its only answer is the end: no thread ever took it (no attach).
      expect(entries).toEqual([
        {
          run: `job-${theirs}`,
          protocol: QUEUE_PROTOCOL_VERSION,
          kind: 'end',
          attempt: 1,
          result: { output: [], stopReason: 'error', diagnostic: expect.stringContaining(`a host speaking queue protocol ${theirs}, and this worker speaks ${QUEUE_PROTOCOL_VERSION}; ${HINT}`) as string },
        },
      ]);
      // The job is done with for good (a worker of this version would not take it either).
      while ((await queue.getJobState(`job-${theirs}`)) !== 'unknown') await new Promise((resolve) => setTimeout(resolve, 20));
      const lines = shared.worker.stderr.split('\n').filter((line) => line.includes(`job-${theirs}`));
      expect(lines).toEqual([expect.stringMatching(new RegExp(`: job job-${theirs} refused: it was queued by a host speaking queue protocol ${theirs}, and this worker speaks ${QUEUE_PROTOCOL_VERSION}; ${HINT}$`))]);
    } finally {
      await queue.close();
      await client.quit();
    }
  });

  it.each([
    ['an older worker (no version), which runs it', {}, '1', 'it is stopped there'],
    ['a newer worker, which refuses it', { protocol: QUEUE_PROTOCOL_VERSION + 1 }, String(QUEUE_PROTOCOL_VERSION + 1), 'it did not run'],
  ])('a host refuses the replies of %s: the run rejects UNSUPPORTED_CAPABILITY naming both versions', async (_, version, theirs, fate) => {
    const queueName = `other-worker-${theirs}`;
    const subscriber = shared.redis.client();
    const writer = shared.redis.client();
    const cancels: string[] = [];
    subscriber.on('message', (_channel: string, run: string) => void cancels.push(run));
    await subscriber.subscribe(`bull:${queueName}:sah:cancel`);
    const refuses = 'protocol' in version;
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    // A worker of another release: an older one attaches and runs the child; a newer one ends it at once.
    const other = new Worker<{ reply: string; attempt: number }>(
      queueName,
      async (job) => {
        const send = (entry: object) => writer.xadd(job.data.reply, 'NOMKSTREAM', '*', 'e', stringify({ run: job.id, ...version, ...entry }));
        if (refuses) return void (await send({ kind: 'end', attempt: job.data.attempt, result: { output: [], stopReason: 'error', diagnostic: 'refused' } }));
        await send({ kind: 'attach', placement: { hostname: 'older', pid: 1, threadId: 1, attempt: 1 } });
        await held;
      },
      { connection: { host: '127.0.0.1', port: shared.redis.port }, prefix: 'bull', lockDuration: LOCK_MS },
    );
    const host = await createHost({ providers: false });
    try {
      host.subagents.registerProvider(queueProvider(host, { connection: shared.redis.url, queue: queueName, lockDurationMs: LOCK_MS, attempts: 2 }));
      const parent = await host.createAgent();
      const request: SubagentStartRequest = { label: 'versioned', prompt: [text('work')], parent, signal: new AbortController().signal };
      const run = await host.subagents.start('queue', request);
      const message = `child ${run.id} was taken by a queue worker speaking queue protocol ${theirs}, and this host speaks ${QUEUE_PROTOCOL_VERSION}, so ${fate}; ${HINT}`;
      await expect(run.result).rejects.toMatchObject({ name: 'SubagentError', code: 'UNSUPPORTED_CAPABILITY', message });
      // The log records the delegation and how it ended.
      const events = host.sessions.get(run.id)!.events;
      expect(events.at(-1)).toMatchObject({ type: 'turn/end', data: { reason: { kind: 'error', error: { code: 'UNSUPPORTED_CAPABILITY', message } } } });
      // A worker that runs the child is told to stop it.
      if (!refuses) while (!cancels.includes(run.id)) await new Promise((resolve) => setTimeout(resolve, 10));
      release();
      await run.dispose();
    } finally {
      release();
      await host.close();
      await other.close();
      await Promise.all([subscriber.quit(), writer.quit()]);
    }
  });
});
