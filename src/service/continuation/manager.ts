// The continuation manager: the private engine behind the service's continuable operations. It
// owns the resident Activations, the per-child lock, admission and the setup registry; every
// accepted message is flushed to persistence before its id is returned.
import { randomUUID } from 'node:crypto';
import type { Agent } from '../../seam/agent-types.js';
import { copyMessageContent, copyMessageSource, type ContentBlock, type MessageId, type MessageSource, type SessionId } from '../../seam/content.js';
import { assertSubagentMaxDepth, resolveChildDepth } from '../../seam/depth.js';
import { settledOneShot } from '../../seam/descriptor.js';
import { SubagentError, describeError } from '../../seam/errors.js';
import { settled } from '../../seam/once.js';
import { readingInput } from '../../seam/parse.js';
import type { SubagentBudget } from '../../seam/budget.js';
import type { SubagentUsage } from '../../seam/usage.js';
import type { ContinuableCreateSpec, ContinuableStartSpec, SubagentEvents, SubagentProvider } from '../../seam/types.js';
import type { AgentRegistry } from '../../runtime/agent-registry.js';
import type { SessionPersistence } from '../../runtime/session-persistence.js';
import type { LiveSessionStore, Logger } from '../../runtime/session-store.js';
import { CONFIGURED_BUDGET_REQUESTS, type TreeAdmission } from '../budget-ledger.js';
import { acknowledge, acknowledgeStart, endDivergedResidencies, startAcknowledgement } from './acknowledge.js';
import { Activation, stopRemoteTurn, type ActivationHost } from './activation.js';
import { Admission, checkAborted, isExactLive, liveLineage, announceStart, type LiveAgents } from './authority.js';
import { Creations } from './creations.js';
import { ParentWatch } from './parent-watch.js';
import { type Built, continuableDescriptor, createFresh, liveElsewhere, resumeStored } from './materialize.js';
import { type EpochOutcome, deliverFitting, injectIfOpen, settlementNotice } from './notices.js';
import { resumeProvider } from './resume-provider.js';
import { SetupRegistry } from './setup-registry.js';
import { admitInput, assertStartSpec, detachedSpec, followupOptions, preparedSpec, startBudget } from './validate.js';

export interface ContinuationDeps {
  agents: AgentRegistry;
  sessions: LiveSessionStore;
  persistence: SessionPersistence | undefined;
  /** How long a settled child stays resident; 0 disposes it at settlement. */
  lingerMs: number;
  logger?: Logger | undefined;
  getProvider(name: string): SubagentProvider | undefined;
  /**
   * Admits a child under the tree budgets covering its parent (and its own, `scope: 'tree'`);
   * throws when one is spent. A `resumed` child's own tree counts what its subtree already spent.
   * `configured`: the budget is the `subagent` tool's config (see `CONFIGURED_BUDGET_REQUESTS`).
   */
  admitBudget?(parentId: SessionId, budget: SubagentBudget | undefined, resumed?: { childId: SessionId; startedAt: number }, configured?: boolean): Promise<TreeAdmission | undefined>;
  /**
   * The agent of a live one-shot run the registry does not hold (a worker child's main-thread proxy):
   * such a child may start and address continuable children of its own.
   */
  runAgent?(id: SessionId): Agent | undefined;
  /** Work agents hold outside their runs (background tasks): it keeps a child busy and goes before it. */
  held?: { holds(owner: Agent): boolean; release(owner: Agent): Promise<void>; finish(owner: Agent): Promise<void> } | undefined;
  /** `spent`: on an epoch's end, what the child spent in it (its own figures). */
  emit<E extends 'subagent/start' | 'subagent/end'>(event: E, payload: SubagentEvents[E], parent: SessionId, spent?: SubagentUsage): void;
}

