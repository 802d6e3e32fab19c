// A hand-written check of the common model specs (scripted text and tool-call steps, module
// models), run before the zod schema in create.ts: a spec it passes is one the schema accepts, so
// a start skips the schema's union; anything else (openai specs, finish steps, any fault) still
// meets the schema, which also words the error.

import { plainJsonProblem } from '../../seam/content.js';
import { everyItem } from '../../seam/parse.js';

type Plain = Record<string, unknown>;

/** A plain object (own keys only, as a strict schema also reads inherited ones) with keys from `allowed`. */
function plainWith(value: unknown, allowed: readonly string[]): value is Plain {
  if (typeof value !== 'object' || value === null || Object.getPrototypeOf(value) !== Object.prototype) return false;
  for (const key of Object.keys(value)) if (!allowed.includes(key)) return false;
  return true;
}

const count = (value: unknown) => Number.isSafeInteger(value) && (value as number) >= 0;
const name = (value: unknown) => typeof value === 'string' && value !== '';

function stepUsage(usage: unknown): boolean {
  return usage === undefined || (plainWith(usage, ['inputTokens', 'outputTokens']) && count(usage['inputTokens']) && count(usage['outputTokens']));
}

/** Plain JSON or absent: it goes into session logs and across threads as it is. */
const plainOrAbsent = (value: unknown) => value === undefined || plainJsonProblem(value, 'value') === undefined;

function toolCall(call: unknown): boolean {
  // An input of `undefined` is none: JSON drops it, and a stored spec would then lack it.
  return plainWith(call, ['name', 'input']) && name(call['name']) && call['input'] !== undefined && plainOrAbsent(call['input']);
}

function step(value: unknown): boolean {
  if (plainWith(value, ['text', 'usage'])) return typeof value['text'] === 'string' && stepUsage(value['usage']);
  if (!plainWith(value, ['toolCalls', 'text', 'usage'])) return false;
  const { toolCalls, text } = value;
  return Array.isArray(toolCalls) && toolCalls.length > 0 && everyItem(toolCalls, toolCall) && (text === undefined || typeof text === 'string') && stepUsage(value['usage']);
}

/** True only for specs the model-spec schema accepts. */
export function plainModelSpec(spec: unknown): boolean {
  if (plainWith(spec, ['kind', 'steps']) && spec['kind'] === 'scripted') {
    const { steps } = spec;
    return steps === undefined || (Array.isArray(steps) && everyItem(steps, step));
  }
  if (plainWith(spec, ['kind', 'specifier', 'export', 'options']) && spec['kind'] === 'module') {
    return name(spec['specifier']) && (spec['export'] === undefined || name(spec['export'])) && plainOrAbsent(spec['options']);
  }
  return false;
}
