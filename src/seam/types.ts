// The seam between the service and its providers: start requests, runs, results, capabilities and
// lifecycle payloads. Providers are transports; these shapes are what every transport honours.
import type { Agent, AgentOptions, JsonSchema, ToolRestriction } from './agent-types.js';
import type { ContentBlock, MessageId, MessageSource, SessionId } from './content.js';
import type { SubagentDescriptorData } from './descriptor.js';
import type { ModelAdapter } from './model-types.js';
import type { SessionEvent } from './session-types.js';
import type { AheadTrees, BudgetStop, SubagentBudget, TreeHeadroom } from './budget.js';
import type { SubagentUsage } from './usage.js';

export type SubagentRunId = string;

/** One boolean per optional start feature a provider supports. */
export interface SubagentCapabilities {
  outputSchema: boolean;
  depthLimit: boolean;
  toolFilter: boolean;
  persona: boolean;
  /** Enforces a request's own `budget` at the child's step boundaries. @default false */
  budget?: boolean;
}

/** Route overrides a delegator may pass to its child. */
export type ChildAgentOptions = Pick<AgentOptions, 'model' | 'toolModules' | 'maxTokens' | 'maxStepsPerTurn'>;

export interface SubagentStartRequest {
  /** Short durable display label. */
  label?: string;
  prompt: ContentBlock[];
  /** The delegating agent. */
  parent: Agent;
  /** Cancels setup before publication and the remaining turn work after. */
  signal: AbortSignal;
  agentOptions?: ChildAgentOptions;
  /** Object-rooted JSON schema; the child gets a `structured_output` tool to satisfy it. */
  outputSchema?: JsonSchema;
  /** Absolute cap on the child's delegation depth. */
  maxDepth?: number;
  toolFilter?: ToolRestriction;
  /** The child's system prompt. */
  persona?: string;
  /** Limits that stop the child (or, with `scope: 'tree'`, its whole subtree) at a step boundary. */
  budget?: SubagentBudget;
}

/** What a provider's `start` receives: a fresh copy of the request plus its descriptor. */
export interface ResolvedSubagentStartRequest extends SubagentStartRequest {
  descriptor: SubagentDescriptorData;
  /** Present when a tree budget covers this child (its own `scope: 'tree'`, or an ancestor's). */
  budgetTree?: BudgetTreeLink;
}

/** A child's view of the tree budgets covering it; the service accounts for the tree. */
export interface BudgetTreeLink {
  /** The limit a covering tree has reached, if any (checked at the child's step boundaries). */
  stop(): BudgetStop | undefined;
  /** Calls `listener` once when a covering tree reaches a limit; returns an unsubscribe. */
  onStop(listener: (stop: BudgetStop) => void): () => void;
  /**
   * The covering trees, for a child whose provider adds its spend to them as it goes (a worker
   * thread, which also checks them where it runs, or a queue run, from the log it mirrors): from
   * this call on the service no longer counts that child's log or result into them, nor cancels a
   * child without a log on this thread when one is spent (its provider stops it through `onStop`).
   */
  share?(): TreeHeadroom[];
  /**
   * The covering trees, for a resident child that adds its tokens and tool calls to them and checks
   * them where it runs, ahead of its host-side log (see AheadTrees); the same counters at every call.
   */
  countAhead?(): AheadTrees;
}

export type SubagentStopReason = 'completed' | 'aborted' | 'error' | 'max-tokens' | 'refusal';

export interface SubagentResult {
  output: ContentBlock[];
  structured?: unknown;
  /** Only on non-completed results; at most 4096 UTF-8 bytes. */
  diagnostic?: string;
  stopReason: SubagentStopReason;
  /** What the child itself spent (its own log); absent when the transport cannot tell. */
  usage?: SubagentUsage;
  /**
   * `usage` plus what every descendant spent (each counted when it settled, before this result;
   * a continuable descendant per closed epoch). Present when some descendant reported usage;
   * otherwise the child's tree is the child itself (`treeUsage ?? usage`).
   */
  treeUsage?: SubagentUsage;
}

export interface SubagentRun {
  /** Local children: the child's session id (in `host.sessions`). */
  readonly id: SessionId;
  /** Worker children: the main-thread proxy agent; out-of-process children: undefined. */
  readonly localAgent: Agent | undefined;
  /** Deeply frozen; resolves on child failure, rejects only on contract faults. */
  readonly result: Promise<SubagentResult>;
  /** Stop remaining work; `result` settles `aborted`. */
  cancel(reason?: unknown): void;
  /** Idempotent; child-first; waits for quiescence. */
  dispose(): Promise<void>;
  /** Same as `dispose()`; runs returned by `SubagentService.start` always have it (`await using`). */
  [Symbol.asyncDispose]?(): Promise<void>;
}

export interface ContinuableCreateRequest {
  sessionId: SessionId;
  parent: Agent;
  /** Aborted when the caller gives up, at host shutdown and by a drain above `parent`; those wait for the provider's answer. */
  signal: AbortSignal;
  /** Present when a tree budget covers this child (its own `scope: 'tree'`, or an ancestor's). */
  budgetTree?: BudgetTreeLink;
  /** The request's route overrides, for a provider that forwards them to its child. */
  agentOptions?: AgentOptions;
}

