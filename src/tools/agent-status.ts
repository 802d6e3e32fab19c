// What the control tools know of each child's activity: `running` between its `subagent/start`
// and `subagent/end`, then `idle` (or `failed` when it ended in error); waiters hear every end.
import { onAbort } from '../seam/abort.js';
import type { Agent } from '../seam/agent-types.js';
import type { SessionId } from '../seam/content.js';
import type { SubagentService } from '../service/service.js';

export type AgentStatus = 'running' | 'idle' | 'failed';

/** Failed children remembered; older failures read as their live agent shows them (a long-lived host must not keep one entry per child). */
export const FAILED_KEPT = 1024;

export class AgentStatusTracker {
  readonly #status = new Map<SessionId, AgentStatus>();
  /** How many entries of `#status` are `failed`. */
  #failed = 0;
  /** Each hears the id of every child that settles, and `undefined` once when the tracker is disposed. */
  readonly #waiters = new Set<(id: SessionId | undefined) => void>();
  #disposed = false;
  readonly #agents: { get(id: SessionId): Agent | undefined };
  readonly #off: (() => void)[];

  constructor(service: SubagentService, agents: { get(id: SessionId): Agent | undefined }) {
    this.#agents = agents;
    this.#off = [
      service.on('subagent/start', (info) => this.#set(info.id, 'running')),
      service.on('subagent/end', (info) => {
        // Only running and failed children are kept: an idle one reads as its live agent shows it.
        this.#set(info.id, info.stopReason === 'error' ? 'failed' : undefined);
        for (const waiter of [...this.#waiters]) waiter(info.id);
      }),
    ];
  }

  /** Sets (or with undefined forgets) one child's status; past FAILED_KEPT failures, the oldest is forgotten. */
  #set(id: SessionId, status: AgentStatus | undefined): void {
    if (this.#status.get(id) === 'failed') this.#failed--;
    this.#status.delete(id);
    if (status === undefined) return;
    this.#status.set(id, status);
    if (status !== 'failed' || ++this.#failed <= FAILED_KEPT) return;
    for (const [oldest, kept] of this.#status) {
      if (kept !== 'failed') continue;
      this.#status.delete(oldest);
      this.#failed--;
      break;
    }
  }

  /** Entries kept (for leak checks). */
  get size(): number {
    return this.#status.size;
  }

  /** A child started before the tracker existed reads as its live agent shows it. */
  statusOf(id: SessionId): AgentStatus {
    return this.#status.get(id) ?? (this.#agents.get(id)?.status === 'running' ? 'running' : 'idle');
  }

  /**
   * Calls `listener` with the id of every child that settles from now on, and with `undefined`
   * when the tracker is disposed (at once if it is already); returns the unsubscriber.
   */
  onSettled(listener: (id: SessionId | undefined) => void): () => void {
    if (this.#disposed) {
      queueMicrotask(() => listener(undefined));
      return () => undefined;
    }
    this.#waiters.add(listener);
    return () => void this.#waiters.delete(listener);
  }

  /** Stops tracking; a wait in progress ends at once with what it sees. */
  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    for (const off of this.#off.splice(0)) off();
    const waiters = [...this.#waiters];
    this.#waiters.clear();
    for (const waiter of waiters) waiter(undefined);
  }
}

/**
 * Resolves `true` once `ready()` holds (checked now, whenever a child settles and whenever one of
 * `alsoWhen` settles), or `false` when `timeoutMs` passes or `signal` aborts first. Owns its timer
 * and subscription.
 */
export function waitUntil(tracker: AgentStatusTracker, ready: () => boolean, timeoutMs: number, signal: AbortSignal, alsoWhen: readonly Promise<void>[] = []): Promise<boolean> {
  if (ready()) return Promise.resolve(true);
  if (signal.aborted) return Promise.resolve(false);
  return new Promise((resolve) => {
    let done = false;
    const finish = (value: boolean) => {
      if (done) return;
      done = true;
      off();
      clearTimeout(timer);
      unwatch();
      resolve(value);
    };
    const off = tracker.onSettled((id) => {
      // Disposed (the control tools were removed): the wait ends with what it sees now.
      if (id === undefined) finish(ready());
      else if (ready()) finish(true);
    });
    const timer = setTimeout(() => finish(false), timeoutMs);
    const unwatch = onAbort(signal, () => finish(false));
    for (const settled of alsoWhen) void settled.then(() => ready() && finish(true));
  });
}