export class ContinuationManager implements ActivationHost {
  readonly setups = new SetupRegistry();
  readonly deps: ContinuationDeps;
  /** Internal to the continuation engine (controls.ts). */
  readonly admission: Admission;
  /** The agents authority is checked against: the registry's, and the proxies of live worker runs. */
  readonly live: LiveAgents;
  readonly activations = new Map<SessionId, Activation>();
  readonly #locks = new Map<SessionId, Promise<unknown>>();
  /** What close() and drains wait for, by the child it concerns: creations, cold resumes, acknowledging flushes. */
  readonly inFlight = new Map<Promise<void>, SessionId>();
  /** Creations in flight, stopped by shutdown and drains (a provider bringing a child back, an import that never ends). */
  readonly creations = new Creations();
  /** Which agents may still be a parent (one-shot starts ask it too). */
  readonly parents = new ParentWatch({ get: (id) => this.live.get(id) }, this.creations);

  constructor(deps: ContinuationDeps) {
    this.deps = deps;
    this.live = { get: (id) => deps.agents.get(id) ?? deps.runAgent?.(id) };
    this.admission = new Admission(this.live);
    endDivergedResidencies(deps.sessions, this.activations, (message, error) => this.warn(message, error));
  }

  get lingerMs(): number {
    return this.deps.lingerMs;
  }

  /** Host shutdown: creations and provider work of cold resumes still in flight are aborted, so drains that wait for them end. */
  shutdown(): void {
    this.creations.shutdown();
  }

  /** Resident continuable children (for leak checks). */
  get resident(): number {
    return this.activations.size;
  }

  holdsWork(agent: Agent): boolean {
    return this.deps.held?.holds(agent) ?? false;
  }

  releaseWork(agent: Agent, gone = false): Promise<void> {
    const held = this.deps.held;
    if (!held) return Promise.resolve();
    return gone ? held.finish(agent) : held.release(agent);
  }

  childrenOf(id: SessionId): Activation[] {
    return [...this.activations.values()].filter((activation) => activation.parentSession === id);
  }

  epochStarted(activation: Activation, runId: string): void {
    this.deps.emit('subagent/start', { runId, provider: activation.provider, id: activation.childId, local: true }, activation.parentSession);
  }

