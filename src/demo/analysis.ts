// The demo's real work: tokenize source files, count, hash, and sketch each file with MinHash so
// near-duplicate files can be found across chunks. Pure CPU, deterministic.
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';

/** Permutations of the token part of a MinHash signature. */
export const SIGNATURE_SIZE = 512;

export interface FileStats {
  path: string;
  lines: number;
  tokens: number;
  bytes: number;
  sha256: string;
  /** MinHash signature: SIGNATURE_SIZE unsigned 32-bit values, base64 (little-endian). */
  signature: string;
}

export interface ChunkAnalysis {
  files: FileStats[];
  lines: number;
  tokens: number;
  bytes: number;
  topIdentifiers: [string, number][];
}

const TOKEN = /[A-Za-z_$][A-Za-z0-9_$]*|\d+(?:\.\d+)?|\S/g;
const IDENTIFIER = /^[A-Za-z_$]/;

// 32-bit FNV-1a, then one multiply-xorshift round per permutation: cheap, well spread, deterministic.
// Every value stays a signed 32-bit integer (a small integer to V8, never a heap number), so the
// hot loop allocates nothing even before it is optimized: the same bits as the unsigned values,
// compared as `unsigned ^ 0x80000000` (which orders them as unsigned) and turned unsigned at the end.
const SIGN = -0x80000000;

function fnv1a(text: string): number {
  let hash = 0x811c9dc5 | 0;
  for (let i = 0; i < text.length; i++) hash = Math.imul(hash ^ text.charCodeAt(i), 0x01000193);
  return hash;
}

/** The permuted hash, order-shifted: ascending order of the results is ascending unsigned order. */
function permuteKey(hash: number, seed: number): number {
  let x = hash ^ Math.imul(seed + 1, 0x9e3779b1);
  x = Math.imul(x ^ (x >>> 16), 0x85ebca6b);
  x = Math.imul(x ^ (x >>> 13), 0xc2b2ae35);
  return x ^ (x >>> 16) ^ SIGN;
}

/** The smallest key of `shingles` under permutation `seed`: one small hot function, optimized early. */
function minKey(shingles: Int32Array, seed: number): number {
  let min = 0x7fffffff;
  for (let i = 0; i < shingles.length; i++) {
    const key = permuteKey(shingles[i]!, seed);
    if (key < min) min = key;
  }
  return min;
}

function minhash(shingles: Int32Array, size: number, seed: number): number[] {
  const mins: number[] = [];
  for (let k = 0; k < size; k++) mins.push((minKey(shingles, seed + k) ^ SIGN) >>> 0);
  return mins;
}

function tokenShingles(tokens: readonly string[]): Int32Array {
  const out = new Int32Array(Math.max(0, tokens.length - 2));
  for (let i = 0; i < out.length; i++) out[i] = fnv1a(`${tokens[i]} ${tokens[i + 1]} ${tokens[i + 2]}`);
  return out;
}

function characterShingles(text: string): Int32Array {
  const compact = text.replace(/\s+/g, ' ');
  const out = new Int32Array(Math.max(0, compact.length - 7));
  for (let i = 0; i < out.length; i++) out[i] = fnv1a(compact.slice(i, i + 8));
  return out;
}

/**
 * MinHash signature of a file: SIGNATURE_SIZE permutations over token 3-shingles, then a quarter
 * as many over character 8-shingles (which still match when code was re-tokenized or renamed).
 */
export function signature(tokens: readonly string[], text = ''): number[] {
  return [...minhash(tokenShingles(tokens), SIGNATURE_SIZE, 0), ...minhash(characterShingles(text), SIGNATURE_SIZE / 4, SIGNATURE_SIZE)];
}

/** Decodes a base64 signature (see FileStats.signature). */
export function decodeSignature(base64: string): Uint32Array {
  const bytes = Buffer.from(base64, 'base64');
  return new Uint32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength));
}

/** Estimated Jaccard similarity of two decoded signatures. */
export function similarity(a: Uint32Array, b: Uint32Array): number {
  let same = 0;
  for (let k = 0; k < a.length; k++) if (a[k] === b[k]) same++;
  return a.length === 0 ? 0 : same / a.length;
}

/** The stats of one file; its identifiers are counted into `identifiers`. */
function fileStats(path: string, identifiers: Map<string, number>): FileStats {
  const text = readFileSync(path, 'utf8');
  const tokens = text.match(TOKEN) ?? [];
  for (const token of tokens) if (IDENTIFIER.test(token)) identifiers.set(token, (identifiers.get(token) ?? 0) + 1);
  return {
    path,
    lines: text.split('\n').length,
    tokens: tokens.length,
    bytes: Buffer.byteLength(text),
    sha256: createHash('sha256').update(text).digest('hex').slice(0, 16),
    signature: Buffer.from(Uint32Array.from(signature(tokens, text)).buffer).toString('base64'),
  };
}

function chunkAnalysis(files: FileStats[], identifiers: Map<string, number>): ChunkAnalysis {
  const topIdentifiers = [...identifiers.entries()].sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0])).slice(0, 5);
  return {
    files,
    lines: files.reduce((sum, f) => sum + f.lines, 0),
    tokens: files.reduce((sum, f) => sum + f.tokens, 0),
    bytes: files.reduce((sum, f) => sum + f.bytes, 0),
    topIdentifiers,
  };
}

/** Analyses the files of one chunk. */
export function analyseFiles(paths: readonly string[]): ChunkAnalysis {
  const identifiers = new Map<string, number>();
  return chunkAnalysis(paths.map((path) => fileStats(path, identifiers)), identifiers);
}

/**
 * Analyses the files of one chunk as `analyseFiles` does, one file per turn of the event loop, and
 * stops (rejecting with the signal's reason) once `signal` aborts. A child on the host's own thread
 * (in-process) so lets a Ctrl-C through between two files, rather than after its whole chunk.
 */
export async function analyseFilesInTurns(paths: readonly string[], signal: AbortSignal): Promise<ChunkAnalysis> {
  const identifiers = new Map<string, number>();
  const files: FileStats[] = [];
  for (const path of paths) {
    await new Promise((resolve) => setImmediate(resolve));
    signal.throwIfAborted();
    files.push(fileStats(path, identifiers));
  }
  return chunkAnalysis(files, identifiers);
}
