// The host's link to one queue: a command connection (BullMQ Queue, cancels, watchdog), a reading
// connection that blocks on the host's reply stream and hands each entry to its run, and a watchdog
// that turns lost workers and a lost Redis into run errors within a bounded time. Redis counts as
// lost when it has not answered the watchdog's ping for the lock duration: a dropped connection, and
// also a server that stops answering while its socket stays open (a frozen process, a silent
// partition), where every command would wait for its timeout.
import { randomUUID } from 'node:crypto';
import type { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import { parse } from '../../seam/codec.js';
import { describeKind } from '../../seam/content.js';
import { SubagentError, describeError, isSubagentError } from '../../seam/errors.js';
import type { Encoded } from '../../seam/codec.js';
import { isRecord } from '../../seam/parse.js';
import type { Logger } from '../../runtime/session-store.js';
import { RedisSilence, bounded, connectRedis, redisSilence } from './connect.js';
import { redisOptions, type ResolvedQueueOptions } from './options.js';
import { MALFORMED_HINT, PREFIX, replyKey, type QueueJobData } from './protocol.js';

/** Whether the `count`th of a flood is told: the 1st, 10th, 100th, … (a flood is not a flood of warnings). */
const tenfold = (count: number) => /^10*$/.test(String(count));

/** A decoded entry of a reply stream naming its run: checked by the run before it reads anything else. */
export type ReplyRecord = Record<string, unknown> & { run: string };

/** What the connection needs of a run. */
export interface ConnectedRun {
  /** An entry of this run's reply stream, in stream order; never throws. */
  receive(entry: ReplyRecord): void;
  /** Checks the run's job; called on every watchdog tick while the run is unsettled. */
  check(connection: QueueConnection): Promise<void>;
  /** Redis has been unreachable for longer than the lock duration. */
  lost(diagnostic: string): void;
}

/**
 * BullMQ and ioredis, loaded on the first connection: importing the package (or a host that never
 * registers a queue provider) does not pay for them (about half of the package's import time).
 */
async function queueModules(): Promise<{ Queue: typeof Queue; Redis: typeof Redis }> {
  const [{ Queue }, { Redis }] = await Promise.all([import('bullmq'), import('ioredis')]);
  return { Queue, Redis };
}

// The reply stream outlives a host that vanished by at most this long.
const REPLY_TTL_MS = 60_000;

type ReadBatch = [Buffer, [Buffer, Buffer[]][]][] | null;

const ENTRY_FIELD = Buffer.from('e');

/** The value of field e of a stream entry's `fields` (name, value, name, value, …), compared as bytes: a name may be any size. */
function entryField(fields: readonly Buffer[]): Buffer | undefined {
  for (let index = 0; index + 1 < fields.length; index += 2) if (ENTRY_FIELD.equals(fields[index]!)) return fields[index + 1];
  return undefined;
}

export class QueueConnection {
  readonly options: ResolvedQueueOptions;
  readonly client: Redis;
  readonly queue: Queue<QueueJobData, Encoded>;
  readonly reply: string;
  readonly #reader: Redis;
  readonly #runs = new Map<string, ConnectedRun>();
  readonly #logger: Logger | undefined;
  /** Entries read that were no reply entries: the 1st, 10th, 100th, … are warned about. */
  #strays = 0;
  /** Reads the server refused in a row (see `#refused`). */
  #refusals = 0;
  #lastId = '0';
  #closed = false;
  /**
   * Ends the pending read with no batch: a disconnected client may never settle it, so closing does
   * not wait for it. One per read, not one promise raced by every read: each race would leave a
   * reaction holding its batch on it for the connection's whole life (a read a second when idle).
   */
  #stopRead: (() => void) | undefined;
  #reading: Promise<void> = Promise.resolve();
  #watchdog: NodeJS.Timeout | undefined;
  #ensuring: Promise<void> | undefined;
  #ticking = false;
  /** Since when (`performance.now()`: a wall clock stepped meanwhile is no silence) the watchdog has waited for an answer from Redis (a ping out, or no connection). */
  #waitingSince: number | undefined;
  #pinging = false;
  /** Callers of `answering` still waiting: each is rejected once the watchdog judges Redis silent. */
  readonly #waiters = new Set<(error: RedisSilence) => void>();

  private constructor(options: ResolvedQueueOptions, client: Redis, reader: Redis, queue: Queue<QueueJobData, Encoded>, logger: Logger | undefined) {
    this.options = options;
    this.#logger = logger;
    this.client = client;
    this.#reader = reader;
    this.reply = replyKey(options.queue, randomUUID());
    this.queue = queue;
    this.queue.on('error', () => undefined);
  }

  /**
   * Connects both connections and creates the reply stream; `START_FAILED` when Redis is unreachable.
   * `logger` (the host's) hears of reply entries the host could not read.
   */
  static async open(options: ResolvedQueueOptions, logger?: Logger): Promise<QueueConnection> {
    const { Queue, Redis } = await queueModules();
    const client = await connectRedis(new Redis(options.url, redisOptions(false)), 'the queue provider');
    let reader: Redis | undefined;
    try {
      reader = await connectRedis(new Redis(options.url, redisOptions(true)), 'the queue provider');
      const queue = new Queue<QueueJobData, Encoded>(options.queue, { connection: client, prefix: PREFIX });
      const connection = new QueueConnection(options, client, reader, queue, logger);
      // Workers append with NOMKSTREAM, so the stream must exist before the first job is queued.
      connection.#lastId = await client.xadd(connection.reply, '*', 'e', 'open') ?? '0';
      await client.pexpire(connection.reply, REPLY_TTL_MS);
      connection.#reading = connection.#read();
      // Often enough for the locks and for the reply stream's expiry alike (a lock duration past two
      // minutes would otherwise let the stream expire under a running child's result).
      const every = Math.max(50, Math.min(Math.floor(options.lockDurationMs / 2), REPLY_TTL_MS / 3));
      connection.#watchdog = setInterval(() => connection.#watch(), every);
      connection.#watchdog.unref();
      return connection;
    } catch (error) {
      reader?.disconnect();
      client.disconnect();
      if (isSubagentError(error)) throw error;
      // Reachable, but refusing the reply stream (out of memory, a read-only replica, an ACL).
      throw new SubagentError('START_FAILED', `the queue provider could not create its reply stream in Redis: ${describeError(error)}`, { cause: error });
    }
  }

  get closed(): boolean {
    return this.#closed;
  }

  /**
   * Keeps the reply stream alive, and makes it again when Redis lost it (a restart without
   * persistence, FLUSHALL, its expiry during a long outage) or another program replaced it with a
   * value of another type: workers append with NOMKSTREAM, so without it every later child's result
   * would be dropped.
   */
  ensureReply(): Promise<void> {
    // One at a time: two that both found another type there would each delete what the other made.
    this.#ensuring ??= this.#ensureReply().finally(() => (this.#ensuring = undefined));
    return this.#ensuring;
  }

  async #ensureReply(): Promise<void> {
    const [type, kept] = await Promise.all([this.client.type(this.reply), this.client.pexpire(this.reply, REPLY_TTL_MS)]);
    if (kept === 1 && type === 'stream') return;
    // Another program wrote a value of another type there: no worker could append, nor the host read.
    if (type !== 'stream' && type !== 'none') {
      this.warn(`queue provider ${this.options.name}: its reply stream ${this.reply} held a Redis ${type}, not a stream, and was made anew (replies sent meanwhile are lost); ${MALFORMED_HINT}`);
      await this.client.del(this.reply);
    }
    await this.client.xadd(this.reply, '*', 'e', 'open');
    await this.client.pexpire(this.reply, REPLY_TTL_MS);
  }

  register(id: string, run: ConnectedRun): void {
    this.#runs.set(id, run);
  }

  unregister(id: string): void {
    this.#runs.delete(id);
  }

  async #read(): Promise<void> {
    while (!this.#closed) {
      let batch: ReadBatch;
      try {
        // Read as bytes: an entry too long for a string (a 512 MB value) fails alone, not every read from then on.
        const read = this.#reader.xreadBuffer('COUNT', 1000, 'BLOCK', 1000, 'STREAMS', this.reply, this.#lastId) as Promise<ReadBatch>;
        read.catch(() => undefined);
        batch = await new Promise<ReadBatch>((resolve, reject) => {
          this.#stopRead = () => resolve(null);
          read.then(resolve, reject);
        });
      } catch (error) {
        if (this.#closed) return;
        if (error instanceof Error && error.name === 'ReplyError') await this.#refused(error);
        await new Promise((resolve) => setTimeout(resolve, 100));
        continue;
      }
      this.#refusals = 0;
      for (const [, entries] of batch ?? []) {
        for (const [id, fields] of entries) {
          this.#lastId = id.toString();
          this.#deliver(this.#lastId, fields);
        }
      }
      // Entries read are dropped; the last one stays so the stream (and its NOMKSTREAM guard) stays.
      if (batch) this.client.xtrim(this.reply, 'MINID', this.#lastId).catch(() => undefined);
    }
  }

  /**
   * Hands one stream entry to its run. Whoever can write to Redis can write here: what is not a
   * reply entry naming a run is dropped and warned about, and nothing in an entry stops the reading.
   * An entry for no run of this host (settled, or disposed: its worker may still be talking) is dropped.
   */
  #deliver(id: string, fields: readonly Buffer[]): void {
    const value = entryField(fields);
    if (value === undefined) return this.#malformed(`entry ${id} has no field e`);
    let entry: unknown;
    try {
      const text = value.toString();
      if (text === 'open') return;
      entry = parse(text);
    } catch (error) {
      return this.#malformed(`entry ${id} is not codec text (${value.length} bytes: ${describeError(error)})`);
    }
    if (!isRecord(entry) || typeof entry['run'] !== 'string') {
      const what = isRecord(entry) ? 'an object without a run id' : describeKind(entry);
      return this.#malformed(`entry ${id} decodes to ${what}, not a reply entry`);
    }
    const run = this.#runs.get(entry['run']);
    try {
      run?.receive(entry as ReplyRecord);
    } catch (error) {
      // A run does not throw on any entry; were one to, it fails, and the reading goes on.
      run?.lost(`the host could not read a reply of the child (${describeError(error)})`);
    }
  }

  /**
   * The server refused a read (not a lost connection), so no reply reaches this host: a stream a
   * value of another type replaced is made anew at once; any other refusal (an ACL that no longer
   * allows it, say) is warned about at the 1st, 10th, 100th, … read in a row, not retried in silence.
   */
  async #refused(error: Error): Promise<void> {
    if (error.message.startsWith('WRONGTYPE')) return this.ensureReply().catch(() => undefined);
    this.#refusals += 1;
    if (!tenfold(this.#refusals)) return;
    const count = this.#refusals === 1 ? '' : ` (${this.#refusals} reads in a row)`;
    this.warn(`queue provider ${this.options.name}: Redis refused to read its reply stream ${this.reply}: ${describeError(error)}${count}; no child's reply reaches this host until it reads again`);
  }

  /** Warns of an entry that is no reply entry: the first, then each tenfold count (a flood is not a flood of warnings). */
  #malformed(what: string): void {
    this.#strays += 1;
    if (!tenfold(this.#strays)) return;
    const count = this.#strays === 1 ? '' : ` (${this.#strays} such entries so far; warned at the 1st, 10th, 100th, …)`;
    this.warn(`queue provider ${this.options.name}: its reply stream ${this.reply} holds an entry that is not a queue worker's reply, ignored: ${what}${count}; is something other than a subagent-host worker writing to it?`);
  }

  /** Tells the host's logger (when it has one). */
  warn(message: string): void {
    this.#logger?.warn(message);
  }

  /** Redis has not answered for the lock duration: its connection dropped, or it stopped answering. */
  get silent(): boolean {
    return this.#waitingSince !== undefined && performance.now() - this.#waitingSince >= this.options.lockDurationMs;
  }

  /**
   * Settles as `work` does, or rejects with a `RedisSilence` once the watchdog judges Redis silent:
   * nobody waits for a command timeout on a connection known dead. `work` is not called when the
   * watchdog already has; commands it sent before the verdict run if the server wakes up.
   */
  async answering<T>(work: () => Promise<T>): Promise<T> {
    if (this.silent) throw new RedisSilence(this.options.lockDurationMs);
    let judged!: (error: RedisSilence) => void;
    const verdict = new Promise<never>((_, reject) => (judged = reject));
    this.#waiters.add(judged);
    try {
      return await Promise.race([work(), verdict]);
    } finally {
      this.#waiters.delete(judged);
    }
  }

  /**
   * One watchdog beat: a ping unless one is still out, then the verdict, after the event loop's I/O:
   * a reply that came while this thread was busy is read before it can count as missing, and the
   * clock runs from when a ping went out (or the connection was seen down), not from the last reply.
   */
  #watch(): void {
    if (this.#closed) return;
    if (this.client.status !== 'ready') this.#waitingSince ??= performance.now();
    else if (!this.#pinging) {
      this.#pinging = true;
      this.#waitingSince ??= performance.now();
      this.client
        .ping()
        // A failed ping (its timeout, a dropped connection) leaves the clock running.
        .then(() => void (this.#waitingSince = undefined), () => undefined)
        .finally(() => (this.#pinging = false));
    }
    setImmediate(() => void this.#tick());
  }

  async #tick(): Promise<void> {
    if (this.#closed) return;
    if (this.silent) {
      const ms = this.options.lockDurationMs;
      for (const judged of [...this.#waiters]) judged(new RedisSilence(ms));
      const why = redisSilence(this.client, ms);
      for (const run of [...this.#runs.values()]) run.lost(why);
      return;
    }
    // A check waits for its commands (at most their timeout); the beats meanwhile only ping.
    if (this.#ticking || this.client.status !== 'ready') return;
    this.#ticking = true;
    try {
      await this.ensureReply().catch(() => undefined);
      await Promise.allSettled([...this.#runs.values()].map((run) => run.check(this)));
    } finally {
      this.#ticking = false;
    }
  }

  /** Idempotent: stops reading and watching, deletes the reply stream, closes both connections. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    clearInterval(this.#watchdog);
    this.#stopRead?.();
    this.#reader.disconnect();
    await this.#reading;
    // With Redis gone or silent, the graceful steps would wait for an answer that may never come.
    if (this.client.status === 'ready' && !this.silent) {
      await bounded(this.client.del(this.reply));
      await bounded(this.client.quit());
    }
    this.client.disconnect();
    await bounded(this.queue.close());
  }
}
