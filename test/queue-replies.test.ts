// What a host does with whatever lands on its reply stream (whoever can write to Redis can write
// there): an entry that is no worker's reply never ends the host's process nor stops its reading,
// and is warned about; an entry for a run this host does not know is dropped; a malformed entry
// for a running child fails that run `CORRUPT_DATA`, says why in its log and to the host's logger,
// and tells its worker to stop the child. Each case runs in its own plain Node process (where an
// unhandled rejection would end it: every case checks that its host process exited 0 with nothing on
// stderr), against a real redis-server and a real worker; the entries are raw XADDs.
import { constants } from 'node:buffer';
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { QUEUE_PROTOCOL_VERSION, stringify } from 'subagent-host/internals';
import { startRedis, startWorker, type RedisServer, type WorkerProcess } from './queue-helpers.js';

const FIXTURE = fileURLToPath(new URL('./fixtures/queue-reply-hostile.mjs', import.meta.url));
const PACKAGE = new URL('../dist/src/index.js', import.meta.url).href;
const INTERNALS = new URL('../dist/src/internals.js', import.meta.url).href;
const QUEUE = 'hostile';
const STREAM_HINT = 'is something other than a subagent-host worker writing to it?';
const RUN_HINT = 'is something other than a subagent-host worker of this version writing to its Redis?';
// One more byte than the longest string V8 makes (0x1fffffe8 characters), and the most Redis takes in one argument.
const GIANT = 512 * 1024 * 1024;

type Entry = { fields: string[] } | { giant: number } | { value: unknown; huge?: number };
interface Case {
  name: string;
  known: boolean;
  entries: Entry[];
}
type Outcome = { resolved: { stopReason: string; diagnostic?: string } } | { rejected: { code: string; message: string } } | 'timeout';
interface Report {
  name: string;
  held?: Outcome;
  lastEvent?: { type: string; data: unknown };
  cancelled?: boolean;
  next: Outcome;
  warnings: string[];
}

const reply = (value: Record<string, unknown>): Entry => ({ value: { run: '$RUN', protocol: QUEUE_PROTOCOL_VERSION, ...value } });
const end = (result: unknown): Entry => reply({ kind: 'end', attempt: 1, result });
const events = (...list: unknown[]): Entry => reply({ kind: 'events', attempt: 1, events: list });
const completed = { output: [{ type: 'text', text: 'done' }], stopReason: 'completed' };

// Entries that are no reply of any run: warned about (`warning`), or silently dropped (undefined).
const stray: [string, Entry[], string | undefined][] = [
  ['text that is not codec text', [{ fields: ['e', 'not json {'] }], 'is not codec text (10 bytes: SubagentError: Encoded data is malformed'],
  ['codec text of null', [{ value: null }], 'decodes to null, not a reply entry'],
  ['codec text of a number', [{ value: 42 }], 'decodes to a value of type number, not a reply entry'],
  ['codec text of an array', [{ value: [{ run: '$RUN' }] }], 'decodes to an array, not a reply entry'],
  ['an object without a run id', [{ value: { protocol: QUEUE_PROTOCOL_VERSION, kind: 'end', attempt: 1, result: completed } }], 'decodes to an object without a run id, not a reply entry'],
  ['an object whose run id is not text', [{ value: { run: 7, protocol: QUEUE_PROTOCOL_VERSION, kind: 'end', attempt: 1, result: completed } }], 'decodes to an object without a run id, not a reply entry'],
  ['an entry without the field e', [{ fields: ['x', stringify({ run: 'nobody', protocol: QUEUE_PROTOCOL_VERSION, kind: 'end', attempt: 1, result: completed })] }], 'has no field e'],
  ['a reply for a run this host does not know', [{ value: { run: 'nobody', protocol: QUEUE_PROTOCOL_VERSION, kind: 'end', attempt: 1, result: completed } }], undefined],
  ['a malformed reply for a run this host does not know', [{ value: { run: 'nobody', protocol: QUEUE_PROTOCOL_VERSION, kind: 'bogus' } }], undefined],
  ['a 64 MB reply for a run this host does not know', [{ value: { run: 'nobody', protocol: QUEUE_PROTOCOL_VERSION, kind: 'end', attempt: 1, result: completed }, huge: 64 * 1024 * 1024 }], undefined],
  ['an entry too long to be a string (512 MiB)', [{ giant: GIANT }], `is not codec text (${GIANT} bytes: `],
];

