// Throughput: delegations per second with 100 and 1,000 in flight on 2 threads, beside raw piscina
// tasks; RSS growth is recorded for 1,000 concurrent children.
import { Piscina } from 'piscina';
import { createHost } from '../src/index.js';
import { delegateOnce, throughput, type Row, type Suite } from './lib.js';

const noopTask = new URL('./fixtures/noop-task.js', import.meta.url).href;

export const throughputSuite: Suite = {
  name: 'throughput',
  async run() {
    const rows: Row[] = [];
    const pool = new Piscina({ filename: noopTask, minThreads: 2, maxThreads: 2, atomics: 'disabled', concurrentTasksPerWorker: 64 });
    await Promise.all([pool.run(0), pool.run(0)]);
    rows.push(await throughput('throughput/floor-piscina', 20_000, 100, () => pool.run(0)));
    await pool.destroy();

    // Zero-latency children are I/O-shaped for the pool: many share a thread.
    const host = await createHost({ pool: { minThreads: 2, maxThreads: 2, childrenPerThread: 512 } });
    const parent = await host.createAgent();
    const delegate = () => delegateOnce(host, 'spawn', parent);
    await throughput('warm-up', 500, 50, delegate);
    rows.push(await throughput('throughput/spawn-100-inflight', 5000, 100, delegate));
    global.gc?.();
    const rssBefore = process.memoryUsage().rss;
    let rssPeak = rssBefore;
    const sampler = setInterval(() => (rssPeak = Math.max(rssPeak, process.memoryUsage().rss)), 20);
    const row = await throughput('throughput/spawn-1000-inflight', 5000, 1000, delegate);
    clearInterval(sampler);
    row.rssGrowthMb = Math.round((rssPeak - rssBefore) / 2 ** 20);
    row.note = `RSS growth ${row.rssGrowthMb} MB (peak over ${Math.round(rssBefore / 2 ** 20)} MB)`;
    rows.push(row);
    await host.close();
    return rows;
  },
};
