// Write-behind batching: appends queue per session and are committed together, one transaction per
// batch, when a short timer fires or on an explicit commit. Storage-agnostic: the commit is a callback.
import type { SessionId } from '../seam/content.js';

/** Everything queued for one session since its last commit. */
export interface PendingBatch<T> {
  readonly sessionId: SessionId;
  /** Seq of `items[0]`; the rest follow contiguously. */
  readonly firstSeq: number;
  readonly items: T[];
}

/**
 * Commits `batches` in one transaction, synchronously. Throwing means nothing was committed.
 * Returns the sessions whose batch was refused (and skipped) while the others committed. Outside an
 * explicit `commit()` the store should not wait for another connection's lock on the thread.
 */
export type CommitBatches<T> = (batches: readonly PendingBatch<T>[]) => ReadonlyMap<SessionId, Error>;

/** How a queue waits out another connection's lock without blocking the thread. */
export interface LockPatience {
  /** How long a flush tries before it fails with the lock error. */
  readonly patienceMs: number;
  /** The commit failed only because another connection holds the lock. */
  busy(error: unknown): boolean;
}

interface Entry<T> {
  batch: PendingBatch<T>;
  promise: Promise<void>;
  resolve: () => void;
  reject: (error: Error) => void;
}

/** Backoff of background retries after a failed commit. */
const MIN_RETRY_MS = 50;
const MAX_RETRY_MS = 5_000;
/** Longest pause between a flush's tries at a locked store. */
const MAX_FLUSH_PAUSE_MS = 25;

/**
 * The pending-write queue of one store. The timer is armed (and ref'd, so the process stays alive
 * while data is unwritten) only while writes are pending; every commit clears it. A failed commit
 * keeps its batches: the next commit retries them and their append promises stay pending until then.
 */
export class WriteQueue<T> {
  readonly #commitBatches: CommitBatches<T>;
  readonly #intervalMs: number;
  readonly #pending = new Map<SessionId, Entry<T>>();
  #timer: NodeJS.Timeout | undefined;
  readonly #patience: LockPatience;
  /** Delay of the next retry after failed background commits (0: the last commit did not fail). */
  #retryMs = 0;
  /** The flush under way: later flushes join it (one wait for a lock, not one each). */
  #flushing: Promise<void> | undefined;

  constructor(commitBatches: CommitBatches<T>, intervalMs: number, patience: LockPatience) {
    this.#commitBatches = commitBatches;
    this.#intervalMs = intervalMs;
    this.#patience = patience;
  }

  /** Queues `items` (seqs from `firstSeq`); resolves once they are committed. */
  enqueue(sessionId: SessionId, firstSeq: number, items: readonly T[]): Promise<void> {
    let entry = this.#pending.get(sessionId);
    if (entry === undefined) {
      let resolve!: () => void;
      let reject!: (error: Error) => void;
      const promise = new Promise<void>((res, rej) => {
        resolve = res;
        reject = rej;
      });
      entry = { batch: { sessionId, firstSeq, items: [] }, promise, resolve, reject };
      this.#pending.set(sessionId, entry);
    }
    for (const item of items) entry.batch.items.push(item);
    this.#timer ??= setTimeout(() => this.#onTimer(), this.#intervalMs);
    return entry.promise;
  }

  /** True when writes for `sessionId` are queued. */
  has(sessionId: SessionId): boolean {
    return this.#pending.has(sessionId);
  }

  /** The seq after the last item queued for `sessionId`; undefined when none is queued. */
  queuedEnd(sessionId: SessionId): number | undefined {
    const batch = this.#pending.get(sessionId)?.batch;
    return batch === undefined ? undefined : batch.firstSeq + batch.items.length;
  }

  /** Commits everything pending now, synchronously; throws the storage error if that fails. */
  commit(): void {
    try {
      this.#attempt();
    } catch (error) {
      this.#retryLater();
      throw error;
    }
  }

  /** One try at committing what is pending; a failure keeps it pending. */
  #attempt(): void {
    if (this.#timer !== undefined) {
      clearTimeout(this.#timer);
      this.#timer = undefined;
    }
    if (this.#pending.size === 0) return;
    const entries = [...this.#pending.values()];
    const refused = this.#commitBatches(entries.map((entry) => entry.batch));
    this.#retryMs = 0;
    this.#pending.clear();
    for (const entry of entries) {
      const error = refused.get(entry.batch.sessionId);
      if (error === undefined) entry.resolve();
      else entry.reject(error);
    }
  }

  /**
   * What a failed commit kept is tried again, backing off, also when no append or flush comes: a
   * store locked for long neither keeps data unwritten for good nor is retried in a spin.
   */
  #retryLater(): void {
    this.#retryMs = Math.min(MAX_RETRY_MS, Math.max(this.#intervalMs, MIN_RETRY_MS, this.#retryMs * 2));
    this.#timer = setTimeout(() => this.#onTimer(), this.#retryMs);
  }

  /**
   * Commits everything pending; resolves once that is committed. While another connection holds the
   * lock it tries again, pausing on timers (the thread is not blocked), until `patienceMs` has passed
   * since this flush began, then throws the lock error. A flush called meanwhile joins this one.
   */
  flush(): Promise<void> {
    if (this.#pending.size === 0) return Promise.resolve();
    // Joined, then tried again: what was appended after the flush under way last tried (by code its
    // commit woke, before that flush settled) is committed too before this one resolves.
    if (this.#flushing) return this.#flushing.then(() => this.flush());
    this.#flushing = this.#flushPatiently().finally(() => (this.#flushing = undefined));
    return this.#flushing;
  }

  async #flushPatiently(): Promise<void> {
    // On the monotonic clock: a wall clock stepped forward meanwhile does not cut the patience short.
    const deadline = performance.now() + this.#patience.patienceMs;
    for (let pauseMs = 1; ; pauseMs = Math.min(MAX_FLUSH_PAUSE_MS, pauseMs * 2)) {
      try {
        this.#attempt();
        return;
      } catch (error) {
        const left = deadline - performance.now();
        if (left <= 0 || !this.#patience.busy(error)) {
          this.#retryLater();
          throw error;
        }
        // Ref'd, as the write-behind timer is: the process does not exit under a pending flush.
        await new Promise((resume) => setTimeout(resume, Math.min(pauseMs, left)));
      }
    }
  }

  /** Final flush; if it fails, every pending append is rejected with `failure(error)`, which is thrown. */
  async close(failure: (error: unknown) => Error = (error) => (error instanceof Error ? error : new Error(String(error)))): Promise<void> {
    try {
      // Joins a flush under way (its deadline); nothing is appended meanwhile, so it commits all.
      await this.flush();
    } catch (error) {
      clearTimeout(this.#timer);
      this.#timer = undefined;
      const failed = failure(error);
      for (const entry of this.#pending.values()) entry.reject(failed);
      this.#pending.clear();
      throw failed;
    }
  }

  #onTimer(): void {
    this.#timer = undefined;
    try {
      // A locked store is tried again on the backoff timer.
      this.commit();
    } catch {
      // Kept, and retried by the timer commit() armed (`flush()` surfaces the error if it repeats).
    }
  }
}
