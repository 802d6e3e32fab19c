// The shared provider contract, unchanged, for the worker-thread providers `spawn` and `fork`
// (`fork` with a parent that completed a turn, so its children are really seeded).
import { createHost } from 'subagent-host';
import { providerContract } from './provider-contract.js';

const ALL = { outputSchema: true, depthLimit: true, toolFilter: true, persona: true };

for (const provider of ['spawn', 'fork']) {
  providerContract(provider, {
    capabilities: ALL,
    local: true,
    fork: provider === 'fork',
    // Threads and their hub ports, the resources this provider creates.
    leftovers: (host) => [...Array.from({ length: host.pool.threads }, () => 'thread'), ...Array.from({ length: host.pool.channels.ports }, () => 'port')],
    async setup(persistence) {
      // A grace far beyond the test timeout: cooperative cancellation must work, not the thread kill.
      const host = await createHost({ persistence, pool: { minThreads: 1, maxThreads: 2, cancelGraceMs: 600_000 } });
      return { host, provider };
    },
  });
}
