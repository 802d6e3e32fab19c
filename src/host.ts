// createHost: wires the live session store, persistence, host tools, the agent registry and the
// subagent service, and owns their shutdown. `close()` stops top-level agents at once, then disposes
// runs (continuable children first, child-first), agents, then storage.
import type { Agent, AgentOptions, ModelSpec, Tool } from './seam/agent-types.js';
import { plainJsonProblem, type SessionId } from './seam/content.js';
import { SubagentError, describeError, isSubagentError } from './seam/errors.js';
import { assertKnownKeys, isRecord, pickFields, readingInput, timerOption, wellFormed } from './seam/parse.js';
import type { SessionHeader } from './seam/session-types.js';
import { AgentRegistry, type CreateAgentOptions } from './runtime/agent-registry.js';
import { checkedPersistence, liveGuardedPersistence } from './runtime/checked-persistence.js';
import type { SessionPersistence } from './runtime/session-persistence.js';
import { LiveSessionStore, type Logger } from './runtime/session-store.js';
import { ToolRegistry } from './runtime/tool-registry.js';
import { memoryPersistence } from './persistence/memory.js';
import { parseHeader } from './persistence/validate.js';
import { assertModelSpec } from './runtime/models/create.js';
import { checkedAdapter } from './runtime/models/module-model.js';
import type { ModelAdapter } from './runtime/models/types.js';
import { sqlitePersistence, type SqlitePersistenceOptions } from './persistence/sqlite.js';
import { unwritableFileError } from './persistence/sqlite-schema.js';
import { createSubagentCatalog } from './service/catalog.js';
import { assertSessionId } from './seam/session-id.js';
import { SubagentService, heldWorkOf, parentLeaving } from './service/service.js';
import { bindHostParts, type Host } from './providers/provider-host.js';
import { openWorkerPool, type WorkerPoolEngine, type WorkerPoolOptions } from './providers/worker/pool.js';
import { forkProvider, spawnProvider } from './providers/worker/worker-provider.js';

export type { Host, HostAgents, HostSessions, HostTools, LiveSession } from './providers/provider-host.js';

export interface HostOptions {
  /** Default model of agents. @default { kind: 'scripted' } */
  model?: ModelSpec;
  /** Where sessions are kept; `{ sqlite: path, …options }` takes the options of `sqlitePersistence`. @default 'memory' */
  persistence?: 'memory' | ({ sqlite: string } & SqlitePersistenceOptions) | SessionPersistence;
  /** Host tools, callable by agents (and by worker children, across the thread boundary). */
  tools?: Tool[];
  /** The worker pool of the spawn and fork providers. */
  pool?: WorkerPoolOptions;
  /** Register the `spawn` and `fork` providers. @default true */
  providers?: boolean;
  /** Receives contained failures (listener throws, write errors). @default silent */
  logger?: Logger;
  /** Continuable children: how long a settled child stays resident (ms; 0 = until it settles). @default { lingerMs: 30000 } */
  continuation?: { lingerMs?: number };
  /**
   * After a cancel, how long a turn of an agent running on this thread (top-level, in-process child)
   * waits for a tool or model adapter that ignores its signal before it ends without it (the call's
   * result is `ABANDONED`), and how long a cancelled worker child's result waits for the host tools
   * it called that ignore theirs. Worker children's own tools lose their thread instead
   * (`pool.cancelGraceMs`). Once `close()` began, nothing waits for this grace. @default 5000
   */
  abandonGraceMs?: number;
}

/**
 * The caller's logger, called so that it cannot fail what it reports on: a warning is written where
 * a failure was contained (a listener's throw, a write-behind error), and a logger that throws there
 * would undo that.
 */