/** A stored continuable child coming back: what its provider recorded when it was created. */
export interface ContinuableResumeRequest extends ContinuableCreateRequest {
  providerData: Record<string, unknown>;
  /** What the child's stored log counts so far (a remote session's running totals continue from it). */
  usage: SubagentUsage;
}

export interface ContinuableCreateSpec {
  seed?: readonly SessionEvent[];
  /** Drives the child's turns instead of its model spec (e.g. a remote agent's session). */
  model?: ModelAdapter;
  /** JSON data kept in the child's descriptor and handed back to `resumeContinuable`. */
  providerData?: Record<string, unknown>;
  /** False when the child loads its tool modules where it runs, not on this thread. @default true */
  toolModulesHere?: boolean;
  /** Frees what the provider holds for this child; called once when it leaves residence or its creation failed. */
  release?(): Promise<void>;
  /**
   * Called once when the child starts leaving residence, before its agent is disposed: input the
   * child's own code adds where it runs is refused from then on, and what it added before reaches
   * its agent first (nothing it was given an id for is lost).
   */
  quiesce?(): Promise<void>;
  /**
   * Throws a `SubagentError` (`INVALID_REQUEST`) for a message the child's transport cannot take (a
   * worker thread's heap bound): asked before each message is accepted into the child's inbox (its
   * start's prompt, each follow-up, the one that brings it back, a child's report), so a refused one is
   * never in its log; a child's settlement notice it refuses goes without the child's closing message.
   * It may be asked more than once about one message: it must change nothing.
   */
  admitInput?(content: readonly ContentBlock[]): void;
}

/** A spec's `admitInput`, once it has one. */
export type AdmitInput = NonNullable<ContinuableCreateSpec['admitInput']>;

export interface SubagentProvider {
  readonly name: string;
  readonly capabilities: SubagentCapabilities;
  /** Descriptive: whether the child sees the parent's completed turns. */
  readonly inheritsParentContext: boolean;
  start(request: ResolvedSubagentStartRequest): Promise<SubagentRun>;
  prepareContinuable?(request: ContinuableCreateRequest): Promise<ContinuableCreateSpec>;
  /** Brings back a stored child whose descriptor holds `providerData`; rejects `NOT_RESUMABLE` when it cannot. */
  resumeContinuable?(request: ContinuableResumeRequest): Promise<ContinuableCreateSpec>;
}

export interface ContinuableStartSpec {
  provider: string;
  label: string;
  childId?: SessionId;
  request: Omit<SubagentStartRequest, 'label' | 'signal' | 'outputSchema'>;
  /** Governs lookup, creation and admission only, until the prompt is accepted. */
  signal?: AbortSignal;
}

export interface ContinuableStart {
  childId: SessionId;
  messageId: MessageId;
}

export interface SubagentFollowupOptions {
  source?: MessageSource;
  signal?: AbortSignal;
}

export type SubagentInterruptAuthority =
  | { kind: 'user'; parentSessionId: SessionId }
  | { kind: 'ancestor'; agent: Agent };

export interface SubagentRunInfo {
  runId: SubagentRunId;
  provider: string;
  id: SessionId;
  local: boolean;
}

export interface SubagentRunEndInfo extends SubagentRunInfo {
  stopReason: SubagentStopReason;
  lastAssistantMessage?: ContentBlock[];
  /** The child's own usage (a continuable child's: all its epochs so far, across cold resumes). */
  usage?: SubagentUsage;
  /** One-shot children: the result's `treeUsage` (absent: the tree is the child itself). */
  treeUsage?: SubagentUsage;
}

export interface SubagentEvents {
  'subagent/provider-added': SubagentProvider;
  'subagent/provider-removed': string;
  'subagent/start': SubagentRunInfo;
  'subagent/end': SubagentRunEndInfo;
}

export type SubagentListEntry =
  | {
      kind: 'child';
      id: SessionId;
      mode: 'one-shot' | 'continuable';
      label?: string;
      activity: 'running' | 'inactive';
      hasChildren: boolean;
      createdAt: number;
      /** What the child itself spent, from its stored usage projection (live: its log so far). */
      usage: SubagentUsage;
    }
  | { kind: 'diagnostic'; id: SessionId; reason: 'corrupt' | 'unavailable' };

export type SubagentDescendantListEntry =
  | (Extract<SubagentListEntry, { kind: 'child' }> & {
      parentId: SessionId;
      depth: number;
      /** The child's usage plus every listed descendant's below it (a leaf's is its `usage`). */
      treeUsage: SubagentUsage;
    })
  | (Extract<SubagentListEntry, { kind: 'diagnostic' }> & { parentId: SessionId; depth: number });

/** Capabilities of a provider that supports none of the optional start features. */
export const NO_START_CAPABILITIES: SubagentCapabilities = Object.freeze({
  outputSchema: false,
  depthLimit: false,
  toolFilter: false,
  persona: false,
});
