// What one turn works with: the agent's parts and the hooks it calls back, and how a hook's promise is
// awaited. Apart from turn.ts so the tool-call runner can read the context without importing the turn
// loop that imports it.
import { onAbort } from '../seam/abort.js';
import type { Agent, AgentOptions } from '../seam/agent-types.js';
import type { TurnEndReason } from '../seam/session-types.js';
import type { History } from './history.js';
import type { Inbox } from './inbox.js';
import type { ModelAdapter } from './models/types.js';
import type { SessionLog } from './session.js';
import type { ToolRegistry } from './tool-registry.js';

/**
 * Optional callbacks into a turn; each runs inside the turn. One that returns a promise is awaited
 * (until the turn is cancelled: a hook gets no signal), and its rejection counts as a throw: it fails
 * the turn (`beforeTool`'s fails its call alone, whose body never runs).
 */
export interface AgentHooks {
  /** Right after `turn/start` is appended (e.g. to append a descriptor inside the first turn). */
  turnStart?(turn: number): void | Promise<void>;
  /**
   * Awaited after a call's `tool/call` is logged and before its body runs: a checkpoint, so what
   * the log says reaches its observers (or storage) before a tool that may never return.
   */
  beforeTool?(callId: string): void | Promise<void>;
  /**
   * Asked at every step boundary, before the step's model call: a verdict ends the turn there with
   * that reason, and the input still queued is discarded (budgets stop a child this way).
   */
  beforeStep?(turn: number, step: number): StepVerdict | undefined | Promise<StepVerdict | undefined>;
}

/** How a step-boundary hook ends a turn. */
export type StepVerdict = Extract<TurnEndReason, { kind: 'max-tokens' } | { kind: 'aborted' }>;

export interface TurnContext {
  agent: Agent;
  session: SessionLog;
  inbox: Inbox;
  history: History;
  model: ModelAdapter;
  tools: ToolRegistry;
  options: AgentOptions;
  hooks: AgentHooks;
  newId(): string;
  /**
   * Model calls the next turn may make, when fewer than `options.maxStepsPerTurn`: a resident
   * child's turn is one step of a host-side turn, and may use only what that turn has left.
   */
  stepAllowance?: number | undefined;
  cancelFlag?: Int32Array;
  /**
   * After a cancel, how long the turn waits for a model stream or tool that ignores its signal
   * before it goes on without it (ends the step or call `aborted`); unset: as long as it takes.
   */
  abandonGraceMs?: number;
  /** Aborted once the host began to close: with `abandonGraceMs`, a cancelled turn waits no grace then. */
  closing?: AbortSignal;
}

/**
 * What an async hook resolves with, or `undefined` once the turn is cancelled: a hook is given no
 * signal to honour, so a cancel stops the wait (every hook's: a turn ends `aborted` at once, not
 * after `abandonGraceMs`, and never waits for ever). A rejection is the hook's throw; one after the
 * cancel is dropped (the race observes it).
 */
export function untilCancelled(work: PromiseLike<unknown>, signal: AbortSignal): Promise<unknown> {
  let stop = () => {};
  const cancelled = new Promise<undefined>((resolve) => {
    if (signal.aborted) resolve(undefined);
    else stop = onAbort(signal, () => resolve(undefined));
  });
  return Promise.race([work, cancelled]).finally(() => stop());
}
