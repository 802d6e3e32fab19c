// Building a continuable child's agent: fresh (header, fork seed, descriptor first in its own log)
// or cold (restored from persistence, composed again from its descriptor). Setup contributions
// install before the agent is published; anything failing leaves no agent behind.
import type { Agent, AgentOptions, ModelSpec } from '../../seam/agent-types.js';
import type { BudgetStop, SubagentBudget } from '../../seam/budget.js';
import type { SessionId } from '../../seam/content.js';
import { DESCRIPTOR_EVENT, type SubagentDescriptorData, foldSubagentDescriptor, snapshotSubagentDescriptor } from '../../seam/descriptor.js';
import { SubagentError, describeError, isSubagentError } from '../../seam/errors.js';
import type { SessionEvent, SessionHeader } from '../../seam/session-types.js';
import type { AdmitInput, ContinuableCreateSpec, ContinuableStartSpec } from '../../seam/types.js';
import type { AgentHandle, AgentRegistry, AgentSetupScope } from '../../runtime/agent-registry.js';
import { budgetHooks, inheritedTools } from '../../runtime/child-run.js';
import type { SessionLog } from '../../runtime/session.js';
import type { SessionPersistence } from '../../runtime/session-persistence.js';
import type { AgentHooks } from '../../runtime/turn-context.js';
import type { SetupBatch, SetupRegistry } from './setup-registry.js';
import { admitInput } from './validate.js';

export type ContinuableDescriptor = Extract<SubagentDescriptorData, { mode: 'continuable' }>;
/** Where a failure that is not the one reported goes (the host's logger). */
export type Warn = (message: string, error: unknown) => void;
/** The stop a tree budget covering the child calls for, if any. */
export type TreeStop = () => BudgetStop | undefined;

/**
 * The descriptor of a new continuable child: everything it runs with except secrets (the model
 * spec names its key's environment variable, never the key), kept as JSON (the model in
 * `agentModel`), plus what its provider needs to bring it back (`providerData`).
 */
export function continuableDescriptor(spec: ContinuableStartSpec, budget: SubagentBudget | undefined, providerData?: Record<string, unknown>): ContinuableDescriptor {
  const { request } = spec;
  const options = request.agentOptions;
  const model = options?.model ?? request.parent.options.model;
  const maxTokens = options?.maxTokens ?? request.parent.options.maxTokens;
  return snapshotSubagentDescriptor({
    mode: 'continuable',
    provider: spec.provider,
    label: spec.label,
    ...(model === undefined ? {} : { agentModel: JSON.stringify(model) }),
    ...(request.persona === undefined ? {} : { persona: request.persona }),
    ...(request.toolFilter === undefined ? {} : { toolFilter: request.toolFilter }),
    ...(maxTokens === undefined ? {} : { maxTokens }),
    ...(options?.maxStepsPerTurn === undefined ? {} : { maxStepsPerTurn: options.maxStepsPerTurn }),
    ...(options?.toolModules === undefined ? {} : { toolModules: options.toolModules }),
    ...(budget === undefined ? {} : { budget }),
    ...(providerData === undefined ? {} : { providerData }),
  }) as ContinuableDescriptor;
}

/** The agent options a descriptor records (a fresh child and a resumed one get the same). */
function optionsOf(descriptor: ContinuableDescriptor, model: ModelSpec | undefined, depth: number): AgentOptions {
  return {
    ...(model === undefined ? {} : { model }),
    ...(descriptor.persona === undefined ? {} : { persona: descriptor.persona }),
    ...(descriptor.maxTokens === undefined ? {} : { maxTokens: descriptor.maxTokens }),
    ...(descriptor.maxStepsPerTurn === undefined ? {} : { maxStepsPerTurn: descriptor.maxStepsPerTurn }),
    ...(descriptor.toolModules === undefined ? {} : { toolModules: [...descriptor.toolModules] }),
    subagentDepth: depth,
  };
}

/**
 * The step-boundary guard of the child's budget, over its whole log (every turn, every epoch,
 * before and after a cold resume); wall time counts from the descriptor, the child's start.
 */
function guard(descriptor: ContinuableDescriptor, out: { session?: SessionLog }, startedAt: number, seedLength: number, treeStop: TreeStop | undefined): AgentHooks {
  return budgetHooks(() => out.session!, { budget: descriptor.budget, startedAt, seedLength, treeStop });
}

