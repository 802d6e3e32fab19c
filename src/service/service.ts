// SubagentService: the provider registry, one-shot `start` with its run wrapper and lifecycle
// events, and the catalog. It never knows how a child runs; providers do.
import type { Agent } from '../seam/agent-types.js';
import { deepFreeze, newId, type ContentBlock, type MessageId, type MessageSource, type SessionId } from '../seam/content.js';
import { SubagentError, describeError, isSubagentError } from '../seam/errors.js';
import type {
  ContinuableStartSpec,
  SubagentDescendantListEntry,
  SubagentEvents,
  SubagentInterruptAuthority,
  SubagentListEntry,
  SubagentProvider,
  SubagentRun,
  SubagentStartRequest,
} from '../seam/types.js';
import type { Logger } from '../runtime/session-store.js';
import { listingProblem } from './catalog-rows.js';
import { BudgetLedger, CONFIGURED_BUDGET_REQUESTS, type TreeAdmission } from './budget-ledger.js';
import { HeldWork } from './held-work.js';
import { SubagentEventBus } from './events.js';
import { SubtreeUsage } from './subtree-usage.js';
import { addUsage, emptyUsage } from '../seam/usage.js';
import { timerOption } from '../seam/parse.js';
import { forwardStartWaits } from '../seam/start-wait.js';
import { ProviderRegistry, snapshotProvider } from './registry.js';
import { ManagedRun, callerAbort, publishableRun, type CallerAbort } from './run.js';
import { resolveStartRequest } from './start-request.js';
import { type ContinuationDeps, ContinuationManager } from './continuation/manager.js';
import { isExactLive } from './continuation/authority.js';
import { PARENT_GONE } from './continuation/parent-watch.js';
import { PendingCalls, drainAll, drainChildren, drainDescendants, interrupt, reportFrom } from './continuation/controls.js';

export interface SubagentServiceOptions {
  logger?: Logger | undefined;
  /**
   * Listing implementation (the catalog); without one, listing rejects `PERSISTENCE_UNAVAILABLE`. As a
   * function, it is given what the service knows of the one-shot children it published.
   */
  catalog?: SubagentCatalog | ((published: PublishedChildren) => SubagentCatalog) | undefined;
  /** Enables continuable children (the host passes its registry, sessions and persistence). */
  continuation?: Omit<ContinuationDeps, 'getProvider' | 'emit' | 'logger'> | undefined;
}

/**
 * What `start` said of a one-shot child it published and has not disposed (its mode and label), for
 * a listing of it before its log holds its descriptor: a worker child's first events are still
 * crossing from its thread when `start` resolves.
 */
export type PublishedChildren = (id: SessionId) => { mode: 'one-shot'; label?: string } | undefined;

/** Reads children and descendants of a session (see `service/catalog`). */
export interface SubagentCatalog {
  listChildren(parentId: SessionId, signal?: AbortSignal): Promise<SubagentListEntry[]>;
  listDescendants(rootId: SessionId, signal?: AbortSignal): Promise<SubagentDescendantListEntry[]>;
}

/** The abort reason of starts that close() interrupts (compared by identity). */
const HOST_CLOSING = Object.freeze({ kind: 'disposed' as const });

const HELD_WORK = new WeakMap<SubagentService, HeldWork>();
const LEAVING = new WeakMap<SubagentService, (agent: Agent) => void>();

/** The work agents of `service` hold outside their runs (for the tools' background tasks). */
export function heldWorkOf(service: SubagentService): HeldWork {
  return HELD_WORK.get(service)!;
}

/** `agent`'s disposal began (the host's registry says so): no child of `service` starts under it any more. */
export function parentLeaving(service: SubagentService, agent: Agent): void {
  LEAVING.get(service)!(agent);
}

