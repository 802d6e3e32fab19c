// `npm run soak [-- --delegations N] [--seed S]`: many delegations across spawn, fork and
// in-process with random cancel and dispose timing, thread crashes, runaway and out-of-memory
// children. Checks that every run settles exactly once, every dispose resolves, nothing is left
// behind after close, and RSS outside V8's young generation ends within 50 MB of where it stood
// after a smaller warm-up host; prints one line of figures and exits 1 if a check fails. It never
// calls process.exit: a leaked handle shows up as a hang.
import { parseArgs } from 'node:util';
import { getHeapSpaceStatistics } from 'node:v8';
import { createHost, inProcessProvider, text, type Agent, type Host } from '../../src/index.js';
import { hostParts } from '../../src/internals.js';
import { plan, type Delegation } from './plan.js';
import { Tally } from './tally.js';

const { values } = parseArgs({
  options: { delegations: { type: 'string', default: '2000' }, seed: { type: 'string' }, concurrency: { type: 'string', default: '8' } },
  strict: true,
});
const total = Number(values.delegations);
const seed = values.seed === undefined ? Date.now() % 1_000_000 : Number(values.seed);
const concurrency = Number(values.concurrency);
const toolModule = new URL('./soak-tools.js', import.meta.url).href;

const MB = 1024 * 1024;
const collect = (globalThis as { gc?: () => void }).gc ?? (() => undefined);
const pause = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
// Only catches a hang; a healthy dispose takes milliseconds (a runaway child's: the cancel grace).
const HANG_MS = 30_000;

function withinBound<T>(work: Promise<T>, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const hang = new Promise<never>((_resolve, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not settle within ${HANG_MS} ms`)), HANG_MS);
  });
  return Promise.race([work, hang]).finally(() => clearTimeout(timer));
}

async function delegate(host: Host, parent: Agent, job: Delegation, tally: Tally): Promise<void> {
  const controller = new AbortController();
  const cancelAt = job.cancelAfterMs === undefined ? undefined : setTimeout(() => controller.abort(), job.cancelAfterMs);
  try {
    const start = host.subagents.start(job.provider, {
      prompt: [text(job.kind)],
      parent,
      signal: controller.signal,
      agentOptions: { model: { kind: 'scripted', steps: job.steps }, toolModules: [toolModule] },
    });
    const run = await withinBound(start, `start of ${job.kind} on ${job.provider}`).catch((error: unknown) => {
      tally.startFailed(job, error);
      return undefined;
    });
    if (!run) return;
    tally.started(job, run.id);
    let settledCount = 0;
    const result = run.result.then((value) => {
      settledCount++;
      return value;
    });
    if (job.disposeEarly) {
      await pause(job.disposeAfterMs);
      await withinBound(run.dispose(), `dispose of ${job.kind} on ${job.provider}`);
    }
    const outcome = await withinBound(result, `result of ${job.kind} on ${job.provider}`);
    await withinBound(run.dispose(), `dispose of ${job.kind} on ${job.provider}`);
    tally.finished(job, run.id, outcome, settledCount);
  } catch (error) {
    tally.fail(`${job.kind} on ${job.provider} (cancel ${job.cancelAfterMs ?? '-'}): ${error instanceof Error ? error.message : String(error)}`);
  } finally {
    clearTimeout(cancelAt);
  }
}

/** One host through `jobs`; returns what it left behind after close. */
async function soak(jobs: Delegation[], tally: Tally): Promise<string[]> {
  const host = await createHost({
    pool: { minThreads: 1, maxThreads: 4, cancelGraceMs: 100, idleTimeoutMs: 200, resourceLimits: { maxOldGenerationSizeMb: 48 } },
  });
  host.subagents.registerProvider(inProcessProvider(host));
  host.subagents.on('subagent/end', (info) => tally.ended(info.id));
  const parent = await host.createAgent();
  let next = 0;
  const lane = async () => {
    while (next < jobs.length) await delegate(host, parent, jobs[next++]!, tally);
  };
  await Promise.all(Array.from({ length: concurrency }, lane));
  await withinBound(host.close(), 'host.close()');
  return [
    host.pool.threads > 0 ? `${host.pool.threads} threads` : '',
    hostParts(host).pool.channels.ports > 0 ? `${hostParts(host).pool.channels.ports} ports` : '',
    host.subagents.activeRuns > 0 ? `${host.subagents.activeRuns} runs` : '',
  ].filter(Boolean);
}

/** Resident memory and, within it, the capacity of V8's young generation, after GC. */
interface Memory {
  rss: number;
  young: number;
}

async function settledMemory(): Promise<Memory> {
  // Let exited threads and closed handles be reaped first.
  await pause(100);
  collect();
  // The young generation's size is V8's choice, not memory anything holds: V8 grows it under
  // allocation up to a cap that scales with the heap limit (2 × 16 MB on Node 20; 2 × 64 MB on
  // Node 24 with this machine's 4 GB limit), and keeps it after GC. It is empty after `gc()`.
  const young = getHeapSpaceStatistics()
    .filter((space) => space.space_name === 'new_space' || space.space_name === 'new_large_object_space')
    .reduce((sum, space) => sum + space.space_size, 0);
  return { rss: process.memoryUsage().rss, young };
}

/**
 * Active handles once the last host's are gone: a closed port or exited process leaves the list a
 * loop turn or two after close() resolves, so wait (bounded) for those kinds; a real leak stays listed.
 */
async function quietHandles(): Promise<string[]> {
  const transient = new Set(['MessagePort', 'ProcessWrap', 'Immediate']);
  for (let waited = 0; waited < 3_000; waited += 20) {
    if (!process.getActiveResourcesInfo().some((name) => transient.has(name))) break;
    await pause(20);
  }
  return process.getActiveResourcesInfo().sort();
}

async function main(): Promise<void> {
  // A first, smaller host loads every module and warms the JIT: the baseline is taken after it.
  await soak(plan(100, seed + 1), new Tally());
  const before = await settledMemory();
  const handlesBefore = await quietHandles();
  const started = performance.now();
  const tally = new Tally();
  const leftovers = await soak(plan(total, seed), tally);
  const seconds = ((performance.now() - started) / 1000).toFixed(1);
  const after = await settledMemory();
  const handlesAfter = await quietHandles();
  if (handlesAfter.join() !== handlesBefore.join()) leftovers.push(`handles [${handlesAfter.join(', ')}] (before: [${handlesBefore.join(', ')}])`);
  for (const leftover of leftovers) tally.fail(`left behind: ${leftover}`);
  const grown = after.rss - after.young - (before.rss - before.young);
  if (grown > 50 * MB) tally.fail(`RSS outside the young generation grew by ${(grown / MB).toFixed(0)} MB`);
  const mb = (bytes: number) => (bytes / MB).toFixed(0);
  const rss = `rss ${mb(before.rss)} → ${mb(after.rss)} MB (young generation ${mb(before.young)} → ${mb(after.young)} MB)`;
  process.stdout.write(`soak: ${tally.summary(total)}; seed ${seed}; ${seconds} s; ${rss}; leaks: ${leftovers.length === 0 ? 'none' : leftovers.join(', ')}\n`);
  for (const failure of tally.failures.slice(0, 20)) process.stderr.write(`soak failure: ${failure}\n`);
  if (tally.failures.length > 0) process.exitCode = 1;
}

await main();