function setupFor(descriptor: ContinuableDescriptor, setups: SetupRegistry, out: { batch?: SetupBatch; session?: SessionLog }, append: boolean) {
  return ({ agent }: AgentSetupScope) => {
    out.session = agent.session;
    if (append) agent.session.append('subagent/descriptor', structuredClone(descriptor));
    out.batch = setups.apply(agent);
  };
}

/**
 * `build()`'s agent; when building fails after its setup ran (an abort, or the id taken meanwhile),
 * the setup installed in it is released. A race for the id is the child's id being taken.
 */
async function releasingSetup(out: { batch?: SetupBatch }, build: () => Promise<AgentHandle>, taken = reservedIdTaken): Promise<AgentHandle> {
  try {
    return await build();
  } catch (error) {
    try {
      out.batch?.release();
    } catch {
      // The failure that stopped the child is the one to report.
    }
    if (isSubagentError(error, 'DUPLICATE_SESSION')) throw taken(error);
    throw error;
  }
}

function reservedIdTaken(error: SubagentError): SubagentError {
  return new SubagentError('DUPLICATE_CHILD', `${error.message}; reserve another child id`, { cause: error });
}

/**
 * The refusal of a cold resume of `childId` while its session is live in this host outside its
 * parent's continuation: brought back as a top-level agent by `host.agents.resume` (two live writers
 * of one log), or a one-shot child. Loading it would close the turn it may have open.
 */
export function liveElsewhere(childId: SessionId, cause?: unknown): SubagentError {
  return new SubagentError(
    'NOT_RESUMABLE',
    `session ${childId} is live but is not a continuable child its parent's continuation holds: it is a top-level agent (a child's session host.agents.resume brought back takes follow-ups once host.agents.dispose frees it) or a one-shot child`,
    cause === undefined ? undefined : { cause },
  );
}

/**
 * Disposes a built agent whose setup must not be committed, then rethrows `error`. A resumed child's
 * queued input (a quiet report for its next turn) is shelved, not discarded: it stays pending in its
 * log for the follow-up that brings it back next.
 */
async function rollback(handle: AgentHandle, batch: SetupBatch | undefined, error: unknown): Promise<never> {
  try {
    batch?.release();
  } catch {
    // The failure that stopped the child is the one to report. (A disposer throwing here needs a setup
    // revoked mid-creation whose disposer also throws; no test combines them.)
  }
  handle.agent.holdTurns();
  handle.agent.shelveInbox();
  await handle.dispose().catch(() => undefined);
  throw error;
}

export interface Built {
  handle: AgentHandle;
  batch: SetupBatch;
  /** Refuses a message the child's transport cannot take (the provider's `admitInput`, see validate.ts). */
  admitInput: AdmitInput;
}

/**
 * `handle` whose dispose first quiesces the child where it runs, then disposes its agent, then frees
 * what the provider holds for the child (once the agent is gone). A release failing after the
 * agent's own dispose failed is only `warn`ed: the dispose's failure is the one reported.
 */
export function withRelease(handle: AgentHandle, spec: Pick<ContinuableCreateSpec, 'release' | 'quiesce'>, warn: Warn): AgentHandle {
  const { release, quiesce } = spec;
  if (!release && !quiesce) return handle;
  let disposing: Promise<void> | undefined;
  return {
    agent: handle.agent,
    dispose: () =>
      (disposing ??= (async () => {
        let failed: { error: unknown } | undefined;
        try {
          await quiesce?.().catch(() => undefined);
          await handle.dispose();
        } catch (error) {
          failed = { error };
        }
        try {
          await release?.();
        } catch (error) {
          if (!failed) throw error;
          warn(`releasing what the provider prepared for continuable child ${handle.agent.id} failed`, error);
        }
        if (failed) throw failed.error;
      })()),
  };
}

