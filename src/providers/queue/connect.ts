// Bounded connection to Redis: an unreachable or refusing server is a `START_FAILED` within the
// connect timeout, and the client stops reconnecting, so nothing lingers behind a failed start.
import type { Redis } from 'ioredis';
import { SubagentError, describeError } from '../../seam/errors.js';
import { CONNECT_TIMEOUT_MS } from './options.js';

/** Where `client` connects, as messages name it: host, port and database, never its credentials. */
export function redisTarget(client: Redis): string {
  const { host, port, db } = client.options;
  return `${host ?? '?'}:${port ?? '?'}${db ? `/${db}` : ''}`;
}

/**
 * A rediss:// URL sent to a server without TLS: the server takes the TLS handshake for a partial
 * command and waits for the rest, so the connection only times out. The timeout says which.
 */
function tlsHint(client: Redis, errors: unknown[]): string {
  if (client.options.tls === undefined) return '';
  if (!errors.some((error) => /ETIMEDOUT|no answer within/.test(describeError(error)))) return '';
  return '; the URL asks for TLS (rediss://), and a server without TLS never answers its handshake: if the server is a plain Redis, use redis://';
}

/** Whether `client` can send: a socket the server closed stops being writable before ioredis hears of it. */
export function redisConnected(client: Redis): boolean {
  return client.status === 'ready' && client.stream?.writable === true;
}

/** A command given up on because its connection's watchdog judged Redis silent for `ms`. */
export class RedisSilence extends Error {
  readonly ms: number;

  constructor(ms: number) {
    super(`no answer to the connection's watchdog for more than ${ms} ms`);
    this.name = 'RedisSilence';
    this.ms = ms;
  }
}

/** Why `client` has not answered for `ms`, naming the server: its connection dropped, or the server went quiet. */
export function redisSilence(client: Redis, ms: number): string {
  const at = `Redis at ${redisTarget(client)}`;
  if (!redisConnected(client)) return `the connection to ${at} has been lost for more than ${ms} ms`;
  return `${at} is connected but has not answered for more than ${ms} ms (a frozen or overloaded server, or a silent network)`;
}

/**
 * Why a command on a connected client failed, in the words of the connection's state: a lost
 * connection or a server that stops answering is named with what to check, not ioredis's wording
 * ("Stream isn't writeable…", "Command timed out"). Undefined for any other failure.
 */
export function redisOutage(client: Redis, error: unknown): string | undefined {
  const at = `Redis at ${redisTarget(client)}`;
  if (!redisConnected(client)) {
    return `the connection to ${at} is lost; check that the server is running and reachable: the connection is retried on its own, so a later start succeeds once Redis is back`;
  }
  if (error instanceof RedisSilence) return `${redisSilence(client, error.ms)}; check the server, then start again`;
  if (error instanceof Error && error.message === 'Command timed out') {
    const { commandTimeout } = client.options;
    return `${at} is connected but did not answer within ${commandTimeout ?? '?'} ms (a frozen or overloaded server, or a silent network); check the server, then start again`;
  }
  return undefined;
}

/** How late the connect timer may fire before the wait is judged this process's, not the server's. */
const LATE_TIMER_MS = 1000;
const MAX_LATE_RESTARTS = 3;

/** Connects `client` (created with `lazyConnect`); on failure disconnects it and rejects. */
export async function connectRedis(client: Redis, who: string): Promise<Redis> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    // A timer that fires late says this process was starved or busy (a loaded machine): the answer
    // may be waiting unread, so the wait starts again (a few times at most) rather than blaming Redis.
    const arm = (restarts: number) => {
      const due = performance.now() + CONNECT_TIMEOUT_MS + 500;
      timer = setTimeout(() => {
        if (performance.now() - due > LATE_TIMER_MS && restarts < MAX_LATE_RESTARTS) return arm(restarts + 1);
        reject(new Error(`no answer within ${CONNECT_TIMEOUT_MS} ms`));
      }, CONNECT_TIMEOUT_MS + 500);
    };
    arm(0);
  });
  // Errors are also reported through the promise below; the event alone would crash the process.
  // The first one says why the server refused (WRONGPASS, not speaking Redis, …) where the promise
  // says only that the connection closed; later ones are the aftermath (a stream no longer writable).
  let refusal: unknown;
  client.on('error', (error: unknown) => (refusal ??= error));
  // A first connection that fails ends the client instead of scheduling a reconnection: disconnecting
  // a client whose socket already closed leaves ioredis's 2 s timer behind, holding the process.
  const { retryStrategy } = client.options;
  client.options.retryStrategy = () => null;
  try {
    await Promise.race([client.connect(), timeout]);
    // ioredis reports a database the server does not have as an 'error' event and goes on in
    // database 0 (another deployment's jobs, maybe): selecting it again makes that a failure here.
    const { db } = client.options;
    if (db !== undefined && db !== 0) await Promise.race([client.select(db), timeout]);
    client.options.retryStrategy = retryStrategy;
    return client;
  } catch (error) {
    if (client.status !== 'end') client.disconnect();
    const why = refusal !== undefined && refusal !== error ? `${describeError(error)} (${describeError(refusal)})` : describeError(error);
    throw new SubagentError('START_FAILED', `${who} could not reach Redis at ${redisTarget(client)}: ${why}${tlsHint(client, [error, refusal])}`, { cause: error });
  } finally {
    clearTimeout(timer);
  }
}

/** Waits for `promise` at most a few seconds, ignoring its outcome. */
export function bounded(promise: Promise<unknown>): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const limit = new Promise<void>((resolve) => (timer = setTimeout(resolve, 3000)));
  return Promise.race([promise.then(() => undefined, () => undefined), limit]).finally(() => clearTimeout(timer));
}
