// A long-lived host stays flat: a shortened memory soak (bench/soak/memory) runs in its own process
// and fails when the main thread or a worker thread keeps memory per delegation.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { beforeAll, describe, expect, it } from 'vitest';
import type { MemorySoakReport } from '../bench/soak/memory.js';

const soak = new URL('../dist/bench/soak/memory.js', import.meta.url).pathname;
const run = promisify(execFile);

// Compiled code and type feedback grow while code paths warm up (hundreds of KB over the first
// thousands of children, then level off); that growth would hide a small leak. With the JIT tiers
// (Maglev too: Node 22+ enables it; Node 20 accepts the flag) and bytecode flushing off, what stays
// behind is data. On Node 24 without --no-maglev a clean run measured 42 bytes per delegation.
const STABLE_HEAP_FLAGS = ['--no-opt', '--no-sparkplug', '--no-maglev', '--no-flush-bytecode', '--no-lazy-feedback-allocation'];

// Measured with these flags: clean runs grow 0–1 bytes per delegation; keeping one 8-character
// string per delegation (in the main thread or in the worker) measures 33–35.
const MAX_BYTES_PER_DELEGATION = 12;
// A worker that ran 4,000 more children measured 35–52 KB above its first hundred (clean) and
// 200–300 KB with the one-string leak.
const MAX_WORKER_GROWTH = 128 * 1024;

describe('memory soak', () => {
  let report: MemorySoakReport;
  beforeAll(async () => {
    const args = [...STABLE_HEAP_FLAGS, soak, '--delegations', '4000', '--every', '500', '--warmup', '1500', '--json'];
    // Generous: it only detects a hang (a loaded machine runs this in 10–60 s).
    const { stdout } = await run(process.execPath, args, { timeout: 240_000 });
    report = JSON.parse(stdout) as MemorySoakReport;
  }, 300_000);

  it('keeps no main-thread memory per delegation', () => {
    expect(report.delegations).toBe(4000);
    expect(report.main.slope, `main heap after GC: ${JSON.stringify(report.main.points)}`).toBeLessThan(MAX_BYTES_PER_DELEGATION);
  });

  it('keeps no worker-thread memory per child', () => {
    expect(report.worker.slope, `worker heap after GC: ${JSON.stringify(report.worker.points)}`).toBeLessThan(MAX_BYTES_PER_DELEGATION);
  });

  it('leaves a worker thread that ran thousands of children about where it was after its first hundred', () => {
    const [children, heap] = report.worker.points.at(-1)!;
    expect(children).toBeGreaterThan(4000);
    const growth = heap - report.worker.afterFirstHundred;
    expect(growth, `worker heap after GC: ${report.worker.afterFirstHundred} after its first hundred children, ${heap} after ${children}`).toBeLessThan(MAX_WORKER_GROWTH);
  });
});
