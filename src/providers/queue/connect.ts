// Bounded connection to Redis: an unreachable or refusing server is a `START_FAILED` within the
// connect timeout, and the client stops reconnecting, so nothing lingers behind a failed start.
import type { Redis } from 'ioredis';
import { SubagentError, describeError } from '../../seam/errors.js';
import { CONNECT_TIMEOUT_MS } from './options.js';

function target(client: Redis): string {
  const { host, port, db } = client.options;
  return `${host ?? '?'}:${port ?? '?'}${db ? `/${db}` : ''}`;
}

/** Connects `client` (created with `lazyConnect`); on failure disconnects it and rejects. */
export async function connectRedis(client: Redis, who: string): Promise<Redis> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${CONNECT_TIMEOUT_MS} ms`)), CONNECT_TIMEOUT_MS + 500);
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
    throw new SubagentError('START_FAILED', `${who} could not reach Redis at ${target(client)}: ${why}`, { cause: error });
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
