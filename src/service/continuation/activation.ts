// One resident continuable child: its agent and handle, the lineage it was materialized under,
// and its epochs. An epoch opens when work arrives and closes when the child is quiet (nothing
// queued, no active children, no background work held): then the parent gets its notice and the child lingers until evicted.
import { randomUUID } from 'node:crypto';
import type { Agent } from '../../seam/agent-types.js';
import { BUDGET_EVENT, describeBudgetStop, type BudgetStop } from '../../seam/budget.js';
import type { SessionId } from '../../seam/content.js';
import { SubagentError, describeError } from '../../seam/errors.js';
import type { SessionEvent } from '../../seam/session-types.js';
import type { AdmitInput } from '../../seam/types.js';
import { UsageMeter, subtractUsage, type SubagentUsage } from '../../seam/usage.js';
import type { AgentHandle } from '../../runtime/agent-registry.js';
import type { LocalAgent } from '../../runtime/agent.js';
import { type EpochOutcome, epochOutcome } from './notices.js';

/** What an Activation needs of its manager. */
export interface ActivationHost {
  readonly lingerMs: number;
  /** Activations whose parent is `id`. */
  childrenOf(id: SessionId): Activation[];
  /** Whether `agent` holds work outside its runs (a background task still running). */
  holdsWork(agent: Agent): boolean;
  /** Stops the work `agent` holds, and what it starts from now on; never rejects. With `gone`, it then forgets the agent. */
  releaseWork(agent: Agent, gone?: boolean): Promise<void>;
  epochStarted(activation: Activation, runId: string): void;
  epochEnded(activation: Activation, runId: string, outcome: EpochOutcome, announced: boolean): void;
  /** Called once the Activation left the manager (its agent is disposed). */
  removed(activation: Activation): void;
  warn(message: string, error: unknown): void;
}

export type ActivationState = 'active' | 'lingering' | 'disposing';

/**
 * Stops the running turn of a child whose provider cannot stop it at its step boundaries (a remote
 * agent's prompt is one step) once a tree covering it is spent: the log keeps the reached limit,
 * the turn ends aborted and its queued input is dropped, as at a boundary. An idle child's next
 * turn stops at its first boundary.
 */
export function stopRemoteTurn(agent: LocalAgent): (stop: BudgetStop) => void {
  return (stop) => {
    if (agent.status !== 'running') return;
    agent.session.append(BUDGET_EVENT, { ...stop });
    agent.cancel({ kind: 'hook', reason: describeBudgetStop(stop) });
  };
}

export class Activation {
  readonly childId: SessionId;
  readonly agent: LocalAgent;
  readonly provider: string;
  readonly parentSession: SessionId;
  /** The child agent plus the live lineage of its parent at materialization. */
  readonly ancestry: ReadonlySet<Agent>;
  /** Presence is the admission cutoff: no delivery enters once disposal began. */
  disposal: Promise<void> | undefined;
  /** Some delivery was accepted (a rolled-back child sends no notice). */
  announced = false;
  /**
   * A fresh child's start being acknowledged: its parent hears of its epochs once the prompt is
   * durable (true). A start the store refused (false) is no child of that parent's: no notice.
   */
  acknowledging: Promise<boolean> | undefined;
  /** Throws for a message the child's transport cannot take: asked before each is accepted. */
  readonly admitInput: AdmitInput;
  readonly #host: ActivationHost;
  readonly #handle: AgentHandle;
  readonly #release: () => void;
  readonly #unsubscribe: () => void;
  /** Counts the child's whole log, every epoch and what it spent before a cold resume. */
  readonly #meter: UsageMeter;
  /** What earlier epochs (here or before a cold resume) already reported. */
  #reported: SubagentUsage;
  #epoch: { runId: string; from: number } | undefined;
  #timer: NodeJS.Timeout | undefined;
  /** Its linger ran out while a child below it still worked: it goes once that child is quiet. */
  #parked = false;
  #checking = false;

  constructor(init: {
    host: ActivationHost;
    handle: AgentHandle;
    provider: string;
    ancestry: Agent[];
    /** Releases the child's setup installations. */
    release: () => void;
    /** Refuses a message the child's transport cannot take (see Built). */
    admitInput: AdmitInput;
  }) {
    this.#host = init.host;
    this.#handle = init.handle;
    this.agent = init.handle.agent;
    this.childId = this.agent.id;
    this.provider = init.provider;
    this.parentSession = this.agent.session.header.parentSession ?? '';
    this.ancestry = new Set([this.agent, ...init.ancestry]);
    this.#release = init.release;
    this.admitInput = init.admitInput;
    this.#meter = new UsageMeter(this.agent.session.header.seedLength ?? 0);
    this.#reported = this.usage;
    this.#unsubscribe = this.agent.subscribe((event) => this.#observe(event));
  }

