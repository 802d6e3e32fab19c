// Memo helpers: a memoized async teardown whose every call (concurrent, repeated or re-entrant from
// inside the teardown itself) gets the same promise, a wait for settlement either way, and a value
// built on first use (schemas: building them at module load would slow every worker thread's start),
// and a wait bounded in time.

/** Wraps `teardown` so it runs once, starting on a microtask after the first call returns. */
export function once(teardown: () => Promise<void>): () => Promise<void> {
  let promise: Promise<void> | undefined;
  // Deferring the body means the promise is stored before any teardown code can call back in.
  return () => (promise ??= Promise.resolve().then(teardown));
}

/** Resolves once `promise` settles, whether it fulfils or rejects (its outcome stays with it). */
export function settled(promise: PromiseLike<unknown>): Promise<void> {
  return Promise.resolve(promise).then(
    () => undefined,
    () => undefined,
  );
}

/** Returns a getter that builds the value on its first call and returns the same value after. */
export function lazy<T>(build: () => T): () => T {
  let value: { current: T } | undefined;
  return () => (value ??= { current: build() }).current;
}

/** Resolves true when `done` settles within `ms`, false otherwise; the timer never holds the loop. */
export async function within(done: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), ms);
    timer.unref();
  });
  try {
    return await Promise.race([done.then(() => true), expired]);
  } finally {
    clearTimeout(timer);
  }
}

/** What `Abandonment.wait` resolves with when it stopped waiting. */
export const ABANDONED: unique symbol = Symbol('abandoned');

/**
 * Waits that give up once `signal` has been aborted for `graceMs`: for work that should honour a
 * cancel but may not (a tool or model adapter ignoring its signal), the caller stops waiting and the
 * work runs on unobserved. One abort listener and one timer however many waits (a step's chunks, a
 * batch of tool calls); the timer holds the loop, so a close waiting on this gets to its end.
 * `dispose()` once no wait is left.
 */
export class Abandonment {
  readonly #signal: AbortSignal;
  readonly #graceMs: number;
  readonly #waiting = new Set<() => void>();
  #timer: NodeJS.Timeout | undefined;
  #fired = false;
  readonly #arm = () => {
    this.#timer = setTimeout(() => {
      this.#fired = true;
      for (const give of [...this.#waiting]) give();
    }, this.#graceMs);
  };

  constructor(signal: AbortSignal, graceMs: number) {
    this.#signal = signal;
    this.#graceMs = graceMs;
    if (signal.aborted) this.#arm();
    else signal.addEventListener('abort', this.#arm, { once: true });
  }

  /** Resolves as `work` does, or with `ABANDONED` once the grace after the abort ran out first. */
  wait<T>(work: Promise<T>): Promise<T | typeof ABANDONED> {
    if (this.#fired) return Promise.resolve(ABANDONED);
    return new Promise<T | typeof ABANDONED>((resolve, reject) => {
      const give = () => resolve(ABANDONED);
      this.#waiting.add(give);
      work.then(
        (value) => {
          this.#waiting.delete(give);
          resolve(value);
        },
        (error: unknown) => {
          this.#waiting.delete(give);
          reject(error);
        },
      );
    });
  }

  dispose(): void {
    clearTimeout(this.#timer);
    this.#signal.removeEventListener('abort', this.#arm);
    this.#waiting.clear();
  }
}

/** Waits through `abandonment` when there is one, else as long as `work` takes. */
export function unlessAbandoned<T>(abandonment: Abandonment | undefined, work: Promise<T>): Promise<T | typeof ABANDONED> {
  return abandonment ? abandonment.wait(work) : work;
}
