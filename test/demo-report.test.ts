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

  // In-process children all run on the host's one thread, taking turns: however many cores the
  // machine has, they cannot finish sooner than the same work one by one on that thread.
  it('is withheld for in-process children whenever the one-by-one run took longer, which one thread cannot explain', () => {
    const inProcess = (sequentialMs: number) => buildReport({ ...facts(), provider: 'in-process', children, baseline: { ms: sequentialMs, stopReasons: ['completed', 'completed'] }, turn: { kind: 'completed' }, cores: 8 });
    expect(inProcess(180)).toMatchObject({ parallelMs: 100, sequentialMs: 180, speedup: null });
    expect(inProcess(180).noSpeedup).toBe(
      "the one-by-one run took ×1.80 the parallel run's time, more than in-process children, which share the host's one thread, can explain: it waited on something other than its work (a slow disk or a busy machine), so the runs are not compared",
    );
    expect(inProcess(95)).toMatchObject({ speedup: 0.95 });
    expect(reportText(inProcess(95))).toContain("The 2 children took 100 ms taking turns on the host's thread ('in-process'); the same children one by one in-process: 95 ms (speed-up ×0.95).");
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

describe('demo report of an interrupted run', () => {
  it('reports a child that never started as not started, with no run time, outside the parallel time', () => {
    const ranOne = { ...children[0]!, stopReason: 'aborted' };
    const never: RanChild = { id: '', label: 'chunk 2/2', prompt: children[1]!.prompt, stopReason: 'not started', queuedAt: 0, startedAt: undefined, endedAt: 500 };
    const built = buildReport({ ...facts(), children: [ranOne, never], turn: { kind: 'aborted', cause: { kind: 'user' } }, baseline: undefined });
    expect(built.children.map((c) => [c.stopReason, c.ms])).toEqual([['aborted', 99], ['not started', 0]]);
    expect(built).toMatchObject({ parallelMs: 100, speedup: null, noSpeedup: 'chunk 1/2 ended aborted, 1 child never started (cancelled before it ran); a speed-up is measured only when every child completed' });
    expect(reportText(built)).toContain('(up to 1 running at once; 1 of them never started: cancelled before it ran).');
  });
});

function facts() {
  const chunks = [{ label: 'chunk 1/2', files: ['src/f0.ts'] }, { label: 'chunk 2/2', files: ['src/f1.ts'] }];
  return { provider: 'spawn', model: 'scripted', parentId: 'p', db: 'x.db', dir: 'src', files: 2, chunks, totalMs: 110, answer: '', cores: 2 } as const;
}