// Malformed replies for the host's running child, and what its run is told.
const malformed: [string, Entry[], string][] = [
  ['an unknown kind', [reply({ kind: 'bogus', attempt: 1 })], 'its kind is "bogus", not attach, events or end'],
  ['an attach without its placement', [reply({ kind: 'attach' })], 'its placement is a value of type undefined, not an object'],
  ['an attach whose hostname is not text', [reply({ kind: 'attach', placement: { hostname: 5, pid: 1, threadId: 1, attempt: 1 } })], 'placement.hostname is 5, not text'],
  ['an attach whose placement has no pid', [reply({ kind: 'attach', placement: { hostname: 'h', threadId: 1, attempt: 1 } })], 'placement.pid is a value of type undefined, not a count'],
  ['an attach whose attempt is not a number', [reply({ kind: 'attach', placement: { hostname: 'h', pid: 1, threadId: 1, attempt: 'one' } })], 'placement.attempt is "one", not an attempt number'],
  ['events that are not an array', [reply({ kind: 'events', attempt: 1, events: 'many' })], 'its events are a value of type string, not an array'],
  ['an event that is null', [events(null)], 'events[0] is null, not a session event'],
  ['an event without a type', [events({ seq: '$SEQ', time: 1, data: {} })], 'events[0].type is a value of type undefined, not an event type'],
  ['an event whose seq is text', [events({ seq: '5', time: 1, type: 'note', data: {} })], 'events[0].seq is "5", not a count'],
  ['an event whose time is not a number', [events({ seq: '$SEQ', time: 'now', type: 'note', data: {} })], 'events[0].time is "now", not a time'],
  ['a turn/start without data', [events({ seq: '$SEQ', time: 1, type: 'turn/start', data: null })], "its events could not be read (TypeError: Cannot read properties of null (reading 'turn'))"],
  ['an end without a result', [reply({ kind: 'end', attempt: 1 })], 'its result is a value of type undefined, not a SubagentResult'],
  ['an end whose result is null', [end(null)], 'its result is null, not a SubagentResult'],
  ['a result with an unknown stop reason', [end({ output: [], stopReason: 'bogus' })], 'result.stopReason is "bogus", not one of completed, aborted, error, max-tokens, refusal'],
  ['a result whose output is not an array', [end({ output: 'done', stopReason: 'completed' })], 'result.output is a value of type string, not an array of content blocks'],
  ['a result whose output holds null', [end({ output: [null], stopReason: 'completed' })], 'result.output[0] is not a content block'],
  ['a result whose diagnostic is not text', [end({ output: [], stopReason: 'error', diagnostic: 7 })], 'result.diagnostic is a value of type number, not text'],
  ['an end whose attempt is text', [reply({ kind: 'end', attempt: '1', result: completed })], 'its attempt is "1", not an attempt number'],
  ['an end whose attempt is a BigInt', [{ fields: ['e', stringify({ run: '$RUN', protocol: QUEUE_PROTOCOL_VERSION, kind: 'end', attempt: 1n, result: completed })] }], 'its attempt is a value of type bigint, not an attempt number'],
  ['a kind of 100 characters', [reply({ kind: 'k'.repeat(100), attempt: 1 })], `its kind is "${'k'.repeat(79)}…, not attach, events or end`],
];

