// Creates, resumes and tracks agents. Creation builds everything unpublished (model, tool modules,
// scope, setup) and publishes last, so a failed create leaves nothing behind. The handle is the
// owner's capability: its memoized dispose cancels, waits for idle, flushes and unregisters.
import { setMaxListeners } from 'node:events';
import { once } from '../seam/once.js';
import { abortReason, unlessAborted } from '../seam/abort.js';
import type { AgentOptions, ModelSpec } from '../seam/agent-types.js';
import { newId, type SessionId } from '../seam/content.js';
import { SubagentError, describeError } from '../seam/errors.js';
import { isRecord, readingInput, timerOption } from '../seam/parse.js';
import { assertSessionId } from '../seam/session-id.js';
import type { SessionEvent, SessionHeader } from '../seam/session-types.js';
import { LocalAgent, type OwnInput } from './agent.js';
import { createModel } from './models/create.js';
import type { ModelAdapter } from './models/types.js';
import { SessionLog } from './session.js';
import type { SessionPersistence } from './session-persistence.js';
import type { LiveSessionStore, Logger } from './session-store.js';
import { ToolRegistry } from './tool-registry.js';
import { loadToolModules, registerModuleTools } from './tool-modules.js';
import type { AgentHooks } from './turn-context.js';

/** What `setup` may do before the agent is published: register scoped tools, restrict inherited ones. */
export interface AgentSetupScope {
  readonly agent: LocalAgent;
  readonly tools: ToolRegistry;
}

interface CommonAgentOptions {
  agentOptions?: AgentOptions;
  /** A ready adapter; overrides `agentOptions.model`. */
  model?: ModelAdapter;
  /** Registry the agent's tool scope inherits from. @default the registry's host tools */
  tools?: ToolRegistry;
  setup?: (scope: AgentSetupScope) => void | Promise<void>;
  hooks?: AgentHooks;
  /** Aborting it before publication rejects the create with `CANCELLED`. */
  signal?: AbortSignal;
  /** The last checks before publication, right after the signal's (no await between): a throw rejects the create. */
  admit?: () => void;
  /** A shared cancel flag set by another thread (see AgentInit.cancelFlag). */
  cancelFlag?: Int32Array;
  /** False: `agentOptions.toolModules` are loaded elsewhere (where a resident child runs). @default true */
  loadToolModules?: boolean;
  /** Where input the agent adds to itself goes (see AgentInit.ownInput). @default its own inbox */
  ownInput?: OwnInput;
  /**
   * False: a cancelled turn waits for its model however long it takes, for `model` is a relay with
   * bounds of its own (a worker thread's grace, an ACP process's). @default true: the registry's
   * `abandonGraceMs`, if it has one
   */
  abandon?: boolean;
}

export interface CreateAgentOptions extends CommonAgentOptions {
  sessionId?: SessionId;
  header?: Omit<SessionHeader, 'id' | 'createdAt' | 'seedLength'>;
  /** A fork's inherited prefix (contiguous seqs from 0). */
  seed?: readonly SessionEvent[];
}

export interface ResumeAgentOptions extends CommonAgentOptions {
  sessionId: SessionId;
  /** Reads the agent options from the stored log (when it gives some, they replace `agentOptions`). */
  agentOptionsFrom?: (events: readonly SessionEvent[]) => AgentOptions | undefined;
  /**
   * Whether input it had accepted and not yet taken starts a turn at once (default `true`).
   * `false` leaves it queued for the next message, whose turn then takes it too.
   */
  wake?: boolean;
}

export interface AgentHandle {
  readonly agent: LocalAgent;
  /** Idempotent: cancels, waits for idle, flushes the session and unregisters the agent. */
  dispose(): Promise<void>;
}

