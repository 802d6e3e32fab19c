// The query parameters of the inspector's JSON requests: each one a decimal integer in its range,
// given at most once; a name the request does not take is refused rather than ignored.
import { SubagentError } from '../seam/errors.js';

/** The range of one integer parameter. */
export interface IntegerRange {
  min: number;
  max: number;
}

/**
 * The integer parameters of `search` (a request URL's part after `?`, undefined for none), each one
 * named by `ranges`.
 * @throws SubagentError `INVALID_REQUEST` for a name `ranges` lacks, a name given twice, or a value
 * that is not a decimal integer in its range.
 */
export function integerParams<K extends string>(search: string | undefined, ranges: Readonly<Record<K, IntegerRange>>): Partial<Record<K, number>> {
  const values: Partial<Record<K, number>> = {};
  const names = Object.keys(ranges) as K[];
  const taken = names.length === 0 ? 'no query parameters' : `only ${names.map((name) => `?${name}=`).join(' and ')}`;
  for (const [name, value] of new URLSearchParams(search ?? '')) {
    if (!names.includes(name as K)) throw new SubagentError('INVALID_REQUEST', `unknown query parameter ${JSON.stringify(name.slice(0, 40))}: this request takes ${taken}`);
    const key = name as K;
    if (values[key] !== undefined) throw new SubagentError('INVALID_REQUEST', `?${key}= is given twice: give it once`);
    const { min, max } = ranges[key];
    const number = /^\d{1,16}$/.test(value) ? Number(value) : Number.NaN;
    if (!(number >= min && number <= max)) {
      throw new SubagentError('INVALID_REQUEST', `?${key}= must be a decimal integer from ${min} to ${max}, not ${JSON.stringify(value.slice(0, 40))}`);
    }
    values[key] = number;
  }
  return values;
}

/** Entries of one transcript answer, unless `?limit=` asks for fewer or more (up to `max`). */
export const TRANSCRIPT_ENTRIES = { default: 1000, max: 10_000 };
/** Descendants of one tree answer, unless `?limit=` asks for fewer or more (up to `max`). */
export const TREE_NODES = { default: 1000, max: 10_000 };
/** Every seq and offset is a safe integer. */
export const POSITION: IntegerRange = { min: 0, max: Number.MAX_SAFE_INTEGER };
