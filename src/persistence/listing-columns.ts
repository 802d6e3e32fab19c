// What a listing reads of a `sessions` row, packed by SQLite into few values: each value a row
// carries back costs about half a millisecond per 10,000 rows, far more than the arithmetic that
// packs it. Figures too large to pack are read again, unpacked, for that row alone.
import type { ListedProjections } from '../runtime/session-persistence.js';
import { MODE_CODE, listedFromRow } from './state-columns.js';

/**
 * The row's small facts and usage counts as one exact integer (at most 2^53 − 1): bits 0–3 the
 * flags (bit 0 origin 'subagent', bit 1 has subagent children, bits 2–3 the identity's {@link
 * MODE_CODE}), then requests (17 bits), turns (16), tool calls (16). The counts part is −1 when a
 * count does not fit or is not stored, so the value is negative and `value + 16` the flags. NULL
 * when origin or next_seq is not a value this store writes: the catalog reads the row again and
 * the schema names the column. `lineage` is the SQL of the has-subagent-children bit.
 */
export function packedFacts(lineage: string): string {
  return `CASE WHEN next_seq >= 0 AND (origin IS NULL OR origin = 'subagent') THEN
     (origin IS NOT NULL) + 2 * ${lineage} + 4 * (${MODE_CODE}) + 16 * CASE
       WHEN usage_requests BETWEEN 0 AND 131071 AND usage_turns BETWEEN 0 AND 65535 AND usage_tools BETWEEN 0 AND 65535
       THEN usage_requests + 131072 * (usage_turns + 65536 * usage_tools) ELSE -1 END
   END`;
}

/** Input tokens (30 bits) and output tokens (23 bits) as one exact integer; −1 when they do not fit. */
export const PACKED_TOKENS = `CASE WHEN usage_input BETWEEN 0 AND 1073741823 AND usage_output BETWEEN 0 AND 8388607
  THEN usage_input + 1073741824 * usage_output ELSE -1 END`;

/** Wall time of the usage state, computed by SQLite as state-columns.ts's `LISTED_SELECT` does. */
export const WALL_TIME = 'coalesce(max(0, usage_through - usage_since), 0)';

/** The flags of a {@link packedFacts} value that is a number. */
export const flagsOf = (facts: number): number => (facts < 0 ? facts + 16 : facts % 16);

const MODES = [null, 'one-shot', 'continuable'] as const;
const ESCAPED = '\u0000';

/**
 * The listed projections of a row's packed values: its {@link packedFacts} (a number), {@link
 * PACKED_TOKENS}, {@link WALL_TIME} and stored label. Undefined when a figure did not fit: the caller
 * reads the row unpacked (`LISTED_SELECT`, {@link listedFromRow}).
 */
export function unpackListed(facts: number, tokens: unknown, wallMs: unknown, label: unknown): ListedProjections | undefined {
  if (facts < 0 || typeof tokens !== 'number' || tokens < 0 || typeof wallMs !== 'number') return undefined;
  const flags = facts % 16;
  const mode = MODES[flags >> 2];
  if (mode === undefined) return undefined;
  let rest = (facts - flags) / 16;
  const requests = rest % 131072;
  rest = (rest - requests) / 131072;
  const turns = rest % 65536;
  const toolCalls = (rest - turns) / 65536;
  const inputTokens = tokens % 1073741824;
  const outputTokens = (tokens - inputTokens) / 1073741824;
  const usage = { inputTokens, outputTokens, totalTokens: inputTokens + outputTokens, requests, turns, toolCalls, wallMs };
  if (typeof label === 'string' && mode !== null && !label.startsWith(ESCAPED)) return { mode, label, usage };
  // The uncommon shapes (no identity, no label, an escaped label) take the checked path.
  return listedFromRow([label, inputTokens, outputTokens, requests, turns, toolCalls, wallMs], 0, flags >> 2);
}
