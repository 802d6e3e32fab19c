// Who may do what: the exact-live-agent rule, live lineage through the agent registry, and
// admission (closed for the whole manager while it drains, or below a scoped-drain root).
import type { Agent } from '../../seam/agent-types.js';
import type { SessionId } from '../../seam/content.js';
import { SubagentError } from '../../seam/errors.js';
import { abortReason } from '../../seam/abort.js';
import { readingInput } from '../../seam/parse.js';

/** The registry lookup the rules need. */
export interface LiveAgents {
  get(id: SessionId): Agent | undefined;
}

/** True when `agent` is the very object the registry holds under its id (not a stale copy). */
export function isExactLive(agents: LiveAgents, agent: Agent | undefined): agent is Agent {
  if (agent === undefined || agent === null) return false;
  try {
    return agents.get(agent.id) === agent;
  } catch {
    // Its id could not be read (a revoked proxy, a getter that throws): no agent of this host.
    return false;
  }
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

/** The fewest entries `closeBelow` sweeps for (a sweep of fewer costs less than it saves). */
const MIN_SWEEP = 32;

export class Admission {
  #draining = false;
  /**
   * Scoped-drain roots (by id) and the agents recorded below each, held weakly: an entry is only
   * pruned at the next drain or check, and must not keep a disposed child and its log alive till then.
   */
  readonly #roots = new Map<SessionId, { root: WeakRef<Agent>; members: WeakSet<Agent> }>();
  /** Half the size at which `closeBelow` next sweeps `#roots`. */
  #swept = MIN_SWEEP;

  constructor(private readonly agents: LiveAgents) {}

  closeAll(): void {
    this.#draining = true;
  }

  /** The root of `entry` while it is the live agent of its id; else the entry is dropped. */
  #live(id: SessionId, entry: { root: WeakRef<Agent> }): Agent | undefined {
    const root = entry.root.deref();
    if (root && this.agents.get(root.id) === root) return root;
    this.#roots.delete(id);
    return undefined;
  }

  /** Closes admission for `root` and everything below it until that root agent leaves the registry. */
  closeBelow(root: Agent, members: Iterable<Agent>): void {
    // Every disposed one-shot local child closes admission below it: roots no longer live go here,
    // once the entries have doubled since the last sweep. A sweep per call made the concurrent
    // disposal of n children (host.close()) quadratic: each swept the others, all still live.
    if (this.#roots.size >= this.#swept * 2) {
      for (const [id, entry] of [...this.#roots]) this.#live(id, entry);
      this.#swept = Math.max(this.#roots.size, MIN_SWEEP);
    }
    let entry = this.#roots.get(root.id);
    if (entry && !this.#live(root.id, entry)) entry = undefined;
    if (entry && entry.root.deref() !== root) return; // A copy of a live root closes nothing (it is no live agent).
    if (!entry) this.#roots.set(root.id, (entry = { root: new WeakRef(root), members: new WeakSet() }));
    for (const member of members) entry.members.add(member);
  }

  /** Whether `agent`'s lineage is closing (manager drain or a scoped drain above it). */
  isClosing(agent: Agent): boolean {
    if (this.#draining) return true;
    if (this.#roots.size === 0) return false;
    const lineage = liveLineage(this.agents, agent);
    for (const [id, entry] of [...this.#roots]) {
      const root = this.#live(id, entry);
      if (root && (entry.members.has(agent) || lineage.includes(root))) return true;
    }
    return false;
  }

  /** `DRAINING` when `agent` may not start or receive new continuable work. */
  check(agent: Agent): void {
    const refused = this.refusal(agent);
    if (refused) throw refused;
  }

  /** The `DRAINING` error `check` would throw for `agent`, or undefined. */
  refusal(agent: Agent): SubagentError | undefined {
    if (!this.isClosing(agent)) return undefined;
    return new SubagentError('DRAINING', this.#draining ? 'the host is closing; continuable children accept no new work' : `agent ${agent.id} is below a draining parent; start no new continuable work there`);
  }
}

/** The caller's abort reason when its signal fired. */
export function checkAborted(signal: AbortSignal | undefined): void {
  if (signal === undefined) return;
  // An aborted AbortSignal always has a reason (abort() without one gives an AbortError). A caller's
  // signal whose `aborted` getter throws is bad input, as in a start request.
  if (readingInput('the signal', 'INVALID_REQUEST', () => signal.aborted)) throw abortReason(signal);
}

/**
 * Runs `announce` (the start edge of a child just built, whose listeners may drain or close) and
 * throws what a drain or close begun there refuses the start with, its message not yet entered:
 * `CLOSED` for the host's close, `DRAINING` for a drain above `parent` or of the child itself.
 */
export function announceStart(admission: Admission, shutdown: AbortSignal, parent: Agent, child: { childId: SessionId; disposal: unknown }, announce: () => void): void {
  const refusal = (): SubagentError | undefined => {
    if (shutdown.aborted) return SubagentError.closedWhile('the host', `child ${child.childId} was starting`);
    return admission.refusal(parent) ?? (child.disposal ? new SubagentError('DRAINING', `child ${child.childId} was drained as it started`) : undefined);
  };
  // One that began before (after the child was published) comes too late: the start is accepted.
  const open = refusal() === undefined;
  announce();
  const refused = open ? refusal() : undefined;
  if (refused) throw refused;
}