export class SubagentService {
  readonly #providers = new ProviderRegistry();
  readonly #events: SubagentEventBus;
  readonly #catalog: SubagentCatalog | undefined;
  readonly #runs = new Set<ManagedRun>();
  readonly #budgets = new BudgetLedger();
  readonly #subtrees = new SubtreeUsage();
  /** Starts whose provider has not settled yet: close() aborts and awaits them. */
  readonly #starting = new Map<Promise<SubagentRun>, AbortController>();
  readonly #continuation: ContinuationManager | undefined;
  readonly #logger: Logger | undefined;
  /** A continuable child whose held work ended may now be quiet: it re-checks its settlement. */
  readonly #held = new HeldWork((ownerId) => this.#continuation?.activations.get(ownerId)?.poke(), (ownerId) => this.#continuation?.activations.get(ownerId)?.admitInput);
  /** The agents of live runs (a worker child's proxy is in no registry): they may be continuable parents. */
  readonly #runAgents = new Map<SessionId, Agent>();
  /** What start said of each published one-shot child not yet disposed (see PublishedChildren). */
  readonly #published = new Map<SessionId, { mode: 'one-shot'; label?: string }>();
  readonly #calls = new PendingCalls();
  #closed = false;
  /** The host's drain of every continuable child (set by close()): later drains wait for it. */
  #drained: Promise<void> | undefined;

  constructor(options: SubagentServiceOptions = {}) {
    HELD_WORK.set(this, this.#held);
    LEAVING.set(this, (agent) => this.#continuation?.parents.leave(agent));
    this.#events = new SubagentEventBus(options.logger);
    this.#catalog = typeof options.catalog === 'function' ? options.catalog((id) => this.#published.get(id)) : options.catalog;
    this.#logger = options.logger;
    if (options.continuation) {
      this.#continuation = new ContinuationManager({
        ...options.continuation,
        // Checked here too, not only by createHost: a linger past a timer's reach would evict at once.
        lingerMs: timerOption(options.continuation.lingerMs, 30_000, 'SubagentService options.continuation.lingerMs'),
        logger: options.logger,
        held: this.#held,
        runAgent: (id) => this.#runAgents.get(id),
        getProvider: (name) => this.#providers.get(name),
        admitBudget: async (parentId, budget, resumed, configured) => {
          if (!resumed) return this.#budgets.admit(parentId, budget, undefined, configured);
          // A resumed tree owner: its stored descendants' spend counts against its tree again.
          let descendants = emptyUsage();
          if (budget?.scope === 'tree') {
            for (const row of await this.listDescendants(resumed.childId)) if (row.kind === 'child') descendants = addUsage(descendants, row.usage);
          }
          return this.#budgets.admit(parentId, budget, { startedAt: resumed.startedAt, descendants });
        },
        emit: (event, payload, parent, spent) => {
          // A continuable epoch reports what it spent (its own and its descendants') to its parent's tree.
          if (event === 'subagent/start') this.#subtrees.open(payload.id, parent);
          else this.#subtrees.close(payload.id, parent, spent && addUsage(spent, this.#subtrees.descendants(payload.id) ?? emptyUsage()));
          this.#events.emit(event, deepFreeze(payload), parent);
        },
      });
    }
  }