function containedLogger(logger: Logger | undefined): Logger | undefined {
  if (logger === undefined) return undefined;
  if (!isRecord(logger) || typeof logger.warn !== 'function' || (logger.debug !== undefined && typeof logger.debug !== 'function')) {
    throw new SubagentError('INVALID_OPTIONS', 'options.logger must be an object with a warn(message, data) method (and optionally debug)');
  }
  const call = (method: 'warn' | 'debug', message: string, data: unknown) => {
    try {
      const returned: unknown = logger[method]?.(message, data);
      // An async logger that rejects must not become an unhandled rejection (which ends the process).
      if (isRecord(returned) && typeof returned['then'] === 'function') (returned as unknown as PromiseLike<unknown>).then(undefined, () => undefined);
    } catch {
      // Nothing to report a failing logger to.
    }
  };
  return { warn: (message, data) => call('warn', message, data), ...(logger.debug ? { debug: (message: string, data?: unknown) => call('debug', message, data) } : {}) };
}

/**
 * `INVALID_OPTIONS` (a model spec: `INVALID_MODEL_SPEC`) naming the first createHost option that is
 * not usable; else the options the host is built with (its logger contained).
 */
function checkHostOptions(options: HostOptions): HostOptions {
  const logger = readingInput('options.logger', 'INVALID_OPTIONS', () => containedLogger(options.logger));
  if (options.model !== undefined) assertModelSpec(options.model);
  if (options.providers !== undefined && typeof options.providers !== 'boolean') {
    throw new SubagentError('INVALID_OPTIONS', `options.providers must be true or false (got ${typeof options.providers})`);
  }
  if (options.tools !== undefined && !Array.isArray(options.tools)) throw new SubagentError('INVALID_OPTIONS', 'options.tools must be an array of tools');
  if (options.continuation !== undefined) {
    if (!isRecord(options.continuation)) throw new SubagentError('INVALID_OPTIONS', 'options.continuation must be an object: { lingerMs? }');
    assertKnownKeys('options.continuation', options.continuation, ['lingerMs']);
  }
  return logger ? { ...options, logger } : options;
}

// Records, so that the compiler asks for a new option here.
const HOST_OPTION_KEYS = Object.keys({ model: 1, persistence: 1, tools: 1, pool: 1, providers: 1, logger: 1, continuation: 1, abandonGraceMs: 1 } satisfies Record<keyof HostOptions, 1>);
const AGENT_OPTION_KEYS = Object.keys({
  sessionId: 1,
  header: 1,
  seed: 1,
  agentOptions: 1,
  model: 1,
  tools: 1,
  setup: 1,
  hooks: 1,
  signal: 1,
  admit: 1,
  cancelFlag: 1,
  loadToolModules: 1,
  ownInput: 1,
  abandon: 1,
} satisfies Record<keyof CreateAgentOptions, 1>);

/** `INVALID_OPTIONS` naming the field unless `header` is the extra fields of a session header. */
function checkNewHeader(header: unknown): void {
  if (!isRecord(header)) throw new SubagentError('INVALID_OPTIONS', 'createAgent options.header must be an object');
  for (const key of ['id', 'createdAt', 'seedLength']) {
    if (key in header) throw new SubagentError('INVALID_OPTIONS', `createAgent options.header.${key} is set by the host, not by the caller`);
  }
  try {
    parseHeader({ ...header, id: 'new', createdAt: 0 } as SessionHeader, 'its fields, all optional: cwd, parentSession, origin, delegationDepth');
  } catch (error) {
    throw new SubagentError('INVALID_OPTIONS', `createAgent options.${(error as Error).message}`, { cause: error });
  }
}

/**
 * A caller's ready adapter is the caller's code: its chunks are checked as a module adapter's are
 * (its output goes into the log as it is). Anything that is no adapter is left for the registry to refuse.
 */
function withCheckedModel(options: CreateAgentOptions | undefined): CreateAgentOptions | undefined {
  const model: unknown = options?.model;
  if (!isRecord(model) || typeof model['stream'] !== 'function') return options;
  return { ...options, model: checkedAdapter(model as unknown as ModelAdapter, 'the model adapter given to createAgent') };
}

