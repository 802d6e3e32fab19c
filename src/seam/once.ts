// Teardown helpers: a memoized async teardown whose every call (concurrent, repeated or re-entrant
// from inside the teardown itself) gets the same promise, and a wait for settlement either way.

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
