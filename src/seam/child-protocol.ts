// The child protocol, whatever carries it: the task a host sends, the notices a child streams
// back, the calls each side serves, the raw outcome, and the transport a child runner speaks
// through. Worker threads are one transport (providers/worker/thread-protocol.ts); a queue or a
// process could be another. Nothing here knows ports, flags or threads.
import type { AgentOptions, JsonSchema, ToolRestriction } from './agent-types.js';
import type { BudgetStop, SubagentBudget, TreeHeadroom } from './budget.js';
import type { ContentBlock, MessageId, MessageSource } from './content.js';
import type { SubagentDescriptorData } from './descriptor.js';
import type { SubagentErrorCode } from './errors.js';
import type { CancelCause, InboxTarget, SessionEvent, SessionHeader } from './session-types.js';
import type { SubagentResult } from './types.js';

/** One-way messages from the child, in order. */
export type ChildNotice =
  /** Sent first: the task has a place to run (for threads, the id a runaway child's thread is terminated by). */
  | { type: 'attach'; threadId: number }
  /** The child's new session events, batched. */
  | { type: 'events'; events: SessionEvent[] }
  /** A resident child's agent is built: it takes prompts. */
  | { type: 'ready' }
  /** Sent last, before the task returns, with the events not sent yet: every event has been sent. */
  | { type: 'end'; events: SessionEvent[] };

export interface HostToolSchema {
  name: string;
  description: string;
  parameters: JsonSchema;
  concurrencySafe?: boolean;
  /** What adds the tool to the agent (e.g. reportTool), for the message of a clash with a tool module's tool. */
  holder?: string;
}

export interface ChildTaskData {
  header: SessionHeader;
  /**
   * A fork's completed-turn prefix as codec text, one per event (`eventTexts`), or [] for spawn.
   * Text is cheap to send, and a parent forking several children with one prefix encodes it once.
   */
  seed: string[];
  prompt: ContentBlock[];
  agentOptions: AgentOptions;
  /** Its `budget` (if any) is enforced where the child runs, wall time from `header.createdAt`. */
  descriptor: SubagentDescriptorData;
  outputSchema?: JsonSchema;
  toolFilter?: ToolRestriction;
  /** Host tools the child may call (already filtered by `toolFilter` on the host side). */
  hostTools: HostToolSchema[];
  /** Set when a tree budget covering the child was spent while it waited for a thread: it stops at its first boundary. */
  treeStop?: BudgetStop;
}

/** Served by the host for one child (`host` lane). */
export interface HostApi {
  /**
   * Runs a host tool for the child; the host side enforces the tool filter again. `concludes`: the
   * tool called `ctx.concludeTurn()` and succeeded, so the child's turn ends after this call.
   */
  callTool(name: string, input: unknown, callId: string): Promise<{ content: ContentBlock[]; isError?: boolean; concludes?: true }>;
}

/** Served by the host for one resident child's stay (`host` lane). */
export interface ResidentHostApi extends HostApi {
  /**
   * Puts input the child added to itself in its thread (a tool's `ctx.agent.followup`, `steer` or
   * `inject`) in the inbox its host-side agent keeps, under the id the child already returned.
   */
  acceptOwn(target: InboxTarget, id: MessageId, content: ContentBlock[], wake: boolean, source: MessageSource): Promise<void>;
}

/** Served by the child for one run (`control` lane). */
export interface ChildControlApi {
  cancel(cause: CancelCause): void;
  /**
   * Puts input in the child's inbox under the id the host already returned; resolves once its
   * `inbox/accepted` event is in the child's log, rejects `CLOSED` if the child cannot take it.
   */
  deliver(target: InboxTarget, id: MessageId, content: ContentBlock[], wake: boolean, source: MessageSource | undefined): Promise<void>;
  /** A tree budget covering the child reached a limit: stop at the next step boundary. */
  budgetStop(stop: BudgetStop): void;
}

/**
 * A continuable child's stay where it runs: its agent is rebuilt from `events` (its completed turns,
 * codec text, one per event) and then takes one turn per `prompt` until the host tells it to leave.
 */
