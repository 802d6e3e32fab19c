// `npm run soak:memory [-- --delegations N --every N --warmup N --json]`: one long-lived host on
// SQLite runs delegations in batches of 50 (spawn, a few with a host tool call, one fork and one
// in-process child per batch), each run disposed; it prints the heap after GC of the main thread and
// of the worker thread (measured inside it) at each checkpoint, and the slope in bytes per delegation.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { createHost, inProcessProvider, text, textOf, type Agent, type Host, type ModelSpec } from '../../src/index.js';
import { settledHeap, type HeapProbe } from '../fixtures/heap-probe-model.js';

const BATCH = 50;
const probeModel: ModelSpec = { kind: 'module', specifier: new URL('../fixtures/heap-probe-model.js', import.meta.url).href, export: 'createHeapProbeModel' };
const answer: ModelSpec = { kind: 'scripted', steps: [{ text: 'ok' }] };
const withToolCall: ModelSpec = { kind: 'scripted', steps: [{ toolCalls: [{ name: 'note', input: { n: 1 } }] }, { text: 'ok' }] };

/** Heap after GC (bytes) against a count (delegations on the main thread, children in the worker). */
export type Point = [count: number, heapUsed: number];

export interface MemorySoakReport {
  delegations: number;
  main: { points: Point[]; slope: number };
  worker: { threadId: number; afterFirstHundred: number; points: Point[]; slope: number };
}

/**
 * Heap growth per delegation (or per child): the median of the slopes between every two points
 * (Theil–Sen), so one checkpoint where the heap happened to shrink or swell does not tilt it.
 */
export function slope(points: readonly Point[]): number {
  const slopes: number[] = [];
  points.forEach(([x1, y1], i) => points.slice(i + 1).forEach(([x2, y2]) => x2 !== x1 && slopes.push((y2 - y1) / (x2 - x1))));
  slopes.sort((a, b) => a - b);
  const mid = slopes.length >> 1;
  return slopes.length === 0 ? 0 : slopes.length % 2 === 1 ? slopes[mid]! : (slopes[mid - 1]! + slopes[mid]!) / 2;
}

class Soak {
  delegations = 0;
  workerChildren = 0;
  readonly #host: Host;
  readonly #parent: Agent;

  constructor(host: Host, parent: Agent) {
    this.#host = host;
    this.#parent = parent;
  }

  /** One delegation; a probe is not counted as a delegation (it is counted as a worker child). */
  async delegate(provider: string, model: ModelSpec, probe = false): Promise<string> {
    const run = await this.#host.subagents.start(provider, {
      prompt: [text('hi')],
      parent: this.#parent,
      signal: new AbortController().signal,
      agentOptions: { model },
    });
    const result = await run.result;
    await run.dispose();
    if (!probe) this.delegations++;
    if (provider !== 'in-process') this.workerChildren++;
    if (result.stopReason !== 'completed') throw new Error(`a ${provider} child ended ${result.stopReason}: ${result.diagnostic ?? ''}`);
    return textOf(result.output);
  }

  batch(): Promise<unknown> {
    return Promise.all(
      Array.from({ length: BATCH }, (_, i) => {
        if (i === 0) return this.delegate('fork', answer);
        if (i === 1) return this.delegate('in-process', answer);
        return this.delegate('spawn', i < 7 ? withToolCall : answer);
      }),
    );
  }

  /** Main-thread heap after GC, with every session write settled first. */
  async mainHeap(): Promise<number> {
    await this.#host.sessions.flush();
    return settledHeap();
  }

  /** The worker's heap after GC, measured inside the thread by a probe child running alone there. */
  async workerHeap(): Promise<HeapProbe> {
    return JSON.parse(await this.delegate('spawn', probeModel, true)) as HeapProbe;
  }
}

