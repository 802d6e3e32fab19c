// Shape checks of the continuable operations' inputs: bad input fails as `INVALID_REQUEST` naming
// the field, before any child, lock or Activation is touched.
import { parseBudget, type SubagentBudget } from '../../seam/budget.js';
import { snapshot } from '../../seam/codec.js';
import { once } from '../../seam/once.js';
import { SubagentError, describeError, isSubagentError } from '../../seam/errors.js';
import { assertKnownKeys, isRecord, parseOrThrow, pickFields, readingInput } from '../../seam/parse.js';
import { assertSessionId } from '../../seam/session-id.js';
import type { ContinuableCreateSpec, ContinuableStartSpec, SubagentProvider } from '../../seam/types.js';
import { assertModelSpec } from '../../runtime/models/create.js';
import { agentOptionsShape } from '../start-request.js';
import { assertMessageContent, type ContentBlock, type MessageSource } from '../../seam/content.js';

function invalid(message: string): SubagentError {
  return new SubagentError('INVALID_REQUEST', message);
}

// Records, so that the compiler asks for a new field here.
const SPEC_KEYS = Object.keys({ provider: 1, label: 1, childId: 1, request: 1, signal: 1 } satisfies Record<keyof ContinuableStartSpec, 1>);
const REQUEST_KEYS = Object.keys({
  prompt: 1,
  parent: 1,
  agentOptions: 1,
  maxDepth: 1,
  toolFilter: 1,
  persona: 1,
  budget: 1,
} satisfies Record<keyof ContinuableStartSpec['request'], 1>);

/** A misspelt field (maxdepth, childid) would give a child without what it names. */
function assertFields(object: object, at: string, known: readonly string[]): void {
  for (const key of Object.keys(object)) {
    if (!known.includes(key)) throw invalid(`${at}.${key} is not a field of a continuable start (fields: ${known.join(', ')})`);
  }
}

/** What reading a caller's spec throws (a getter, a proxy trap) is `INVALID_REQUEST` naming it. */
const readingSpec = <T>(read: () => T): T => readingInput('startContinuable spec', 'INVALID_REQUEST', read);

/** Validates a `startContinuable` spec. */
export function assertStartSpec(spec: unknown): asserts spec is ContinuableStartSpec {
  readingSpec(() => checkStartSpec(spec));
}

function checkStartSpec(spec: unknown): void {
  if (spec === null || typeof spec !== 'object') throw invalid('startContinuable needs a spec object { provider, label, request }');
  const { provider, label, childId, request, signal } = spec as Record<string, unknown>;
  if (typeof provider !== 'string' || provider === '') throw invalid('spec.provider must be a provider name');
  if (typeof label !== 'string' || label.trim() === '') throw invalid('spec.label must be a non-empty string (continuable children are listed by it)');
  if (childId !== undefined) assertSessionId(childId, 'spec.childId', 'INVALID_REQUEST');
  if (signal !== undefined && !(signal instanceof AbortSignal)) throw invalid('spec.signal must be an AbortSignal when given');
  if (request === null || typeof request !== 'object') throw invalid('spec.request must be an object { prompt, parent, … }');
  assertFields(spec, 'spec', SPEC_KEYS);
  assertFields(request, 'spec.request', REQUEST_KEYS);
  const { parent, prompt } = request as Record<string, unknown>;
  if (parent === null || typeof parent !== 'object' || typeof (parent as { id?: unknown }).id !== 'string') {
    throw invalid('spec.request.parent must be the delegating agent');
  }
  assertMessageContent(prompt);
}

/**
 * Checks a continuable start's route overrides and budget as a one-shot start's are checked;
 * returns the detached budget. A budget needs a provider with the `budget` capability.
 */
export function startBudget(spec: ContinuableStartSpec, provider: SubagentProvider): SubagentBudget | undefined {
  return readingSpec(() => checkedBudget(spec, provider));
}

function checkedBudget(spec: ContinuableStartSpec, provider: SubagentProvider): SubagentBudget | undefined {
  const { agentOptions, budget } = spec.request;
  if (agentOptions !== undefined) {
    parseOrThrow(agentOptionsShape, agentOptions, 'INVALID_REQUEST', 'spec.request.agentOptions');
    if (agentOptions.model !== undefined) assertModelSpec(agentOptions.model);
  }
  if (budget === undefined) return undefined;
  const parsed = parseBudget(budget, 'spec.request.budget');
  if (!provider.capabilities.budget) {
    throw SubagentError.unsupported(provider.name, 'budget', 'budget');
  }
  return parsed;
}

/** `followup`'s options, read once into a copy: a misspelt field, a signal that is none or a getter that throws is `INVALID_REQUEST`. */
export function followupOptions(opts: object): { source?: MessageSource; signal?: AbortSignal } {
  return readingInput('followup opts', 'INVALID_REQUEST', () => {
    assertKnownKeys('followup opts', opts, ['source', 'signal'], 'INVALID_REQUEST');
    const options = pickFields(opts, ['source', 'signal']);
    if (options['signal'] !== undefined && !(options['signal'] instanceof AbortSignal)) throw invalid('opts.signal must be an AbortSignal when given');
    return options;
  });
}

