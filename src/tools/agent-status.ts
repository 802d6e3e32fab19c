// What the control tools know of each child's activity: `running` between its `subagent/start`
// and `subagent/end`, then `idle` (or `failed` when it ended in error); waiters hear every end, and
// every interrupt that leaves a child's queued messages parked (its work stops, its epoch stays open).
import { onAbort } from '../seam/abort.js';
import type { Agent } from '../seam/agent-types.js';
import type { SessionId } from '../seam/content.js';
import type { SubagentService } from '../service/service.js';
import { storedStatuses, type StoredStatusHost } from './stored-status.js';

export type AgentStatus = 'running' | 'idle' | 'failed';

/** A live agent as the tracker reads it: a host's agent also shows the turns its inbox still holds. */
export type TrackedAgent = Agent & { readonly pendingTurns?: number };

/**
 * Whether an interrupt parked the agent: no turn runs, yet queued messages wait (a wake takes them
 * up; nothing starts them by itself). Any other idle agent has an empty queue.
 */
function parked(agent: TrackedAgent): boolean {
  return agent.status === 'idle' && (agent.pendingTurns ?? 0) > 0;
}

/** Failed children remembered; older failures read as their live agent shows them (a long-lived host must not keep one entry per child). */
export const FAILED_KEPT = 1024;

/**
 * Statuses read from the logs of children in no live place, remembered (the most recent reads) until
 * the child runs again; a single read larger than this is kept whole, until a later read trims it.
 */
export const STORED_KEPT = 1024;

export class AgentStatusTracker {
  readonly #status = new Map<SessionId, AgentStatus>();
  /** How many entries of `#status` are `failed`. */
  #failed = 0;
  /** Each hears the id of every child that settles, and `undefined` once when the tracker is disposed. */
  readonly #waiters = new Set<(id: SessionId | undefined) => void>();
  #disposed = false;
  readonly #agents: { get(id: SessionId): TrackedAgent | undefined };
  /** Where the status of a child in no live place is read: its durable log. */
  readonly #store: StoredStatusHost | undefined;
  /** What those reads found, for children this tracker saw neither start nor end since. */
  readonly #stored = new Map<SessionId, 'idle' | 'failed'>();
  /** For each read of logs in progress: the children that started or ended meanwhile (what it read of them is stale). */
  readonly #reads = new Set<Set<SessionId>>();
  readonly #off: (() => void)[];
  /** The unsubscribers of the running children's logs. */
  readonly #watched = new Map<SessionId, () => void>();

  constructor(service: SubagentService, agents: { get(id: SessionId): TrackedAgent | undefined }, store?: StoredStatusHost) {
    this.#agents = agents;
    this.#store = store;
    this.#off = [
      service.on('subagent/start', (info) => {
        this.#set(info.id, 'running');
        this.#watch(info.id);
      }),
      service.on('subagent/end', (info) => {
        this.#watched.get(info.id)?.();
        this.#watched.delete(info.id);
        // Only running and failed children are kept: an idle one reads as its live agent shows it.
        this.#set(info.id, info.stopReason === 'error' ? 'failed' : undefined);
        this.#notify(info.id);
      }),
    ];
  }

  #notify(id: SessionId): void {
    for (const waiter of [...this.#waiters]) waiter(id);
  }

  /** Waiters hear a running child whose turn ended parked: its work stopped, though no `subagent/end` came. */
  #watch(id: SessionId): void {
    const agent = this.#agents.get(id);
    if (!agent) return;
    const off = agent.subscribe((event) => {
      if (event.type !== 'turn/end') return;
      void agent.whenIdle().then(() => {
        if (this.#watched.get(id) === off && parked(agent)) this.#notify(id);
      });
    });
    this.#watched.set(id, off);
  }

  /** Sets (or with undefined forgets) one child's status; past FAILED_KEPT failures, the oldest is forgotten. */
  #set(id: SessionId, status: AgentStatus | undefined): void {
    // It ran here: what its log said before is out of date.
    this.#stored.delete(id);
    for (const touched of this.#reads) touched.add(id);
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
    return this.#status.size + this.#stored.size;
  }

  /**
   * Reads the status of those of `ids` this tracker knows nothing of and that are in no live place
   * (evicted, or left by an earlier run of the host) from their logs: a child whose last stretch
   * failed before a restart still reads `failed`. Never rejects.
   */
  async refresh(ids: Iterable<SessionId>): Promise<void> {
    const store = this.#store;
    if (!store || this.#disposed) return;
    const unknown = [...new Set(ids)].filter((id) => !this.#status.has(id) && !this.#stored.has(id) && !this.#agents.get(id));
    if (unknown.length === 0) return;
    const touched = new Set<SessionId>();
    this.#reads.add(touched);
    let statuses;
    try {
      statuses = await storedStatuses(store, unknown);
    } catch {
      return;
    } finally {
      this.#reads.delete(touched);
    }
    let kept = 0;
    for (const [id, status] of statuses) {
      // Started (or ended) here while its log was read: the tracker's own word stands.
      if (touched.has(id) || this.#agents.get(id)) continue;
      this.#stored.delete(id);
      this.#stored.set(id, status);
      kept++;
    }
    // The oldest reads go first, never this one's: its caller reads them next (evicted, a failed
    // child would read idle), and the next call of a parent with that many children reads no log.
    for (const oldest of this.#stored.keys()) {
      if (this.#stored.size <= Math.max(STORED_KEPT, kept)) break;
      this.#stored.delete(oldest);
    }
  }

  /**
   * A child started before the tracker existed reads as its live agent shows it; a running one that
   * an interrupt parked (its queued messages wait for its next wake) reads `idle`.
   */
  statusOf(id: SessionId): AgentStatus {
    const kept = this.#status.get(id);
    const agent = this.#agents.get(id);
    if (kept === 'running' && agent && parked(agent)) return 'idle';
    if (kept) return kept;
    if (agent) return agent.status === 'running' ? 'running' : 'idle';
    return this.#stored.get(id) ?? 'idle';
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
    for (const off of this.#watched.values()) off();
    this.#watched.clear();
    const waiters = [...this.#waiters];
    this.#waiters.clear();
    for (const waiter of waiters) waiter(undefined);
  }
}

/**
 * Resolves `true` once `ready()` holds (checked now, whenever a child settles and whenever one of
 * `alsoWhen` calls back: each subscribes a listener and returns its removal), or `false` when
 * `timeoutMs` passes or `signal` aborts first. Owns its timer and subscriptions.
 */
export function waitUntil(
  tracker: AgentStatusTracker,
  ready: () => boolean,
  timeoutMs: number,
  signal: AbortSignal,
  alsoWhen: readonly ((listener: () => void) => () => void)[] = [],
): Promise<boolean> {
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
      for (const unwait of unwaits) unwait();
      resolve(value);
    };
    const off = tracker.onSettled((id) => {
      // Disposed (the control tools were removed): the wait ends with what it sees now.
      if (id === undefined) finish(ready());
      else if (ready()) finish(true);
    });
    const timer = setTimeout(() => finish(false), timeoutMs);
    const unwatch = onAbort(signal, () => finish(false));
    // Subscriptions, not reactions on promises: a wait that times out keeps nothing behind.
    const unwaits = alsoWhen.map((subscribe) => subscribe(() => ready() && finish(true)));
  });
}
