// Builds a model adapter from a serializable ModelSpec. The spec is validated here, at the
// boundary where it arrives (options, worker task data), so bad specs fail before any turn runs.
import { z } from 'zod';
import type { ModelSpec, ScriptedStep } from '../../seam/agent-types.js';
import { plainJsonProblem } from '../../seam/content.js';
import { lazy } from '../../seam/once.js';
import { SubagentError } from '../../seam/errors.js';
import { MAX_IDLE_TIMEOUT_MS, openaiModel } from './openai.js';
import { scriptedAdapter, scriptedModel, type ScriptedModel } from './scripted.js';
import { plainModelSpec } from './spec-check.js';
import { loadModuleModel } from './module-model.js';
import type { ModelAdapter } from './types.js';
import { parseOrThrow, readingInput } from '../../seam/parse.js';

/** A base URL without userinfo or fragment: fetch refuses the one, and the other would be cut. */
function withoutCredentials(url: string): boolean {
  // Zod runs this also on a value its URL check refused: that check reports it.
  if (!URL.canParse(url)) return true;
  const parsed = new URL(url);
  return parsed.username === '' && parsed.password === '' && parsed.hash === '';
}

/** Headers undici's fetch refuses or mishandles (a set `content-length` makes it hang). */
const UNSENDABLE_HEADERS = new Set(['content-length', 'transfer-encoding', 'keep-alive', 'upgrade', 'expect']);

/** Headers fetch can send (checked when the spec arrives, not found wrong mid-turn). */
function sendableHeaders(headers: Record<string, string>): boolean {
  if (Object.keys(headers).some((name) => UNSENDABLE_HEADERS.has(name.toLowerCase()))) return false;
  try {
    new Headers(Object.entries(headers));
    return true;
  } catch {
    return false;
  }
}

/**
 * Plain JSON (or absent, unless `required`): a spec's values go into session logs and across threads
 * as they are. A required one may not be `undefined` either, which JSON drops (a stored spec would
 * then lack it).
 */
function plainJson(field: string, required = false) {
  return z.unknown().superRefine((value, ctx) => {
    if (required && value === undefined) return void ctx.addIssue({ code: 'custom', message: 'is required ({} for no input)' });
    const problem = value === undefined ? undefined : plainJsonProblem(value, field);
    if (problem) ctx.addIssue({ code: 'custom', message: `must be plain JSON (${problem})` });
  });
}

const modelSpecSchema = lazy(() => {
  const count = z.number().int().nonnegative();
  const stepUsage = z.strictObject({ inputTokens: count, outputTokens: count }).optional();
  const scriptedStep = z.union([
    z.strictObject({ text: z.string(), usage: stepUsage }),
    z.strictObject({
      toolCalls: z.array(z.strictObject({ name: z.string().min(1), input: plainJson('input', true) })).min(1),
      text: z.string().optional(),
      usage: stepUsage,
    }),
    z.strictObject({ finish: z.enum(['max-tokens', 'refusal', 'error', 'hang']), text: z.string().optional(), usage: stepUsage }),
  ], { error: 'must be one of { text, usage? }, { toolCalls: [{ name, input }, …], text?, usage? } or { finish: max-tokens | refusal | error | hang, text?, usage? }' });

  return z.discriminatedUnion('kind', [
    z.strictObject({ kind: z.literal('scripted'), steps: z.array(scriptedStep).optional() }),
    z.strictObject({
      kind: z.literal('openai'),
      baseURL: z
        .url({ protocol: /^https?$/ })
        .refine(withoutCredentials, 'must not hold a user name, password or #fragment (the key goes in the environment, see apiKeyEnv)'),
      model: z.string().min(1),
      apiKeyEnv: z.string().min(1).optional(),
      headers: z.record(z.string(), z.string()).refine(sendableHeaders, 'must be headers fetch can send: valid names and values (no line breaks), none of content-length, transfer-encoding, keep-alive, upgrade, expect').optional(),
      maxRetries: z.number().int().min(0).max(5).optional(),
      idleTimeoutMs: z.number().int().positive().max(MAX_IDLE_TIMEOUT_MS, `must be at most ${MAX_IDLE_TIMEOUT_MS} ms: Node's fetch ends a request that receives no data for 300 s`).optional(),
    }),
    z.strictObject({
      kind: z.literal('module'),
      specifier: z.string().min(1),
      export: z.string().min(1).optional(),
      options: plainJson('options').optional(),
    }),
  ]);
});

/** Throws `INVALID_MODEL_SPEC` naming the first bad field unless `spec` is a valid ModelSpec. */
export function assertModelSpec(spec: unknown): asserts spec is ModelSpec {
  readingInput('the model spec', 'INVALID_MODEL_SPEC', () => {
    if (!plainModelSpec(spec)) parseOrThrow(modelSpecSchema(), spec, 'INVALID_MODEL_SPEC', 'model spec', 'kinds: scripted, openai, module');
  });
}

/** What each field of an OpenAI-compatible spec read from the environment must hold. */
const ENV_FIELD_NEEDS = {
  baseURL: 'an http(s) URL without user name, password or #fragment, such as https://api.openai.com/v1',
  model: 'a non-empty model name',
} as const;

/**
 * `assertModelSpec` for an OpenAI-compatible spec whose fields were read from environment variables
 * (`variables` names the variable of each): `INVALID_MODEL_SPEC` names the variable and what it must
 * hold, not a spec field the user never wrote, and never its value (it may hold a secret).
 */
export function assertEnvModelSpec(spec: ModelSpec, variables: { readonly [K in keyof typeof ENV_FIELD_NEEDS]: string }): void {
  const parsed = modelSpecSchema().safeParse(spec);
  if (parsed.success) return;
  const field = parsed.error.issues.map((issue) => issue.path[0]).find((key): key is keyof typeof ENV_FIELD_NEEDS => key === 'baseURL' || key === 'model');
  if (field === undefined) assertModelSpec(spec);
  else throw new SubagentError('INVALID_MODEL_SPEC', `${variables[field]} must be ${ENV_FIELD_NEEDS[field]}`, { cause: parsed.error });
}

/**
 * `scriptedModel` as the package exports it: its steps are checked as those of a `{ kind: 'scripted' }`
 * spec are (`INVALID_MODEL_SPEC` naming the bad step), not found wrong mid-turn.
 */
export function checkedScriptedModel(steps: readonly ScriptedStep[] = []): ScriptedModel {
  assertModelSpec({ kind: 'scripted', steps });
  return scriptedModel(steps);
}

/** Builds the adapter a ModelSpec describes. Rejects `INVALID_MODEL_SPEC` on a bad spec. */
export async function createModel(spec: ModelSpec, env: NodeJS.ProcessEnv = process.env): Promise<ModelAdapter> {
  assertModelSpec(spec);
  switch (spec.kind) {
    case 'scripted':
      return scriptedAdapter(spec.steps);
    case 'openai':
      return openaiModel(spec, env);
    case 'module':
      return loadModuleModel(spec);
  }
}
