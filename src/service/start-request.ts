// Start-time validation and snapshotting. Everything here runs synchronously when `start` is
// called, before any provider code: a rejected start leaves nothing behind, and the provider gets
// a detached copy that later mutation of the caller's objects cannot reach.
import { z } from 'zod';
import type { JsonSchema } from '../seam/agent-types.js';
import { snapshot } from '../seam/codec.js';
import { parseBudget } from '../seam/budget.js';
import { assertSubagentMaxDepth } from '../seam/depth.js';
import { snapshotSubagentDescriptor } from '../seam/descriptor.js';
import { contentProblem, plainJsonProblem } from '../seam/content.js';
import { SubagentError, describeError } from '../seam/errors.js';
import type { ResolvedSubagentStartRequest, SubagentProvider, SubagentStartRequest } from '../seam/types.js';
import { compileJsonSchema } from '../runtime/json-schema.js';
import { assertModelSpec } from '../runtime/models/create.js';
import { everyItem, isRecord, parseOrThrow, readingInput } from '../seam/parse.js';
import { toolFilterSchema } from '../seam/tool-filter.js';

const CAPABILITY_OF = [
  ['outputSchema', 'outputSchema'],
  ['maxDepth', 'depthLimit'],
  ['toolFilter', 'toolFilter'],
  ['persona', 'persona'],
  ['budget', 'budget'],
] as const;

/** The route overrides a start may carry (continuable starts check the same shape). */
export const agentOptionsShape = z.strictObject({
  model: z.unknown().optional(),
  toolModules: z.array(z.string().min(1)).optional(),
  maxTokens: z.number().int().positive().optional(),
  maxStepsPerTurn: z.number().int().positive().optional(),
});

const requestShape = z.object({
  label: z.string().optional(),
  prompt: z.array(z.looseObject({ type: z.string() })).min(1, 'must be a non-empty array of content blocks'),
  parent: z.looseObject({
    id: z.string().min(1),
    options: z.looseObject({}),
    session: z.looseObject({ header: z.looseObject({}), events: z.array(z.unknown()) }),
  }, { message: 'must be an Agent' }),
  signal: z.instanceof(AbortSignal, { message: 'must be an AbortSignal' }),
  agentOptions: agentOptionsShape.optional(),
  toolFilter: toolFilterSchema().optional(),
  persona: z.string().optional(),
});

// Records, so that the compiler asks for a new field here.
const REQUEST_KEYS = new Set(Object.keys({
  label: 1,
  prompt: 1,
  parent: 1,
  signal: 1,
  agentOptions: 1,
  outputSchema: 1,
  maxDepth: 1,
  toolFilter: 1,
  persona: 1,
  budget: 1,
} satisfies Record<keyof SubagentStartRequest, 1>));

const isCount = (value: unknown) => value === undefined || (Number.isSafeInteger(value) && (value as number) > 0);
const AGENT_OPTION_KEYS = new Set(['model', 'toolModules', 'maxTokens', 'maxStepsPerTurn']);

/**
 * The common request, checked by hand: true only for values `requestShape` accepts, so a start
 * that passes skips zod (a large share of a start's cost); anything else (a tool filter
 * included) goes through zod, which also words the error.
 */
function plainlyValid(request: SubagentStartRequest): boolean {
  const { label, prompt, parent, signal, agentOptions, persona } = request as Partial<Record<keyof SubagentStartRequest, unknown>>;
  if ((label !== undefined && typeof label !== 'string') || (persona !== undefined && typeof persona !== 'string')) return false;
  if (request.toolFilter !== undefined || !(signal instanceof AbortSignal)) return false;
  if (!Array.isArray(prompt) || prompt.length === 0 || !everyItem(prompt, (block) => isRecord(block) && typeof block['type'] === 'string')) return false;
  if (!isRecord(parent) || typeof parent['id'] !== 'string' || parent['id'] === '' || !isRecord(parent['options'])) return false;
  const session = parent['session'];
  if (!isRecord(session) || !isRecord(session['header']) || !Array.isArray(session['events'])) return false;
  if (agentOptions === undefined) return true;
  // A plain object: zod's strict check also sees inherited enumerable keys.
  if (!isRecord(agentOptions) || Object.getPrototypeOf(agentOptions) !== Object.prototype) return false;
  if (!Object.keys(agentOptions).every((key) => AGENT_OPTION_KEYS.has(key))) return false;
  const { toolModules } = agentOptions;
  if (toolModules !== undefined && !(Array.isArray(toolModules) && everyItem(toolModules, (specifier) => typeof specifier === 'string' && specifier !== ''))) return false;
  return isCount(agentOptions['maxTokens']) && isCount(agentOptions['maxStepsPerTurn']);
}

