// Benchmark harness: tinybench latency rows, manual throughput rows, and the printed table with
// each row's ratio to its floor measured in the same run.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Bench } from 'tinybench';
import { text, type Agent, type Host } from '../src/index.js';

export interface Row {
  id: string;
  medianMs: number;
  p99Ms: number;
  opsPerSec?: number;
  /** Peak RSS growth of the process while the row ran, in MB. */
  rssGrowthMb?: number;
  /** Free-form extra. */
  note?: string;
}

export interface Suite {
  name: string;
  run(): Promise<Row[]>;
}

/** The temp folders of the suite running in this process, removed when a signal stops it. */
const tempDirs = new Set<string>();

/** A fresh temp folder for a suite; `removeTempDir` it when done (a signal that stops the suite removes it too). */
export function suiteTempDir(prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  tempDirs.add(dir);
  return dir;
}

export function removeTempDir(dir: string): void {
  tempDirs.delete(dir);
  // Retried: a process the suite started may still be writing into it when a signal ends both.
  rmSync(dir, { recursive: true, force: true, maxRetries: 5 });
}

/** Removes every temp folder a suite still holds (from a signal handler: the suite's own `finally` never runs). */
export function removeTempDirs(): void {
  for (const dir of tempDirs) removeTempDir(dir);
}

/** Latency of one async operation: median and p99 over at least `iterations` samples. */
export async function latency(
  id: string,
  fn: () => Promise<unknown>,
  options: { iterations?: number; time?: number; warmup?: number; afterEach?: () => Promise<void> } = {},
): Promise<Row> {
  const bench = new Bench({
    iterations: options.iterations ?? 200,
    time: options.time ?? 2000,
    warmup: (options.warmup ?? 20) > 0,
    warmupIterations: options.warmup ?? 20,
    warmupTime: 0,
  });
  bench.add(id, fn, options.afterEach ? { afterEach: options.afterEach } : {});
  await bench.run();
  const result = bench.tasks[0]!.result;
  if (!('latency' in result)) throw new Error(`${id}: ${'error' in result ? String(result.error) : result.state}`);
  return { id, medianMs: result.latency.p50, p99Ms: result.latency.p99 };
}

/** Throughput with `inFlight` operations kept running until `total` have completed. */
export async function throughput(id: string, total: number, inFlight: number, op: () => Promise<unknown>): Promise<Row> {
  const samples: number[] = [];
  let started = 0;
  const t0 = performance.now();
  async function lane(): Promise<void> {
    while (started < total) {
      started++;
      const s = performance.now();
      await op();
      samples.push(performance.now() - s);
    }
  }
  await Promise.all(Array.from({ length: inFlight }, lane));
  const seconds = (performance.now() - t0) / 1000;
  samples.sort((a, b) => a - b);
  return {
    id,
    medianMs: samples[samples.length >> 1] ?? 0,
    p99Ms: samples[Math.min(samples.length - 1, Math.floor(samples.length * 0.99))] ?? 0,
    opsPerSec: total / seconds,
  };
}

const FLOORS: Record<string, { floor: string; kind: 'ratio' | 'delta' | 'ops' }> = {
  'startup/spawn-warm': { floor: 'startup/floor-piscina-roundtrip', kind: 'ratio' },
  'startup/in-process': { floor: 'startup/floor-piscina-roundtrip', kind: 'ratio' },
  'startup/fork-seed-10': { floor: 'startup/floor-piscina-roundtrip', kind: 'ratio' },
  'startup/fork-seed-1000': { floor: 'startup/floor-piscina-roundtrip', kind: 'ratio' },
  'startup/spawn-cold': { floor: 'startup/floor-bare-worker', kind: 'ratio' },
  'overhead/spawn': { floor: 'overhead/in-process', kind: 'delta' },
  'overhead/fork': { floor: 'overhead/in-process', kind: 'delta' },
  'throughput/spawn-100-inflight': { floor: 'throughput/floor-piscina', kind: 'ops' },
  'throughput/spawn-1000-inflight': { floor: 'throughput/floor-piscina', kind: 'ops' },
  'listing/list-children-10k-cold': { floor: 'listing/floor-sqlite-children-10k', kind: 'ratio' },
  'continuation/followup-resident': { floor: 'continuation/floor-durable-commit', kind: 'ratio' },
  'acp/start-prewarmed': { floor: 'acp/start-fresh', kind: 'ratio' },
  'acp/prompt-roundtrip': { floor: 'acp/floor-sdk-roundtrip', kind: 'ratio' },
  'acp/followup-resident': { floor: 'acp/floor-sdk-roundtrip', kind: 'ratio' },
};

function fmt(value: number): string {
  return value >= 100 ? value.toFixed(0) : value >= 1 ? value.toFixed(2) : value.toFixed(3);
}

/** The table of one suite's rows, each beside its floor. */
export function table(rows: Row[], all: Row[]): string {
  const byId = new Map(all.map((r) => [r.id, r]));
  const lines = rows.map((row) => {
    const link = FLOORS[row.id];
    const floor = link ? byId.get(link.floor) : undefined;
    let versus = '';
    if (link && floor) {
      if (link.kind === 'ratio') versus = `×${(row.medianMs / floor.medianMs).toFixed(2)} of ${link.floor}`;
      else if (link.kind === 'delta') versus = `${row.medianMs - floor.medianMs >= 0 ? '+' : ''}${fmt(row.medianMs - floor.medianMs)} ms over ${link.floor}`;
      else if (row.opsPerSec && floor.opsPerSec) versus = `${((row.opsPerSec / floor.opsPerSec) * 100).toFixed(1)}% of ${link.floor}`;
    }
    const ops = row.opsPerSec === undefined ? '' : `${Math.round(row.opsPerSec)}/s`;
    return `  ${row.id.padEnd(42)} ${fmt(row.medianMs).padStart(9)} ms ${fmt(row.p99Ms).padStart(9)} ms ${ops.padStart(9)}  ${versus}${row.note ? `  ${row.note}` : ''}`;
  });
  return [`  ${'id'.padEnd(42)} ${'median'.padStart(12)} ${'p99'.padStart(12)} ${'ops'.padStart(9)}  vs floor`, ...lines].join('\n');
}

/** A row from `n` samples that each time only their own window (setup and teardown excluded). */
export async function sampled(id: string, n: number, sample: () => Promise<number>, warmup = 2): Promise<Row> {
  for (let i = 0; i < warmup; i++) await sample();
  const samples: number[] = [];
  for (let i = 0; i < n; i++) samples.push(await sample());
  return rowOf(id, samples);
}

/** A row's median and p99 of `samples` (ms). */
export function rowOf(id: string, samples: number[]): Row {
  const n = samples.length;
  const sorted = [...samples].sort((a, b) => a - b);
  return { id, medianMs: sorted[n >> 1] ?? 0, p99Ms: sorted[Math.min(n - 1, Math.floor(n * 0.99))] ?? 0 };
}

/** One whole delegation (start → result → dispose) of a zero-latency scripted child. */
export async function delegateOnce(host: Host, provider: string, parent: Agent): Promise<void> {
  const run = await host.subagents.start(provider, {
    prompt: [text('hi')],
    parent,
    signal: new AbortController().signal,
    agentOptions: { model: { kind: 'scripted', steps: [{ text: 'ok' }] } },
  });
  await run.result;
  await run.dispose();
}
