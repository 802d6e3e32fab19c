// The fast path of reading stored projection states: one regular expression for the exact text
// `encodeStates` writes, with JSON's own string and number grammars. Listing reads thousands of rows;
// matching is several times cheaper than JSON.parse plus the schema. Any other text is refused here
// and takes the schema path, which decides.
import type { ProjectionViews } from '../runtime/session-persistence.js';
import type { SubagentIdentity, SubagentTimingState } from '../seam/projections.js';
import type { SubagentUsage, SubagentUsageState } from '../seam/usage.js';
import type { ProjectionStates } from './projection-states.js';

const STRING = String.raw`"((?:[^"\\\u0000-\u001f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*)"`;
const NUMBER = String.raw`(-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?)`;
const COUNT = String.raw`(0|[1-9]\d*)`;
const CANONICAL = new RegExp(
  String.raw`^\{"subagent":\{"version":2,"identity":(?:null|\{"mode":"(one-shot|continuable)",(?:"label":${STRING},)?"seq":(0|[1-9]\d*)\})\},` +
    String.raw`"subagentTiming":\{"version":2,"settledMs":${NUMBER},"descriptorSeen":(true|false)` +
    String.raw`(?:,"active":\{"since":${NUMBER},"through":${NUMBER}\})?(?:,"pendingTurnStart":${NUMBER})?\},` +
    String.raw`"subagentUsage":\[1,${COUNT},${COUNT},${COUNT},${COUNT},${COUNT},(true|false),(?:null|${NUMBER}),(?:null|${NUMBER}),(?:null|${NUMBER})\]\}$`,
);
// Capture groups of CANONICAL.
const MODE = 1;
const LABEL = 2;
const SEQ = 3;
const SETTLED = 4;
const SEEN = 5;
const SINCE = 6;
const THROUGH = 7;
const PENDING = 8;
const USAGE = 9; // inputTokens, outputTokens, requests, turns, toolCalls, descriptorSeen, since, through, pendingTurnStart

/** The number a matched JSON number denotes; NaN when it is not finite (the schema refuses it). */
function finite(text: string): number {
  const value = Number(text);
  return Number.isFinite(value) ? value : Number.NaN;
}

/**
 * The identity of a match (null: none); undefined when the schema decides instead: an unsafe seq,
 * or a continuable identity without a label.
 */
function identityOf(match: RegExpExecArray): SubagentIdentity | null | undefined {
  const mode = match[MODE];
  if (mode === undefined) return null;
  const seq = Number(match[SEQ]);
  if (!Number.isSafeInteger(seq)) return undefined;
  const raw = match[LABEL];
  // The grammar admits only valid escapes, so parsing the quoted label cannot throw.
  const label = raw === undefined || !raw.includes('\\') ? raw : (JSON.parse(`"${raw}"`) as string);
  if (mode === 'continuable') return label === undefined ? undefined : { mode, label, seq };
  return label === undefined ? { mode: 'one-shot', seq } : { mode: 'one-shot', label, seq };
}

/** The open turn of a match; null when there is none, undefined when a bound is not finite. */
function activeOf(match: RegExpExecArray): { since: number; through: number } | null | undefined {
  const since = match[SINCE];
  if (since === undefined) return null;
  const span = { since: finite(since), through: finite(match[THROUGH]!) };
  return Number.isNaN(span.since) || Number.isNaN(span.through) ? undefined : span;
}

/** The usage state of a match; undefined when a count is unsafe or a time not finite. */
function usageOf(match: RegExpExecArray): SubagentUsageState | undefined {
  const inputTokens = count(match[USAGE]!);
  const outputTokens = count(match[USAGE + 1]!);
  const requests = count(match[USAGE + 2]!);
  const turns = count(match[USAGE + 3]!);
  const toolCalls = count(match[USAGE + 4]!);
  if (Number.isNaN(inputTokens + outputTokens + requests + turns + toolCalls)) return undefined;
  const state: SubagentUsageState = { version: 1, inputTokens, outputTokens, requests, turns, toolCalls, descriptorSeen: match[USAGE + 5] === 'true' };
  const since = match[USAGE + 6];
  const through = match[USAGE + 7];
  const pending = match[USAGE + 8];
  if (since !== undefined && Number.isNaN((state.since = finite(since)))) return undefined;
  if (through !== undefined && Number.isNaN((state.through = finite(through)))) return undefined;
  if (pending !== undefined && Number.isNaN((state.pendingTurnStart = finite(pending)))) return undefined;
  return state;
}

/** A matched count; NaN when it is not a safe integer (only a long digit string can fail). */
function count(text: string): number {
  const value = Number(text);
  return text.length < 16 || Number.isSafeInteger(value) ? value : Number.NaN;
}

/**
 * The usage view of a match without building its state first (listing reads thousands of rows);
 * undefined where {@link usageOf} refuses the state.
 */
function usageViewOf(match: RegExpExecArray): SubagentUsage | undefined {
  const inputTokens = count(match[USAGE]!);
  const outputTokens = count(match[USAGE + 1]!);
  const requests = count(match[USAGE + 2]!);
  const turns = count(match[USAGE + 3]!);
  const toolCalls = count(match[USAGE + 4]!);
  const since = match[USAGE + 6];
  const through = match[USAGE + 7];
  const pending = match[USAGE + 8];
  const from = since === undefined ? 0 : finite(since);
  const to = through === undefined ? 0 : finite(through);
  const sum = inputTokens + outputTokens + requests + turns + toolCalls + from + to + (pending === undefined ? 0 : finite(pending));
  if (Number.isNaN(sum)) return undefined;
  const wallMs = since === undefined || through === undefined ? 0 : Math.max(0, to - from);
  return { inputTokens, outputTokens, totalTokens: inputTokens + outputTokens, requests, turns, toolCalls, wallMs };
}

/** The views of `text` if it is exactly what `encodeStates` writes, else undefined. */
export function canonicalViews(text: string): ProjectionViews | undefined {
  const match = CANONICAL.exec(text);
  if (match === null) return undefined;
  const identity = identityOf(match);
  const active = activeOf(match);
  const settledMs = finite(match[SETTLED]!);
  if (identity === undefined || active === undefined || Number.isNaN(settledMs)) return undefined;
  // The view leaves out what only the fold needs, but must still refuse what the schema refuses.
  if (match[PENDING] !== undefined && Number.isNaN(finite(match[PENDING]))) return undefined;
  const usage = usageViewOf(match);
  if (usage === undefined) return undefined;
  return { subagent: identity, subagentTiming: active === null ? { settledMs } : { settledMs, active }, subagentUsage: usage };
}

/** The states of `text` if it is exactly what `encodeStates` writes, else undefined. */
export function canonicalStates(text: string): ProjectionStates | undefined {
  const match = CANONICAL.exec(text);
  if (match === null) return undefined;
  const identity = identityOf(match);
  const active = activeOf(match);
  const timing: SubagentTimingState = { version: 2, settledMs: finite(match[SETTLED]!), descriptorSeen: match[SEEN] === 'true' };
  if (identity === undefined || active === undefined || Number.isNaN(timing.settledMs)) return undefined;
  if (active !== null) timing.active = active;
  if (match[PENDING] !== undefined) {
    timing.pendingTurnStart = finite(match[PENDING]);
    if (Number.isNaN(timing.pendingTurnStart)) return undefined;
  }
  const usage = usageOf(match);
  if (usage === undefined) return undefined;
  return { subagent: { version: 2, identity }, subagentTiming: timing, subagentUsage: usage };
}
