// The provider registry: validates what a provider declares, keeps a frozen snapshot of it (so a
// caller mutating its object later changes nothing) and remembers insertion order.
import { z } from 'zod';
import { SubagentError, describeError, isSubagentError } from '../seam/errors.js';
import type { SubagentProvider } from '../seam/types.js';
import { parseOrThrow } from '../seam/parse.js';

const providerShape = z.object({
  name: z.string().min(1, 'must be a non-empty string'),
  capabilities: z.object({
    outputSchema: z.boolean(),
    depthLimit: z.boolean(),
    toolFilter: z.boolean(),
    persona: z.boolean(),
    budget: z.boolean().optional(),
  }),
  inheritsParentContext: z.boolean(),
  start: z.custom<SubagentProvider['start']>((value) => typeof value === 'function', 'must be a function'),
  prepareContinuable: z
    .custom<NonNullable<SubagentProvider['prepareContinuable']>>((value) => typeof value === 'function', 'must be a function')
    .optional(),
  resumeContinuable: z
    .custom<NonNullable<SubagentProvider['resumeContinuable']>>((value) => typeof value === 'function', 'must be a function')
    .optional(),
});

/**
 * Reads and validates `provider`'s fields once; `INVALID_PROVIDER` names the first bad one, or
 * carries what a getter or proxy trap of it threw as `cause`.
 */
export function snapshotProvider(provider: unknown): SubagentProvider {
  let fields: z.output<typeof providerShape>;
  try {
    fields = parseOrThrow(providerShape, provider, 'INVALID_PROVIDER', 'provider');
  } catch (error) {
    if (isSubagentError(error, 'INVALID_PROVIDER')) throw error;
    throw new SubagentError('INVALID_PROVIDER', `provider: reading its fields threw: ${describeError(error)}`, { cause: error });
  }
  const { name, capabilities, inheritsParentContext, start, prepareContinuable, resumeContinuable } = fields;
  const source = provider as SubagentProvider;
  const { budget, ...required } = capabilities;
  // The methods read (and checked) above, bound to the caller's object so providers written as classes keep `this`.
  const snapshot: SubagentProvider = {
    name,
    capabilities: Object.freeze(budget === undefined ? { ...required } : { ...required, budget }),
    inheritsParentContext,
    start: start.bind(source),
    ...(prepareContinuable ? { prepareContinuable: prepareContinuable.bind(source) } : {}),
    ...(resumeContinuable ? { resumeContinuable: resumeContinuable.bind(source) } : {}),
  };
  return Object.freeze(snapshot);
}

export class ProviderRegistry {
  readonly #providers = new Map<string, SubagentProvider>();

  get(name: string): SubagentProvider | undefined {
    return this.#providers.get(name);
  }

  names(): string[] {
    return [...this.#providers.keys()];
  }

  /** Inserts a validated snapshot; `DUPLICATE_PROVIDER` if the name is taken. */
  add(snapshot: SubagentProvider): void {
    if (this.#providers.has(snapshot.name)) {
      throw new SubagentError('DUPLICATE_PROVIDER', `a provider named ${snapshot.name} is already registered; unregister it first or pick another name`);
    }
    this.#providers.set(snapshot.name, snapshot);
  }

  /** Removes `snapshot` if it is still the one registered under its name. */
  remove(snapshot: SubagentProvider): boolean {
    if (this.#providers.get(snapshot.name) !== snapshot) return false;
    this.#providers.delete(snapshot.name);
    return true;
  }
}