  /** Registers a provider (validated, snapshotted); returns an idempotent disposer. */
  registerProvider(provider: SubagentProvider): () => void {
    if (this.#closed) throw SubagentError.closed('the host', 'register providers on an open host');
    const snapshot = snapshotProvider(provider);
    this.#providers.add(snapshot);
    try {
      this.#events.emitStrict('subagent/provider-added', snapshot);
    } catch (error) {
      // Listeners that ran before the failing one mounted what they serve: they hear it go.
      if (this.#providers.remove(snapshot)) this.#events.emit('subagent/provider-removed', snapshot.name);
      throw error;
    }
    let removed = false;
    return () => {
      if (removed) return;
      removed = true;
      if (this.#providers.remove(snapshot)) this.#events.emit('subagent/provider-removed', snapshot.name);
    };
  }

  getProvider(name: string): SubagentProvider | undefined {
    return this.#providers.get(name);
  }

  /** Provider names in insertion order. */
  list(): string[] {
    return this.#providers.names();
  }

  /** Runs not yet disposed (for leak checks and host shutdown). */
  get activeRuns(): number {
    return this.#runs.size;
  }

  /** Number of lifecycle listeners (for leak checks). */
  get listenerCount(): number {
    return this.#events.size;
  }

  /**
   * Starts a one-shot child. Every failure is a rejection; a rejected start leaves no child. The run
   * is `AsyncDisposable` (`await using run = await host.subagents.start(…)`).
   */
  start(name: string, request: SubagentStartRequest): Promise<SubagentRun & AsyncDisposable> {
    let resolved;
    let provider: SubagentProvider | undefined;
    let admission: TreeAdmission | undefined;
    // The provider gets the run's own signal; the caller's abort is forwarded into it while the provider starts, and by the run wrapper afterwards (cheaper than AbortSignal.any).
    const controller = new AbortController();
    let caller: CallerAbort;
    try {
      if (this.#closed) throw SubagentError.closed('the host', 'start children on an open host');
      provider = this.#providers.get(name);
      if (!provider) throw new SubagentError('NO_PROVIDER', `no subagent provider named ${typeof name === 'string' ? name : `<a ${typeof name}, not a name>`} (registered: ${this.list().join(', ') || 'none'})`);
      resolved = resolveStartRequest(provider, request);
      // A parent disposed (or going) would get an orphan: refused as startContinuable refuses it.
      this.#continuation?.parents.check(resolved.parent);
      admission = this.#budgets.admit(resolved.parent.id, resolved.budget, undefined, CONFIGURED_BUDGET_REQUESTS.has(request));
      if (admission) resolved.budgetTree = admission.link;
      caller = callerAbort(resolved.signal, (reason) => controller.abort(reason));
    } catch (error) {
      return Promise.reject(error as Error);
    }
    const unwatch = this.#continuation?.parents.watch(resolved.parent, controller);
    forwardStartWaits(resolved.signal, controller.signal);
    resolved.signal = controller.signal;
    let starting: Promise<SubagentRun>;
    try {
      // A provider whose start throws instead of rejecting still fails as a rejection.
      starting = Promise.resolve(provider.start(resolved));
    } catch (error) {
      caller.stop();
      unwatch?.();
      return Promise.reject(error as Error);
    }
    const identity = resolved.label === undefined ? { mode: 'one-shot' as const } : { mode: 'one-shot' as const, label: resolved.label };
    const publishing = this.#publish(provider, resolved.parent, starting, controller, caller, admission, identity);
    this.#starting.set(publishing, controller);
    // A published run has taken the listener over; a failed start removes it here.
    publishing.then(
      () => {
        unwatch?.();
        this.#starting.delete(publishing);
      },
      () => {
        caller.stop();
        unwatch?.();
        this.#starting.delete(publishing);
      },
    );
    return publishing;
  }

  async #publish(
    provider: SubagentProvider,
    parent: Agent,
    starting: Promise<SubagentRun>,
    controller: AbortController,
    caller: CallerAbort,
    admission: TreeAdmission | undefined,
    identity: { mode: 'one-shot'; label?: string },
  ): Promise<ManagedRun> {
    let raw: SubagentRun;
    try {
      raw = await starting;
    } catch (error) {
      // close() aborted the start (the caller did not): the host closing is the cause, not a cancel.
      if (controller.signal.reason === HOST_CLOSING && isSubagentError(error, 'CANCELLED')) {
        throw new SubagentError('CLOSED', 'the host closed while the child was starting', { cause: error });
      }
      if (controller.signal.reason === PARENT_GONE && isSubagentError(error, 'CANCELLED')) {
        throw new SubagentError('UNAUTHORIZED', 'request.parent was disposed while the child was starting', { cause: error });
      }
      throw error;
    }
    raw = await publishableRun(raw, provider.name, (id) => this.#subtrees.clash(id, parent.id));
    // A child its provider started is the caller's run, also when the host began to close meanwhile:
    // rejected, it would be a start that "never started" whose log is stored and listed. close() waits
    // for this start, then disposes the run with the others.
    this.#subtrees.open(raw.id, parent.id);
    const continuation = this.#continuation;
    const child = raw.localAgent;
    const run = new ManagedRun(raw, provider.name, controller, caller, {
      descendants: () => this.#subtrees.descendants(raw.id),
      // A local child may have started continuable children or background work of its own: they go before it.
      ...(child ? { releaseDescendants: () => this.#releaseBelow(child, continuation), releaseLate: () => this.#held.finish(child) } : {}),
      disposed: () => {
        this.#runs.delete(run);
        if (this.#published.get(run.id) === identity) this.#published.delete(run.id);
        if (child && this.#runAgents.get(child.id) === child) this.#runAgents.delete(child.id);
      },
    });
    this.#runs.add(run);
    this.#published.set(run.id, identity);
    if (child) this.#runAgents.set(child.id, child);
    admission?.join(run);
    // Payloads are frozen: every listener gets the same object, and one must not change what the next sees.
    const info = Object.freeze({ runId: newId(), provider: provider.name, id: run.id, local: run.localAgent !== undefined });
    // The end observer is attached before start is emitted, so end always follows start.
    run.result.then(
      (result) => {
        this.#subtrees.close(run.id, parent.id, result.treeUsage ?? result.usage);
        this.#events.emit(
          'subagent/end',
          Object.freeze({
            ...info,
            stopReason: result.stopReason,
            ...(result.output.length > 0 ? { lastAssistantMessage: result.output } : {}),
            ...(result.usage ? { usage: result.usage } : {}),
            ...(result.treeUsage ? { treeUsage: result.treeUsage } : {}),
          }),
          parent.id,
        );
      },
      () => {
        this.#subtrees.close(run.id, parent.id, undefined);
        this.#events.emit('subagent/end', Object.freeze({ ...info, stopReason: 'error' as const }), parent.id);
      },
    );
    this.#events.emit('subagent/start', info, parent.id);
    return run;
  }

  /** Releases what `child` started: its held work and its continuable descendants (the first failure is thrown). */
  async #releaseBelow(child: Agent, continuation: ContinuationManager | undefined): Promise<void> {
    const holding = this.#held.holds(child);
    const held = this.#held.release(child);
    if (!continuation) return held;
    const draining = drainDescendants(continuation, [child]);
    // After the drain began (what it stops ends DRAINING): no child starts under this one any more.
    continuation.parents.leave(child);
    // Most children hold nothing: their release is the drain alone.
    if (!holding) return draining;
    const [, drained] = await Promise.allSettled([held, draining]);
    if (drained.status === 'rejected') throw drained.reason;
  }

  /** Subscribes to lifecycle events; `CLOSED` once the host is closing (no child starts any more). */
  on<E extends keyof SubagentEvents>(event: E, listener: (payload: SubagentEvents[E]) => unknown, opts?: { parent?: SessionId }): () => void {
    if (this.#closed) throw SubagentError.closed('the host');
    return this.#events.on(event, listener, opts);
  }

  /** Starts a continuable child; resolves once its prompt is accepted and durable. */
  startContinuable(spec: ContinuableStartSpec): Promise<{ childId: SessionId; messageId: MessageId }> {
    const manager = this.#continuation;
    if (!manager) return Promise.reject(SubagentError.continuationUnavailable('startContinuable'));
    if (this.#closed) return Promise.reject(SubagentError.closed('the host', 'start children on an open host'));
    return this.#calls.add(manager.startContinuable(spec));
  }

  /** The next FIFO turn of a continuable child, from its exact live parent. */
  followup(parent: Agent, childId: SessionId, content: ContentBlock[], opts?: { source?: MessageSource; signal?: AbortSignal }): Promise<MessageId> {
    const manager = this.#continuation;
    if (!manager) return Promise.reject(SubagentError.continuationUnavailable('followup'));
    if (this.#closed) return Promise.reject(SubagentError.closed('the host', 'send follow-ups on an open host'));
    return this.#calls.add(manager.followup(parent, childId, content, opts));
  }

  /** Stops a resident child's current turn (its inbox stays); no-op for absent ids, `CLOSED` once the host is closing. */
  interrupt(targetId: SessionId, authority: SubagentInterruptAuthority): void {
    if (!this.#continuation) throw SubagentError.continuationUnavailable('interrupt');
    if (this.#closed) throw SubagentError.closed('the host', 'its children are being stopped or were stopped');
    interrupt(this.#continuation, targetId, authority);
  }

  reportFrom(child: Agent, content: ContentBlock[], opts: { delivery: 'quiet' | 'next-step'; signal?: AbortSignal }): Promise<MessageId> {
    const manager = this.#continuation;
    if (!manager) return Promise.reject(SubagentError.continuationUnavailable('reportFrom'));
    if (this.#closed) return Promise.reject(SubagentError.closed('the host', 'report on an open host'));
    return reportFrom(manager, child, content, opts);
  }

  registerContinuableSetup(install: (child: Agent) => () => void): () => void {
    if (!this.#continuation) throw SubagentError.continuationUnavailable('registerContinuableSetup');
    if (this.#closed) throw SubagentError.closed('the host', 'register setup contributions on an open host');
    return this.#continuation.setups.register(install);
  }

  async drainContinuableDescendants(parents: Agent[]): Promise<void> {
    if (!this.#continuation) throw SubagentError.continuationUnavailable('drainContinuableDescendants');
    await drainDescendants(this.#continuation, parents, this.#calls.now());
  }

  async drainContinuableChildren(parent: Agent, childIds: SessionId[]): Promise<void> {
    if (!this.#continuation) throw SubagentError.continuationUnavailable('drainContinuableChildren');
    // A parent the closing host has disposed is no one to refuse: the host drained its children.
    if (this.#drained && !isExactLive(this.#continuation.live, parent)) return this.#drained;
    await drainChildren(this.#continuation, parent, childIds);
  }

  /** Resident continuable children (for leak checks). */
  get residentChildren(): number {
    return this.#continuation?.resident ?? 0;
  }

  listChildren(parentId: SessionId, signal?: AbortSignal): Promise<SubagentListEntry[]> {
    const bad = listingProblem('listChildren', parentId, signal);
    if (bad) return Promise.reject(bad);
    if (!this.#catalog) return Promise.reject(new SubagentError('PERSISTENCE_UNAVAILABLE', 'listing needs a catalog; use createHost'));
    return this.#catalog.listChildren(parentId, signal);
  }

  listDescendants(rootId: SessionId, signal?: AbortSignal): Promise<SubagentDescendantListEntry[]> {
    const bad = listingProblem('listDescendants', rootId, signal);
    if (bad) return Promise.reject(bad);
    if (!this.#catalog) return Promise.reject(new SubagentError('PERSISTENCE_UNAVAILABLE', 'listing needs a catalog; use createHost'));
    return this.#catalog.listDescendants(rootId, signal);
  }

  /** Host shutdown: refuses new starts, cancels and awaits pending ones, disposes every run. */
  async close(): Promise<void> {
    this.#closed = true;
    for (const controller of this.#starting.values()) controller.abort(HOST_CLOSING);
    // Continuable children go first (child-first), before one-shot runs and the agents they use.
    if (this.#continuation) {
      this.#drained = drainAll(this.#continuation, this.#calls.now());
      await this.#drained.catch((error: unknown) => this.#logger?.warn('draining continuable children failed', describeError(error)));
    }
    await this.#held.releaseAll();
    await Promise.allSettled([...this.#starting.keys()]);
    await Promise.allSettled([...this.#runs].map((run) => run.dispose()));
  }
}