/** Creates a fresh child of `spec.request.parent` under `childId`. */
export async function createFresh(options: {
  agents: AgentRegistry;
  setups: SetupRegistry;
  spec: ContinuableStartSpec;
  childId: SessionId;
  depth: number;
  descriptor: ContinuableDescriptor;
  seed: readonly SessionEvent[];
  /** The provider's part; its `release` must be idempotent (the caller also calls it when creation fails). */
  prepared: ContinuableCreateSpec;
  signal: AbortSignal | undefined;
  /**
   * The start's last checks (its parent's lineage still admits children), run with the signal's
   * right before the child is published: from there on the start is accepted, not rolled back.
   */
  admit?: (() => void) | undefined;
  treeStop?: TreeStop | undefined;
  /** Told of a release that failed after the agent's own dispose failed (see withRelease). */
  warn: Warn;
}): Promise<Built> {
  const { spec, descriptor } = options;
  const parent: Agent = spec.request.parent;
  const header: Omit<SessionHeader, 'id' | 'createdAt' | 'seedLength'> = {
    ...(parent.session.header.cwd === undefined ? {} : { cwd: parent.session.header.cwd }),
    parentSession: parent.id,
    origin: 'subagent',
    delegationDepth: options.depth,
  };
  const model = spec.request.agentOptions?.model ?? parent.options.model;
  const out: { batch?: SetupBatch; session?: SessionLog } = {};
  const built = await releasingSetup(out, () => options.agents.create({
    sessionId: options.childId,
    header,
    seed: options.seed,
    agentOptions: optionsOf(descriptor, model, options.depth),
    ...(options.prepared.model ? { model: options.prepared.model, abandon: false } : {}),
    ...(options.prepared.toolModulesHere === false ? { loadToolModules: false } : {}),
    tools: inheritedTools(options.agents.tools, descriptor.toolFilter),
    setup: setupFor(descriptor, options.setups, out, true),
    ...(options.admit ? { admit: options.admit } : {}),
    hooks: guard(descriptor, out, Date.now(), options.seed.length, options.treeStop),
    ...(options.signal ? { signal: options.signal } : {}),
  }));
  const handle = withRelease(built, options.prepared, options.warn);
  const batch = out.batch!;
  try {
    batch.commit();
  } catch (error) {
    return rollback(handle, batch, error);
  }
  return { handle, batch, admitInput: (content) => admitInput(options.prepared, spec.provider, content) };
}

function parseModel(agentModel: string | undefined): ModelSpec | undefined {
  if (agentModel === undefined) return undefined;
  try {
    return JSON.parse(agentModel) as ModelSpec;
  } catch (error) {
    throw new SubagentError('NOT_RESUMABLE', `the stored model of this child is not readable: ${describeError(error)}`, { cause: error });
  }
}

/** What a failed store read of a stored child is to the caller: its abort, if it aborted meanwhile, else `NOT_RESUMABLE`. */
function readFailure(error: unknown, childId: SessionId, signal: AbortSignal | undefined): unknown {
  // A store read failing because the caller aborted meanwhile: no test times an abort into a read.
  if (signal?.aborted) return signal.reason;
  return new SubagentError('NOT_RESUMABLE', `child ${childId} cannot be read from persistence: ${describeError(error)}`, { cause: error });
}

/**
 * The refusals a follow-up can meet, asked of reads that write nothing: loading a log closes the turn
 * it has open, which must not be done to another host's live child for a caller that is not its
 * parent, nor to a session that is no continuable child.
 */
async function refuseBeforeLoad(store: Pick<SessionPersistence, 'list' | 'projections'>, childId: SessionId, parent: Agent, signal: AbortSignal | undefined): Promise<void> {
  let siblings, projections;
  try {
    [siblings, projections] = await Promise.all([store.list({ parentSession: parent.id }), store.projections([childId])]);
  } catch (error) {
    throw readFailure(error, childId, signal);
  }
  const stored = projections.get(childId);
  if (!stored) throw new SubagentError('NOT_RESUMABLE', `no continuable child ${childId} is stored; check the id`);
  if (!siblings.some((header) => header.id === childId)) {
    throw new SubagentError('UNAUTHORIZED', `only the direct parent of ${childId} may send it messages`);
  }
  if (!stored.ok) return; // The load says what is wrong with it.
  if (stored.views.subagent === null) {
    throw new SubagentError('NOT_RESUMABLE', `session ${childId} has no subagent descriptor: it is no child, or its start never completed (its host stopped before its first events were stored)`);
  }
  if (stored.views.subagent.mode !== 'continuable') {
    throw new SubagentError('NOT_RESUMABLE', `session ${childId} is not a continuable child (one-shot children cannot receive follow-ups)`);
  }
}

