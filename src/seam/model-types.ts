// The model adapter contract: a request built from a session's history, answered by a stream of
// chunks that always ends with exactly one `finish`. Adapters never throw out of the stream. It lives
// in the seam because providers may drive a child with their own adapter (a remote session).
import type { JsonSchema } from './agent-types.js';
import type { ContentBlock } from './content.js';
import type { FailureInfo, Usage } from './session-types.js';

/** A message as the model sees it. Tool results travel in user messages as `tool_result` blocks. */
export interface ModelMessage {
  role: 'user' | 'assistant';
  content: ContentBlock[];
}

/** What a model is shown of a tool. */
export interface ToolSchema {
  name: string;
  description: string;
  parameters: JsonSchema;
}

export interface ModelRequest {
  system?: string;
  messages: ModelMessage[];
  tools: ToolSchema[];
  maxTokens?: number;
  signal: AbortSignal;
}

export type FinishReason = 'stop' | 'tool-calls' | 'max-tokens' | 'refusal' | 'aborted' | 'error';

export type ModelChunk =
  | { type: 'text-delta'; text: string }
  | { type: 'reasoning-delta'; text: string }
  /** A complete tool call; `input` is the parsed arguments (or the raw string when not JSON). */
  | { type: 'tool-call'; id: string; name: string; input: unknown }
  | { type: 'usage'; usage: Usage }
  | { type: 'finish'; reason: FinishReason; failure?: FailureInfo };

/** A model. `stream` must not throw: failures end the stream with `finish` `error`/`aborted`. */
export interface ModelAdapter {
  stream(request: ModelRequest): AsyncIterable<ModelChunk>;
}

/** What a `module` ModelSpec's export must be: a factory of adapters. */
export type ModelAdapterFactory = (options: unknown) => ModelAdapter | Promise<ModelAdapter>;