function invalid(field: string, problem: string): SubagentError {
  return new SubagentError('INVALID_REQUEST', `request.${field} ${problem}`);
}

/** Throws `INVALID_REQUEST` unless `schema` is an object-rooted JSON Schema we can enforce. */
export function assertObjectSchema(schema: unknown): asserts schema is JsonSchema {
  if (schema === null || typeof schema !== 'object' || Array.isArray(schema)) throw invalid('outputSchema', 'must be a JSON Schema object');
  const root = schema as Record<string, unknown>;
  if (root['type'] !== 'object' || 'oneOf' in root || 'anyOf' in root) {
    throw invalid('outputSchema', 'is an unsupported JSON schema: its root must be { type: "object", … } without oneOf/anyOf');
  }
  const problem = plainJsonProblem(schema, 'outputSchema');
  if (problem) throw invalid('outputSchema', `must be plain JSON (${problem})`);
  try {
    compileJsonSchema(schema, 'request.outputSchema');
  } catch (error) {
    throw new SubagentError('INVALID_REQUEST', `request.outputSchema is an unsupported JSON schema: ${error instanceof Error ? error.message : describeError(error)}`, { cause: error });
  }
}

/**
 * Validates `request` for `provider` in the contract's order (capabilities, then values), then
 * returns the detached copy the provider receives, with its one-shot descriptor.
 */
export function resolveStartRequest(provider: SubagentProvider, request: SubagentStartRequest): ResolvedSubagentStartRequest {
  // A getter or proxy trap of the caller's request that throws (a revoked proxy) is its bad input.
  return readingInput('request', 'INVALID_REQUEST', () => resolve(provider, request));
}

function resolve(provider: SubagentProvider, request: SubagentStartRequest): ResolvedSubagentStartRequest {
  if (request === null || typeof request !== 'object') throw new SubagentError('INVALID_REQUEST', 'request must be an object { prompt, parent, signal, … }');
  for (const [field, capability] of CAPABILITY_OF) {
    if (request[field] !== undefined && !provider.capabilities[capability]) {
      throw SubagentError.unsupported(provider.name, field, capability);
    }
  }
  // A misspelt field (maxdepth, toolfilter) would give a child without the limit it names.
  for (const key of Object.keys(request)) {
    if (!REQUEST_KEYS.has(key)) throw invalid(key, `is not a start request field (fields: ${[...REQUEST_KEYS].join(', ')})`);
  }
  assertSubagentMaxDepth(request.maxDepth);
  const budget = request.budget === undefined ? undefined : parseBudget(request.budget);
  if (request.outputSchema !== undefined) assertObjectSchema(request.outputSchema);
  if (!plainlyValid(request)) parseOrThrow(requestShape, request, 'INVALID_REQUEST', 'request');
  const promptProblem = contentProblem(request.prompt, 'request.prompt');
  if (promptProblem) throw new SubagentError('INVALID_REQUEST', promptProblem);
  if (request.agentOptions?.model !== undefined) assertModelSpec(request.agentOptions.model);
  if (request.signal.aborted) {
    throw SubagentError.cancelled('the start', request.signal.reason, 'before a child existed');
  }
  // One detached copy, as the data would cross a port (plain JSON is copied in one walk).
  const data = snapshot<Pick<SubagentStartRequest, 'prompt' | 'outputSchema' | 'agentOptions' | 'toolFilter'>>({
    prompt: request.prompt,
    ...(request.outputSchema === undefined ? {} : { outputSchema: request.outputSchema }),
    ...(request.agentOptions === undefined ? {} : { agentOptions: request.agentOptions }),
    ...(request.toolFilter === undefined ? {} : { toolFilter: request.toolFilter }),
  });
  const descriptor = snapshotSubagentDescriptor({
    mode: 'one-shot',
    provider: provider.name,
    ...(request.label === undefined ? {} : { label: request.label }),
    ...(budget === undefined ? {} : { budget }),
  });
  return {
    ...data,
    parent: request.parent,
    signal: request.signal,
    ...(request.label === undefined ? {} : { label: request.label }),
    ...(request.maxDepth === undefined ? {} : { maxDepth: request.maxDepth }),
    ...(request.persona === undefined ? {} : { persona: request.persona }),
    ...(budget === undefined ? {} : { budget }),
    descriptor,
  };
}