/** The createAgent options, their fields read once, checked as the store and the registry will check them. */
function checkAgentOptions(given: CreateAgentOptions): CreateAgentOptions {
  assertKnownKeys('createAgent options', given, AGENT_OPTION_KEYS);
  const options = pickFields(given, AGENT_OPTION_KEYS);
  const { header, agentOptions, seed } = options;
  // Checked as the store will check it: a header it refuses would leave the agent running unsaved.
  if (header !== undefined) checkNewHeader(header);
  // A new id must be one `ls` and the inspector can show and be given back.
  if (options.sessionId !== undefined) assertSessionId(options.sessionId, 'create(): options.sessionId', 'INVALID_OPTIONS');
  // A misspelt option (maxToken) is refused, as a start's agentOptions are, not silently dropped.
  if (isRecord(agentOptions)) assertKnownKeys('createAgent options.agentOptions', agentOptions, AGENT_OPTIONS_FIELDS);
  if (seed !== undefined) checkSeed(seed);
  return options as CreateAgentOptions;
}

/**
 * `INVALID_OPTIONS` naming the first event of a caller's `seed` that no store could keep or no agent
 * could continue from: each must be `{ seq, time, type, data }` with plain-JSON data, and a turn's
 * start and end must carry its number. (Contiguous seqs from 0 are the session's check: `SEQ_MISMATCH`.)
 */
function checkSeed(seed: unknown): void {
  if (!Array.isArray(seed)) throw new SubagentError('INVALID_OPTIONS', 'createAgent options.seed must be an array of session events');
  seed.forEach((event: unknown, index) => {
    const at = `createAgent options.seed[${index}]`;
    if (!isRecord(event)) throw new SubagentError('INVALID_OPTIONS', `${at} must be a session event { seq, time, type, data }`);
    const { type, time, data } = event;
    if (typeof type !== 'string' || type === '' || !Number.isFinite(time)) {
      throw new SubagentError('INVALID_OPTIONS', `${at} must have a non-empty string type and a numeric time`);
    }
    // The store refuses it (at the first flush, failing close()): refused here, before the agent exists.
    if (!wellFormed(type)) throw new SubagentError('INVALID_OPTIONS', `${at}.type must be well-formed text (it has a lone UTF-16 surrogate, which no store keeps)`);
    const problem = plainJsonProblem(data, `${at}.data`);
    if (problem) throw new SubagentError('INVALID_OPTIONS', `${problem} (event data is stored as JSON)`);
    if ((type === 'turn/start' || type === 'turn/end') && !(isRecord(data) && Number.isSafeInteger(data['turn']) && (data['turn'] as number) > 0)) {
      throw new SubagentError('INVALID_OPTIONS', `${at}.data.turn must be the turn's number (a whole number ≥ 1)`);
    }
  });
}

const AGENT_OPTIONS_FIELDS = Object.keys({
  model: 1,
  persona: 1,
  maxTokens: 1,
  maxStepsPerTurn: 1,
  subagentDepth: 1,
  toolModules: 1,
} satisfies Record<keyof AgentOptions, 1>);

/** What a caller's SessionPersistence must offer; a partial object fails here, not at first write. */
const PERSISTENCE_METHODS = ['create', 'append', 'load', 'list', 'childRecords', 'descendantRecords', 'projections', 'flush', 'close'] as const;

function openPersistence(option: HostOptions['persistence']): { persistence: SessionPersistence; owned: boolean } {
  if (option === undefined || option === 'memory') return { persistence: memoryPersistence(), owned: true };
  if (typeof option === 'object' && option !== null && 'sqlite' in option) {
    const { sqlite, ...options } = option;
    // A host writes its store: a file it may only read is refused now, not at its first write.
    const unwritable = typeof sqlite === 'string' ? unwritableFileError(sqlite) : undefined;
    if (unwritable) throw unwritable;
    return { persistence: sqlitePersistence(sqlite, options), owned: true };
  }
  const isStore = (store: object) => PERSISTENCE_METHODS.every((m) => typeof (store as Record<string, unknown>)[m] === 'function');
  if (typeof option === 'object' && option !== null && readingInput('options.persistence', 'INVALID_OPTIONS', () => isStore(option))) {
    // Checked: what it throws or returns reaches the host typed, as from the built-in stores.
    return { persistence: checkedPersistence(option as SessionPersistence), owned: false };
  }
  throw new SubagentError('INVALID_OPTIONS', "options.persistence must be 'memory', { sqlite: path } or a SessionPersistence");
}

