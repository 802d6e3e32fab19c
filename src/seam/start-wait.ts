// A start that must wait for room before its child can exist (a worker pool with every slot taken)
// may say so, with the child's id, before it waits. The background `subagent` tool listens, so
// that its call answers at once instead of holding its turn until a slot frees. Keyed by the
// start's signal, which the service forwards to the one the provider gets; nothing is copied into
// requests, and a provider that never says so simply has its start awaited.
import type { SessionId } from './content.js';

type WaitListener = (childId: SessionId) => void;

const listeners = new WeakMap<AbortSignal, WaitListener>();

/** Calls `listener` if the start given `signal` has to wait for room; returns the remover. */
export function onStartWaits(signal: AbortSignal, listener: WaitListener): () => void {
  listeners.set(signal, listener);
  return () => {
    if (listeners.get(signal) === listener) listeners.delete(signal);
  };
}

/** The listener of the caller's signal, on the signal the provider gets. */
export function forwardStartWaits(from: AbortSignal, to: AbortSignal): void {
  const listener = listeners.get(from);
  if (listener !== undefined) listeners.set(to, listener);
}

/** Said by a provider whose start, for the child `childId`, now waits for room. */
export function startWaits(signal: AbortSignal, childId: SessionId): void {
  const listener = listeners.get(signal);
  listeners.delete(signal);
  listener?.(childId);
}
