// The remote side of the queue provider, one per worker process: a BullMQ Worker takes child jobs
// and runs each on this process's own worker-thread pool; the child's attach, events and result go
// to the host's reply stream in order, and cancellations (and spent tree budgets' stops) arrive on
// the queue's pub/sub channels.
import { hostname } from 'node:os';
import { WaitingError, Worker, type Job } from 'bullmq';
import { Redis } from 'ioredis';
import { budgetStopOf, type BudgetStop } from '../../seam/budget.js';
import { encode, parse, stringify, type Encoded } from '../../seam/codec.js';
import { SubagentError, describeError } from '../../seam/errors.js';
import type { HostApi } from '../../seam/child-protocol.js';
import type { SubagentResult } from '../../seam/types.js';
import type { SessionEvent } from '../../seam/session-types.js';
import { MAX_TIMER_MS } from '../../seam/parse.js';
import type { Slot } from '../worker/admission.js';
import { openWorkerPool, type WorkerPoolEngine } from '../worker/pool.js';
import { ThreadChild } from '../worker/thread-child.js';
import { holdLock, type HeldLock } from './job-lock.js';
import { redisOptions } from './options.js';
import { bounded, connectRedis, redisConnected, redisTarget } from './connect.js';
import {
  JOB_NAME,
  PREFIX,
  PROTOCOL_VERSION,
  attemptNumber,
  budgetChannel,
  budgetKey,
  cancelChannel,
  cancelKey,
  isReplyKey,
  jobProblem,
  type QueueJobData,
  type ReplyBody,
  type ReplyEntry,
} from './protocol.js';

// Each child runs on this process's pool exactly like a spawn child (a ThreadChild: encoded task,
// hub-port notices, cancel flag plus control call, grace termination), its notices going to the
// reply stream instead of a local mirror. Queue children have no host tools and take no input.
const noHostTools: HostApi = {
  callTool(name) {
    return Promise.reject(new SubagentError('UNKNOWN_TOOL', `no tool named ${name} is available to this child (queue children have no host tools)`));
  },
};

interface PoolChild {
  /** Settles once every event went to the reply stream's queue; never rejects. */
  readonly result: Promise<SubagentResult>;
  /** Asks the child to stop; past the pool's grace its thread is terminated. */
  cancel(): void;
  /** Its host's reply stream is gone: the child is stopped, and its attempt sends no end unless it completed. */
  orphan(): void;
  /** A tree budget covering the child is spent: it stops at its next step boundary (the first stop counts). */
  budgetStop(stop: BudgetStop): void;
  /** Its host's reply stream. */
  readonly reply: string;
  /** Its run: a run taken again (restarted by its host) may have an earlier attempt still stopping here. */
  readonly run: string;
}

export interface QueueWorkerOptions {
  url: string;
  queue: string;
  /** Children this process runs at once. */
  concurrency: number;
  /** Threads of this process's pool. */
  poolThreads: number;
  lockDurationMs: number;
  /** A cancelled child still running this long has its thread terminated. @default 2000 */
  cancelGraceMs?: number;
  /** Receives one line per notable happening (start, job failures). */
  log?: (line: string) => void;
}

/** A running queue worker; `close(graceMs)` drains it. */
export class QueueWorker {
  readonly #options: QueueWorkerOptions;
  readonly #client: Redis;
  readonly #subscriber: Redis;
  readonly #pool: WorkerPoolEngine;
  readonly #active = new Set<PoolChild>();
  #worker: Worker<QueueJobData, Encoded> | undefined;
  /** Set when `close()` begins: a job handed to this worker after that is put back, never started. */
  #closing: Promise<void> | undefined;
  /** Re-reads the cancel keys of running children: a cancel published while the subscriber was away is not lost. */
  #sweeper: NodeJS.Timeout | undefined;
  #sweeping = false;
  /** Set while closing: ends the drain once no child runs and Redis is not connected. */
  #drainOffline: (() => void) | undefined;
  /** While Redis is unreachable: the errors logged since it went (each once), and the repeats left out. */
  #outage: { logged: Set<string>; repeats: number } | undefined;

  private constructor(options: QueueWorkerOptions, client: Redis, subscriber: Redis) {
    this.#options = options;
    this.#client = client;
    this.#subscriber = subscriber;
    this.#pool = openWorkerPool({ minThreads: 1, maxThreads: options.poolThreads, cancelGraceMs: options.cancelGraceMs ?? 2000 });
  }

