// The durable `subagent/descriptor` event (seam-spec §6): what kind of child a session is, written
// once by the establishing side and read back on resume and by the identity projection. Versioned:
// a payload of another version is unclassifiable rather than corrupt.
import { z } from 'zod';
import { budgetSchema, type SubagentBudget } from './budget.js';
import { SubagentError } from './errors.js';
import { lazy } from './once.js';
import { isRecord, parseOrThrow } from './parse.js';
import type { SessionEvent } from './session-types.js';
import { toolFilterSchema, type ToolRestriction } from './tool-filter.js';

export const SUBAGENT_DESCRIPTOR_VERSION = 2;
export const DESCRIPTOR_EVENT = 'subagent/descriptor';

/** Which tools a continuable child may use; at least one list is present. */
export type SubagentToolFilter = ToolRestriction;

/** The payload of a `subagent/descriptor` event. Composition is explicit fields, never open options. */
export type SubagentDescriptorData =
  | { version: 2; mode: 'one-shot'; provider: string; label?: string; budget?: SubagentBudget }
  | {
      version: 2;
      mode: 'continuable';
      provider: string;
      label: string;
      agentModel?: string;
      persona?: string;
      toolFilter?: SubagentToolFilter;
      /** The route overrides it was started with, so a cold resume runs it the same way. */
      maxTokens?: number;
      maxStepsPerTurn?: number;
      toolModules?: string[];
      /** Durable, so a resumed child keeps counting against what it already spent. */
      budget?: SubagentBudget;
      /** What the provider needs to bring the child back (e.g. a remote session id); JSON, never secrets. */
      providerData?: Record<string, unknown>;
    };

/** What `snapshotSubagentDescriptor` takes: the descriptor without its version (each mode's own fields). */
export type SubagentDescriptorInput = SubagentDescriptorData extends infer D ? (D extends unknown ? Omit<D, 'version'> : never) : never;

/** The schema of a descriptor payload of this version (both modes). */
export const descriptorSchema = lazy(() => {
  const toolFilter = toolFilterSchema();
  const oneShot = z.strictObject({
    version: z.literal(SUBAGENT_DESCRIPTOR_VERSION),
    mode: z.literal('one-shot'),
    provider: z.string(),
    label: z.string().optional(),
    budget: budgetSchema.optional(),
  });
  const continuable = z.strictObject({
    version: z.literal(SUBAGENT_DESCRIPTOR_VERSION),
    mode: z.literal('continuable'),
    provider: z.string(),
    label: z.string(),
    agentModel: z.string().optional(),
    persona: z.string().optional(),
    toolFilter: toolFilter.optional(),
    maxTokens: z.number().int().positive().optional(),
    maxStepsPerTurn: z.number().int().positive().optional(),
    toolModules: z.array(z.string().min(1)).optional(),
    budget: budgetSchema.optional(),
    providerData: z.record(z.string(), z.unknown()).optional(),
  });
  return z.discriminatedUnion('mode', [oneShot, continuable]);
});

// Read before the full schema so that an unknown version is recognised however its fields look.
const versionSchema = lazy(() => z.looseObject({ version: z.number() }));

function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (typeof value !== 'object' || value === null) return false;
  const proto: unknown = Object.getPrototypeOf(value);
  return proto === null || proto === Object.prototype;
}

const ONE_SHOT_KEYS = new Set(['version', 'mode', 'provider', 'label']);

/**
 * A one-shot descriptor without a budget, checked by hand: true only for payloads the schema
 * accepts, so the common case skips its union (a budget, or any other shape, still meets zod).
 */
function plainOneShot(value: Record<string, unknown>): boolean {
  if (Object.getPrototypeOf(value) !== Object.prototype || !Object.keys(value).every((key) => ONE_SHOT_KEYS.has(key))) return false;
  const { version, mode, provider, label } = value;
  return version === SUBAGENT_DESCRIPTOR_VERSION && mode === 'one-shot' && typeof provider === 'string' && (label === undefined || typeof label === 'string');
}

/** A copy of `value` through JSON, or undefined when that copy differs (the value is not plain JSON). */
function jsonCopy<T>(value: T): T | undefined {
  let copy: unknown;
  try {
    copy = JSON.parse(JSON.stringify(value));
  } catch {
    return undefined;
  }
  return sameJson(copy, value) ? (copy as T) : undefined;
}

function sameJson(a: unknown, b: unknown): boolean {
  if (Object.is(a, b)) return true;
  if (Array.isArray(a) && Array.isArray(b)) {
    return a.length === b.length && a.every((item, index) => index in b && sameJson(item, b[index]));
  }
  if (!isPlainObject(a) || !isPlainObject(b)) return false;
  const keys = Object.keys(a);
  return (
    keys.length === Object.keys(b).length &&
    keys.every((key) => Object.hasOwn(b, key) && sameJson(a[key], b[key]))
  );
}

