// STUB — to be implemented: OpenAI-compatible chat-completions adapter (streaming SSE).
import type { ModelSpec } from '../../seam/agent-types.js';
import type { ModelAdapter } from './types.js';
export type OpenAIModelSpec = Extract<ModelSpec, { kind: 'openai' }>;
export function openaiModel(_spec: OpenAIModelSpec, _env: NodeJS.ProcessEnv = process.env): ModelAdapter {
  throw new Error('not implemented');
}
