// Memoized async teardown: every call (concurrent, repeated or re-entrant from inside the
// teardown itself) gets the same promise, and the teardown runs exactly once.

/** Wraps `teardown` so it runs once, starting on a microtask after the first call returns. */
export function once(teardown: () => Promise<void>): () => Promise<void> {
  let promise: Promise<void> | undefined;
  // Deferring the body means the promise is stored before any teardown code can call back in.
  return () => (promise ??= Promise.resolve().then(teardown));
}
