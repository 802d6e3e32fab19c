// One listener per caller's AbortSignal, however many children, listings or waits watch it. A host
// fans out: one controller aborting fifty children is ordinary, and fifty 'abort' listeners on one
// signal make Node print a MaxListenersExceededWarning (its limit is 10) on the caller's stderr.

interface Fanout {
  readonly watchers: Set<(reason: unknown) => void>;
  readonly listener: () => void;
}

const fanouts = new WeakMap<AbortSignal, Fanout>();

/**
 * The reason `signal` aborted with. A caller's signal whose `reason` getter throws gives that throw
 * instead: read in an abort listener, the throw would end the host's process.
 */
export function abortReason(signal: AbortSignal): unknown {
  try {
    return signal.reason;
  } catch (error) {
    return error;
  }
}

/**
 * Calls `callback` once when `signal` aborts, like `addEventListener('abort', callback, { once: true })`,
 * but every callback on one signal shares a single listener. Returns the removal (idempotent). The
 * signal's listener goes with its last callback, so a long-lived signal keeps nothing between uses.
 * As with listeners: an already aborted signal never calls back, and a callback removed while the
 * abort is being dispatched is not called. Callbacks get the abort reason, read once (see
 * {@link abortReason}), and must not throw (every caller's only settles or aborts something of its
 * own). A signal whose `addEventListener` throws throws here, and keeps nothing.
 */
export function onAbort(signal: AbortSignal, callback: (reason: unknown) => void): () => void {
  let fanout = fanouts.get(signal);
  if (fanout === undefined) {
    const watchers = new Set<(reason: unknown) => void>();
    const listener = () => {
      fanouts.delete(signal);
      const reason = abortReason(signal);
      for (const watcher of watchers) watcher(reason);
      watchers.clear();
    };
    signal.addEventListener('abort', listener, { once: true });
    fanout = { watchers, listener };
    fanouts.set(signal, fanout);
  }
  const { watchers, listener } = fanout;
  // A wrapper per call: the same function watched twice is removed once per watch.
  const watcher = (reason: unknown) => callback(reason);
  watchers.add(watcher);
  return () => {
    // After the abort the set is empty, so only a removal before it can be the last.
    if (!watchers.delete(watcher) || watchers.size > 0) return;
    fanouts.delete(signal);
    signal.removeEventListener('abort', listener);
  };
}

/**
 * `work`, or a rejection with `abortError(reason)` as soon as `signal` aborts (at once if it has):
 * for waits that cannot be stopped themselves (an import whose top-level await never settles). What
 * `work` does later is dropped. A signal that cannot be read or watched throws (synchronously).
 */
export function unlessAborted<T>(work: Promise<T>, signal: AbortSignal | undefined, abortError: (reason: unknown) => Error): Promise<T> {
  if (signal === undefined) return work;
  work.catch(() => undefined);
  if (signal.aborted) return Promise.reject(abortError(abortReason(signal)));
  let reject: (error: Error) => void = () => undefined;
  const aborted = new Promise<never>((_, rejectAborted) => (reject = rejectAborted));
  const stop = onAbort(signal, (reason) => reject(abortError(reason)));
  return Promise.race([work, aborted]).finally(stop);
}
