// A model adapter from a user's module: loaded by specifier, and its stream checked chunk by chunk,
// since what it yields goes into the session log as it is (a tool call's id, a usage record).
import type { ModelSpec } from '../../seam/agent-types.js';
import { deepToolInputFailure, plainJsonProblem } from '../../seam/content.js';
import { SubagentError, describeError } from '../../seam/errors.js';
import { isRecord } from '../../seam/parse.js';
import type { FailureInfo, Usage } from '../../seam/session-types.js';
import { importModule, specifierAdvice } from '../module-import.js';
import type { FinishReason, ModelAdapter, ModelAdapterFactory, ModelChunk, ModelRequest } from './types.js';

const FINISH_REASONS: ReadonlySet<string> = new Set(['stop', 'tool-calls', 'max-tokens', 'refusal', 'aborted', 'error']);
const count = (value: unknown) => Number.isSafeInteger(value) && (value as number) >= 0;
const optionalCount = (value: unknown) => value === undefined || count(value);

/**
 * A copy of `chunk` holding only the fields of its type, or why it is not a ModelChunk. Written by
 * hand, not as a schema: it runs for every chunk a module streams, and keeps nothing per thread.
 */
function checkChunk(chunk: unknown, source: string): { chunk: ModelChunk } | { problem: string } | { failure: FailureInfo } {
  if (!isRecord(chunk)) return { problem: 'not an object' };
  switch (chunk['type']) {
    case 'text-delta':
    case 'reasoning-delta': {
      const text = chunk['text'];
      return typeof text === 'string' ? { chunk: { type: chunk['type'], text } } : { problem: `${chunk['type']}.text must be a string` };
    }
    case 'tool-call': {
      const { id, name, input } = chunk;
      if (typeof id !== 'string' || id === '') return { problem: 'tool-call.id must be a non-empty string' };
      if (typeof name !== 'string') return { problem: 'tool-call.name must be a string' };
      // Refused as every adapter's is (MODEL_OUTPUT_TOO_DEEP), naming the adapter and the depth.
      const deep = deepToolInputFailure(source, name, input);
      if (deep) return { failure: deep };
      const problem = plainJsonProblem(input, 'tool-call.input');
      if (problem) return { problem: `${problem} ({} for no input)` };
      return { chunk: { type: 'tool-call', id, name, input } };
    }
    case 'usage': {
      const usage = chunk['usage'];
      if (!isRecord(usage) || !count(usage['inputTokens']) || !count(usage['outputTokens']) || !optionalCount(usage['cacheReadTokens']) || !optionalCount(usage['reasoningTokens'])) {
        return { problem: 'usage.usage must hold whole token counts: inputTokens, outputTokens, cacheReadTokens?, reasoningTokens?' };
      }
      const copy: Usage = { inputTokens: usage['inputTokens'] as number, outputTokens: usage['outputTokens'] as number };
      if (usage['cacheReadTokens'] !== undefined) copy.cacheReadTokens = usage['cacheReadTokens'] as number;
      if (usage['reasoningTokens'] !== undefined) copy.reasoningTokens = usage['reasoningTokens'] as number;
      return { chunk: { type: 'usage', usage: copy } };
    }
    case 'finish': {
      const { reason, failure } = chunk;
      if (typeof reason !== 'string' || !FINISH_REASONS.has(reason)) return { problem: `finish.reason must be one of ${[...FINISH_REASONS].join(', ')}` };
      if (failure === undefined) return { chunk: { type: 'finish', reason: reason as FinishReason } };
      if (!isRecord(failure) || typeof failure['code'] !== 'string' || typeof failure['message'] !== 'string' || (failure['status'] !== undefined && !Number.isFinite(failure['status']))) {
        return { problem: 'finish.failure must be { code: string, message: string, status?: number }' };
      }
      const info: FailureInfo = { code: failure['code'], message: failure['message'] };
      if (failure['status'] !== undefined) info.status = failure['status'] as number;
      return { chunk: { type: 'finish', reason: reason as FinishReason, failure: info } };
    }
    default:
      return { problem: 'type must be one of text-delta, reasoning-delta, tool-call, usage, finish' };
  }
}