/**
 * Builds the descriptor payload for `input`: version, mode, provider and the optional fields present
 * for that mode (other input keys are ignored). The result is a detached, lossless-JSON copy.
 * Throws `SubagentError` `INVALID_REQUEST` naming the bad field.
 */
export function snapshotSubagentDescriptor(input: SubagentDescriptorInput): SubagentDescriptorData {
  const draft: Record<string, unknown> = {
    version: SUBAGENT_DESCRIPTOR_VERSION,
    mode: input.mode,
    provider: input.provider,
  };
  const optional =
    input.mode === 'continuable'
      ? (['label', 'agentModel', 'persona', 'toolFilter', 'maxTokens', 'maxStepsPerTurn', 'toolModules', 'budget', 'providerData'] as const)
      : (['label', 'budget'] as const);
  for (const key of optional) {
    const value = (input as Partial<Record<(typeof optional)[number], unknown>>)[key];
    if (value !== undefined) draft[key] = value;
  }
  // A plain one-shot draft holds only strings and the version number, in an object built here:
  // it is already the detached, lossless copy.
  if (plainOneShot(draft)) return draft as SubagentDescriptorData;
  parseOrThrow(descriptorSchema(), draft, 'INVALID_REQUEST', 'descriptor');
  const copy = jsonCopy(draft);
  if (copy === undefined) {
    throw new SubagentError(
      'INVALID_REQUEST',
      'Invalid subagent descriptor: it does not survive a JSON round trip; pass plain strings and arrays.',
    );
  }
  return copy as SubagentDescriptorData;
}

/**
 * Parses one descriptor payload. Returns undefined for a payload of another version; throws
 * `SubagentError` `CORRUPT_DATA` naming the field for anything else malformed. Returns a fresh object.
 */
export function parseSubagentDescriptor(data: unknown): SubagentDescriptorData | undefined {
  if (!isPlainObject(data)) {
    throw new SubagentError('CORRUPT_DATA', 'Stored subagent descriptor is not a plain object.');
  }
  // Fresh like the schema's output: a plain one-shot payload holds primitives only.
  if (plainOneShot(data)) return { ...data } as SubagentDescriptorData;
  const { version } = parseOrThrow(versionSchema(), data, 'CORRUPT_DATA', 'stored descriptor');
  if (version !== SUBAGENT_DESCRIPTOR_VERSION) return undefined;
  return parseOrThrow(descriptorSchema(), data, 'CORRUPT_DATA', 'stored descriptor') as SubagentDescriptorData;
}

/**
 * The descriptor of a session: the FIRST `subagent/descriptor` event wins (resume reads the child's
 * own suffix). No descriptor, or one of another version → undefined; malformed → `CORRUPT_DATA`.
 */
export function foldSubagentDescriptor(events: readonly SessionEvent[]): SubagentDescriptorData | undefined {
  if (!Array.isArray(events)) throw new SubagentError('INVALID_REQUEST', 'foldSubagentDescriptor() takes an array of session events');
  const event = events.find((candidate: unknown) => {
    if (!isRecord(candidate)) throw new SubagentError('INVALID_REQUEST', 'foldSubagentDescriptor() takes session events ({ seq, time, type, data }), and one is not an object');
    return candidate['type'] === DESCRIPTOR_EVENT;
  });
  return event === undefined ? undefined : parseSubagentDescriptor(event.data);
}

/** How far each log was searched for its own descriptor, and what that said once found. */
const searchedLogs = new WeakMap<readonly SessionEvent[], { searched: number; oneShot: boolean | undefined }>();

/**
 * Whether an agent is a one-shot child whose result has settled: idle, and its own descriptor (the
 * first after its seed) says one-shot. Its one turn was its result: a notice for it (a background
 * task, a continuable child settling) is context only, never a new turn nobody reads or budgets.
 */
export function settledOneShot(agent: { readonly status: string; readonly session: { readonly header: { readonly seedLength?: number }; readonly events: readonly SessionEvent[] } }): boolean {
  if (agent.status !== 'idle') return false;
  const { events, header } = agent.session;
  // Logs only grow: each is searched once up to its end, then only what came since (a parent that
  // is no child has no descriptor, and is asked at every notice its children send it).
  const known = searchedLogs.get(events);
  if (known?.oneShot !== undefined) return known.oneShot;
  const from = header.seedLength ?? 0;
  const start = known !== undefined && known.searched <= events.length ? Math.max(from, known.searched) : from;
  for (let index = start; index < events.length; index++) {
    const event = events[index]!;
    if (event.type === DESCRIPTOR_EVENT) {
      const oneShot = (event.data as { mode?: unknown } | null)?.mode === 'one-shot';
      searchedLogs.set(events, { searched: index + 1, oneShot });
      return oneShot;
    }
  }
  if (known) known.searched = events.length;
  else searchedLogs.set(events, { searched: events.length, oneShot: undefined });
  return false;
}
