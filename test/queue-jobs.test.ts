// Jobs of this protocol version that no host of it queues, as another client with access to Redis
// could add them: the worker answers each with a typed end (or, with no reply stream to answer on,
// a log line), writes nothing anywhere else, and goes on serving the queue.
import { Queue } from 'bullmq';
import { describe, expect, it } from 'vitest';
import { text } from 'subagent-host';
import { QUEUE_PROTOCOL_VERSION, encode, parse } from 'subagent-host/internals';
import { sharedQueue } from './queue-helpers.js';

const QUEUE = 'jobs';
const REPLY = `bull:${QUEUE}:sah:reply:test-jobs`;
const HINT = 'is something other than a subagent-host host of this version adding jobs to its queue?';

const shared = sharedQueue(['--queue', QUEUE, '--lock-duration-ms', '30000']);

interface Entry {
  run: string;
  kind: string;
  attempt?: unknown;
  result?: { stopReason: string; diagnostic?: string };
}

/** A task as a host of this version encodes it, with `over` laid on top (a field set to undefined is left out). */
function task(id: string, over: Record<string, unknown> = {}) {
  const data: Record<string, unknown> = {
    header: { id, createdAt: Date.now(), origin: 'subagent', delegationDepth: 1 },
    seed: [],
    prompt: [text('work')],
    agentOptions: { model: { kind: 'scripted' } },
    descriptor: { version: 2, mode: 'one-shot', provider: 'queue' },
    hostTools: [],
    ...over,
  };
  for (const key of Object.keys(data)) if (data[key] === undefined) delete data[key];
  return encode(data);
}

/** Queues `data` as job `id` and resolves with the entries the reply stream gets until its end. */
async function answers(id: string, data: Record<string, unknown>): Promise<Entry[]> {
  const client = shared.redis.client();
  const queue = new Queue(QUEUE, { connection: client, prefix: 'bull' });
  try {
    let last = (await client.xadd(REPLY, '*', 'e', 'open'))!;
    await queue.add('child', data, { jobId: id, removeOnComplete: true });
    const entries: Entry[] = [];
    while (entries.at(-1)?.kind !== 'end') {
      const read = (await client.xread('BLOCK', 15_000, 'STREAMS', REPLY, last)) as [string, [string, string[]][]][] | null;
      if (read === null) throw new Error(`no end for job ${id}: ${JSON.stringify(entries)}`);
      for (const [at, values] of read[0]![1]) {
        last = at;
        entries.push(parse<Entry>(values[1]!));
      }
    }
    return entries;
  } finally {
    await queue.close();
    await client.quit();
  }
}

const linesOf = (id: string) => shared.worker.stderr.split('\n').filter((line) => line.includes(`job ${id} `));

describe('queue jobs no host of this version queues', () => {
  it.each([
    ['a text', 'x', '"x"'],
    ['zero', 0, '0'],
  ])('a job whose attempt is %s is refused: one end of attempt 1 says why, no child runs, one log line', async (_, attempt, shown) => {
    const id = `attempt-${String(attempt)}`;
    const entries = await answers(id, { protocol: QUEUE_PROTOCOL_VERSION, task: task(id), reply: REPLY, attempt });
    const why = `its attempt is ${shown}, not an attempt number; ${HINT}`;
    expect(entries).toEqual([
      { run: id, protocol: QUEUE_PROTOCOL_VERSION, kind: 'end', attempt: 1, result: { output: [], stopReason: 'error', diagnostic: expect.stringContaining(why) as string } },
    ]);
    expect(linesOf(id)).toEqual([expect.stringContaining(`job ${id} refused: ${why}`)]);
  });

  it('a job whose reply names a key that is no reply stream of its queue is refused: nothing is written to that key', async () => {
    const client = shared.redis.client();
    const queue = new Queue(QUEUE, { connection: client, prefix: 'bull' });
    // BullMQ's own event stream exists, and its readers would take the child's entries for events.
    const events = `bull:${QUEUE}:events`;
    try {
      await queue.add('child', { protocol: QUEUE_PROTOCOL_VERSION, task: task('elsewhere'), reply: events, attempt: 1 }, { jobId: 'elsewhere' });
      while ((await queue.getJobState('elsewhere')) !== 'completed') await new Promise((resolve) => setTimeout(resolve, 20));
      const written = (await client.xrange(events, '-', '+')).filter(([, values]) => values[0] === 'e');
      expect(written).toEqual([]);
      expect(linesOf('elsewhere')).toEqual([
        expect.stringContaining(`job elsewhere refused: its reply is "${events}", not the name of a reply stream of queue ${QUEUE}; ${HINT}`),
      ]);
    } finally {
      await queue.close();
      await client.quit();
    }
  });

  it.each([
    ['header', { header: undefined }, 'has no session header (an id and a creation time)'],
    ['descriptor', { descriptor: undefined }, 'has no descriptor'],
    ['host tools', { hostTools: undefined }, 'has no list of host tools'],
  ])('a task without its %s ends CORRUPT_DATA naming what is missing, and the worker goes on', async (_, over, problem) => {
    const id = `no-${Object.keys(over)[0]!}`;
    const entries = await answers(id, { protocol: QUEUE_PROTOCOL_VERSION, task: task(id, over), reply: REPLY, attempt: 1 });
    expect(entries.at(-1)).toMatchObject({
      kind: 'end',
      attempt: 1,
      result: { stopReason: 'error', diagnostic: `CORRUPT_DATA: the task handed to this child ${problem}; it was not written by a host of this version` },
    });
    // The worker still runs a well-formed job.
    const next = await answers(`${id}-next`, { protocol: QUEUE_PROTOCOL_VERSION, task: task(`${id}-next`), reply: REPLY, attempt: 1 });
    expect(next.at(-1)).toMatchObject({ kind: 'end', result: { stopReason: 'completed', output: [text('echo: work')] } });
  });
});
