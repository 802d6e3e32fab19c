// A model adapter from a user's module: loaded by specifier, and its stream checked chunk by chunk,
// since what it yields goes into the session log as it is (a tool call's id, a usage record).
import { z } from 'zod';
import type { ModelSpec } from '../../seam/agent-types.js';
import { plainJsonProblem } from '../../seam/content.js';
import { SubagentError, describeError } from '../../seam/errors.js';
import { lazy } from '../../seam/once.js';
import { describeIssue } from '../../seam/parse.js';
import { importModule } from '../module-import.js';
import type { ModelAdapter, ModelAdapterFactory, ModelChunk, ModelRequest } from './types.js';

const chunkSchema = lazy(() => {
  const count = z.number().int().nonnegative();
  return z.discriminatedUnion('type', [
    z.object({ type: z.literal('text-delta'), text: z.string() }),
    z.object({ type: z.literal('reasoning-delta'), text: z.string() }),
    z.object({
      type: z.literal('tool-call'),
      id: z.string().min(1),
      name: z.string(),
      input: z.unknown().superRefine((value, ctx) => {
        const problem = plainJsonProblem(value, 'input');
        if (problem) ctx.addIssue({ code: 'custom', message: `must be plain JSON, {} for none (${problem})` });
      }),
    }),
    z.object({
      type: z.literal('usage'),
      usage: z.object({ inputTokens: count, outputTokens: count, cacheReadTokens: count.optional(), reasoningTokens: count.optional() }),
    }),
    z.object({
      type: z.literal('finish'),
      reason: z.enum(['stop', 'tool-calls', 'max-tokens', 'refusal', 'aborted', 'error']),
      failure: z.object({ code: z.string(), message: z.string(), status: z.number().optional() }).optional(),
    }),
  ]);
});

/**
 * The module's stream with each chunk checked and copied (unknown fields dropped); the first one
 * that is not a ModelChunk ends the step `error` (`MODEL_CONTRACT`) and stops the module's stream.
 */
function checked(adapter: ModelAdapter, specifier: string): ModelAdapter {
  return {
    async *stream(request: ModelRequest): AsyncIterable<ModelChunk> {
      for await (const chunk of adapter.stream(request)) {
        const parsed = chunkSchema().safeParse(chunk);
        if (!parsed.success) {
          const message = `model module ${specifier} yielded a chunk that is not a ModelChunk: ${describeIssue(parsed.error, 'chunk')}`;
          yield { type: 'finish', reason: 'error', failure: { code: 'MODEL_CONTRACT', message } };
          return;
        }
        yield parsed.data as ModelChunk;
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
      `cannot load model module ${spec.specifier}: ${describeError(error)}; use a file URL or an installed package name`,
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
  const adapter: unknown = await (factory as ModelAdapterFactory)(spec.options);
  if (adapter === null || typeof adapter !== 'object' || typeof (adapter as ModelAdapter).stream !== 'function') {
    throw new SubagentError(
      'INVALID_MODEL_SPEC',
      `the factory '${exportName}' of ${spec.specifier} did not return an object with a stream() method`,
    );
  }
  return checked(adapter as ModelAdapter, spec.specifier);
}
