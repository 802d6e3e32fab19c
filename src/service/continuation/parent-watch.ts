// Which agents may still be a parent: the exact live agent of its id, whose disposal has not begun.
// A start under any other is refused before any child exists, and a start in flight under an agent
// whose disposal begins gives up (its provider's signal aborts): no child outlives a parent it never had.
import type { Agent } from '../../seam/agent-types.js';
import { SubagentError } from '../../seam/errors.js';
import { isExactLive, type LiveAgents } from './authority.js';
import type { Creations } from './creations.js';

/** The abort reason of starts whose parent began to go away (compared by identity). */
export const PARENT_GONE = Object.freeze({ kind: 'parent' as const });

export class ParentWatch {
  /** Agents whose disposal began (weak: a disposed agent keeps no entry alive). */
  readonly #leaving = new WeakSet<Agent>();
  /** The starts in flight under each parent, aborted when it begins to go. */
  readonly #starts = new Map<Agent, Set<AbortController>>();

  /** `creations`: the continuable creations in flight, which stop with their parent too. */
  constructor(private readonly live: LiveAgents, private readonly creations: Creations) {}

  /** `UNAUTHORIZED` unless `parent` is a live agent of this host whose disposal has not begun. */
  refusal(parent: Agent): SubagentError | undefined {
    if (isExactLive(this.live, parent) && !this.#leaving.has(parent)) return undefined;
    return new SubagentError('UNAUTHORIZED', 'request.parent must be a live agent of this host (it was disposed, or its disposal has begun)');
  }

  /** Throws the {@link refusal} of `parent`, if any. */
  check(parent: Agent): void {
    const refused = this.refusal(parent);
    if (refused) throw refused;
  }

  /** `agent`'s disposal began: no child starts under it from now on, and those starting give up. */
  leave(agent: Agent): void {
    this.#leaving.add(agent);
    this.creations.drain((parent) => (parent === agent ? this.refusal(parent) : undefined));
    const starts = this.#starts.get(agent);
    if (!starts) return;
    this.#starts.delete(agent);
    for (const controller of starts) controller.abort(PARENT_GONE);
  }

  /** Aborts `controller` with `PARENT_GONE` if `parent` begins to go before the returned stop is called. */
  watch(parent: Agent, controller: AbortController): () => void {
    let starts = this.#starts.get(parent);
    if (!starts) this.#starts.set(parent, (starts = new Set()));
    starts.add(controller);
    return () => {
      starts.delete(controller);
      if (starts.size === 0 && this.#starts.get(parent) === starts) this.#starts.delete(parent);
    };
  }
}
