// The deterministic local model: answers from a script of steps, then echoes. No clock, no
// randomness; call ids come from a counter, so logs are byte-stable. `scriptedModel` (exported)
// records every request; the adapter a `{ kind: 'scripted' }` spec builds records none, since each
// request holds the whole history and a long-lived agent would keep them all.
// Usage is deterministic too: a step's own `usage`, else one token per started 4 characters
// (input: system prompt + text of every request message and tool result; output: the step's
// text, plus 8 per tool call).
import type { ScriptedStep } from '../../seam/agent-types.js';
import { textOf } from '../../seam/content.js';
import type { Usage } from '../../seam/session-types.js';
import type { ModelAdapter, ModelChunk, ModelRequest } from './types.js';

/** A scripted model instance; `requests` holds every request it received, in order. */
export interface ScriptedModel extends ModelAdapter {
  readonly requests: readonly ModelRequest[];
}

/** Splits text into word-sized deltas (whitespace kept with the word before it). */
function deltas(text: string): string[] {
  return text.match(/\S+\s*|\s+/g) ?? [];
}

function lastUserText(request: ModelRequest): string {
  for (let i = request.messages.length - 1; i >= 0; i--) {
    const message = request.messages[i]!;
    if (message.role !== 'user') continue;
    const value = textOf(message.content);
    if (value !== '') return value;
  }
  return '';
}

/** Output tokens counted for each scripted tool call. */
export const SCRIPTED_TOKENS_PER_TOOL_CALL = 8;

// A request carries the whole history, and the history hands out the same message objects turn
// after turn: counting each message once keeps a long session's usage linear, not quadratic.
const messageChars = new WeakMap<ModelRequest['messages'][number], number>();

function charsOf(message: ModelRequest['messages'][number]): number {
  let chars = messageChars.get(message);
  if (chars === undefined) {
    chars = textOf(message.content).length;
    for (const block of message.content) if (block.type === 'tool_result') chars += textOf(block.content).length;
    messageChars.set(message, chars);
  }
  return chars;
}

/** Deterministic usage of an answer with `text` and `calls` tool calls to `request` (see the file header). */
export function estimatedUsage(request: Pick<ModelRequest, 'system' | 'messages'>, text: string, calls: number): Usage {
  let chars = request.system?.length ?? 0;
  for (const message of request.messages) chars += charsOf(message);
  return { inputTokens: Math.ceil(chars / 4), outputTokens: Math.ceil(text.length / 4) + SCRIPTED_TOKENS_PER_TOOL_CALL * calls };
}

/** The usage the scripted model reports for `step` answering `request`. */
export function scriptedUsage(step: ScriptedStep, request: Pick<ModelRequest, 'system' | 'messages'>): Usage {
  if (step.usage) return { inputTokens: step.usage.inputTokens, outputTokens: step.usage.outputTokens };
  return estimatedUsage(request, step.text ?? '', 'toolCalls' in step ? step.toolCalls.length : 0);
}

function waitForAbort(signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }));
}

/** Creates a scripted model over `steps` (copied) that records every request in `requests`. */
export function scriptedModel(steps: readonly ScriptedStep[] = []): ScriptedModel {
  const requests: ModelRequest[] = [];
  const adapter = scriptedAdapter(steps, requests);
  return { requests, stream: adapter.stream };
}

/** Creates a scripted model over `steps` (copied); only a given `recorded` array keeps the requests. */
export function scriptedAdapter(steps: readonly ScriptedStep[] = [], recorded?: ModelRequest[]): ModelAdapter {
  const script = structuredClone([...steps]);
  let nextStep = 0;
  let nextCallId = 1;

  async function* run(request: ModelRequest): AsyncGenerator<ModelChunk> {
    const step = script[nextStep++] ?? { text: `echo: ${lastUserText(request)}` };
    const { signal } = request;
    for (const piece of deltas(step.text ?? '')) {
      if (signal.aborted) return yield { type: 'finish', reason: 'aborted' };
      yield { type: 'text-delta', text: piece };
    }
    if (signal.aborted) return yield { type: 'finish', reason: 'aborted' };
    // A failed or hung request reports no usage, as a real endpoint that never answered.
    if (!('finish' in step) || step.finish === 'max-tokens' || step.finish === 'refusal') {
      yield { type: 'usage', usage: scriptedUsage(step, request) };
    }
    if ('toolCalls' in step) {
      for (const call of step.toolCalls) {
        yield { type: 'tool-call', id: `call_${nextCallId++}`, name: call.name, input: structuredClone(call.input) };
      }
      return yield { type: 'finish', reason: 'tool-calls' };
    }
    if (!('finish' in step)) return yield { type: 'finish', reason: 'stop' };
    switch (step.finish) {
      case 'max-tokens':
        return yield { type: 'finish', reason: 'max-tokens' };
      case 'refusal':
        return yield { type: 'finish', reason: 'refusal' };
      case 'error':
        return yield {
          type: 'finish',
          reason: 'error',
          failure: { code: 'SCRIPTED_ERROR', message: 'the scripted model was told to fail' },
        };
      case 'hang':
        await waitForAbort(signal);
        return yield { type: 'finish', reason: 'aborted' };
    }
  }

  return {
    stream(request) {
      recorded?.push(request);
      return run(request);
    },
  };
}