  epochEnded(activation: Activation, runId: string, outcome: EpochOutcome, announced: boolean): void {
    const acknowledging = announced ? activation.acknowledging : undefined;
    if (acknowledging) void acknowledging.then((durable) => (durable ? this.#notify(activation, outcome) : undefined));
    else if (announced) this.#notify(activation, outcome);
    this.activations.get(activation.parentSession)?.poke();
    this.deps.emit(
      'subagent/end',
      { runId, provider: activation.provider, id: activation.childId, local: true, stopReason: outcome.stopReason,
        ...(outcome.output.length > 0 ? { lastAssistantMessage: outcome.output } : {}), usage: activation.usage },
      activation.parentSession,
      activation.takeSpent(),
    );
  }

  removed(activation: Activation): void {
    if (this.activations.get(activation.childId) === activation) this.activations.delete(activation.childId);
  }

  warn(message: string, error: unknown): void {
    this.deps.logger?.warn(message, describeError(error));
  }

  /** Frees what a provider prepared for a child that never became resident; a failure here is warned, never reported over the one that stopped the child. */
  async releasePrepared(prepared: Pick<ContinuableCreateSpec, 'release'> | undefined, childId: SessionId): Promise<void> {
    try {
      await prepared?.release?.();
    } catch (error) {
      this.warn(`releasing what the provider prepared for continuable child ${childId} failed`, error);
    }
  }

  /**
   * The settlement notice: a turn for an idle parent, the next step of a busy one, context only while
   * it closes or when it is a one-shot child whose result settled.
   */
  #notify(activation: Activation, outcome: EpochOutcome): void {
    const parent = this.live.get(activation.parentSession);
    if (!parent) return;
    const deliver = ({ content, source }: { content: ContentBlock[]; source: MessageSource }): void => {
      if (this.admission.isClosing(parent) || this.activations.get(parent.id)?.disposal || settledOneShot(parent)) injectIfOpen(parent, content, source);
      else if (parent.status === 'idle') parent.followup(content, { source });
      else parent.steer(content, { source });
    };
    try {
      deliverFitting(this.activations.get(parent.id)?.admitInput, (admit) => settlementNotice(activation.childId, outcome, admit), deliver);
    } catch (error) {
      this.warn(`the settlement notice of ${activation.childId} could not reach its parent`, error);
    }
  }

  /** Resolves once every section for `id` begun so far (a follow-up's cold resume) has ended, and what it left in flight. */
  async quiet(id: SessionId): Promise<void> {
    await settled(this.#locks.get(id) ?? Promise.resolve());
    await Promise.all([...this.inFlight].flatMap(([done, of]) => (of === id ? [done] : [])));
  }

  /** Runs `section` after every earlier section for `id` (a failed one never blocks later ones). */
  #locked<T>(id: SessionId, section: () => Promise<T>): Promise<T> {
    const previous = this.#locks.get(id) ?? Promise.resolve();
    const next = previous.then(section, section);
    const tail = settled(next);
    this.#locks.set(id, tail);
    void tail.then(() => {
      if (this.#locks.get(id) === tail) this.#locks.delete(id);
    });
    return next;
  }

  /** `work`, in flight for child `id` until it settles (see `inFlight`). */
  track<T>(work: Promise<T>, id: SessionId): Promise<T> {
    const done = settled(work);
    this.inFlight.set(done, id);
    void done.then(() => this.inFlight.delete(done));
    return work;
  }

  /**
   * Final admission span (no awaits): authority, then the message enters the child's inbox. A fresh
   * child was `admitted` (signal, admission and its prompt's size) as it was published: its start is accepted from there.
   */
  #submit(activation: Activation, parent: Agent, content: ContentBlock[], source: MessageSource, signal: AbortSignal | undefined, admitted = false): MessageId {
    if (!admitted) {
      checkAborted(signal);
      this.admission.check(parent);
    }
    if (activation.disposal) throw new SubagentError('ACTIVATION_CLOSING', `child ${activation.childId} is shutting down`);
    if (!isExactLive(this.live, parent) || activation.parentSession !== parent.id) {
      throw new SubagentError('UNAUTHORIZED', `only the live direct parent of ${activation.childId} may send it messages`);
    }
    // A fresh child's prompt was asked about before the child was created.
    if (!admitted) activation.admitInput(content);
    activation.open();
    const id = activation.agent.followup(content, { source });
    activation.announced = true;
    return id;
  }

  /** Installs a materialized child; a failure before its first message disposes it silently. */
  async #adopt(
    built: Pick<Built, 'handle' | 'batch' | 'admitInput'>,
    provider: string,
    parent: Agent,
    from: number,
    deliver: (activation: Activation) => MessageId,
    budgetTree: TreeAdmission | undefined,
  ): Promise<MessageId> {
    const leaveTree = budgetTree?.joinAgent(built.handle.agent, this.deps.getProvider(provider)?.capabilities.budget ? undefined : stopRemoteTurn(built.handle.agent));
    const activation = new Activation({
      host: this,
      handle: built.handle,
      provider,
      ancestry: liveLineage(this.live, parent),
      admitInput: built.admitInput,
      release: () => {
        leaveTree?.();
        built.batch.release();
      },
    });
    this.activations.set(activation.childId, activation);
    try {
      if (this.activations.get(parent.id)?.disposal) throw new SubagentError('ACTIVATION_CLOSING', `parent ${parent.id} is shutting down`);
      announceStart(this.admission, this.creations.shutdownSignal, parent, activation, () => activation.open(from));
      const id = deliver(activation);
      activation.poke();
      return id;
    } catch (error) {
      // What a cold-resumed child had queued before this message stays pending in its log.
      await settled(activation.dispose({ keepInbox: true }));
      throw error;
    }
  }

