// What the control tools know of each child's activity: `running` between its `subagent/start`
// and `subagent/end`, then `idle` (or `failed` when it ended in error); waiters hear every end.
import { onAbort } from '../seam/abort.js';
import type { Agent } from '../seam/agent-types.js';
import type { SessionId } from '../seam/content.js';
import type { SubagentService } from '../service/service.js';

export type AgentStatus = 'running' | 'idle' | 'failed';

export class AgentStatusTracker {
  readonly #status = new Map<SessionId, AgentStatus>();
  readonly #waiters = new Set<(id: SessionId) => void>();
  readonly #agents: { get(id: SessionId): Agent | undefined };
  readonly #off: (() => void)[];

  constructor(service: SubagentService, agents: { get(id: SessionId): Agent | undefined }) {
    this.#agents = agents;
    this.#off = [
      service.on('subagent/start', (info) => this.#status.set(info.id, 'running')),
      service.on('subagent/end', (info) => {
        this.#status.set(info.id, info.stopReason === 'error' ? 'failed' : 'idle');
        for (const waiter of [...this.#waiters]) waiter(info.id);
      }),
    ];
  }

  /** A child started before the tracker existed reads as its live agent shows it. */
  statusOf(id: SessionId): AgentStatus {
    return this.#status.get(id) ?? (this.#agents.get(id)?.status === 'running' ? 'running' : 'idle');
  }

  /** Calls `listener` with the id of every child that settles from now on; returns the unsubscriber. */
  onSettled(listener: (id: SessionId) => void): () => void {
    this.#waiters.add(listener);
    return () => void this.#waiters.delete(listener);
  }

  dispose(): void {
    for (const off of this.#off.splice(0)) off();
    this.#waiters.clear();
  }
}

/**
 * Resolves `true` once `ready()` holds (checked now and whenever a child settles), or `false`
 * when `timeoutMs` passes or `signal` aborts first. Owns its timer and subscription.
 */
export function waitUntil(tracker: AgentStatusTracker, ready: () => boolean, timeoutMs: number, signal: AbortSignal): Promise<boolean> {
  if (ready()) return Promise.resolve(true);
  if (signal.aborted) return Promise.resolve(false);
  return new Promise((resolve) => {
    const finish = (value: boolean) => {
      off();
      clearTimeout(timer);
      unwatch();
      resolve(value);
    };
    const off = tracker.onSettled(() => {
      if (ready()) finish(true);
    });
    const timer = setTimeout(() => finish(false), timeoutMs);
    const unwatch = onAbort(signal, () => finish(false));
  });
}
