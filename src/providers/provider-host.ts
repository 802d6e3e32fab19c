// The host as users hold it (narrow views of its parts) and as providers drive it (the parts
// themselves). `createHost` binds the two; providers look the parts up, so the public type names no
// engine class and providers still depend on this shape, not on the host module.
import type { Agent, Session, SessionStore, Tool } from '../seam/agent-types.js';
import type { SessionId } from '../seam/content.js';
import type { SessionEvent } from '../seam/session-types.js';
import { SubagentError } from '../seam/errors.js';
import { isRecord, pickFields, readingInput } from '../seam/parse.js';
import type { AgentHandle, AgentRegistry, CreateAgentOptions, ResumeAgentOptions } from '../runtime/agent-registry.js';
import type { LocalAgent } from '../runtime/agent.js';
import type { SessionPersistence } from '../runtime/session-persistence.js';
import type { LiveSessionStore, Logger } from '../runtime/session-store.js';
import type { ToolRegistry } from '../runtime/tool-registry.js';
import type { SubagentService } from '../service/service.js';
import type { WorkerPool, WorkerPoolEngine } from './worker/pool.js';

/** The host's live agents: top-level agents and local children. */
export interface HostAgents {
  get(id: SessionId): LocalAgent | undefined;
  list(): LocalAgent[];
  /** Loads a stored session as a live agent (`PERSISTENCE_UNAVAILABLE` without persistence). */
  resume(options: ResumeAgentOptions): Promise<AgentHandle>;
  /**
   * Frees the live top-level agent `id` (one `createAgent` made or `resume` brought back): cancels
   * its turn, waits for idle, flushes its session and forgets it. Its stored session stays (resume
   * brings it back). False when no agent `id` is live; `INVALID_REQUEST` for a child a run or a
   * continuation holds (a subagent's session `resume` brought back is top-level: freed here).
   */
  dispose(id: SessionId): Promise<boolean>;
}

/** A session held live by the host: its log so far, and every later event as it is appended. */
export interface LiveSession extends Session {
  /** Calls `listener` after every later append; returns the unsubscriber. */
  subscribe(listener: (event: SessionEvent) => void): () => void;
}

/** The host's live sessions; `flush` writes what is pending to persistence (one session or all). */
export interface HostSessions extends SessionStore {
  get(id: SessionId): LiveSession | undefined;
  list(): LiveSession[];
  flush(id?: SessionId): Promise<void>;
}

/** The host's tools, callable by every agent of the host (and by worker children). */
export interface HostTools {
  /** Adds tools; `DUPLICATE_TOOL` on a taken name. Returns the function that removes them. */
  register(...tools: Tool[]): () => void;
  get(name: string): Tool | undefined;
  list(): Tool[];
  names(): string[];
}

export interface Host extends AsyncDisposable {
  readonly subagents: SubagentService;
  readonly agents: HostAgents;
  readonly sessions: HostSessions;
  readonly persistence: SessionPersistence | undefined;
  readonly tools: HostTools;
  readonly pool: WorkerPool;
  /** Creates a top-level agent, owned by the host until `close()`. */
  createAgent(options?: CreateAgentOptions): Promise<Agent>;
  /** Idempotent: disposes runs and agents, flushes and closes what the host owns. */
  close(): Promise<void>;
}

/** What providers need of a host: its engine parts. */
export interface ProviderHost {
  readonly agents: AgentRegistry;
  readonly sessions: LiveSessionStore;
  readonly tools: ToolRegistry;
  readonly persistence: SessionPersistence | undefined;
  readonly pool: WorkerPoolEngine;
  /**
   * The host's `abandonGraceMs`: also how long a worker child's run, once its turn was cancelled or
   * its thread is gone, waits for the host calls it left out (their signal aborted).
   */
  readonly abandonGraceMs: number;
  /** The host's logger (`createHost({ logger })`, contained: it never throws): for failures a provider contains. */
  readonly logger?: Logger | undefined;
  /**
   * Registers teardown that `close()` awaits (after runs are disposed), for resources a provider
   * owns beyond its runs, such as prewarmed processes. Returns an unregister function.
   */
  onClose(hook: () => Promise<void>): () => void;
}

const partsOfHost = new WeakMap<object, ProviderHost>();

/** Called by `createHost`: `parts` are what providers given `host` will drive. */
export function bindHostParts(host: Host, parts: ProviderHost): void {
  partsOfHost.set(host, parts);
}

/** The engine parts of a host made by `createHost`; `INVALID_OPTIONS` for any other object. */
export function hostParts(host: Host): ProviderHost {
  const parts = typeof host === 'object' && host !== null ? partsOfHost.get(host) : undefined;
  if (parts === undefined) throw new SubagentError('INVALID_OPTIONS', 'expected a host made by createHost()');
  return parts;
}

type FieldCheck = (value: unknown) => boolean;

/** Field checks shared by the provider factories: what each option must be, and the check. */
const OPTION_FIELDS = {
  name: ['a non-empty string', (value: unknown) => typeof value === 'string' && value !== ''],
  fork: ['a boolean', (value: unknown) => typeof value === 'boolean'],
} satisfies Record<string, [string, FieldCheck]>;

/**
 * A provider factory's `opts`: an object whose fields are among `fields`, each passing its check
 * when given; otherwise `INVALID_OPTIONS` naming the factory and the field.
 */
export function factoryOptions<T extends object>(opts: T, factory: string, fields: readonly (keyof typeof OPTION_FIELDS)[]): T {
  return readingInput(`${factory} options`, 'INVALID_OPTIONS', () => {
    if (!isRecord(opts)) throw new SubagentError('INVALID_OPTIONS', `${factory} options must be an object`);
    for (const key of Object.keys(opts)) {
      if (!fields.some((known) => known === key)) throw new SubagentError('INVALID_OPTIONS', `${factory} options has unknown field ${key} (known: ${fields.join(', ')})`);
    }
    // The copy checked is the one used: a getter (a class's too) is read once, not asked again.
    const copy = pickFields(opts, fields);
    for (const field of fields) {
      const [expected, check] = OPTION_FIELDS[field];
      if (copy[field] !== undefined && !check(copy[field])) throw new SubagentError('INVALID_OPTIONS', `${factory} options.${field} must be ${expected}`);
    }
    return copy as T;
  });
}