/** Restores a stored continuable child; `UNAUTHORIZED` unless `parent` is its stored parent. */
export async function resumeStored(options: {
  agents: AgentRegistry;
  setups: SetupRegistry;
  store: Pick<SessionPersistence, 'load' | 'list' | 'projections'>;
  childId: SessionId;
  parent: Agent;
  signal: AbortSignal | undefined;
  /** Re-checked after the stored record was read. */
  recheck: () => void;
  /** Admits the child under the tree budgets that cover it (its own, re-opened from its start). */
  admit?: ((budget: SubagentBudget | undefined, startedAt: number) => Promise<TreeStop | undefined>) | undefined;
  /** The provider's part of bringing the child back (a remote session), before its agent is built. */
  prepare: (descriptor: ContinuableDescriptor, own: readonly SessionEvent[]) => Promise<ContinuableCreateSpec>;
  /** Frees what `prepare` brought when the child is not built; never rejects (the build's failure is the one reported). */
  releasePrepared: (prepared: ContinuableCreateSpec) => Promise<void>;
  /** Told of a release that failed after the agent's own dispose failed (see withRelease). */
  warn: Warn;
}): Promise<Built & { from: number; provider: string; descriptor: ContinuableDescriptor }> {
  const { childId } = options;
  await refuseBeforeLoad(options.store, childId, options.parent, options.signal);
  options.recheck();
  let stored;
  try {
    stored = await options.store.load(childId);
  } catch (error) {
    throw readFailure(error, childId, options.signal);
  }
  options.recheck();
  // Its parent was checked before the load (a stored header's parent never changes).
  if (!stored) throw new SubagentError('NOT_RESUMABLE', `no continuable child ${childId} is stored; check the id`);
  const seedLength = stored.header.seedLength ?? 0;
  const own = stored.events.slice(seedLength);
  let descriptor;
  try {
    descriptor = foldSubagentDescriptor(own);
  } catch (error) {
    throw new SubagentError('NOT_RESUMABLE', `child ${childId} has a corrupt descriptor: ${describeError(error)}`, { cause: error });
  }
  if (descriptor?.mode !== 'continuable') {
    throw new SubagentError('NOT_RESUMABLE', `session ${childId} is not a continuable child (one-shot children cannot receive follow-ups)`);
  }
  const model = parseModel(descriptor.agentModel);
  const startedAt = own.find((event) => event.type === DESCRIPTOR_EVENT)!.time;
  const treeStop = await options.admit?.(descriptor.budget, startedAt);
  options.recheck();
  const prepared = await options.prepare(descriptor, own);
  const out: { batch?: SetupBatch; session?: SessionLog } = {};
  let handle: AgentHandle;
  try {
    handle = await releasingSetup(out, () => options.agents.resumeChild({
      sessionId: childId,
      // The follow-up that brings it back is delivered next: its turn takes what was queued before it.
      wake: false,
      agentOptions: optionsOf(descriptor, model, stored.header.delegationDepth ?? 1),
      ...(prepared.model ? { model: prepared.model, abandon: false } : {}),
      ...(prepared.toolModulesHere === false ? { loadToolModules: false } : {}),
      tools: inheritedTools(options.agents.tools, descriptor.toolFilter),
      setup: setupFor(descriptor, options.setups, out, false),
      hooks: guard(descriptor, out, startedAt, seedLength, treeStop),
      ...(options.signal ? { signal: options.signal } : {}),
    }), (error) => liveElsewhere(childId, error));
  } catch (error) {
    await options.releasePrepared(prepared);
    if (isSubagentError(error)) throw error;
    throw new SubagentError('NOT_RESUMABLE', `child ${childId} could not be resumed: ${describeError(error)}`, { cause: error });
  }
  handle = withRelease(handle, prepared, options.warn);
  const batch = out.batch!;
  try {
    batch.commit();
  } catch (error) {
    return rollback(handle, batch, error);
  }
  return { handle, batch, admitInput: (content) => admitInput(prepared, descriptor.provider, content), from: stored.events.length, provider: descriptor.provider, descriptor };
}