export interface ResidentTaskData {
  header: SessionHeader;
  events: string[];
  agentOptions: AgentOptions;
  hostTools: ResidentHostTools;
  /** The child's own budget, checked at each step where it runs (`seedLength`: its inherited prefix in `events`). */
  budget?: { budget: SubagentBudget; startedAt: number; seedLength: number };
  /**
   * The child started before (an earlier stay was built, or it was resumed from its log): its tool
   * modules' tools hide inherited host tools of their names instead of refusing them (see
   * `registerModuleTools`). Unset for its first stay, whose tool modules are checked as a start's.
   */
  started?: true;
}

/**
 * The host tools of a resident child, in the order its model is offered them, as where it runs
 * in-process: those its host-side agent inherits come first, then its tool modules' tools (loaded
 * where it runs), then those of the host-side agent's own scope (setup contributions, e.g. `report`).
 */
export interface ResidentHostTools {
  inherited: HostToolSchema[];
  own: HostToolSchema[];
}

/** One message of a resident child's turn, under the id its host already returned. */
export interface ResidentMessage {
  id: MessageId;
  content: ContentBlock[];
  source: MessageSource;
}

/** Served by a resident child for its stay (`control` lane). */
export interface ResidentControlApi {
  /**
   * Runs one turn: the first message opens it, the others join its first step. `hostTools`, when
   * given, replaces the host tools the child sees (setup contributions come and go). Resolves at
   * the turn's end with its events not sent as notices yet (its `turn/end` last), so a turn that
   * ends within one event-loop turn costs one message each way. `steps`: the model calls the turn
   * may make (what its host-side turn has left of maxStepsPerTurn).
   */
  prompt(messages: ResidentMessage[], hostTools?: ResidentHostTools, steps?: number): Promise<SessionEvent[]>;
  /**
   * Hands over messages of the next turn's first step ahead of its `prompt` (which brings the rest):
   * messages that together are more than a thread takes at once cross a few at a time.
   */
  stage(messages: ResidentMessage[]): void;
  /** Cancels the running turn; the child stays. */
  cancel(cause: CancelCause): void;
  /** Ends the stay: the agent is disposed and the task returns. */
  leave(): void;
  /**
   * Refuses (`CLOSED`) input the child's own code adds to itself from now on; resolves once what it
   * added before has reached its host-side agent (which is about to be disposed).
   */
  closeOwnInput(): Promise<void>;
}

/** What a child task returns (encoded by its transport): the child's raw terminal outcome. */
export interface ChildTaskResult {
  type: 'result';
  result: SubagentResult;
  /**
   * The typed error that kept the child's agent from being built where it runs (a tool module that
   * does not load, or exports a tool name the child already has): the one an in-process start
   * rejects with, for the host to end the child's turn with it.
   */
  failure?: { code: SubagentErrorCode; message: string };
}

/**
 * The runner's side of one child's channel to its host. Every transport keeps the same
 * guarantees: notices in order, host calls rejecting `CLOSED` when the peer is lost, and
 * cancellation observed even while the child's own code runs.
 */
export interface ChildTransport {
  /** Sends one notice; the host sees notices in the order they were sent. */
  notify(notice: ChildNotice): void;
  /** Calls the host; rejects `CLOSED` once the channel is lost. */
  callHost<R>(invoke: (host: HostApi) => Promise<R>): Promise<R>;
  /** Serves this child's control calls to the host. */
  serve(control: ChildControlApi | ResidentControlApi): void;
  /**
   * The child is idle and about to return: from now on the host refuses input for it (`CLOSED`),
   * and this resolves once every message the host sent before has reached `deliver`, so an id
   * the host returned is never left behind.
   */
  closeInput(): Promise<void>;
  /** True once the host cancelled out of band (checked before the child starts and when it ends). */
  cancelRequested(): boolean;
  /**
   * A flag shared with the host that the agent's loop polls between steps and tool calls, so a
   * cancel lands even before its control message is read; absent where memory is not shared.
   */
  readonly cancelFlag?: Int32Array;
  /**
   * Tree budgets covering the child, their spend in memory shared with the host: the child adds
   * its own spend and checks them at each step; absent where no tree covers it or memory is not shared.
   */
  readonly trees?: readonly TreeHeadroom[];
  /** A resident child's: where it also adds the tokens and tool calls it adds to `trees` (see AheadTrees). */
  readonly ahead?: BigInt64Array;
}
