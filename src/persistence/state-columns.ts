// The projection states as typed columns of the `sessions` table: one column per state field, so
// SQLite reads them and listing takes each figure as a number, with no text to parse. STRICT types
// and CHECK constraints (see sqlite-migrate.ts) make every non-NULL value valid; NULL where a
// state needs a value means "not stored", and the reader rebuilds the row from its log.
import type { SubagentIdentity, SubagentTimingState } from '../seam/projections.js';
import type { SubagentUsageState } from '../seam/usage.js';
import type { ListedProjections } from '../runtime/session-persistence.js';
import type { ProjectionStates } from './projection-states.js';

/** The state columns, in the order of {@link stateValues} and {@link statesFromRow}. */
export const STATE_COLUMNS = [
  'identity_mode',
  'identity_label',
  'identity_seq',
  'timing_settled',
  'timing_since',
  'timing_through',
  'timing_pending',
  'timing_seen',
  'usage_input',
  'usage_output',
  'usage_requests',
  'usage_turns',
  'usage_tools',
  'usage_seen',
  'usage_since',
  'usage_through',
  'usage_pending',
] as const;

/**
 * What a listing selects of the states besides the mode (packed into the row's flags by the
 * catalog's query), in the order of {@link listedFromRow}: label and usage figures, wall time
 * computed by SQLite. Each value read costs time on every listed row.
 */
export const LISTED_SELECT =
  'identity_label, usage_input, usage_output, usage_requests, usage_turns, usage_tools, ' +
  'coalesce(max(0, usage_through - usage_since), 0)';

/** The identity's mode as a small integer: 0 none, 1 one-shot, 2 continuable. */
export const MODE_CODE = "CASE identity_mode WHEN 'one-shot' THEN 1 WHEN 'continuable' THEN 2 ELSE 0 END";
const MODES = [null, 'one-shot', 'continuable'] as const;

export type ColumnValue = string | number | null;

// SQLite stores text as UTF-8, which cannot hold a lone surrogate: such a label, or one that would
// read as this escape, is stored as NUL followed by its JSON text. Every other label is stored as is.
const ESCAPED = '\u0000';
const LONE_SURROGATE = /\p{Cs}/u;

function storedLabel(label: string): string {
  return label.startsWith(ESCAPED) || LONE_SURROGATE.test(label) ? ESCAPED + JSON.stringify(label) : label;
}

/** The label a stored value denotes; undefined when it is not one this store writes. */
export function labelOf(value: unknown): string | null | undefined {
  if (value === null) return null;
  if (typeof value !== 'string') return undefined;
  if (!value.startsWith(ESCAPED)) return value;
  try {
    const label: unknown = JSON.parse(value.slice(1));
    return typeof label === 'string' ? label : undefined;
  } catch {
    return undefined;
  }
}

/** The column values of `states`, in {@link STATE_COLUMNS} order. */
export function stateValues(states: ProjectionStates): ColumnValue[] {
  const { identity } = states.subagent;
  const timing = states.subagentTiming;
  const usage = states.subagentUsage;
  return [
    identity?.mode ?? null,
    identity?.label === undefined ? null : storedLabel(identity.label),
    identity?.seq ?? null,
    timing.settledMs,
    timing.active?.since ?? null,
    timing.active?.through ?? null,
    timing.pendingTurnStart ?? null,
    timing.descriptorSeen ? 1 : 0,
    usage.inputTokens,
    usage.outputTokens,
    usage.requests,
    usage.turns,
    usage.toolCalls,
    usage.descriptorSeen ? 1 : 0,
    usage.since ?? null,
    usage.through ?? null,
    usage.pendingTurnStart ?? null,
  ];
}

/** Values of a session whose states are not stored (rebuilt from its log when read). */
export const NO_STATES: readonly ColumnValue[] = STATE_COLUMNS.map(() => null);

const isNumber = (value: unknown): value is number => typeof value === 'number';
const isFlag = (value: unknown): value is 0 | 1 => value === 0 || value === 1;