/** Whether `for await` can take `value`: an async iterable, or a plain one. */
function iterable(value: unknown): value is AsyncIterable<unknown> | Iterable<unknown> {
  if (value === null || value === undefined) return false;
  const object = value as Partial<AsyncIterable<unknown> & Iterable<unknown>>;
  return typeof object[Symbol.asyncIterator] === 'function' || typeof object[Symbol.iterator] === 'function';
}

/** What a value that is no stream is, for its error message. */
function describeValue(value: unknown): string {
  if (value === null) return 'null';
  if (value instanceof Promise) return 'a promise';
  return typeof value === 'object' ? 'an object' : typeof value === 'undefined' ? 'undefined' : `a ${typeof value}`;
}

/**
 * A user's adapter (`source` names it) whose stream has each chunk checked and copied (unknown
 * fields dropped); the first one that is not a ModelChunk ends the step `error` (`MODEL_CONTRACT`;
 * `MODEL_OUTPUT_TOO_DEEP` for tool input nested too deep) and stops the adapter's stream.
 */
export function checkedAdapter(adapter: ModelAdapter, source: string): ModelAdapter {
  return {
    async *stream(request: ModelRequest): AsyncIterable<ModelChunk> {
      const stream: unknown = adapter.stream(request);
      if (!iterable(stream)) {
        const message = `${source}: stream() returned ${describeValue(stream)}, not an async iterable of ModelChunk; declare it \`async *stream(request)\``;
        yield { type: 'finish', reason: 'error', failure: { code: 'MODEL_CONTRACT', message } };
        return;
      }
      for await (const chunk of stream) {
        const checked = checkChunk(chunk, source);
        if ('failure' in checked) {
          yield { type: 'finish', reason: 'error', failure: checked.failure };
          return;
        }
        if ('problem' in checked) {
          const message = `${source} yielded a chunk that is not a ModelChunk: ${checked.problem}`;
          yield { type: 'finish', reason: 'error', failure: { code: 'MODEL_CONTRACT', message } };
          return;
        }
        yield checked.chunk;
      }
    },
  };
}

/** Loads the factory a `module` spec names and builds its adapter; `INVALID_MODEL_SPEC` when it cannot. */
export async function loadModuleModel(spec: Extract<ModelSpec, { kind: 'module' }>): Promise<ModelAdapter> {
  const exportName = spec.export ?? 'default';
  let mod: Record<string, unknown>;
  try {
    mod = (await importModule(spec.specifier)) as Record<string, unknown>;
  } catch (error) {
    throw new SubagentError(
      'INVALID_MODEL_SPEC',
      `cannot load model module ${spec.specifier}: ${describeError(error)}${specifierAdvice(spec.specifier, error)}`,
      { cause: error },
    );
  }
  const factory = mod[exportName];
  if (typeof factory !== 'function') {
    throw new SubagentError(
      'INVALID_MODEL_SPEC',
      `model module ${spec.specifier} has no function export '${exportName}'; export a factory (options) => ModelAdapter`,
    );
  }
  let adapter: unknown;
  try {
    adapter = await (factory as ModelAdapterFactory)(spec.options);
  } catch (error) {
    throw new SubagentError('INVALID_MODEL_SPEC', `the factory '${exportName}' of ${spec.specifier} threw: ${describeError(error)}`, { cause: error });
  }
  if (adapter === null || typeof adapter !== 'object' || typeof (adapter as ModelAdapter).stream !== 'function') {
    throw new SubagentError(
      'INVALID_MODEL_SPEC',
      `the factory '${exportName}' of ${spec.specifier} did not return an object with a stream() method`,
    );
  }
  return checkedAdapter(adapter as ModelAdapter, `model module ${spec.specifier} (export '${exportName}')`);
}
