// The demo's analysis is deterministic: counts, top identifiers and MinHash signatures are pinned
// to fixed values (a faster hash loop must produce the very same signatures), and the signatures
// tell a near-duplicate file from an unrelated one.
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { SIGNATURE_SIZE, analyseFiles, decodeSignature, similarity } from '../dist/src/demo/analysis.js';

const dir = mkdtempSync(join(tmpdir(), 'subagent-analysis-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const SOURCE = 'export function add(a, b) {\n  return a + b;\n}\n\nexport const total = [1, 2, 3].reduce(add, 0);\n';
const files = Object.entries({
  'a.ts': SOURCE,
  'b.ts': SOURCE.replace('total', 'sum'),
  'c.ts': 'class Queue { items = []; push(x) { this.items.push(x); } }\n',
  'empty.ts': '',
}).map(([name, text]) => {
  const path = join(dir, name);
  writeFileSync(path, text);
  return path;
});

describe('demo analysis', () => {
  const result = analyseFiles(files);
  const signatures = result.files.map((file) => decodeSignature(file.signature));

  it('counts and signs each file exactly as before (values pinned)', () => {
    const digest = (text: string) => createHash('sha256').update(text).digest('hex').slice(0, 16);
    expect(result.files.map(({ lines, tokens, bytes, signature }) => ({ lines, tokens, bytes, sig: digest(signature) }))).toEqual([
      { lines: 6, tokens: 34, bytes: 94, sig: 'a6e77ed98e64bba1' },
      { lines: 6, tokens: 34, bytes: 92, sig: '4eac7818f5dce4fb' },
      { lines: 2, tokens: 24, bytes: 60, sig: '97bd763e55044857' },
      { lines: 1, tokens: 0, bytes: 0, sig: '7a663ac340ef38d0' },
    ]);
    expect(result.topIdentifiers).toEqual([['a', 4], ['add', 4], ['b', 4], ['export', 4], ['const', 2]]);
    // Unsigned 32-bit values, as many as the token and character parts have permutations.
    expect(signatures[0]!.length).toBe(SIGNATURE_SIZE + SIGNATURE_SIZE / 4);
    expect([signatures[0]![0], signatures[0]![SIGNATURE_SIZE]]).toEqual([41643167, 3961097]);
    // A file without shingles keeps every minimum at the largest unsigned value.
    expect(signatures[3]!.every((value) => value === 0xffffffff)).toBe(true);
  });

  it('finds the near-duplicate and not the unrelated file', () => {
    expect(similarity(signatures[0]!, signatures[1]!)).toBeGreaterThan(0.8);
    expect(similarity(signatures[0]!, signatures[2]!)).toBeLessThan(0.05);
  });
});
