// The demo's real work: tokenize source files, count, hash, and sketch each file with MinHash so
// near-duplicate files can be found across chunks. Pure CPU, deterministic.
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';

/** Permutations per MinHash signature. */
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
function fnv1a(text: string): number {
  let hash = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) hash = Math.imul(hash ^ text.charCodeAt(i), 0x01000193);
  return hash >>> 0;
}

function permute(hash: number, seed: number): number {
  let x = (hash ^ Math.imul(seed + 1, 0x9e3779b1)) >>> 0;
  x = Math.imul(x ^ (x >>> 16), 0x85ebca6b);
  x = Math.imul(x ^ (x >>> 13), 0xc2b2ae35);
  return (x ^ (x >>> 16)) >>> 0;
}

/** MinHash signature of a token sequence's 3-shingles. */
export function signature(tokens: readonly string[]): number[] {
  const mins = new Array<number>(SIGNATURE_SIZE).fill(0xffffffff);
  for (let i = 0; i + 2 < tokens.length; i++) {
    const shingle = fnv1a(`${tokens[i]} ${tokens[i + 1]} ${tokens[i + 2]}`);
    for (let k = 0; k < SIGNATURE_SIZE; k++) {
      const value = permute(shingle, k);
      if (value < mins[k]!) mins[k] = value;
    }
  }
  return mins;
}

function decodeSignature(base64: string): Uint32Array {
  const bytes = Buffer.from(base64, 'base64');
  return new Uint32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength));
}

/** Estimated Jaccard similarity of two base64 signatures. */
export function similarity(left: string, right: string): number {
  const a = decodeSignature(left);
  const b = decodeSignature(right);
  let same = 0;
  for (let k = 0; k < SIGNATURE_SIZE; k++) if (a[k] === b[k]) same++;
  return same / SIGNATURE_SIZE;
}

/** Analyses the files of one chunk. */
export function analyseFiles(paths: readonly string[]): ChunkAnalysis {
  const identifiers = new Map<string, number>();
  const files: FileStats[] = paths.map((path) => {
    const text = readFileSync(path, 'utf8');
    const tokens = text.match(TOKEN) ?? [];
    for (const token of tokens) if (IDENTIFIER.test(token)) identifiers.set(token, (identifiers.get(token) ?? 0) + 1);
    return {
      path,
      lines: text.split('\n').length,
      tokens: tokens.length,
      bytes: Buffer.byteLength(text),
      sha256: createHash('sha256').update(text).digest('hex').slice(0, 16),
      signature: Buffer.from(Uint32Array.from(signature(tokens)).buffer).toString('base64'),
    };
  });
  const topIdentifiers = [...identifiers.entries()].sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0])).slice(0, 5);
  return {
    files,
    lines: files.reduce((sum, f) => sum + f.lines, 0),
    tokens: files.reduce((sum, f) => sum + f.tokens, 0),
    bytes: files.reduce((sum, f) => sum + f.bytes, 0),
    topIdentifiers,
  };
}