/** The identity of mode, label and seq values: null for none, undefined when they are not one. */
function identityOf(mode: unknown, rawLabel: unknown, seq: unknown): SubagentIdentity | null | undefined {
  if (mode === null) return rawLabel === null && seq === null ? null : undefined;
  const label = labelOf(rawLabel);
  if (label === undefined || !isNumber(seq)) return undefined;
  if (mode === 'continuable') return label === null ? undefined : { mode, label, seq };
  if (mode !== 'one-shot') return undefined;
  return label === null ? { mode, seq } : { mode, label, seq };
}

/** The open turn of since and through values: null for none, undefined when only one is there. */
function spanOf(since: unknown, through: unknown): { since: number; through: number } | null | undefined {
  if (since === null && through === null) return null;
  return isNumber(since) && isNumber(through) ? { since, through } : undefined;
}

/** The states stored in `row` from index `at` on ({@link STATE_COLUMNS}); undefined when not stored. */
export function statesFromRow(row: readonly unknown[], at: number): ProjectionStates | undefined {
  const identity = identityOf(row[at], row[at + 1], row[at + 2]);
  const [settledMs, since, through, pending, timingSeen] = row.slice(at + 3, at + 8);
  const active = spanOf(since, through);
  if (identity === undefined || active === undefined || !isNumber(settledMs) || !isFlag(timingSeen)) return undefined;
  if (pending !== null && !isNumber(pending)) return undefined;
  const timing: SubagentTimingState = { version: 2, settledMs, descriptorSeen: timingSeen === 1 };
  if (active !== null) timing.active = active;
  if (pending !== null) timing.pendingTurnStart = pending;
  const [inputTokens, outputTokens, requests, turns, toolCalls, usageSeen, usageSince, usageThrough, usagePending] = row.slice(at + 8, at + 17);
  const counts = [inputTokens, outputTokens, requests, turns, toolCalls];
  if (!counts.every(isNumber) || !isFlag(usageSeen)) return undefined;
  const times = [usageSince, usageThrough, usagePending];
  if (!times.every((time) => time === null || isNumber(time))) return undefined;
  const usage: SubagentUsageState = {
    version: 1,
    inputTokens: inputTokens as number,
    outputTokens: outputTokens as number,
    requests: requests as number,
    turns: turns as number,
    toolCalls: toolCalls as number,
    descriptorSeen: usageSeen === 1,
  };
  if (usageSince !== null) usage.since = usageSince as number;
  if (usageThrough !== null) usage.through = usageThrough as number;
  if (usagePending !== null) usage.pendingTurnStart = usagePending as number;
  return { subagent: { version: 2, identity }, subagentTiming: timing, subagentUsage: usage };
}

/**
 * The listed projections of the {@link LISTED_SELECT} values in `row` from index `at` on, with the
 * mode of its {@link MODE_CODE}; undefined when the states are not stored there: the caller reads
 * them through `projections()`.
 */
export function listedFromRow(row: readonly unknown[], at: number, modeCode: number): ListedProjections | undefined {
  const label = row[at];
  const inputTokens = row[at + 1];
  const outputTokens = row[at + 2];
  const requests = row[at + 3];
  const turns = row[at + 4];
  const toolCalls = row[at + 5];
  const wallMs = row[at + 6];
  if (!isNumber(inputTokens) || !isNumber(outputTokens) || !isNumber(requests) || !isNumber(turns) || !isNumber(toolCalls) || !isNumber(wallMs)) {
    return undefined;
  }
  const mode = MODES[modeCode];
  if (mode === undefined) return undefined;
  const usage = { inputTokens, outputTokens, totalTokens: Math.min(Number.MAX_SAFE_INTEGER, inputTokens + outputTokens), requests, turns, toolCalls, wallMs };
  if (typeof label === 'string' && mode !== null && !label.startsWith(ESCAPED)) return { mode, label, usage };
  // The uncommon shapes (no identity, no label, an escaped label) take the checked path.
  if (mode === null) return label === null ? { mode, label: undefined, usage } : undefined;
  const checked = labelOf(label);
  if (checked === undefined || (mode === 'continuable' && checked === null)) return undefined;
  return { mode, label: checked ?? undefined, usage };
}
