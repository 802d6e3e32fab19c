// Options of the queue provider and its worker processes: the Redis URL (checked before any
// connection), queue name, retry budget and lock duration, and the ioredis settings that keep every
// Redis call bounded, so an unreachable server is an error, never a hang.
import type { RedisOptions } from 'ioredis';
import { z } from 'zod';
import { SubagentError } from '../../seam/errors.js';
import { parseOrThrow, readingInput } from '../../seam/parse.js';

export interface QueueProviderOptions {
  /** `redis://[user:password@]host[:port][/db]` or `rediss://…` (TLS). */
  connection: string;
  /** @default 'subagent-host' */
  queue?: string;
  /** @default 'queue' */
  name?: string;
  /** Runs of a child, counting the first; a child whose worker is lost is restarted while any remain. @default 1 */
  attempts?: number;
  /** How long a lost worker may go unnoticed (its job lock lapses after this long). @default 10000 */
  lockDurationMs?: number;
}

export const DEFAULT_QUEUE = 'subagent-host';
export const DEFAULT_LOCK_DURATION_MS = 10_000;
/** The lock durations a host and a worker take, in ms. */
export const LOCK_DURATION_RANGE = [100, 3_600_000] as const;
/** How long a start (or a worker's first connection) waits for Redis before giving up. */
export const CONNECT_TIMEOUT_MS = 3000;

// BullMQ joins its keys with ':', so a queue name must not contain one.
const queueName = z.string().regex(/^[A-Za-z0-9_.-]{1,100}$/, 'must be 1–100 letters, digits, _ . or -');

const shape = z.strictObject({
  connection: z.string(),
  queue: queueName.optional(),
  name: z.string().min(1).optional(),
  attempts: z.number().int().min(1).max(100).optional(),
  lockDurationMs: z.number().int().min(LOCK_DURATION_RANGE[0]).max(LOCK_DURATION_RANGE[1]).optional(),
});

export interface ResolvedQueueOptions {
  url: string;
  queue: string;
  name: string;
  attempts: number;
  lockDurationMs: number;
}

/** Checks a Redis URL; `INVALID_OPTIONS` names what is wrong (the password never appears). */
export function parseRedisUrl(value: unknown, field: string): string {
  if (typeof value !== 'string' || value === '') throw new SubagentError('INVALID_OPTIONS', `${field} must be a redis:// URL`);
  // The URL parser drops such characters where ioredis does not, which then fails untyped at connect.
  if (/[\u0000-\u0020\u007f]/.test(value)) throw new SubagentError('INVALID_OPTIONS', `${field} must not contain spaces or control characters`);
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new SubagentError('INVALID_OPTIONS', `${field} is not a URL; expected redis://host:port or rediss://host:port`);
  }
  if (url.protocol !== 'redis:' && url.protocol !== 'rediss:') {
    throw new SubagentError('INVALID_OPTIONS', `${field} has protocol ${url.protocol}; expected redis: or rediss:`);
  }
  if (url.hostname === '') throw new SubagentError('INVALID_OPTIONS', `${field} has no host; expected redis://host:port`);
  const db = url.pathname.replace(/^\//, '');
  if (db !== '' && !/^\d{1,2}$/.test(db)) throw new SubagentError('INVALID_OPTIONS', `${field} has database "${db}"; expected a number such as /0`);
  if (url.search !== '' || url.hash !== '') throw new SubagentError('INVALID_OPTIONS', `${field} must not carry a query or fragment`);
  return value;
}

/** Validates and fills in the provider's options; `INVALID_OPTIONS` on any bad field. */
export function parseQueueOptions(options: QueueProviderOptions): ResolvedQueueOptions {
  const parsed = readingInput('queueProvider options', 'INVALID_OPTIONS', () => parseOrThrow(shape, options, 'INVALID_OPTIONS', 'options'));
  return {
    url: parseRedisUrl(parsed.connection, 'options.connection'),
    queue: parsed.queue ?? DEFAULT_QUEUE,
    name: parsed.name ?? 'queue',
    attempts: parsed.attempts ?? 1,
    lockDurationMs: parsed.lockDurationMs ?? DEFAULT_LOCK_DURATION_MS,
  };
}

/**
 * ioredis settings for one connection. `blocking` connections (BullMQ workers, stream readers) retry
 * commands across reconnects; the others fail a command at once while disconnected.
 */
export function redisOptions(blocking: boolean): RedisOptions {
  return {
    lazyConnect: true,
    connectTimeout: CONNECT_TIMEOUT_MS,
    maxRetriesPerRequest: blocking ? null : 1,
    enableOfflineQueue: blocking,
    // A command a live but unresponsive server never answers fails instead of waiting forever.
    ...(blocking ? {} : { commandTimeout: 5000 }),
    // Reconnect quickly at first, then every second; the owner decides when to give up.
    retryStrategy: (times) => Math.min(times * 100, 1000),
    // A disconnect ends the socket and destroys it after this long unless it closed: ioredis's 2 s
    // default held the process that long after any close while Redis was down, frozen or not Redis
    // (a socket that already closed never clears that timer). Graceful closes QUIT first.
    disconnectTimeout: 0,
  };
}
