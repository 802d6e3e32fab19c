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

describe('queue jobs whose task no host of this version writes', () => {
  const tool = { name: 'lookup', description: 'looks up', parameters: { type: 'object' } };
  const header = (over: Record<string, unknown>) => ({ header: { id: 'unused', createdAt: Date.now(), origin: 'subagent', delegationDepth: 1, ...over } });
  const descriptor = (budget: Record<string, unknown>) => ({ descriptor: { version: 2, mode: 'one-shot', provider: 'queue', budget } });
  it.each([
    ['no prompt', { prompt: undefined }, 'task.prompt'],
    ['a prompt that is text', { prompt: 'work' }, 'task.prompt'],
    ['a prompt block of no known type', { prompt: [{ type: 'scroll', text: 'work' }] }, 'task.prompt[0]'],
    ['agent options that are text', { agentOptions: 'fast' }, 'task.agentOptions'],
    ['a host tool that is null', { hostTools: [null] }, 'task.hostTools[0]'],
    ['a host tool without a description', { hostTools: [{ name: 'lookup', parameters: { type: 'object' } }] }, 'task.hostTools[0].description'],
    ['a host tool whose parameters are text', { hostTools: [{ ...tool, parameters: 'any' }] }, 'task.hostTools[0].parameters'],
    ['a host tool with a field no host writes', { hostTools: [{ ...tool, run: 'rm -rf /' }] }, 'task.hostTools[0]: has unknown field(s) run'],
    ['a delegation depth that is text', header({ delegationDepth: 'x' }), 'task.header.delegationDepth'],
    ['a negative delegation depth', header({ delegationDepth: -1 }), 'task.header.delegationDepth'],
    ['a fractional delegation depth', header({ delegationDepth: 1.5 }), 'task.header.delegationDepth'],
    ['a header field no host writes', header({ owner: 'root' }), 'task.header: has unknown field(s) owner'],
    ['a budget field no host writes', descriptor({ tokens: 100, coins: 5 }), 'task.descriptor.budget: has unknown field(s) coins'],
    ['a budget limit that is text', descriptor({ tokens: 'many' }), 'task.descriptor.budget.tokens'],
  ])('a task with %s ends CORRUPT_DATA naming the field: one error end, and the worker goes on', async (what, over, field) => {
    const id = `shape-${what.replaceAll(' ', '-')}`;
    const laid = 'header' in over ? { header: { ...over.header, id } } : over;
    const entries = await answers(id, { protocol: QUEUE_PROTOCOL_VERSION, task: task(id, laid), reply: REPLY, attempt: 1 });
    const ends = entries.filter((entry) => entry.kind === 'end');
    expect(ends).toEqual([
      expect.objectContaining({ attempt: 1, result: { output: [], stopReason: 'error', diagnostic: expect.stringMatching(/^CORRUPT_DATA: the task handed to this child /) as string } }),
    ]);
    expect(ends[0]!.result!.diagnostic).toContain(field);
    const next = await answers(`${id}-next`, { protocol: QUEUE_PROTOCOL_VERSION, task: task(`${id}-next`), reply: REPLY, attempt: 1 });
    expect(next.at(-1)).toMatchObject({ kind: 'end', result: { stopReason: 'completed', output: [text('echo: work')] } });
  });

  it('a task with a well-formed host tool, a budget and every header field a host writes runs', async () => {
    const id = 'shape-full';
    const full = {
      header: { id, createdAt: Date.now(), cwd: '/tmp', parentSession: 'parent', origin: 'subagent', delegationDepth: 2 },
      descriptor: { version: 2, mode: 'one-shot', provider: 'queue', label: 'full', budget: { tokens: 1000, turns: 3, wallMs: 60_000, toolCalls: 5, scope: 'child' } },
      hostTools: [{ ...tool, concurrencySafe: true }],
    };
    const entries = await answers(id, { protocol: QUEUE_PROTOCOL_VERSION, task: task(id, full), reply: REPLY, attempt: 1 });
    expect(entries.at(-1)).toMatchObject({ kind: 'end', result: { stopReason: 'completed', output: [text('echo: work')] } });
  });
});
