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

/**
 * Resolves true when `done` settles within `ms`, false otherwise; once `hurry` is aborted, the wait
 * lasts one more turn of the event loop at most. The timer never holds the loop.
 */
export async function within(done: Promise<unknown>, ms: number, hurry?: AbortSignal): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  let cut: (() => void) | undefined;
  const expired = new Promise<false>((resolve) => {
    const expireIn = (after: number) => {
      clearTimeout(timer);
      timer = setTimeout(() => resolve(false), after);
      timer.unref();
    };
    expireIn(hurry?.aborted ? 0 : ms);
    if (hurry && !hurry.aborted) hurry.addEventListener('abort', (cut = () => expireIn(0)), { once: true });
  });
  try {
    return await Promise.race([done.then(() => true), expired]);
  } finally {
    clearTimeout(timer);
    if (cut) hurry?.removeEventListener('abort', cut);
  }
}
