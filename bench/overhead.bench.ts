// Overhead of a whole delegation (start → result → dispose) with a zero-latency scripted child,
// per provider; in-process is the floor the worker providers are compared with.
import { createHost, inProcessProvider, text } from '../src/index.js';
import { delegateOnce, latency, type Row, type Suite } from './lib.js';

export const overheadSuite: Suite = {
  name: 'overhead',
  async run() {
    const host = await createHost({ pool: { minThreads: 2, maxThreads: 2 } });
    host.subagents.registerProvider(inProcessProvider(host));
    const parent = await host.createAgent();
    parent.followup([text('one completed turn, so fork has something to seed')]);
    await parent.whenIdle();
    const rows: Row[] = [];
    for (const provider of ['in-process', 'spawn', 'fork']) {
      rows.push(
        await latency(
          `overhead/${provider}`,
          () => delegateOnce(host, provider, parent),
          { iterations: 1000 },
        ),
      );
    }
    await host.close();
    return rows;
  },
};