/** `INVALID_OPTIONS` unless `options` is an object whose `sessionId` (required for a resume) is a non-empty string (and can be read). */
const assertAgentOptionsObject = (method: string, options: unknown, needsId: boolean): void => readingInput(`${method}() options`, 'INVALID_OPTIONS', () => checkOptionsObject(method, options, needsId));
function checkOptionsObject(method: string, options: unknown, needsId: boolean): void {
  if (!isRecord(options)) throw new SubagentError('INVALID_OPTIONS', `${method}(): options must be an object`);
  const bad = (field: string, what: string) => new SubagentError('INVALID_OPTIONS', `${method}(): options.${field} must be ${what}`);
  const { model, tools, setup, hooks, signal, admit, cancelFlag, loadToolModules, ownInput, abandon, sessionId } = options;
  if (model !== undefined && !(isRecord(model) && typeof model['stream'] === 'function')) {
    throw bad('model', 'a ready model adapter (an object with a stream() method); a model spec goes in agentOptions.model');
  }
  if (tools !== undefined && !(tools instanceof ToolRegistry)) throw bad('tools', 'a ToolRegistry');
  if (setup !== undefined && typeof setup !== 'function') throw bad('setup', 'a function');
  if (admit !== undefined && typeof admit !== 'function') throw bad('admit', 'a function');
  if (ownInput !== undefined && typeof ownInput !== 'function') throw bad('ownInput', 'a function');
  if (hooks !== undefined && !isRecord(hooks)) throw bad('hooks', 'an object');
  if (signal !== undefined && !(signal instanceof AbortSignal)) throw bad('signal', 'an AbortSignal');
  if (cancelFlag !== undefined && !(cancelFlag instanceof Int32Array)) throw bad('cancelFlag', 'an Int32Array');
  if (loadToolModules !== undefined && typeof loadToolModules !== 'boolean') throw bad('loadToolModules', 'true or false');
  if (abandon !== undefined && typeof abandon !== 'boolean') throw bad('abandon', 'true or false');
  if (sessionId === undefined && !needsId) return;
  assertSessionId(sessionId, `${method}(): options.sessionId`, 'INVALID_OPTIONS', true);
}

const positiveCount = (value: unknown) => value === undefined || (Number.isSafeInteger(value) && (value as number) > 0);

/**
 * `INVALID_OPTIONS` unless the agent options' numbers and strings are usable: a `maxStepsPerTurn`
 * below 1 would end every turn before it took its input, and start the next one at once.
 */
function assertAgentOptions(options: unknown): asserts options is AgentOptions {
  const bad = (field: string, what: string) => new SubagentError('INVALID_OPTIONS', `agentOptions.${field} must be ${what}`);
  if (!isRecord(options)) throw new SubagentError('INVALID_OPTIONS', 'agentOptions must be an object');
  if (!positiveCount(options['maxStepsPerTurn'])) throw bad('maxStepsPerTurn', 'a whole number ≥ 1');
  if (!positiveCount(options['maxTokens'])) throw bad('maxTokens', 'a whole number ≥ 1');
  const depth = options['subagentDepth'];
  // Checked here, not first at each delegation (which would refuse every start of this agent).
  if (depth !== undefined && !(Number.isSafeInteger(depth) && (depth as number) >= 0 && !Object.is(depth, -0))) throw bad('subagentDepth', 'a whole number ≥ 0');
  const { persona, toolModules } = options;
  if (persona !== undefined && typeof persona !== 'string') throw bad('persona', 'a string');
  if (toolModules !== undefined && !(Array.isArray(toolModules) && toolModules.every((specifier) => typeof specifier === 'string' && specifier !== ''))) {
    throw bad('toolModules', 'an array of module specifiers');
  }
}

function checkSignal(signal: AbortSignal | undefined): void {
  if (signal !== undefined && readingInput('createAgent options.signal', 'INVALID_OPTIONS', () => signal.aborted)) throw SubagentError.cancelled('agent creation', abortReason(signal));
}

export class AgentRegistry {
  readonly #agents = new Map<SessionId, AgentHandle>();
  /** The live agents a run or a continuation holds (they dispose them, child-first), not their callers. */
  readonly #children = new Set<SessionId>();
  /** Aborted by close(): agents still being built stop waiting for their modules and are not published. */
  readonly #closed = new AbortController();
  /** Set by hold(): the host is closing, and no agent is created or resumed any more. */
  #holding = false;
  /** Aborted by hold() and close(): see {@link closing}. */
  readonly #closing = new AbortController();
  #beforeDispose: ((agent: LocalAgent) => Promise<void>) | undefined;
  readonly #sessions: LiveSessionStore;
  readonly #tools: ToolRegistry;
  readonly #model: ModelSpec;
  readonly #persistence: SessionPersistence | undefined;
  readonly #logger: Logger | undefined;
  readonly #abandonGraceMs: number | undefined;