  async startContinuable(given: ContinuableStartSpec): Promise<{ childId: SessionId; messageId: MessageId }> {
    assertStartSpec(given);
    const { request, signal } = given;
    const parent = request.parent;
    const { agents, sessions, persistence } = this.deps;
    this.parents.check(parent);
    this.admission.check(parent);
    if (!persistence) throw new SubagentError('PERSISTENCE_UNAVAILABLE', 'continuable children need session persistence');
    assertSubagentMaxDepth(request.maxDepth);
    const childId = given.childId ?? randomUUID();
    const taken = () => childId === parent.id || agents.get(childId) !== undefined || sessions.has(childId);
    if (taken()) throw new SubagentError('DUPLICATE_CHILD', `session ${childId} already exists; reserve another child id`);
    const depth = resolveChildDepth(parent, request.maxDepth);
    const provider = this.deps.getProvider(given.provider);
    if (!provider) throw new SubagentError('NO_PROVIDER', `no subagent provider named ${given.provider}`);
    if (!provider.prepareContinuable) {
      throw new SubagentError('UNSUPPORTED_CAPABILITY', `provider ${given.provider} cannot run continuable children (use in-process, spawn, fork, or acp with an agent that loads sessions)`);
    }
    const prepareContinuable = provider.prepareContinuable.bind(provider);
    const budget = startBudget(given, provider);
    const configured = CONFIGURED_BUDGET_REQUESTS.has(given.request);
    // Validated before the provider spends anything (an ACP provider spawns a process).
    readingInput('startContinuable spec', 'INVALID_REQUEST', () => continuableDescriptor(given, budget));
    // From here on (after awaits) the copy is read, never the caller's objects.
    const spec = detachedSpec(given);
    // The child's lock is taken at once: a drain naming a reserved id waits for this start, then releases the child
    // it brought. All of it, the provider's part and the acknowledging flush too, is what shutdown and drains wait for.
    const messageId = await this.#locked(childId, () => this.track((async () => {
      const acknowledged = startAcknowledgement();
      const budgetTree = await this.deps.admitBudget?.(parent.id, budget, undefined, configured);
      let prepared: ContinuableCreateSpec | undefined;
      let id: MessageId;
      try {
        const built = await this.creations.run(parent, signal, `child ${childId} was being created`, async (creating) => {
          // The caller's abort first (its own reason), then the host's or a drain's (CLOSED, DRAINING), then the parent's going
          // (UNAUTHORIZED); checked before the provider spends anything too, for what came before this creation was in flight.
          const stopped = (): void => { checkAborted(signal); checkAborted(creating); this.admission.check(parent); this.parents.check(parent); };
          stopped();
          const created = await preparedSpec(spec.provider, () => prepareContinuable({
            sessionId: childId, parent, signal: creating,
            ...(spec.request.agentOptions === undefined ? {} : { agentOptions: spec.request.agentOptions }),
            ...(budgetTree ? { budgetTree: budgetTree.link } : {}),
          })).catch((error: unknown) => { stopped(); throw error; });
          const ready: ContinuableCreateSpec = (prepared = created);
          stopped();
          // A prompt the child could not take is refused before the child exists.
          admitInput(ready, spec.provider, spec.request.prompt);
          const duplicate = () => new SubagentError('DUPLICATE_CHILD', `session ${childId} already exists; reserve another child id`);
          // Asked of the projections, which write nothing: a load would close the open turn of another host's live child.
          if (taken() || (spec.childId !== undefined && (await persistence.projections([childId])).has(childId))) throw duplicate();
          // The read took a turn of the event loop: the same checks again before anything is built.
          stopped();
          if (taken()) throw duplicate();
          const descriptor = continuableDescriptor(spec, budget, ready.providerData);
          // Published once admitted: an abort or a drain landing after that comes too late, and the start is accepted (a rollback would leave its stored session and catalog row behind), unless a start listener began it.
          const admit = () => this.admission.check(parent);
          return createFresh({ agents, setups: this.setups, spec, childId, depth, descriptor, seed: ready.seed ?? [], prepared: ready, signal: creating, admit, treeStop: budgetTree?.link.stop, warn: (message, error) => this.warn(message, error) });
        });
        id = await this.#adopt(
          built, spec.provider, parent, built.handle.agent.session.seq,
          (activation) => this.#submit(Object.assign(activation, { acknowledging: acknowledged.promise }), parent, spec.request.prompt, { kind: 'user' }, signal, true),
          budgetTree,
        );
      } catch (error) {
        // Whatever the provider holds for a child that never became resident goes (idempotent).
        await this.releasePrepared(prepared, childId);
        throw error;
      }
      await acknowledgeStart(sessions, this.activations, childId, acknowledged);
      return id;
    })(), childId));
    return { childId, messageId };
  }

  async followup(parent: Agent, childId: SessionId, given: ContentBlock[], opts?: { source?: MessageSource; signal?: AbortSignal }): Promise<MessageId> {
    // Copied now: the message is taken after awaits, and the caller may change its arrays meanwhile.
    const content = copyMessageContent(given);
    // null is taken as no options; anything else must be them (a misspelt `signal` is not dropped).
    if (opts != null) opts = followupOptions(opts);
    const signal = opts?.signal;
    const source: MessageSource = opts?.source === undefined ? { kind: 'user' } : copyMessageSource(opts.source);
    checkAborted(signal);
    if (typeof childId !== 'string') throw new SubagentError('INVALID_REQUEST', 'childId must be a session id string');
    if (!isExactLive(this.live, parent)) throw new SubagentError('UNAUTHORIZED', `only the live direct parent of ${childId} may send it messages`);
    this.admission.check(parent);
    // Locked for the delivery only (follow-ups pipeline); its acknowledging flush, tracked from the delivery on (a cold resume included), is awaited by close() and drains too.
    const { acked } = await this.#locked(childId, async () => {
      for (;;) {
        const activation = this.activations.get(childId);
        if (activation?.disposal) {
          await settled(activation.disposal);
          checkAborted(signal);
          this.admission.check(parent);
          continue;
        }
        const delivered = activation ? this.#submit(activation, parent, content, source, signal) : this.#coldResume(parent, childId, content, source, signal);
        const acked = this.track(acknowledge(this.deps.sessions, this.activations, childId, delivered), childId);
        await delivered;
        return { acked };
      }
    });
    return acked;
  }

  async #coldResume(parent: Agent, childId: SessionId, content: ContentBlock[], source: MessageSource, signal: AbortSignal | undefined): Promise<MessageId> {
    const { agents, sessions, persistence } = this.deps;
    if (!persistence) throw new SubagentError('PERSISTENCE_UNAVAILABLE', 'resuming a continuable child needs session persistence');
    // Loading repairs an open turn: never load a session that is live here.
    if (agents.get(childId) || sessions.has(childId)) throw liveElsewhere(childId);
    // Trees covering the parent now cover the resumed child (a spent one refuses it).
    let budgetTree: TreeAdmission | undefined;
    const built = await this.creations.run(parent, signal, `child ${childId} was resuming`, (resuming) => resumeStored({
      agents,
      setups: this.setups,
      store: persistence,
      childId,
      parent,
      signal: resuming,
      recheck: () => { checkAborted(signal); this.admission.check(parent); },
      admit: async (budget, startedAt) => {
        budgetTree = await this.deps.admitBudget?.(parent.id, budget, { childId, startedAt });
        return budgetTree?.link.stop;
      },
      prepare: (descriptor, own) => resumeProvider(
        { getProvider: (name) => this.deps.getProvider(name), shutdownSignal: this.creations.shutdownSignal, warn: (message, error) => this.warn(message, error), releasePrepared: (prepared, id) => this.releasePrepared(prepared, id) },
        { descriptor, own, childId, parent, content, signal, resuming, budgetTree },
      ),
      releasePrepared: (prepared) => this.releasePrepared(prepared, childId),
      warn: (message, error) => this.warn(message, error),
    }));
    return this.#adopt(built, built.provider, parent, built.from, (activation) => this.#submit(activation, parent, content, source, signal), budgetTree);
  }
}
