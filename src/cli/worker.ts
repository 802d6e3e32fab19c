// `subagent-host worker --redis URL [--queue NAME] [--concurrency N] [--pool-threads N]`: takes
// child jobs from a queue and runs each in this process's worker-thread pool until SIGTERM/SIGINT,
// then stops taking jobs, lets running children finish within a grace (cancels the rest), exits 0.
import { SubagentError, describeError } from '../seam/errors.js';
import { DEFAULT_LOCK_DURATION_MS, DEFAULT_QUEUE, parseRedisUrl } from '../providers/queue/options.js';
import { QueueWorker } from '../providers/queue/queue-worker.js';
import { parseCommand, readValues } from './args.js';

const USAGE = `usage: subagent-host worker --redis URL [--queue NAME] [--concurrency N] [--pool-threads N]

Runs children queued by a host's queue provider, each in a worker thread of this process.

  --redis URL            redis://host:port[/db] of the queue (required)
  --queue NAME           queue name (default ${DEFAULT_QUEUE})
  --concurrency N        children run at once (default 4)
  --pool-threads N       worker threads (default: the concurrency)
  --lock-duration-ms N   a lost worker is noticed after this long (default ${DEFAULT_LOCK_DURATION_MS})
  --drain-grace-ms N     on SIGTERM, children still running after this long are cancelled (default 10000)`;

function positive(value: string | undefined, flag: string, fallback: number): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new SubagentError('INVALID_OPTIONS', `${flag} must be a positive integer, got ${JSON.stringify(value)}`);
  return n;
}

function log(line: string): void {
  process.stderr.write(`subagent-host worker[${process.pid}]: ${line}\n`);
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
    },
  });
  if (typeof parsed === 'number') return parsed;
  const { values } = parsed;
  const settings = readValues('worker', USAGE, () => {
    const url = parseRedisUrl(values.redis, '--redis');
    const queue = values.queue ?? DEFAULT_QUEUE;
    if (!/^[A-Za-z0-9_.-]{1,100}$/.test(queue)) throw new SubagentError('INVALID_OPTIONS', '--queue must be 1–100 letters, digits, _ . or -');
    const concurrency = positive(values.concurrency, '--concurrency', 4);
    return {
      url,
      queue,
      concurrency,
      poolThreads: positive(values['pool-threads'], '--pool-threads', concurrency),
      lockDurationMs: positive(values['lock-duration-ms'], '--lock-duration-ms', DEFAULT_LOCK_DURATION_MS),
      drainGraceMs: positive(values['drain-grace-ms'], '--drain-grace-ms', 10_000),
    };
  });
  if (typeof settings === 'number') return settings;
  const { url, queue, concurrency, poolThreads, lockDurationMs, drainGraceMs } = settings;
  const worker = await QueueWorker.start({ url, queue, concurrency, poolThreads, lockDurationMs, log });
  const stopped = new Promise<string>((resolve) => {
    process.once('SIGTERM', () => resolve('SIGTERM'));
    process.once('SIGINT', () => resolve('SIGINT'));
  });
  // Tests and supervisors wait for this line before queueing work.
  process.stdout.write(`ready pid=${process.pid} queue=${queue} concurrency=${concurrency} threads=${poolThreads}\n`);
  const signal = await stopped;
  // Taking jobs stops before the line below is written, so whoever reads it knows no new job starts here.
  const closing = worker.close(drainGraceMs);
  log(`${signal}: no longer taking jobs; draining ${worker.active} running children`);
  // Closing fails only when Redis or the thread pool fails during the drain: not provoked by a test.
  try {
    await closing;
  } catch (error) {
    log(`closing failed: ${describeError(error)}`);
    return 1;
  }
  log('drained');
  return 0;
}
