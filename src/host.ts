// createHost: wires the live session store, persistence, host tools, the agent registry and the
// subagent service, and owns their shutdown. `close()` disposes runs, agents, then storage.
import type { Agent, ModelSpec, Tool } from './seam/agent-types.js';
import { SubagentError } from './seam/errors.js';
import { AgentRegistry, type AgentHandle, type CreateAgentOptions } from './runtime/agent-registry.js';
import type { SessionPersistence } from './runtime/session-persistence.js';
import { LiveSessionStore, type Logger } from './runtime/session-store.js';
import { ToolRegistry } from './runtime/tool-registry.js';
import { memoryPersistence } from './persistence/memory.js';
import { sqlitePersistence } from './persistence/sqlite.js';
import { SubagentService } from './service/service.js';
import { createWorkerPool, type WorkerPool, type WorkerPoolOptions } from './providers/worker/pool.js';
import { forkProvider, spawnProvider } from './providers/worker/worker-provider.js';

export interface HostOptions {
  /** Default model of agents. @default { kind: 'scripted' } */
  model?: ModelSpec;
  /** Where sessions are kept. @default 'memory' */
  persistence?: 'memory' | { sqlite: string } | SessionPersistence;
  /** Host tools, callable by agents (and by worker children, across the thread boundary). */
  tools?: Tool[];
  /** The worker pool of the spawn and fork providers. */
  pool?: WorkerPoolOptions;
  /** Register the `spawn` and `fork` providers. @default true */
  providers?: boolean;
  /** Receives contained failures (listener throws, write errors). @default silent */
  logger?: Logger;
}

export interface Host extends AsyncDisposable {
  readonly subagents: SubagentService;
  readonly agents: AgentRegistry;
  readonly sessions: LiveSessionStore;
  readonly persistence: SessionPersistence | undefined;
  readonly tools: ToolRegistry;
  readonly pool: WorkerPool;
  /** Creates a top-level agent, owned by the host until `close()`. */
  createAgent(options?: CreateAgentOptions): Promise<Agent>;
  /** Idempotent: disposes runs and agents, flushes and closes what the host owns. */
  close(): Promise<void>;
}

function openPersistence(option: HostOptions['persistence']): { persistence: SessionPersistence; owned: boolean } {
  if (option === undefined || option === 'memory') return { persistence: memoryPersistence(), owned: true };
  if (typeof option === 'object' && option !== null && 'sqlite' in option) {
    return { persistence: sqlitePersistence(option.sqlite), owned: true };
  }
  if (typeof option === 'object' && option !== null && typeof (option as SessionPersistence).append === 'function') {
    return { persistence: option as SessionPersistence, owned: false };
  }
  throw new SubagentError('INVALID_OPTIONS', "options.persistence must be 'memory', { sqlite: path } or a SessionPersistence");
}

class HostImpl implements Host {
  readonly subagents: SubagentService;
  readonly agents: AgentRegistry;
  readonly sessions: LiveSessionStore;
  readonly persistence: SessionPersistence;
  readonly tools: ToolRegistry;
  readonly pool: WorkerPool;
  readonly #ownsPersistence: boolean;
  readonly #handles = new Set<AgentHandle>();
  #closing: Promise<void> | undefined;

  constructor(options: HostOptions) {
    const { persistence, owned } = openPersistence(options.persistence);
    this.persistence = persistence;
    this.#ownsPersistence = owned;
    this.sessions = new LiveSessionStore({ persistence, logger: options.logger });
    this.tools = new ToolRegistry();
    if (options.tools?.length) this.tools.register(...options.tools);
    this.agents = new AgentRegistry({
      sessions: this.sessions,
      tools: this.tools,
      persistence,
      logger: options.logger,
      ...(options.model ? { model: options.model } : {}),
    });
    this.subagents = new SubagentService({ logger: options.logger });
    this.pool = createWorkerPool(options.pool);
    if (options.providers !== false) {
      this.subagents.registerProvider(spawnProvider(this));
      this.subagents.registerProvider(forkProvider(this));
    }
  }

  async createAgent(options?: CreateAgentOptions): Promise<Agent> {
    if (this.#closing) throw new SubagentError('CLOSED', 'the host is closed');
    const handle = await this.agents.create(options);
    this.#handles.add(handle);
    return handle.agent;
  }

  close(): Promise<void> {
    this.#closing ??= (async () => {
      try {
        await this.subagents.close();
        await Promise.allSettled([...this.#handles].map((handle) => handle.dispose()));
        await this.agents.close();
        await this.sessions.flush();
      } finally {
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

/** Creates a host. */
export async function createHost(options: HostOptions = {}): Promise<Host> {
  return new HostImpl(options);
}