  constructor(options: {
    sessions: LiveSessionStore;
    tools?: ToolRegistry;
    model?: ModelSpec | undefined;
    persistence?: SessionPersistence | undefined;
    logger?: Logger | undefined;
    /**
     * Given to its agents (but those created with `abandon: false`): see `TurnContext.abandonGraceMs`.
     */
    abandonGraceMs?: number | undefined;
  }) {
    // Checked here too, not only by createHost: a grace past a timer's reach would abandon at once.
    this.#abandonGraceMs = options.abandonGraceMs === undefined ? undefined : timerOption(options.abandonGraceMs, 0, 'AgentRegistry options.abandonGraceMs');
    // Every cancelled turn and child run waiting on a call listens to it: as many as run at once.
    setMaxListeners(0, this.#closing.signal);
    this.#sessions = options.sessions;
    this.#tools = options.tools ?? new ToolRegistry();
    this.#model = options.model ?? { kind: 'scripted' };
    this.#persistence = options.persistence;
    this.#logger = options.logger;
  }

  /**
   * Aborted once the host began to close (hold() or close()): from then on a cancelled turn, and a
   * child's run, no longer wait out a grace for calls that ignore their signal (one may be waiting
   * for the close itself); they give up on them at once.
   */
  get closing(): AbortSignal {
    return this.#closing.signal;
  }

  /** The host tools: what an agent's scope inherits unless its options name other tools. */
  get tools(): ToolRegistry {
    return this.#tools;
  }

  /** The model agents get when their options name none. */
  get defaultModel(): ModelSpec {
    return this.#model;
  }

  get(id: SessionId): LocalAgent | undefined {
    return this.#agents.get(id)?.agent;
  }

  list(): LocalAgent[] {
    return [...this.#agents.values()].map((handle) => handle.agent);
  }

  /** Creates and publishes a new agent with a new session. */
  async create(options: CreateAgentOptions = {}): Promise<AgentHandle> {
    if (this.#holding) throw SubagentError.closed('the host');
    assertAgentOptionsObject('create', options, false);
    const id = options.sessionId ?? newId();
    if (this.#agents.has(id) || this.#sessions.has(id)) {
      throw new SubagentError('DUPLICATE_SESSION', `session ${id} is already live; choose another id`);
    }
    const seed = options.seed ?? [];
    const header: SessionHeader = {
      ...options.header,
      id,
      createdAt: Date.now(),
      ...(seed.length > 0 ? { seedLength: seed.length } : {}),
    };
    const session = SessionLog.create(header, seed, (error) => this.#logger?.warn(`session ${id} listener failed`, describeError(error)));
    return this.#build(options, session, false, header.origin === 'subagent');
  }

  /** Restores a stored session (a subagent's too) as a live top-level agent; input it had accepted runs again. */
  resume(options: ResumeAgentOptions): Promise<AgentHandle> {
    return this.#resume(options, false);
  }

  /** `resume` of a continuable child its parent's continuation holds and disposes (not `dispose(id)`). */
  resumeChild(options: ResumeAgentOptions): Promise<AgentHandle> {
    return this.#resume(options, true);
  }

  async #resume(options: ResumeAgentOptions, child: boolean): Promise<AgentHandle> {
    if (this.#holding) throw SubagentError.closed('the host', 'resume sessions on an open host');
    assertAgentOptionsObject('resume', options, true);
    if (!this.#persistence) {
      throw new SubagentError('PERSISTENCE_UNAVAILABLE', 'resume needs session persistence; create the host with persistence');
    }
    if (this.#agents.has(options.sessionId) || this.#sessions.has(options.sessionId)) {
      throw new SubagentError('DUPLICATE_SESSION', `session ${options.sessionId} is already live`);
    }
    const stored = await this.#persistence.load(options.sessionId);
    if (!stored) throw new SubagentError('UNKNOWN_SESSION', `no stored session ${options.sessionId}`);
    const session = SessionLog.restore(stored.header, stored.events, (error) => this.#logger?.warn(`session ${stored.header.id} listener failed`, describeError(error)));
    const kept = options.agentOptionsFrom?.(stored.events);
    const handle = await this.#build(kept ? { ...options, agentOptions: kept } : options, session, true, child);
    if (options.wake !== false) handle.agent.wakeRestored();
    return handle;
  }

  async #build(options: CommonAgentOptions, session: SessionLog, stored: boolean, child: boolean): Promise<AgentHandle> {
    const agentOptions = options.agentOptions ?? {};
    assertAgentOptions(agentOptions);
    checkSignal(options.signal);
    const model = options.model ?? (await this.#loading(createModel(agentOptions.model ?? this.#model), options.signal));
    const tools = (options.tools ?? this.#tools).scope();
    if (agentOptions.toolModules?.length && options.loadToolModules !== false) {
      registerModuleTools(tools, await this.#loading(loadToolModules(agentOptions.toolModules, tools, { overInherited: stored }), options.signal), stored);
    }
    checkSignal(options.signal);
    const agent = new LocalAgent({
      options: agentOptions,
      model,
      tools,
      session,
      ...(options.hooks ? { hooks: options.hooks } : {}),
      ...(options.cancelFlag ? { cancelFlag: options.cancelFlag } : {}),
      ...(options.ownInput ? { ownInput: options.ownInput } : {}),
      ...(options.abandon !== false && this.#abandonGraceMs !== undefined ? { abandonGraceMs: this.#abandonGraceMs, closing: this.#closing.signal } : {}),
      onError: (error) => this.#logger?.warn(`agent ${session.id} failed`, describeError(error)),
    });
    if (options.setup) {
      await options.setup({ agent, tools });
      checkSignal(options.signal);
    }
    // Nothing is published into a closed registry: close() has disposed what it had.
    if (this.#closed.signal.aborted) throw this.#closedWhileBuilding();
    options.admit?.();
    if (this.#agents.has(session.id)) throw new SubagentError('DUPLICATE_SESSION', `session ${session.id} became live during creation`);
    this.#sessions.publish(session, { stored });
    const handle: AgentHandle = {
      agent,
      dispose: once(async () => {
        // What the agent started that outlives a turn (background tasks) goes first: child-first.
        await this.#beforeDispose?.(agent);
        agent.beginDispose();
        await agent.whenIdle();
        agent.release();
        this.#agents.delete(agent.id);
        this.#children.delete(agent.id);
        await this.#sessions.remove(agent.id);
      }),
    };
    this.#agents.set(agent.id, handle);
    if (child) this.#children.add(agent.id);
    return handle;
  }

  /**
   * Disposes the live top-level agent `id` (cancels its turn, waits for idle, flushes its session and
   * unregisters it); false when no agent `id` is live. A child a run or a continuation holds is refused
   * (`INVALID_REQUEST`): that run or continuation disposes it, child-first. A subagent's session
   * brought back by `resume` (without `child`) is top-level: this frees it.
   */
  async dispose(id: SessionId): Promise<boolean> {
    if (typeof id !== 'string') throw new SubagentError('INVALID_OPTIONS', 'agents.dispose(): id must be a session id (a string)');
    const handle = this.#agents.get(id);
    if (!handle) return false;
    if (this.#children.has(id)) {
      throw new SubagentError('INVALID_REQUEST', `agents.dispose(): ${id} is a subagent child; its run or its parent's continuation disposes it (dispose the run, or drain the parent's continuable descendants)`);
    }
    await handle.dispose();
    return true;
  }

  /**
   * Sets what runs before each agent's disposal (the host releases the work the agent holds there,
   * such as its background tasks); it must not reject.
   */
  beforeDispose(hook: (agent: LocalAgent) => Promise<void>): void {
    this.#beforeDispose = hook;
  }

  /**
   * The host begins to close: creates and resumes are refused (`CLOSED`), and every top-level agent
   * stops at once, as its disposal stops it (its turn ends aborted, its queued input is discarded,
   * and input it accepts from now on stays pending in the log): no model is called for it while
   * the host drains the children, which their runs and continuations stop, child-first.
   */
  hold(): void {
    this.#holding = true;
    this.#closing.abort();
    for (const { agent } of this.#agents.values()) if (!this.#children.has(agent.id)) agent.beginDispose();
  }

  /** Disposes every agent, also when one's disposal fails (its flush); then throws the first failure. */
  async close(): Promise<void> {
    this.#closed.abort(this.#closedWhileBuilding());
    this.#closing.abort();
    const outcomes = await Promise.allSettled([...this.#agents.values()].map((handle) => handle.dispose()));
    const failed = outcomes.find((outcome) => outcome.status === 'rejected');
    if (failed) throw failed.reason;
  }

  /** `work` (caller modules being loaded), unless `signal` aborts (`CANCELLED`) or the registry closes (`CLOSED`) first. */
  #loading<T>(work: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
    const cancelled = (reason: unknown) => SubagentError.cancelled('agent creation', reason);
    return unlessAborted(readingInput('createAgent options.signal', 'INVALID_OPTIONS', () => unlessAborted(work, signal, cancelled)), this.#closed.signal, () => this.#closedWhileBuilding());
  }

  #closedWhileBuilding(): SubagentError {
    return SubagentError.closedWhile('the host', 'the agent was being built');
  }
}
