// The spawn and fork providers: each child runs inside a worker thread of the host's pool (see
// worker-run.ts). Start builds the child's task here, on the main thread, before any thread is
// involved: its header, its host tools (filtered once now, again per call) and its fork seed.
import type { ChildTaskData } from '../../seam/child-protocol.js';
import { newId } from '../../seam/content.js';
import { SubagentError } from '../../seam/errors.js';
import { eventTexts } from '../../seam/event-texts.js';
import type { SessionEvent, SessionHeader } from '../../seam/session-types.js';
import type { ContinuableCreateRequest, ContinuableCreateSpec, ContinuableResumeRequest, ResolvedSubagentStartRequest, SubagentProvider, SubagentRun } from '../../seam/types.js';
import { STRUCTURED_OUTPUT_TOOL, captureToolTaken, inheritedTools } from '../../runtime/child-run.js';
import { completedTurnPrefix } from '../../runtime/session.js';
import { ALL_CAPABILITIES, localChildPlan } from '../local-child.js';
import { factoryOptions, hostParts, type Host } from '../provider-host.js';
import { assertEventsFitRunning, assertFitsThread, assertMessageFits, tooLargeForThread } from './heap-fit.js';
import { ResidentWorkerModel } from './resident-model.js';
import { WorkerRun, type WorkerProviderHost, type WorkerTaskPlan } from './worker-run.js';

export type { WorkerProviderHost } from './worker-run.js';

export interface WorkerProviderOptions {
  /** @default 'spawn' / 'fork' */
  name?: string;
}

// The seed cache. A parent that forks several children from one answer (parallel tool calls) has
// the same completed-turn prefix for each; encoding it is the costly part of a fork start, so the
// last encoding per parent session is kept. Keyed weakly by the session object: a parent that is
// gone takes its entry with it, and a longer prefix (a later turn) simply replaces it.
// (A thread gets its own copy of the texts, posted to it, and empties that one as it parses it.)
const seedCache = new WeakMap<object, { length: number; texts: string[] }>();

function encodedSeed(parentSession: object, seed: readonly SessionEvent[]): string[] {
  if (seed.length === 0) return [];
  const cached = seedCache.get(parentSession);
  // The log is append-only, so an equal length means an equal prefix.
  if (cached?.length === seed.length) return cached.texts;
  const texts = eventTexts(seed);
  seedCache.set(parentSession, { length: seed.length, texts });
  return texts;
}

/**
 * A fork's seed a pool thread cannot hold (see heap-fit.ts) is refused before any thread gets it; in
 * a thread `shared` with a child that may have filled its heap, so is one with an event too large.
 */
function assertSeedFits(seed: readonly string[], heapLimitMb: number | undefined, shared: boolean): void {
  const mb = tooLargeForThread(seed, heapLimitMb);
  if (mb !== undefined) {
    throw new SubagentError(
      'INVALID_REQUEST',
      `the parent's completed turns (${mb} MB encoded) are too large to fork into a worker thread with pool.resourceLimits.maxOldGenerationSizeMb ${heapLimitMb}; raise that limit (to at least 4 × the seed) or start a fresh child with spawn`,
    );
  }
  if (shared) assertEventsFitRunning('an event of the parent’s completed turns', seed, heapLimitMb, 'start a fresh child with spawn');
}

/**
 * Refuses a start a thread could not take in: its fork seed, the seed with the prompt, and the whole
 * task, whose persona, label, model spec and schemas cross into the thread with them. A thread shared
 * by several children may already run one that filled its heap: there the prompt and the rest of the
 * task are bounded as what a running child is handed (the seed's events one by one: assertSeedFits).
 */
function assertStartFits(data: ChildTaskData, heapLimitMb: number | undefined, shared: boolean): void {
  const { seed, prompt } = data;
  assertSeedFits(seed, heapLimitMb, shared);
  if (heapLimitMb === undefined) return;
  // The task is plain JSON, checked where each part entered: this cannot throw.
  const promptText = JSON.stringify(prompt);
  const started = [...seed, promptText];
  assertFitsThread(seed.length > 0 ? 'the prompt with the fork seed' : 'the prompt', started, heapLimitMb, 'send less');
  const rest = JSON.stringify({ ...data, seed: [], prompt: [] });
  const what = seed.length > 0 ? 'the prompt with the fork seed, persona, label, model spec and schemas' : 'the prompt with the persona, label, model spec and schemas';
  const remedy = 'send a shorter persona, label, model spec or output schema';
  assertFitsThread(what, [...started, rest], heapLimitMb, remedy);
  if (shared) assertFitsThread('the prompt with the persona, label, model spec and schemas', [promptText, rest], heapLimitMb, `${remedy}, a shorter prompt, or set pool.childrenPerThread to 1`, { running: true });
}

