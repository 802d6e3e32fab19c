// A value that holds one object at many places is plain JSON, but JSON (and superjson) writes that
// object out in full at every place that holds it: a value holding the level below twice, 40
// levels deep, is 41 objects in memory and 2^41 written out, and writing it (or walking it place by
// place) never finishes. The codec and the checks of content measure a value's written size by
// walking each object once, and refuse what this bound does not allow.

/**
 * How many objects and arrays the places an object is held at a second time may add to a value
 * written out, beyond `REPEAT_FACTOR` times the value's own.
 */
export const MAX_REPEATS = 1_000_000;
export const REPEAT_FACTOR = 16;

/** Past this a written size is not told exactly (the content checks keep sizes up to it exactly). */
export const EXACT_WRITTEN_SIZE = 2 ** 43;

/**
 * Why a value of `distinct` objects and arrays that would write out `total` of them is refused
 * (`its … are held at so many places …`), or undefined when the places its shared objects are held
 * at add at most MAX_REPEATS, or at most REPEAT_FACTOR times `distinct`.
 */
export function repeatsProblem(distinct: number, total: number): string | undefined {
  const repeats = total - distinct;
  if (repeats <= MAX_REPEATS || repeats <= REPEAT_FACTOR * distinct) return undefined;
  return (
    `its ${distinct} objects and arrays are held at so many places that written out in full it would take ` +
    `${total >= EXACT_WRITTEN_SIZE ? 'more than 2^43' : total} (a shared object is written at every place that holds it); ` +
    'hold each shared object at fewer places (refer to it by a key or an index)'
  );
}

/**
 * How many arrays and objects may enclose a value of content, from any source (a message, a tool
 * result, a model's tool call): what logging, freezing, storage, the codec and structured clone
 * all recurse through with room to spare, on the main thread and on a worker's smallest stack.
 */
export const MAX_CONTENT_DEPTH = 256;

/**
 * What one check has learned of the objects and arrays it walked, each walked once however many
 * places hold it: OPEN while it is walked (met again then, it encloses itself: a cycle), then its
 * entry, `LEVELS` × how many objects and arrays it holds written out (itself included, a shared one
 * counted at every place that holds it) + how many levels of them it nests (1 for `{}`).
 */
export type Walked = Map<object, number>;

/**
 * How many characters the strings of one value of content (a message, a tool result, a tool call's
 * input, …) may hold, keys included and a shared object's at every place that holds it. A session
 * log stores each as one JSON text, which V8 cannot build past 2^29 characters: escaped at worst
 * (`\u0000` for each control character), 2^26 still fits, with room for the event around it.
 */
export const MAX_CONTENT_CHARS = 2 ** 26;

/** The characters of the strings (keys included) of the objects and arrays a check walked, each counted once. */
export interface Tally {
  chars: number;
}

/** Why a value at `path` whose strings hold `chars` characters is too long to be stored, or undefined. */
export function charsProblem(path: string, chars: number): string | undefined {
  if (chars <= MAX_CONTENT_CHARS) return undefined;
  return (
    `${path} holds ${chars >= EXACT_WRITTEN_SIZE ? 'more than 2^43' : chars} characters of strings (keys included), more than the ` +
    `${MAX_CONTENT_CHARS} (64 Mi) one message, tool result or input may hold (a session log stores it as one JSON text); ` +
    'pass large data by reference (a file path or a URL)'
  );
}

const OPEN = -1;
/** More than the levels a value may nest. */
const LEVELS = 512;

/** A string, boolean, finite number or null: checked without building its path. */
const plainLeaf = (value: unknown) =>
  typeof value === 'string' || typeof value === 'boolean' || value === null || (typeof value === 'number' && Number.isFinite(value));

/**
 * Why `value` is not plain JSON a log can hold, or its entry in `walked` (0 for a string, number,
 * boolean or null). `depth`: how many objects and arrays enclose it. `undefined` may only be a
 * property's value (JSON drops it).
 */