/** `delivery` of `reportFrom`. */
export function assertDelivery(delivery: unknown): asserts delivery is 'quiet' | 'next-step' {
  if (delivery !== 'quiet' && delivery !== 'next-step') throw invalid("opts.delivery must be 'quiet' or 'next-step'");
}

/** One `ACTIVATION_TEARDOWN_FAILED` for the failures of several teardowns (or undefined). */
export function teardownError(results: PromiseSettledResult<unknown>[]): SubagentError | undefined {
  const failures = results.flatMap((result) => (result.status === 'rejected' ? [result.reason as unknown] : []));
  if (failures.length === 0) return undefined;
  if (failures.length === 1 && failures[0] instanceof SubagentError && failures[0].code === 'ACTIVATION_TEARDOWN_FAILED') return failures[0];
  return new SubagentError(
    'ACTIVATION_TEARDOWN_FAILED',
    `${failures.length} continuable children failed to tear down: ${failures.map((f) => (f instanceof Error ? f.message : String(f))).join('; ')}`,
    { cause: failures[0] },
  );
}

/**
 * The spec with its data (prompt, options, filter, budget) copied: a start reads them after awaits,
 * and changes the caller makes meanwhile must not reach the child. Call it once the spec is valid.
 */
export function detachedSpec(spec: ContinuableStartSpec): ContinuableStartSpec {
  return readingSpec(() => detached(spec));
}

function detached(spec: ContinuableStartSpec): ContinuableStartSpec {
  const { parent, prompt, agentOptions, toolFilter, budget, ...rest } = spec.request;
  const data = snapshot({
    prompt,
    ...(agentOptions === undefined ? {} : { agentOptions }),
    ...(toolFilter === undefined ? {} : { toolFilter }),
    ...(budget === undefined ? {} : { budget }),
  });
  return { ...spec, request: { ...rest, parent, ...data } };
}

/**
 * What the provider's `prepareContinuable` answers (a throw is a rejection, a spec not in a promise is
 * taken as is); `CONTRACT_VIOLATION` when it is no spec object or its `release` or `quiesce` is no function.
 */
export async function preparedSpec(provider: string, prepare: () => Promise<ContinuableCreateSpec>): Promise<ContinuableCreateSpec> {
  return ownSpec(provider, 'prepareContinuable', await prepare());
}

/**
 * The spec a provider's `prepareContinuable` or `resumeContinuable` answered, as the service keeps
 * it: an object whose hooks are functions (else `CONTRACT_VIOLATION`), its fields read once, its
 * hooks called on it (methods of its class keep their `this`), and `release` run at most once.
 */
export function ownSpec(provider: string, method: 'prepareContinuable' | 'resumeContinuable', answered: unknown): ContinuableCreateSpec {
  const violation = (what: string) => new SubagentError('CONTRACT_VIOLATION', `provider ${provider}'s ${method} answered ${what}; it must resolve a ContinuableCreateSpec object`);
  if (!isRecord(answered)) throw violation('no object');
  const spec = answered as ContinuableCreateSpec;
  const { seed, model, providerData, toolModulesHere, release, quiesce, admitInput } = spec;
  const hooks = { release, quiesce, admitInput };
  const bad = (Object.keys(hooks) as (keyof typeof hooks)[]).find((key) => hooks[key] !== undefined && typeof hooks[key] !== 'function');
  if (bad !== undefined) throw violation(`a ${bad} that is no function`);
  return {
    ...(seed === undefined ? {} : { seed }),
    ...(model === undefined ? {} : { model }),
    ...(providerData === undefined ? {} : { providerData }),
    ...(toolModulesHere === undefined ? {} : { toolModulesHere }),
    ...(release ? { release: once(() => release.call(spec)) } : {}),
    ...(quiesce ? { quiesce: () => quiesce.call(spec) } : {}),
    ...(admitInput ? { admitInput: (content: readonly ContentBlock[]) => admitInput.call(spec, content) } : {}),
  };
}

/** Asks `spec.admitInput` (see ContinuableCreateSpec) about `content`: its `SubagentError` refuses the message; anything else it throws is the provider's fault. */
export function admitInput(spec: Pick<ContinuableCreateSpec, 'admitInput'>, provider: string, content: readonly ContentBlock[]): void {
  try {
    spec.admitInput?.(content);
  } catch (error) {
    if (isSubagentError(error)) throw error;
    throw new SubagentError('CONTRACT_VIOLATION', `provider ${provider}'s admitInput threw ${describeError(error)}; it must throw a SubagentError or nothing`, { cause: error });
  }
}