function planTask(host: WorkerProviderHost, request: ResolvedSubagentStartRequest, fork: boolean): WorkerTaskPlan {
  const plan = localChildPlan(request, fork);
  // The host tools this child may call: filtered here, before any child exists, and again per call.
  const allowed = inheritedTools(host.tools, request.toolFilter).list();
  // The capture tool is added in the thread; a host tool of its name is refused now, as in-process
  // refuses it, before any child exists (not as a child that fails once it started).
  if (request.outputSchema && allowed.some((tool) => tool.name === STRUCTURED_OUTPUT_TOOL)) {
    throw captureToolTaken('host');
  }
  const header: SessionHeader = {
    ...plan.header,
    id: newId(),
    createdAt: Date.now(),
    ...(plan.seed.length > 0 ? { seedLength: plan.seed.length } : {}),
  };
  const seed = encodedSeed(request.parent.session, plan.seed);
  const data: ChildTaskData = {
    header,
    seed,
    prompt: request.prompt,
    agentOptions: { ...plan.agentOptions, model: plan.agentOptions.model ?? host.agents.defaultModel },
    descriptor: request.descriptor,
    hostTools: allowed.map(({ name, description, parameters, concurrencySafe }) => ({
      name,
      description,
      parameters,
      ...(concurrencySafe ? { concurrencySafe } : {}),
    })),
    ...(request.outputSchema ? { outputSchema: request.outputSchema } : {}),
  };
  const { resourceLimits, childrenPerThread } = host.pool.options;
  assertStartFits(data, resourceLimits?.maxOldGenerationSizeMb, childrenPerThread > 1);
  return { data, allowedTools: new Set(allowed.map((tool) => tool.name)), seed: plan.seed };
}

async function startWorkerChild(host: WorkerProviderHost, request: ResolvedSubagentStartRequest, fork: boolean): Promise<SubagentRun> {
  const { signal } = request;
  if (signal.aborted) throw SubagentError.cancelled('the start', signal.reason, 'before the child was published');
  return WorkerRun.start(host, request, planTask(host, request, fork));
}

/** Recorded in a continuable child's descriptor: it comes back as a resident of a worker thread. */
const RESIDENT_DATA = Object.freeze({ residence: 'worker-thread' });

/**
 * A continuable child's host-side agent takes its turns through a resident stay in a pool thread
 * (see resident-model.ts), which also loads its tool modules; its log, inbox and epochs stay here.
 */
function residentSpec(host: WorkerProviderHost, request: ContinuableCreateRequest, resumed: boolean): ContinuableCreateSpec {
  // Its stays add the child's spend to the trees covering it and check them where it runs.
  const model = new ResidentWorkerModel(host, request.sessionId, request.parent.id, request.budgetTree?.countAhead?.(), resumed);
  return {
    model,
    providerData: { ...RESIDENT_DATA },
    toolModulesHere: false,
    quiesce: () => model.closeOwnInput(),
    release: () => model.release(),
    // Each turn's input goes to a stay that may have filled its thread: one that could not take a message never accepts it.
    admitInput: (content) => assertMessageFits(content, host.pool.options.resourceLimits?.maxOldGenerationSizeMb),
  };
}

function resumeResident(host: WorkerProviderHost, name: string, request: ContinuableResumeRequest): Promise<ContinuableCreateSpec> {
  if (request.providerData.residence !== RESIDENT_DATA.residence) {
    return Promise.reject(new SubagentError('NOT_RESUMABLE', `child ${request.sessionId} was not created by a worker provider; ${name} cannot bring it back`));
  }
  return Promise.resolve(residentSpec(host, request, true));
}

function workerProvider(host: WorkerProviderHost, fork: boolean, name: string): SubagentProvider {
  return {
    name,
    capabilities: ALL_CAPABILITIES,
    inheritsParentContext: fork,
    start: (request) => startWorkerChild(host, request, fork),
    // A continuable fork child starts from the parent's completed turns, like a one-shot fork.
    prepareContinuable: (request) => {
      const seed = fork ? completedTurnPrefix(request.parent.session.events) : undefined;
      try {
        // Past the pool's nesting limit now: refused before the child exists, as a one-shot start is.
        host.pool.admission.checkNesting({ parent: request.parent.id, parentOf: (id) => host.sessions.get(id)?.header.parentSession });
        // A seed no thread can hold, too: its stays would only fail (or abort the process).
        const { resourceLimits, childrenPerThread } = host.pool.options;
        if (seed) assertSeedFits(encodedSeed(request.parent.session, seed), resourceLimits?.maxOldGenerationSizeMb, childrenPerThread > 1);
        // Options no stay could take, too: they cross with each stay's log, the model spec twice (in them and in the log).
        if (request.agentOptions && resourceLimits?.maxOldGenerationSizeMb !== undefined) {
          const { model, ...rest } = request.agentOptions;
          const spec = model === undefined ? undefined : JSON.stringify(model);
          const texts = spec === undefined ? [JSON.stringify(rest)] : [JSON.stringify(rest), spec, spec];
          assertFitsThread('the model spec and options of a continuable child', texts, resourceLimits?.maxOldGenerationSizeMb, 'give it a shorter model spec', { running: childrenPerThread > 1 });
        }
      } catch (error) {
        return Promise.reject(error as Error);
      }
      return Promise.resolve({ ...residentSpec(host, request, false), ...(seed ? { seed } : {}) });
    },
    resumeContinuable: (request) => resumeResident(host, name, request),
  };
}

/** Fresh children, each in a worker thread of the host's pool. */
export function spawnProvider(host: Host, opts: WorkerProviderOptions = {}): SubagentProvider {
  return workerProvider(hostParts(host), false, factoryOptions(opts, 'spawnProvider', ['name']).name ?? 'spawn');
}

/** Children seeded with the parent's completed turns, each in a worker thread. */
export function forkProvider(host: Host, opts: WorkerProviderOptions = {}): SubagentProvider {
  return workerProvider(hostParts(host), true, factoryOptions(opts, 'forkProvider', ['name']).name ?? 'fork');
}
