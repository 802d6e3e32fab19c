// Who may do what: the exact-live-agent rule, live lineage through the agent registry, and
// admission (closed for the whole manager while it drains, or below a scoped-drain root).
import type { Agent } from '../../seam/agent-types.js';
import type { SessionId } from '../../seam/content.js';
import { SubagentError } from '../../seam/errors.js';

/** The registry lookup the rules need. */
export interface LiveAgents {
  get(id: SessionId): Agent | undefined;
}

/** True when `agent` is the very object the registry holds under its id (not a stale copy). */
export function isExactLive(agents: LiveAgents, agent: Agent | undefined): agent is Agent {
  return agent !== undefined && agent !== null && agents.get(agent.id) === agent;
}

/** `agent` and its live ancestors, walking `parentSession` headers (stops at a gap or a cycle). */
export function liveLineage(agents: LiveAgents, agent: Agent): Agent[] {
  const lineage = [agent];
  const seen = new Set<SessionId>([agent.id]);
  let next = agent.session.header.parentSession;
  while (next !== undefined && !seen.has(next)) {
    const ancestor = agents.get(next);
    if (!ancestor) break;
    lineage.push(ancestor);
    seen.add(next);
    next = ancestor.session.header.parentSession;
  }
  return lineage;
}

export class Admission {
  #draining = false;
  /** Scoped-drain roots and the agents recorded below each. */
  readonly #roots = new Map<Agent, Set<Agent>>();

  constructor(private readonly agents: LiveAgents) {}

  closeAll(): void {
    this.#draining = true;
  }

  /** Closes admission for `root` and everything below it until that root agent leaves the registry. */
  closeBelow(root: Agent, members: Iterable<Agent>): void {
    // Every disposed one-shot local child closes admission below it: roots no longer live go here,
    // so the map holds live roots only, however few checks run.
    for (const gone of [...this.#roots.keys()].filter((agent) => this.agents.get(agent.id) !== agent)) this.#roots.delete(gone);
    const set = this.#roots.get(root) ?? new Set<Agent>();
    for (const member of members) set.add(member);
    this.#roots.set(root, set);
  }

  /** Whether `agent`'s lineage is closing (manager drain or a scoped drain above it). */
  isClosing(agent: Agent): boolean {
    if (this.#draining) return true;
    if (this.#roots.size === 0) return false;
    const lineage = liveLineage(this.agents, agent);
    for (const [root, members] of this.#roots) {
      if (this.agents.get(root.id) !== root) {
        this.#roots.delete(root);
        continue;
      }
      if (members.has(agent) || lineage.includes(root)) return true;
    }
    return false;
  }

  /** `DRAINING` when `agent` may not start or receive new continuable work. */
  check(agent: Agent): void {
    if (this.isClosing(agent)) {
      throw new SubagentError('DRAINING', this.#draining ? 'the host is closing; continuable children accept no new work' : `agent ${agent.id} is below a draining parent; start no new continuable work there`);
    }
  }
}

/** The caller's abort reason when its signal fired. */
export function checkAborted(signal: AbortSignal | undefined): void {
  // An aborted AbortSignal always has a reason (abort() without one gives an AbortError).
  if (signal?.aborted) throw signal.reason;
}
