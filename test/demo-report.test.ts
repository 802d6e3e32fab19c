// The demo's speed-up: given only when the one-by-one run could have been that much slower through
// parallelism alone; a ratio beyond the cores measures a stall of that run, and the report says so.
import { describe, expect, it } from 'vitest';
import { buildReport, type RanChild } from '../dist/src/demo/report.js';
import { reportText } from '../dist/src/demo/report-text.js';

const children: RanChild[] = [0, 1].map((i) => ({
  id: `c${i}`,
  label: `chunk ${i + 1}/2`,
  prompt: `Analyse these 1 files of src:\n- src/f${i}.ts`,
  stopReason: 'completed',
  queuedAt: 0,
  startedAt: 1,
  endedAt: 100,
}));

function report(sequentialMs: number, cores: number) {
  return buildReport({
    provider: 'spawn',
    model: 'scripted',
    parentId: 'p',
    db: 'x.db',
    dir: 'src',
    files: 2,
    chunks: [{ label: 'chunk 1/2', files: ['src/f0.ts'] }, { label: 'chunk 2/2', files: ['src/f1.ts'] }],
    children,
    totalMs: 110,
    turn: { kind: 'completed' },
    answer: 'done',
    baseline: { ms: sequentialMs, stopReasons: ['completed', 'completed'] },
    cores,
  });
}

describe('demo speed-up', () => {
  it('is the ratio of the one-by-one run to the parallel one when the cores can explain it', () => {
    expect(report(180, 2)).toMatchObject({ parallelMs: 100, sequentialMs: 180, speedup: 1.8 });
    expect(report(180, 2)).not.toHaveProperty('noSpeedup');
  });

  it('is withheld, with the reason, when the one-by-one run is slower than the cores can explain', () => {
    const slow = report(673, 2);
    expect(slow).toMatchObject({ parallelMs: 100, sequentialMs: 673, speedup: null });
    expect(slow.noSpeedup).toBe(
      "the one-by-one run took ×6.73 the parallel run's time, more than 2 cores can explain: it waited on something other than its work (a slow disk or a busy machine), so the runs are not compared",
    );
    expect(report(673, 8)).toMatchObject({ speedup: 6.73 });
  });
});

describe('demo report text', () => {
  it('shows control characters of a label and of the answer (the model’s text) escaped, keeping the answer’s lines', () => {
    const built = report(200, 2);
    const forged = { ...built, children: built.children.map((child, i) => (i === 0 ? { ...child, label: 'evil\n  forged row\u001b]0;pwned\u0007\u001b[31m' } : child)), answer: 'line one\nline \u001b[2Jtwo' };
    const text = reportText(forged);
    expect(text).not.toMatch(/[\u001b\u0007]/);
    expect(text).toContain('evil\\x0a  forged row\\x1b]0;pwned\\x07\\x1b[31m');
    expect(text).toContain('line one\n');
    expect(text).toContain('line \\x1b[2Jtwo');
  });
});