const cases: Case[] = [
  ...stray.map(([name, entries]) => ({ name, known: false, entries })),
  ...malformed.map(([name, entries]) => ({ name, known: true, entries })),
  // Well-formed envelopes whose data the host cannot read when the run settles.
  { name: 'an assistant message without data, then an end', known: true, entries: [events({ seq: '$SEQ', time: 1, type: 'assistant/message', data: null }), end({ output: [], stopReason: 'error' })] },
  // A reply without field e is not read as one (the first field's value was): the run ends with the next entry.
  { name: 'a reply for the run without the field e, then its end', known: true, entries: [{ fields: ['x', stringify({ run: '$RUN', protocol: QUEUE_PROTOCOL_VERSION, kind: 'end', attempt: 1, result: { output: [], stopReason: 'error', diagnostic: 'not read' } })] }, end(completed)] },
  { name: 'events with a gap in their seqs', known: true, entries: [events({ seq: 99, time: 1, type: 'note', data: {} })] },
  { name: 'a hundred entries that are not codec text', known: false, entries: Array.from({ length: 100 }, (_, index) => ({ fields: ['e', `stray ${index + 1}`] })) },
];

let redis: RedisServer;
let worker: WorkerProcess;
const runs = new Map<string, { code: number | null; stderr: string; report: Report | undefined }>();

/** Runs `list` in one host process: its exit code and stderr, and the reports of the cases it finished. */
function run(list: Case[]): Promise<{ code: number | null; stderr: string; reports: Report[] }> {
  return new Promise((resolve) => {
    // The giant entry takes up to ~1.5 GB while it is written and read (the server's copy, the host's read).
    execFile(process.execPath, [FIXTURE, PACKAGE, INTERNALS, redis.url, QUEUE, JSON.stringify(list)], { encoding: 'utf8', timeout: 150_000, maxBuffer: 16 * 1024 * 1024 }, (error, stdout, stderr) => {
      const code = error === null ? 0 : ((error as { code?: number }).code ?? null);
      resolve({ code, stderr, reports: stdout.split('\n').filter(Boolean).map((line) => JSON.parse(line) as Report) });
    });
  });
}

beforeAll(async () => {
  redis = await startRedis();
  worker = await startWorker(redis.url, ['--queue', QUEUE, '--concurrency', '8', '--lock-duration-ms', '30000']);
  // The cases run one after another in one host process; one that ends it is charged with how it
  // ended, and the cases after it run in a new process, so each reports on its own.
  for (let rest = cases; rest.length > 0; ) {
    const { code, stderr, reports } = await run(rest);
    const ended = rest[reports.length];
    for (const report of reports) runs.set(report.name, { code: ended ? 0 : code, stderr: ended ? '' : stderr, report });
    if (!ended) break;
    runs.set(ended.name, { code, stderr, report: undefined });
    rest = rest.slice(reports.length + 1);
  }
}, 240_000);

afterAll(async () => {
  await worker?.stop();
  await redis?.stop();
}, 30_000);

/** The report of case `name`, once its host process ended on its own (exit 0) with nothing on stderr. */
function reportOf(name: string): Report {
  const { code, stderr, report } = runs.get(name)!;
  expect({ code, stderr }).toStrictEqual({ code: 0, stderr: '' });
  return report!;
}

const afterwards = { resolved: { stopReason: 'completed' } };