/** Runs the soak; `log` receives the human-readable lines. */
export async function runMemorySoak(
  options: { delegations: number; every: number; warmup: number },
  log: (line: string) => void,
): Promise<MemorySoakReport> {
  const dir = mkdtempSync(join(tmpdir(), 'subagent-soak-'));
  // One thread, so every worker child runs in the thread the probe measures.
  const host = await createHost({
    persistence: { sqlite: join(dir, 'soak.db') },
    pool: { minThreads: 1, maxThreads: 1, childrenPerThread: BATCH },
    tools: [{ name: 'note', description: 'Takes a note.', parameters: { type: 'object' }, execute: async () => 'noted' }],
  });
  try {
    host.subagents.registerProvider(inProcessProvider(host, { name: 'in-process' }));
    const parent = await host.createAgent();
    // A completed turn, so fork children get a seed.
    parent.followup([text('hello')]);
    await parent.whenIdle();
    const soak = new Soak(host, parent);
    while (soak.workerChildren < 100) await soak.batch();
    const first = await soak.workerHeap();
    log(`worker thread ${first.threadId} after its first ${soak.workerChildren} children: ${mb(first.heapUsed)}`);
    while (soak.delegations < options.warmup) await soak.batch();
    const start = soak.delegations;
    const main: Point[] = [];
    const worker: Point[] = [];
    log(`${'delegations'.padStart(12)} ${'main heap'.padStart(10)} ${'worker heap'.padStart(12)}`);
    for (let done = 0; ; ) {
      main.push([done, await soak.mainHeap()]);
      const probe = await soak.workerHeap();
      if (probe.threadId !== first.threadId) throw new Error(`the worker thread was replaced (${first.threadId} → ${probe.threadId})`);
      worker.push([soak.workerChildren, probe.heapUsed]);
      log(`${String(done).padStart(12)} ${mb(main.at(-1)![1]).padStart(10)} ${mb(probe.heapUsed).padStart(12)}`);
      if (done >= options.delegations) break;
      const target = Math.min(options.delegations, done + options.every);
      while (soak.delegations - start < target) await soak.batch();
      done = soak.delegations - start;
    }
    const report: MemorySoakReport = {
      delegations: soak.delegations - start,
      main: { points: main, slope: slope(main) },
      worker: { threadId: first.threadId, afterFirstHundred: first.heapUsed, points: worker, slope: slope(worker) },
    };
    log(`main thread: ${report.main.slope.toFixed(1)} bytes/delegation over ${report.delegations} delegations (after ${start} warm-up)`);
    log(`worker thread: ${report.worker.slope.toFixed(1)} bytes/child; ${soak.workerChildren} children: ${mb(worker.at(-1)![1])} vs ${mb(first.heapUsed)} after its first hundred`);
    return report;
  } finally {
    await host.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

function mb(bytes: number): string {
  return `${(bytes / 2 ** 20).toFixed(2)} MB`;
}

async function main(args: string[]): Promise<void> {
  const { values } = parseArgs({
    args,
    options: {
      delegations: { type: 'string', default: '100000' },
      every: { type: 'string', default: '10000' },
      // Past the SQLite store's next-seq cache (1,024 sessions), so its filling is not counted.
      warmup: { type: 'string', default: '2000' },
      json: { type: 'boolean', default: false },
    },
    strict: true,
  });
  const options = { delegations: Number(values.delegations), every: Number(values.every), warmup: Number(values.warmup) };
  for (const [name, value] of Object.entries(options)) {
    if (!Number.isSafeInteger(value) || value <= 0) throw new Error(`--${name} must be a positive integer`);
  }
  // With --json the lines go to stderr and stdout carries only the report.
  const log = values.json ? (line: string) => process.stderr.write(`${line}\n`) : (line: string) => process.stdout.write(`${line}\n`);
  const report = await runMemorySoak(options, log);
  if (values.json) process.stdout.write(`${JSON.stringify(report)}\n`);
}

if (import.meta.url === `file://${process.argv[1]}`) {
  main(process.argv.slice(2)).catch((error: unknown) => {
    process.stderr.write(`memory soak failed: ${error instanceof Error ? error.stack : String(error)}\n`);
    process.exitCode = 1;
  });
}