  /** What the child has spent so far, over its whole log. */
  get usage(): SubagentUsage {
    return this.#meter.read(this.agent.session.events);
  }

  /** What the child spent since the last call (each epoch's own spend, for its parent's tree). */
  takeSpent(): SubagentUsage {
    const usage = this.usage;
    const spent = subtractUsage(usage, this.#reported);
    this.#reported = usage;
    return spent;
  }

  get state(): ActivationState {
    if (this.disposal) return 'disposing';
    return this.#epoch ? 'active' : 'lingering';
  }

  /** Opens an epoch (idempotent): emits `subagent/start` and stops any eviction timer. */
  open(from: number = this.agent.session.seq): void {
    if (this.#epoch || this.disposal) return;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#parked = false;
    this.#epoch = { runId: randomUUID(), from };
    this.#host.epochStarted(this, this.#epoch.runId);
  }

  #observe(event: SessionEvent): void {
    // Work the manager did not submit (a notice or report woke this child) opens an epoch too.
    if (event.type === 'turn/start') this.open(event.seq);
    if (event.type === 'turn/end' || event.type === 'inbox/discarded') this.poke();
  }

  /** Whether this child, or any child below it, still has work in flight. */
  get busy(): boolean {
    if (this.agent.status === 'running' || this.agent.pendingTurns > 0 || this.#host.holdsWork(this.agent)) return true;
    return this.#host.childrenOf(this.childId).some((child) => child.state === 'active');
  }

  /** Re-checks settlement once the agent is idle. */
  poke(): void {
    if (this.#checking || this.disposal) return;
    this.#checking = true;
    void this.agent.whenIdle().then(() => {
      this.#checking = false;
      if (this.disposal || this.busy) return;
      if (this.#epoch) this.#close();
      else if (this.#parked) this.#linger();
    });
  }

  #close(): void {
    const epoch = this.#epoch;
    if (!epoch) return;
    this.#epoch = undefined;
    const outcome = epochOutcome(this.agent.session.events.slice(epoch.from));
    this.#host.epochEnded(this, epoch.runId, outcome, this.announced);
    if (this.disposal) return;
    this.#linger();
  }

  /** Evicts the quiet child after `lingerMs`; one whose children (or held work) went on working meanwhile waits for them. */
  #linger(): void {
    this.#parked = false;
    const evict = () => {
      this.#timer = undefined;
      if (this.busy) {
        // Work started under it by the host (a child's follow-up) while it lingered: poked at that work's end.
        this.#parked = true;
        return;
      }
      this.dispose({ keepInbox: true }).catch((error: unknown) => this.#host.warn(`evicting continuable child ${this.childId} failed`, error));
    };
    if (this.#host.lingerMs === 0) return evict();
    this.#timer = setTimeout(evict, this.#host.lingerMs);
    this.#timer.unref();
  }

  /**
   * Memoized teardown: cancels this child (queued input discarded), then its children, closes an
   * open epoch, releases setup and disposes the agent. The child stays in persistence. With
   * `keepInbox` (an eviction: residency is a cache) nothing is discarded: input still queued, such
   * as a quiet report for its next turn, stays pending in the log, here and below, and comes back
   * with a cold resume.
   */
  dispose(opts?: { keepInbox?: boolean }): Promise<void> {
    if (this.disposal) return this.disposal;
    const keepInbox = opts?.keepInbox === true;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.agent.cancel({ kind: 'parent' }, { keepInbox });
    // Input that still arrives (its own code's, on its way from its thread) starts no turn now: it
    // stays pending in the log, for the child loaded from it next.
    this.agent.holdTurns();
    // Children (and held work) are cancelled in this same synchronous span, top-down; they finish first.
    const children = [...this.#host.childrenOf(this.childId).map((child) => child.dispose(opts)), this.#host.releaseWork(this.agent)];
    this.disposal = (async () => {
      const failures: unknown[] = [];
      for (const result of await Promise.allSettled(children)) if (result.status === 'rejected') failures.push(result.reason);
      await this.agent.whenIdle();
      // A background start its last turn had in flight: released at once when it landed; waited for here.
      await this.#host.releaseWork(this.agent, true);
      this.#close();
      this.#unsubscribe();
      try {
        this.#release();
      } catch (error) {
        failures.push(error);
      }
      if (keepInbox) this.agent.shelveInbox();
      try {
        await this.#handle.dispose();
      } catch (error) {
        failures.push(error);
      }
      this.#host.removed(this);
      if (failures.length > 0) {
        throw new SubagentError(
          'ACTIVATION_TEARDOWN_FAILED',
          `tearing down continuable child ${this.childId} failed: ${failures.map(describeError).join('; ')}`,
          { cause: failures[0] },
        );
      }
    })();
    return this.disposal;
  }
}
