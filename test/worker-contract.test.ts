// The shared provider contract, unchanged, for the worker-thread providers `spawn` and `fork`
// (`fork` with a parent that completed a turn, so its children are really seeded).
import { createHost } from 'subagent-host';
import { hostParts } from 'subagent-host/internals';
import { providerContract } from './provider-contract.js';

const ALL = { outputSchema: true, depthLimit: true, toolFilter: true, persona: true, budget: true };

for (const provider of ['spawn', 'fork']) {
  providerContract(provider, {
    capabilities: ALL,
    local: true,
    fork: provider === 'fork',
    // Threads and their hub ports, the resources this provider creates.
    leftovers: (host) => [...Array.from({ length: host.pool.threads }, () => 'thread'), ...Array.from({ length: hostParts(host).pool.channels.ports }, () => 'port')],
    async setup(persistence) {
      // The default grace: a child the contract cancels settles aborted whether it stops by itself or
      // loses its thread (worker-provider.test.ts tells the two apart with a grace beyond the test timeout).
      const host = await createHost({ persistence, pool: { minThreads: 1, maxThreads: 2, cancelGraceMs: 2000 } });
      return { host, provider };
    },
  });
}