  /** Connects (rejects `START_FAILED` when Redis is unreachable) and starts taking jobs. */
  static async start(options: QueueWorkerOptions): Promise<QueueWorker> {
    const client = await connectRedis(new Redis(options.url, redisOptions(true)), 'the queue worker');
    let subscriber: Redis;
    try {
      subscriber = await connectRedis(new Redis(options.url, redisOptions(true)), 'the queue worker');
    } catch (error) {
      client.disconnect();
      throw error;
    }
    const worker = new QueueWorker(options, client, subscriber);
    try {
      await worker.#listen();
    } catch (error) {
      // Its pool and both connections are open by now: closed, or they would hold the process.
      await worker.close(0).catch(() => undefined);
      throw error;
    }
    return worker;
  }

  /** Children running now. */
  get active(): number {
    return this.#active.size;
  }

  async #listen(): Promise<void> {
    const { queue, lockDurationMs } = this.#options;
    const budgets = budgetChannel(queue);
    this.#subscriber.on('message', (channel: string, run: string) => {
      for (const child of this.#active) {
        if (child.run !== run) continue;
        if (channel === budgets) this.#readBudgetStop(run, child).catch(() => undefined);
        else child.cancel();
      }
    });
    await this.#subscriber.subscribe(cancelChannel(queue), budgets);
    // Pub/sub delivers to whoever listens at that moment: a cancel published while the subscriber
    // reconnected, or whose publish never left a host that lost Redis, is found by its key.
    this.#subscriber.on('ready', () => this.#sweep());
    this.#sweeper = setInterval(() => this.#sweep(), Math.max(50, Math.min(1000, Math.floor(lockDurationMs / 2))));
    this.#sweeper.unref();
    await this.#pool.warm();
    this.#worker = new Worker<QueueJobData, Encoded>(queue, (job, token) => this.#process(job, token), {
      connection: this.#client,
      prefix: PREFIX,
      concurrency: this.#options.concurrency,
      lockDuration: lockDurationMs,
      // Each attempt renews its own lock (holdLock): BullMQ's renewal, by job id, would renew it a
      // second time, and a lost lock's every renewal would be one more error in the worker's log.
      skipLockRenewal: true,
      stalledInterval: lockDurationMs,
      // A stalled child fails at once; the host decides whether to restart it.
      maxStalledCount: 0,
    });
    this.#worker.on('error', (error) => this.#logError(error));
    this.#client.on('ready', () => this.#endOutage());
    this.#worker.on('failed', (job, error) => this.#options.log?.(`job ${job?.id ?? '?'} failed: ${describeError(error)}`));
    await this.#worker.waitUntilReady();
  }

  /**
   * Logs a worker error. While Redis is unreachable, every reconnection attempt of every connection
   * fails alike (about one a second each): an error is logged once per outage, and its end once.
   */
  #logError(error: unknown): void {
    const line = `worker error: ${describeError(error)}`;
    if (redisConnected(this.#client)) return this.#options.log?.(line);
    const outage = (this.#outage ??= { logged: new Set(), repeats: 0 });
    if (outage.logged.has(line)) return void (outage.repeats += 1);
    const first = outage.logged.size === 0;
    outage.logged.add(line);
    const at = `Redis at ${redisTarget(this.#client)}`;
    this.#options.log?.(first ? `${line} (${at} is unreachable; reconnecting, and repeats of this error are not logged until it is back)` : line);
  }

  #endOutage(): void {
    const outage = this.#outage;
    if (outage === undefined) return;
    this.#outage = undefined;
    this.#options.log?.(`reconnected to Redis at ${redisTarget(this.#client)} (${outage.repeats} repeated errors not logged)`);
  }

  /** Passes the stop of a spent tree budget covering `run` (its budget key, set by the host) to its child, if any. */
  async #readBudgetStop(run: string, child: PoolChild): Promise<void> {
    const text = await this.#client.get(budgetKey(this.#options.queue, run));
    const stop = text === null ? undefined : budgetStopOf(parse(text));
    if (stop) child.budgetStop(stop);
  }

  /**
   * Cancels every running child whose cancel key is set, or whose host's reply stream is gone, and
   * passes each a spent tree budget's stop its host recorded.
   */
  #sweep(): void {
    const children = [...this.#active];
    if (children.length === 0 || this.#sweeping) return;
    this.#sweeping = true;
    const keys = children.flatMap((child) => [cancelKey(this.#options.queue, child.run), child.reply]);
    const stops = children.map((child) => this.#readBudgetStop(child.run, child).catch(() => undefined));
    Promise.all([...keys.map((key) => this.#client.exists(key)), ...stops])
      .then(
        (found) => children.forEach((child, i) => (found[2 * i] === 1 ? child.cancel() : found[2 * i + 1] === 0 && child.orphan())),
        () => undefined,
      )
      .finally(() => (this.#sweeping = false));
  }

  async #process(job: Job<QueueJobData, Encoded>, token: string | undefined): Promise<Encoded> {
    if (job.name !== JOB_NAME || job.id === undefined) throw new SubagentError('INVALID_REQUEST', `unexpected job ${job.name}`);
    if (this.#closing !== undefined && token !== undefined) {
      // BullMQ's blocking fetch, already waiting when close() began, can still return one job: it
      // goes back to the queue untouched (no attempt counted) for another worker to take.
      await job.moveToWait(token);
      throw new WaitingError();
    }
    const run = job.id;
    const problem = jobProblem(job.data, this.#options.queue);
    if (problem !== undefined) return this.#refuse(run, job.data, problem);
    const lock = holdLock(job, token, this.#options.lockDurationMs, this.#options.log);
    try {
      const result = await this.#run(job.data, run, lock);
      // A job whose lock is gone cannot be finished by this attempt (BullMQ refuses, and logs it
      // twice): it is left to what took it (its host, the stall check, a restart), as a job put back.
      if (lock.lost) throw new WaitingError();
      return result;
    } finally {
      lock.release();
    }
  }

  async #run(data: QueueJobData, run: string, lock: HeldLock): Promise<Encoded> {
    const { task, reply, attempt } = data;
    const send = (entry: ReplyBody) => this.#client.xadd(reply, 'NOMKSTREAM', '*', 'e', stringify({ ...entry, protocol: PROTOCOL_VERSION }));
    // Ordering holds because every entry goes through this one connection, in call order. A reply
    // stream that is gone means its host is gone (or Redis lost it): nobody waits for this child any more.
    let child: PoolChild | undefined;
    /** Set once its host's reply stream was found gone: the child is stopped and its attempt sends no end. */
    let orphaned = false;
    // Events Redis refused (out of memory, a read-only replica) leave a gap in the host's log: the
    // child is stopped, and its end says why. The end waits for the last batch's answer to know.
    let unsent: unknown;
    let sending: Promise<void> = Promise.resolve();
    const quiet = (entry: ReplyBody) =>
      void (sending = send(entry).then(
        (id) => void (id === null && child?.orphan()),
        (error: unknown) => {
          if (unsent !== undefined) return;
          unsent = error;
          this.#options.log?.(`job ${run}: its events could not be sent to its host: ${describeError(error)}; stopping its child`);
          child?.cancel();
        },
      ));
    let result: SubagentResult;
    // Not run: a child cancelled before it was taken, or one whose host is gone (its reply stream
    // expires a minute after its host stopped refreshing it): nobody would read what it does.
    const [cancelled, replying] = await Promise.all([this.#client.exists(cancelKey(this.#options.queue, run)), this.#client.exists(reply)]);
    if (replying === 0) this.#options.log?.(`job ${run} not run: its host is gone (its reply stream no longer exists)`);
    if (cancelled === 1 || replying === 0) {
      result = { output: [], stopReason: 'aborted' };
      // Sent no end, as a child stopped for it (below): only a cancel is answered `aborted`.
      if (cancelled !== 1) return encode(result);
    } else {
      // A child waits for a slot of the pool (more children than threads) where a cancel reaches it.
      const waiting = new AbortController();
      let thread: ThreadChild | undefined;
      let budgetStop: BudgetStop | undefined;
      const sink = {
        attach: (threadId: number) => {
          // A stop sent before the thread took the child may have found no port: it goes again.
          if (budgetStop) thread?.budgetStop(budgetStop);
          quiet({ run, kind: 'attach', placement: { hostname: hostname(), pid: process.pid, threadId, attempt } });
        },
        events: (events: SessionEvent[]) => quiet({ run, kind: 'events', attempt, events }),
      };
      const onThread = async (): Promise<SubagentResult> => {
        let slot: Slot;
        try {
          slot = await this.#pool.admission.acquire({ child: run, parent: '', parentOf: () => undefined, signal: waiting.signal });
        } catch (error) {
          return waiting.signal.aborted ? { output: [], stopReason: 'aborted' } : { output: [], stopReason: 'error', diagnostic: describeError(error) };
        }
        if (waiting.signal.aborted) {
          slot.release();
          return { output: [], stopReason: 'aborted' };
        }
        const started = new ThreadChild(this.#pool, run, task, noHostTools, sink, () => slot.release());
        thread = started;
        const outcome = await started.outcome.finally(() => started.release());
        return outcome.type === 'result' ? outcome.result : { output: [], diagnostic: outcome.diagnostic, stopReason: outcome.aborted ? 'aborted' : 'error' };
      };
      const stopBudget = (stop: BudgetStop) => {
        if (budgetStop) return;
        budgetStop = stop;
        thread?.budgetStop(stop);
      };
      const cancel = () => (thread ? thread.cancel() : waiting.abort());
      const orphan = () => {
        if (!orphaned) this.#options.log?.(`job ${run}: its host is gone (its reply stream no longer exists): stopping its child`);
        orphaned = true;
        cancel();
      };
      child = { result: onThread(), cancel, orphan, budgetStop: stopBudget, reply, run };
      this.#active.add(child);
      lock.child = child;
      if (lock.lost) child.cancel();
      // A cancel or a tree's stop published before this child was listed is caught by its key.
      if ((await this.#client.exists(cancelKey(this.#options.queue, run))) === 1) child.cancel();
      await this.#readBudgetStop(run, child).catch(() => undefined);
      try {
        result = await child.result;
      } finally {
        this.#active.delete(child);
        this.#checkDrain();
      }
      await sending;
      // An attempt whose lock is gone (Redis lost it, or the job was taken back as stalled) is no
      // longer counted on: unless its child completed anyway, it sends no end, and its host learns
      // from the queue what became of the job (restarted while attempts remain, else `error`).
      if (lock.lost && result.stopReason !== 'completed') return encode(result);
      // Likewise one stopped because its host's reply stream was gone: a host that made its stream
      // anew (Redis lost its data) would read the `aborted` end as a cancel nobody asked for.
      if (orphaned && result.stopReason !== 'completed') return encode(result);
      if (unsent !== undefined) {
        result = { ...result, stopReason: 'error', diagnostic: `the worker could not send the child’s events to its host (${describeError(unsent)}) and stopped the child` };
      }
    }
    await send({ run, kind: 'end', attempt, result });
    return encode(result);
  }

  /**
   * A job of another protocol version is not run: this worker would misread it (an option it does
   * not enforce, a field it reads otherwise); nor is one of this version that no host of it queues.
   * Its host, when the job names one, gets an `end` saying why and the job leaves the queue for
   * good, rather than wait for a worker of its version that may never come.
   */
  async #refuse(run: string, data: unknown, why: string): Promise<Encoded> {
    this.#options.log?.(`job ${run} refused: ${why}`);
    const result: SubagentResult = { output: [], stopReason: 'error', diagnostic: `the queue worker ${hostname()}[${process.pid}] did not run the child: ${why}` };
    const { reply, attempt } = (data ?? {}) as Partial<QueueJobData>;
    if (isReplyKey(this.#options.queue, reply)) {
      const entry: ReplyEntry = { run, protocol: PROTOCOL_VERSION, kind: 'end', attempt: attemptNumber(attempt) ? attempt : 1, result };
      await this.#client.xadd(reply, 'NOMKSTREAM', '*', 'e', stringify(entry));
    }
    return encode(result);
  }

  /** While closing: with no child running and Redis not connected, nothing is left to wait for. */
  #checkDrain(): void {
    if (this.#active.size === 0 && this.#client.status !== 'ready') this.#drainOffline?.();
  }

  /**
   * Stops taking jobs and lets running children finish; those still running after `graceMs` are
   * cancelled (and terminated after the cancel grace). Idempotent.
   */
  close(graceMs = 10_000): Promise<void> {
    this.#closing ??= (async () => {
      clearInterval(this.#sweeper);
      const drained = this.#worker?.close() ?? Promise.resolve();
      const timer = setTimeout(() => {
        for (const child of this.#active.values()) child.cancel();
      }, graceMs);
      // BullMQ's close waits for Redis; with Redis gone the drain ends once the children have (their
      // last replies could not be sent anyway), and at the latest some time after their cancel grace.
      let giveUp: NodeJS.Timeout | undefined;
      const limit = new Promise<void>((resolve) => (giveUp = setTimeout(resolve, Math.min(graceMs + this.#pool.options.cancelGraceMs + 5000, MAX_TIMER_MS))));
      const offline = new Promise<void>((resolve) => (this.#drainOffline = resolve));
      const check = () => this.#checkDrain();
      this.#client.on('close', check);
      check();
      try {
        await Promise.race([drained, limit, offline]);
      } finally {
        this.#client.off('close', check);
        clearTimeout(giveUp);
        clearTimeout(timer);
        await this.#pool.close();
        // A client that is not connected would queue its QUIT behind its unsent commands for good.
        await Promise.all([this.#subscriber, this.#client].map((client) => (client.status === 'ready' ? bounded(client.quit()) : undefined)));
        this.#subscriber.disconnect();
        this.#client.disconnect();
      }
    })();
    return this.#closing;
  }
}