function liveLogFailed(id: SessionId, cause?: unknown): SubagentError {
  const why = cause === undefined ? 'its own flush says why' : describeError(cause);
  return new SubagentError('PERSISTENCE_UNAVAILABLE', `session ${id} is live in this host and some of its writes failed: the store does not hold its log (${why})`, { cause });
}

class HostImpl implements Host {
  readonly subagents: SubagentService;
  readonly agents: AgentRegistry;
  readonly sessions: LiveSessionStore;
  readonly persistence: SessionPersistence;
  readonly tools: ToolRegistry;
  readonly pool: WorkerPoolEngine;
  readonly abandonGraceMs: number;
  readonly logger: Logger | undefined;
  readonly #ownsPersistence: boolean;
  readonly #closeHooks = new Set<() => Promise<void>>();
  #closing: Promise<void> | undefined;

  constructor(options: HostOptions, { persistence, owned }: ReturnType<typeof openPersistence>) {
    this.#ownsPersistence = owned;
    const { logger } = options;
    this.logger = logger;
    this.sessions = new LiveSessionStore({ persistence, logger });
    this.persistence = liveGuardedPersistence(persistence, (id) => {
      const session = this.sessions.get(id);
      const state = this.sessions.writeState(id);
      // Not live, or live under an id whose stored log is another writer's: the store answers.
      if (!session || state === 'refused') return undefined;
      // The store's load would repair a turn the live log has open behind the agent: never called for it.
      if (state === 'failed') return Promise.reject(liveLogFailed(id));
      // Flushed first (a read reports no failure: that is for the writer's own flushes), so the copy is what the store holds.
      return this.sessions.flush(id, { report: false }).then(
        () => {
          if (this.sessions.writeState(id) === 'failed') throw liveLogFailed(id);
          return structuredClone({ header: session.header, events: [...session.events] });
        },
        (error: unknown) => {
          throw liveLogFailed(id, error);
        },
      );
    });
    this.tools = new ToolRegistry();
    if (options.tools?.length) this.tools.register(...options.tools);
    this.abandonGraceMs = timerOption(options.abandonGraceMs, 5000, 'options.abandonGraceMs');
    this.agents = new AgentRegistry({
      sessions: this.sessions,
      tools: this.tools,
      persistence,
      logger,
      abandonGraceMs: this.abandonGraceMs,
      ...(options.model ? { model: options.model } : {}),
    });
    this.subagents = new SubagentService({
      logger,
      catalog: (published) => createSubagentCatalog({ persistence, sessions: this.sessions, logger, published }),
      continuation: { agents: this.agents, sessions: this.sessions, persistence, lingerMs: timerOption(options.continuation?.lingerMs, 30_000, 'options.continuation.lingerMs') },
    });
    // An agent's background tasks are cancelled (and their notices given) before the agent goes;
    // then no child starts under it any more, and starts under it in flight give up.
    const held = heldWorkOf(this.subagents);
    this.agents.beforeDispose((agent) => {
      const finishing = held.finish(agent);
      parentLeaving(this.subagents, agent);
      return finishing;
    });
    this.pool = openWorkerPool(options.pool, logger);
    bindHostParts(this, this);
    if (options.providers !== false) {
      this.subagents.registerProvider(spawnProvider(this));
      this.subagents.registerProvider(forkProvider(this));
      // Warm threads in the background so the first child does not pay for thread start-up.
      this.pool.warm().catch(() => undefined);
    }
  }

