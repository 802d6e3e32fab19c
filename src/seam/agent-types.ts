// Interfaces of the agent substrate that the seam and providers speak: agents, sessions, tools and
// the serializable model spec. `runtime/` implements them; nothing here has behaviour.
import type { ContentBlock, MessageId, MessageSource, SessionId } from './content.js';
import type { CancelCause, SessionEvent, SessionHeader } from './session-types.js';

/** A JSON Schema document (object form). */
export type JsonSchema = { readonly [key: string]: unknown };

/** A serializable description of the model an agent uses; it crosses into worker threads. */
export type ModelSpec =
  | { kind: 'scripted'; steps?: ScriptedStep[] }
  | {
      kind: 'openai';
      baseURL: string;
      model: string;
      /** Name of the environment variable holding the API key. @default 'OPENAI_API_KEY' */
      apiKeyEnv?: string;
      headers?: Record<string, string>;
      /** Retries before the first response byte (429, 5xx, network error). @default 1 */
      maxRetries?: number;
      /** Abort a request when no byte arrives for this long; at most 300000 (Node's fetch gives up then). @default 120000 */
      idleTimeoutMs?: number;
    }
  | { kind: 'module'; specifier: string; export?: string; options?: unknown };

/**
 * One scripted model answer. Each model request of an agent consumes the next step; when none
 * are left (or none were given) the model answers `echo: <last user text>` and ends the turn.
 */
export type ScriptedStep = (
  | { text: string }
  | { toolCalls: { name: string; input: unknown }[]; text?: string }
  | { finish: 'max-tokens' | 'refusal' | 'error' | 'hang'; text?: string }
) & {
  /** The usage this step reports. @default one token per started 4 characters (see `scriptedUsage`) */
  usage?: { inputTokens: number; outputTokens: number };
};

export interface AgentOptions {
  /** @default the host's model, else `{ kind: 'scripted' }` */
  model?: ModelSpec;
  /** System prompt. */
  persona?: string;
  maxTokens?: number;
  /** A turn that needs more model calls than this ends `error` (code `MAX_STEPS`). @default 32 */
  maxStepsPerTurn?: number;
  /** Runtime delegation depth; the header's `delegationDepth` is a floor. */
  subagentDepth?: number;
  /** Module specifiers exporting `tools: Tool[]`, loaded where the agent runs. */
  toolModules?: string[];
}

/** A live session: header plus append-only log (`events[i].seq === i`). */
export interface Session {
  readonly header: SessionHeader;
  readonly events: readonly SessionEvent[];
}

/** The live sessions of a host. */
export interface SessionStore {
  get(id: SessionId): Session | undefined;
  list(): Session[];
}

export interface Agent {
  readonly id: SessionId;
  readonly session: Session;
  readonly options: AgentOptions;
  readonly status: 'idle' | 'running';
  /** Queue `content` as a later turn; wakes an idle agent (status is `running` on return). */
  followup(content: ContentBlock[], opts?: { source?: MessageSource }): MessageId;
  /** Queue `content` for the next step; wakes an idle agent. */
  steer(content: ContentBlock[], opts?: { source?: MessageSource }): MessageId;
  /** Queue `content` for the next step without waking. */
  inject(content: ContentBlock[], opts?: { source?: MessageSource }): MessageId;
  /** Abort the running turn. Without `keepInbox`, queued input is discarded too. @default cause { kind: 'user' } */
  cancel(cause?: CancelCause, opts?: { keepInbox?: boolean }): void;
  /** Resolves when no turn runs. */
  whenIdle(): Promise<void>;
  /** Called after each appended event; returns the unsubscriber. */
  subscribe(listener: (event: SessionEvent) => void): () => void;
}

export interface ToolContext {
  agent: Agent;
  callId: string;
  /** Aborted when the turn is cancelled. */
  signal: AbortSignal;
  /**
   * Ends the turn after this call succeeds: no further model call follows, and later tool calls
   * of the same answer are not run. Optional so hosts may call tools outside a turn.
   */
  concludeTurn?(): void;
}

export type ToolOutput = string | { content: ContentBlock[]; isError?: boolean };

export interface Tool {
  name: string;
  description: string;
  /** JSON Schema of the input; validated before `execute` runs. */
  parameters: JsonSchema;
  execute(input: unknown, ctx: ToolContext): Promise<ToolOutput>;
  /** Calls of this tool in one answer may run at the same time. @default false */
  concurrencySafe?: boolean;
}

export type { ToolRestriction } from './tool-filter.js';
