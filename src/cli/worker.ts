// `subagent-host worker --redis URL [--queue NAME] [--concurrency N] [--pool-threads N]`: takes
// child jobs from a queue and runs each in this process's worker-thread pool until SIGTERM/SIGINT/SIGHUP,
// then stops taking jobs, lets running children finish within a grace (cancels the rest), exits 0.
import { SubagentError, describeError } from '../seam/errors.js';
import { visible } from '../seam/visible.js';
import { DEFAULT_LOCK_DURATION_MS, DEFAULT_QUEUE, LOCK_DURATION_RANGE, parseRedisUrl } from '../providers/queue/options.js';
import { QueueWorker } from '../providers/queue/queue-worker.js';
import { MAX_TIMER_MS, integerValue, parseCommand, readValues } from './args.js';
import { outputFailed, outputGone } from './output.js';

const USAGE = `usage: subagent-host worker --redis URL [--queue NAME] [--concurrency N] [--pool-threads N]
                            [--lock-duration-ms N] [--drain-grace-ms N] [--cancel-grace-ms N]

Runs children queued by a host's queue provider, each in a worker thread of this process.

  --redis URL            redis://host:port[/db] of the queue (required)
  --queue NAME           queue name (default ${DEFAULT_QUEUE})
  --concurrency N        children run at once (default 4)
  --pool-threads N       worker threads (default: the concurrency)
  --lock-duration-ms N   a lost worker is noticed after this long (default ${DEFAULT_LOCK_DURATION_MS})
  --drain-grace-ms N     on SIGTERM, children still running after this long are cancelled (default 10000)
  --cancel-grace-ms N    a cancelled child still running after this long has its thread terminated (default 2000)`;

/** A whole number in `[min, max]` (decimal digits only), or `fallback` when the flag is absent. */
function integer(value: string | undefined, flag: string, fallback: number, [min, max]: readonly [number, number]): number {
  if (value === undefined) return fallback;
  const n = integerValue(value, min, max);
  if (n === undefined) throw new SubagentError('INVALID_OPTIONS', `${flag} must be a whole number from ${min} to ${max}, got ${JSON.stringify(value)}`);
  return n;
}

/** Children or threads of one worker process. */
const COUNT: [number, number] = [1, 1024];

/** One line on stderr; it may quote a job or Redis (e.g. a job's name): control characters are shown escaped. */
function log(line: string): void {
  process.stderr.write(`subagent-host worker[${process.pid}]: ${visible(line)}\n`);
}

/** Runs the worker until a termination signal; resolves with the exit code. */
export async function run(args: string[]): Promise<number> {
  const parsed = parseCommand('worker', USAGE, {
    args,
    options: {
      redis: { type: 'string' },
      queue: { type: 'string' },
      concurrency: { type: 'string' },
      'pool-threads': { type: 'string' },
      'lock-duration-ms': { type: 'string' },
      'drain-grace-ms': { type: 'string' },
      'cancel-grace-ms': { type: 'string' },
    },
  });
  if (typeof parsed === 'number') return parsed;
  const { values } = parsed;
  const settings = readValues('worker', USAGE, () => {
    const url = parseRedisUrl(values.redis, '--redis');
    const queue = values.queue ?? DEFAULT_QUEUE;
    if (!/^[A-Za-z0-9_.-]{1,100}$/.test(queue)) throw new SubagentError('INVALID_OPTIONS', '--queue must be 1–100 letters, digits, _ . or -');
    const concurrency = integer(values.concurrency, '--concurrency', 4, COUNT);
    return {
      url,
      queue,
      concurrency,
      poolThreads: integer(values['pool-threads'], '--pool-threads', concurrency, COUNT),
      // The host's queueProvider takes the same range: both sides must agree on it.
      lockDurationMs: integer(values['lock-duration-ms'], '--lock-duration-ms', DEFAULT_LOCK_DURATION_MS, LOCK_DURATION_RANGE),
      drainGraceMs: integer(values['drain-grace-ms'], '--drain-grace-ms', 10_000, [1, MAX_TIMER_MS]),
      cancelGraceMs: integer(values['cancel-grace-ms'], '--cancel-grace-ms', 2000, [1, MAX_TIMER_MS]),
    };
  });
  if (typeof settings === 'number') return settings;
  const { url, queue, concurrency, poolThreads, lockDurationMs, drainGraceMs, cancelGraceMs } = settings;
  const worker = await QueueWorker.start({ url, queue, concurrency, poolThreads, lockDurationMs, cancelGraceMs, log });
  const stopped = new Promise<string>((resolve) => {
    process.once('SIGTERM', () => resolve('SIGTERM'));
    process.once('SIGINT', () => resolve('SIGINT'));
    // Its terminal or session closed: drained too, or its running children would be lost with it.
    process.once('SIGHUP', () => resolve('SIGHUP'));
  });
  // Tests and supervisors wait for this line before queueing work.
  process.stdout.write(`ready pid=${process.pid} queue=${queue} concurrency=${concurrency} threads=${poolThreads}\n`);
  // A ready line that found no reader ends the worker as interrupted (the entry point raises SIGINT):
  // the log says so, not a signal nobody sent.
  const signal = await stopped;
  const reason = !outputGone() ? signal : outputFailed() ? 'its output could not be written' : "its output's reader went away";
  // Taking jobs stops before the line below is written, so whoever reads it knows no new job starts here.
  const closing = worker.close(drainGraceMs);
  log(`${reason}: no longer taking jobs; draining ${worker.active} running children`);
  // Closing fails only when Redis or the thread pool fails during the drain: not provoked by a test.
  try {
    await closing;
  } catch (error) {
    log(`closing failed: ${describeError(error)}`);
    return 1;
  }
  log('drained');
  // The drain is done; BullMQ's blocking connection may still be retrying a Redis that went away.
  setImmediate(() => process.exit()).unref();
  return 0;
}