  async createAgent(given?: CreateAgentOptions): Promise<Agent> {
    if (this.#closing) throw SubagentError.closed('the host');
    // Read once into a copy and checked; a getter or proxy trap that throws is the caller's bad input.
    const options = given === undefined ? undefined : readingInput('createAgent options', 'INVALID_OPTIONS', () => checkAgentOptions(given));
    const id = (options as { sessionId?: unknown } | undefined)?.sessionId;
    // A stored session is brought back with agents.resume; a new one under its id would write into its log.
    if (typeof id === 'string' && id !== '' && (await this.persistence.projections([id])).has(id)) {
      throw new SubagentError('DUPLICATE_SESSION', `session ${id} is already stored; resume it with host.agents.resume({ sessionId }) or choose another id`);
    }
    const handle = await this.agents.create(withCheckedModel(options));
    try {
      // The check above cannot see a creation under way in another host on the same store: the
      // store's own refusal is the last word, or the agent would run with a log written nowhere.
      await this.sessions.created(handle.agent.id);
    } catch (error) {
      await handle.dispose().catch(() => undefined);
      if (isSubagentError(error, 'DUPLICATE_SESSION')) {
        throw new SubagentError('DUPLICATE_SESSION', `session ${handle.agent.id} was created meanwhile by another writer of this store (another host, or another process); resume it with host.agents.resume({ sessionId }) or choose another id`, { cause: error });
      }
      throw error;
    }
    if (this.#closing) {
      // close() began while this agent was being built; it may already have swept the registry.
      await handle.dispose().catch(() => undefined);
      throw SubagentError.closedWhile('the host', 'the agent was being created');
    }
    return handle.agent;
  }

  /** For providers (ProviderHost): teardown of provider-owned resources, awaited by `close()` after runs. */
  onClose(hook: () => Promise<void>): () => void {
    if (this.#closing) throw SubagentError.closed('the host');
    this.#closeHooks.add(hook);
    return () => void this.#closeHooks.delete(hook);
  }

  close(): Promise<void> {
    this.#closing ??= (async () => {
      try {
        this.tools.close();
        // Children are refused from now on; top-level agents stop now (a turn in flight ends
        // aborted), not after the children drained: a paid model is called no more once close began.
        const draining = this.subagents.close();
        this.agents.hold();
        await draining;
        await Promise.allSettled([...this.#closeHooks].map((hook) => hook()));
        // The sessions are flushed also when an agent's own flush failed; that failure is then reported.
        const disposed = await this.agents.close().then(
          () => undefined,
          (error: unknown) => ({ error }),
        );
        await this.sessions.flush();
        if (disposed) throw disposed.error;
      } finally {
        this.sessions.stopRetries();
        await this.pool.close();
        if (this.#ownsPersistence) await this.persistence.close();
      }
    })();
    return this.#closing;
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }
}

/**
 * The caller's options, read once into plain copies (the continuation's, the tool list, a
 * `{ sqlite }` persistence; the pool's are copied as the pool reads them) and checked: a getter or
 * proxy trap that throws is `INVALID_OPTIONS` naming the option, not a TypeError from inside the host.
 */
function readHostOptions(given: HostOptions): HostOptions {
  const options: Record<string, unknown> = readingInput('createHost options', 'INVALID_OPTIONS', () => {
    assertKnownKeys('createHost options', given, HOST_OPTION_KEYS);
    return pickFields(given, HOST_OPTION_KEYS);
  });
  const { tools, continuation, persistence } = options;
  readingInput('options.tools', 'INVALID_OPTIONS', () => {
    if (Array.isArray(tools)) options['tools'] = [...(tools as unknown[])];
  });
  readingInput('options.continuation', 'INVALID_OPTIONS', () => {
    // Its own fields, for the check of misspelt ones, and lingerMs also where a class defines it.
    if (isRecord(continuation)) options['continuation'] = { ...continuation, ...pickFields(continuation, ['lingerMs']) };
  });
  readingInput('options.persistence', 'INVALID_OPTIONS', () => {
    // A store of the caller's own is kept as it is (its methods are checked as it is opened); a
    // `{ sqlite }` one is copied: its own fields, and the path also where a class defines it.
    if (isRecord(persistence) && 'sqlite' in persistence) options['persistence'] = { ...persistence, ...pickFields(persistence, ['sqlite']) };
  });
  return checkHostOptions(options as HostOptions);
}

/** Creates a host. */
export async function createHost(given: HostOptions = {}): Promise<Host> {
  const checked = readHostOptions(given);
  const opened = openPersistence(checked.persistence);
  try {
    return new HostImpl(checked, opened);
  } catch (error) {
    // No host is returned to close it, so a failed construction releases what it opened.
    if (opened.owned) await opened.persistence.close().catch(() => undefined);
    throw error;
  }
}