describe('a queue host reading its reply stream', () => {
  it('is given an entry longer than the longest string this Node makes, and the most Redis takes in one argument', () => {
    expect(GIANT).toBeGreaterThan(constants.MAX_STRING_LENGTH);
  });

  it.each(stray)('drops %s and reads on: a later child completes', (name, _entries, warning) => {
    const report = reportOf(name);
    expect(report.next).toStrictEqual(afterwards);
    if (warning === undefined) return void expect(report.warnings).toStrictEqual([]);
    expect(report.warnings).toStrictEqual([expect.stringContaining(warning)]);
    expect(report.warnings[0]).toMatch(new RegExp(`^queue provider queue: its reply stream bull:${QUEUE}:sah:reply:[0-9a-f-]{36} holds an entry that is not a queue worker's reply, ignored: entry \\d+-\\d+ `));
    expect(report.warnings[0]!.endsWith(`; ${STREAM_HINT}`)).toBe(true);
  });

  it.each(malformed)('fails the running child on %s: CORRUPT_DATA naming the problem, in its log and to the logger; its worker is told to stop it', (name, _entries, problem) => {
    const report = reportOf(name);
    const message = expect.stringMatching(new RegExp(`^child [0-9a-f-]{36} failed: a reply to it on the queue's reply stream is malformed \\(`)) as string;
    expect(report.held).toStrictEqual({ rejected: { code: 'CORRUPT_DATA', message } });
    const { rejected } = report.held as { rejected: { message: string } };
    expect(rejected.message).toContain(`(${problem}), so the child was stopped; ${RUN_HINT}`);
    expect(report.lastEvent).toMatchObject({ type: 'turn/end', data: { reason: { kind: 'error', error: { code: 'CORRUPT_DATA', message: rejected.message } } } });
    expect(report.warnings).toStrictEqual([`queue provider queue: ${rejected.message}`]);
    expect(report.cancelled).toBe(true);
    expect(report.next).toStrictEqual(afterwards);
  });

  it('fails the running child CORRUPT_DATA when its logged events cannot be read as it settles, and tells its worker to stop it', () => {
    const report = reportOf('an assistant message without data, then an end');
    const { rejected } = report.held as { rejected: { code: string; message: string } };
    expect(rejected.code).toBe('CORRUPT_DATA');
    expect(rejected.message).toMatch(new RegExp(`^child [0-9a-f-]{36} failed: its log from the queue's reply stream could not be read as it settled \\(TypeError: .*\\), so the child was stopped; ${RUN_HINT.replace(/[?]/g, '\\?')}$`));
    expect(report.lastEvent).toMatchObject({ type: 'turn/end', data: { reason: { kind: 'error', error: { code: 'CORRUPT_DATA' } } } });
    expect(report.warnings).toContain(`queue provider queue: ${rejected.message}`);
    expect(report.cancelled).toBe(true);
    expect(report.next).toStrictEqual(afterwards);
  });

  it('reads a reply only from its field e: another field is warned about, not taken for the run’s end', () => {
    const report = reportOf('a reply for the run without the field e, then its end');
    expect(report.held).toStrictEqual({ resolved: { stopReason: 'completed' } });
    expect(report.warnings).toStrictEqual([expect.stringContaining('has no field e')]);
    expect(report.next).toStrictEqual(afterwards);
  });

  it('settles a child whose events have a gap error, as events Redis refused (no warning: the worker logs why)', () => {
    const report = reportOf('events with a gap in their seqs');
    expect(report.held).toStrictEqual({ resolved: { stopReason: 'error', diagnostic: expect.stringContaining("some of the child's events never reached the host") as string } });
    expect(report.lastEvent).toMatchObject({ type: 'turn/end', data: { reason: { kind: 'error', error: { code: 'QUEUE_CHILD_LOST' } } } });
    expect(report.warnings).toStrictEqual([]);
    expect(report.cancelled).toBe(true);
    expect(report.next).toStrictEqual(afterwards);
  });

  it('warns of entries that are no replies at the 1st, 10th, 100th, … (a flood of them is not a flood of warnings)', () => {
    const report = reportOf('a hundred entries that are not codec text');
    expect(report.warnings).toStrictEqual([
      expect.stringContaining('is not codec text (7 bytes: '),
      expect.stringMatching(/: entry \d+-\d+ is not codec text \(8 bytes: .*\) \(10 such entries so far; warned at the 1st, 10th, 100th, …\); /),
      expect.stringContaining('(100 such entries so far; warned at the 1st, 10th, 100th, …); '),
    ]);
    expect(report.next).toStrictEqual(afterwards);
  });
});
