// What providers need of a host. `createHost`'s Host satisfies it; providers depend on this
// shape, not on the host module, so the layers stay one-directional.
import type { AgentRegistry } from '../runtime/agent-registry.js';
import type { LiveSessionStore } from '../runtime/session-store.js';
import type { ToolRegistry } from '../runtime/tool-registry.js';

export interface ProviderHost {
  readonly agents: AgentRegistry;
  readonly sessions: LiveSessionStore;
  readonly tools: ToolRegistry;
  /**
   * Registers teardown that `close()` awaits (after runs are disposed), for resources a provider
   * owns beyond its runs, such as prewarmed processes. Returns an unregister function.
   */
  onClose?(hook: () => Promise<void>): () => void;
}
