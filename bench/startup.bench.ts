// Startup: how long `start()` takes until it resolves, for each provider, beside its floors (a
// raw piscina round trip; a `new Worker` of an empty ES module; one with the same imports as our
// worker entry).
import { once } from 'node:events';
import { Worker } from 'node:worker_threads';
import { Piscina } from 'piscina';
import { createHost, inProcessProvider, text, type Agent, type Host } from '../src/index.js';
import { latency, rowOf, sampled, type Row, type Suite } from './lib.js';

const noopTask = new URL('./fixtures/noop-task.js', import.meta.url).href;
const sameImports = new URL('./fixtures/same-imports.js', import.meta.url);
const bareWorker = new URL('./fixtures/bare-worker.js', import.meta.url);
const scripted = { kind: 'scripted' as const, steps: [{ text: 'ok' }] };

function request(parent: Agent) {
  return { prompt: [text('hi')], parent, signal: new AbortController().signal, agentOptions: { model: scripted } };
}

/** A parent whose log holds about `events` events of completed turns. */
async function parentWithHistory(host: Host, events: number): Promise<Agent> {
  const parent = await host.createAgent({ agentOptions: { model: { kind: 'scripted' } } });
  while (parent.session.events.length < events) {
    parent.followup([text('more history')]);
    await parent.whenIdle();
  }
  return parent;
}

async function startOnly(host: Host, provider: string, parent: Agent): Promise<void> {
  const run = await host.subagents.start(provider, request(parent));
  await run.result;
  await run.dispose();
}

export const startupSuite: Suite = {
  name: 'startup',
  async run() {
    const rows: Row[] = [];
    const pool = new Piscina({ filename: noopTask, minThreads: 1, maxThreads: 1, atomics: 'disabled' });
    await pool.run(0);
    rows.push(await latency('startup/floor-piscina-roundtrip', () => pool.run(0), { iterations: 1000 }));
    await pool.destroy();

    /** From `new Worker(entry)` to its first message; then the worker, holding nothing, exits. */
    const firstMessage = (entry: URL) => async () => {
      const t0 = performance.now();
      const worker = new Worker(entry);
      const exited = once(worker, 'exit');
      await once(worker, 'message');
      const ms = performance.now() - t0;
      // Not terminated: terminating a thread that may still be evaluating its module aborts Node 20.
      await exited;
      return ms;
    };
    rows.push(await sampled('startup/floor-bare-worker', 30, firstMessage(bareWorker)));
    rows.push(await sampled('startup/floor-new-worker', 30, firstMessage(sameImports)));

    const host = await createHost({ pool: { minThreads: 2, maxThreads: 2 } });
    host.subagents.registerProvider(inProcessProvider(host));
    const parent = await host.createAgent();
    // Only `start()` is timed; each run is finished in the untimed afterEach hook.
    let pending: Promise<void> = Promise.resolve();
    const finish = { afterEach: () => pending };
    const timedStart = (provider: string, from: Agent) => async () => {
      const run = await host.subagents.start(provider, request(from));
      pending = run.result.then(() => run.dispose());
    };
    rows.push(await latency('startup/in-process', timedStart('in-process', parent), { iterations: 1000, ...finish }));
    // The floor again, paired: a round trip to a thread that sat idle about as long as the spawn
    // row's thread does, taken right after each of its samples. The back-to-back floor above keeps
    // its thread busy, so it never pays the wake-up of an idle thread, which a lone delegation does.
    const pairedPool = new Piscina({ filename: noopTask, minThreads: 1, maxThreads: 1, atomics: 'disabled' });
    await pairedPool.run(0);
    const paired: number[] = [];
    const warmup = 20;
    const warm = await latency('startup/spawn-warm', timedStart('spawn', parent), {
      iterations: 1000,
      warmup,
      afterEach: async () => {
        await pending;
        const t0 = performance.now();
        await pairedPool.run(0);
        paired.push(performance.now() - t0);
      },
    });
    await pairedPool.destroy();
    const pairedFloor = rowOf('startup/floor-piscina-paired', paired.slice(warmup));
    pairedFloor.note = 'a piscina round trip to an idle thread, sampled after each startup/spawn-warm sample';
    warm.note = `×${(warm.medianMs / pairedFloor.medianMs).toFixed(2)} of startup/floor-piscina-paired`;
    rows.push(warm, pairedFloor);
    const seed10 = await parentWithHistory(host, 10);
    const seed1000 = await parentWithHistory(host, 1000);
    rows.push(await latency('startup/fork-seed-10', timedStart('fork', seed10), { iterations: 500, ...finish }));
    rows.push(await latency('startup/fork-seed-1000', timedStart('fork', seed1000), { iterations: 200, ...finish }));
    await startOnly(host, 'spawn', parent);
    await host.close();

    rows.push(
      await sampled('startup/spawn-cold', 30, async () => {
        const t0 = performance.now();
        const cold = await createHost({ pool: { minThreads: 1, maxThreads: 1 } });
        const top = await cold.createAgent();
        const run = await cold.subagents.start('spawn', request(top));
        const ms = performance.now() - t0;
        await run.result;
        await cold.close();
        return ms;
      }),
    );
    return rows;
  },
};