export function jsonProblem(value: unknown, path: string, depth: number, walked: Walked, tally: Tally): string | number {
  switch (typeof value) {
    case 'string':
    case 'boolean':
      return 0;
    case 'number':
      return Number.isFinite(value) ? 0 : `${path} is ${String(value)}, not a finite number`;
    case 'object':
      break;
    default:
      return `${path} is a ${typeof value}, not plain JSON`;
  }
  if (value === null) return 0;
  const known = walked.get(value);
  if (known === OPEN) return `${path} refers back to an enclosing value (a cycle)`;
  // Held at another place too: walked there, written out here again.
  if (known !== undefined) return depth + (known % LEVELS) > MAX_CONTENT_DEPTH ? `${path} is nested more than ${MAX_CONTENT_DEPTH} levels deep` : known;
  if (depth >= MAX_CONTENT_DEPTH) return `${path} is nested more than ${MAX_CONTENT_DEPTH} levels deep`;
  walked.set(value, OPEN);
  let size = 1;
  let levels = 0;
  let chars = 0;
  if (Array.isArray(value)) {
    for (let index = 0; index < value.length; index++) {
      const item: unknown = value[index];
      if (item === undefined) return `${path}[${index}] is undefined`;
      if (typeof item === 'string') chars += item.length;
      if (plainLeaf(item)) continue;
      const entry = jsonProblem(item, `${path}[${index}]`, depth + 1, walked, tally);
      if (typeof entry === 'string') return entry;
      if (entry === 0) continue;
      size += Math.floor(entry / LEVELS);
      levels = Math.max(levels, entry % LEVELS);
    }
  } else {
    const proto: unknown = Object.getPrototypeOf(value);
    if (proto !== Object.prototype && proto !== null) return `${path} is a class instance, not a plain object`;
    for (const key of Object.keys(value)) {
      const item = (value as Record<string, unknown>)[key];
      if (item === undefined) continue;
      chars += key.length;
      if (typeof item === 'string') chars += item.length;
      if (plainLeaf(item)) continue;
      const entry = jsonProblem(item, `${path}.${key}`, depth + 1, walked, tally);
      if (typeof entry === 'string') return entry;
      if (entry === 0) continue;
      size += Math.floor(entry / LEVELS);
      levels = Math.max(levels, entry % LEVELS);
    }
  }
  // Sizes past EXACT_WRITTEN_SIZE (refused whatever they are) are kept as it, so an entry stays exact.
  const entry = Math.min(size, EXACT_WRITTEN_SIZE) * LEVELS + levels + 1;
  walked.set(value, entry);
  tally.chars += chars;
  return entry;
}

/**
 * How many characters the strings (keys included) of plain JSON `values` hold written out, a shared
 * object's at every place that holds it; `distinct` counts each object's once (a {@link Tally}),
 * and `total` and `objects` are how many objects and arrays they hold written out and in memory.
 * Held at one place each, they are the same; else they are counted again, unless even the most a
 * shared object could add keeps them within MAX_CONTENT_CHARS.
 */
export function writtenChars(values: readonly unknown[], distinct: number, total: number, objects: number): number {
  if (total <= objects || distinct * total <= MAX_CONTENT_CHARS) return distinct;
  const memo = new Map<object, number>();
  const count = (value: unknown): number => {
    if (typeof value === 'string') return value.length;
    if (typeof value !== 'object' || value === null) return 0;
    const known = memo.get(value);
    if (known !== undefined) return known;
    let chars = 0;
    if (Array.isArray(value)) for (const item of value) chars += count(item);
    else for (const [key, item] of Object.entries(value)) if (item !== undefined) chars += key.length + count(item);
    chars = Math.min(chars, EXACT_WRITTEN_SIZE);
    memo.set(value, chars);
    return chars;
  };
  return values.reduce<number>((sum, value) => sum + count(value), 0);
}

/** How many objects and arrays a value whose entry is `entry` holds written out. */
export const writtenSize = (entry: number) => Math.floor(entry / LEVELS);

/**
 * Why a value at `path` whose objects and arrays, written out, are `total` is refused for holding
 * its shared objects at too many places (see `repeatsProblem`), or undefined.
 */
export function sharingProblem(path: string, walked: Walked, total: number): string | undefined {
  const problem = repeatsProblem(walked.size, total);
  return problem && `${path}: ${problem}`;
}

/**
 * Why `value` is not plain JSON (strings, finite numbers, booleans, null, arrays and plain objects
 * of those; `undefined` only as a property's value, which JSON drops), or undefined when it is. A
 * JSON round trip is not enough: it silently drops functions instead of failing.
 */
export function plainJsonProblem(value: unknown, path: string): string | undefined {
  return readable(path, () => {
    const walked: Walked = new Map();
    const tally: Tally = { chars: 0 };
    const entry = jsonProblem(value, path, 0, walked, tally);
    if (typeof entry === 'string') return entry;
    const total = writtenSize(entry);
    const distinct = typeof value === 'string' ? value.length : tally.chars;
    return sharingProblem(path, walked, total) ?? charsProblem(path, writtenChars([value], distinct, total, walked.size));
  });
}

/**
 * How many characters the strings of plain JSON `value` hold (see MAX_CONTENT_CHARS), or undefined
 * when it is not plain JSON a log can hold (the caller's own check says why).
 */
export function charsIn(value: unknown): number | undefined {
  const walked: Walked = new Map();
  const tally: Tally = { chars: 0 };
  try {
    const entry = jsonProblem(value, 'value', 0, walked, tally);
    if (typeof entry === 'string') return undefined;
    return writtenChars([value], typeof value === 'string' ? value.length : tally.chars, writtenSize(entry), walked.size);
  } catch {
    return undefined;
  }
}

/** `check`'s answer, or that the value at `path` could not be read (a getter or proxy threw). */
export function readable(path: string, check: () => string | undefined): string | undefined {
  try {
    return check();
  } catch {
    return `${path} could not be read (a getter or proxy threw)`;
  }
}

