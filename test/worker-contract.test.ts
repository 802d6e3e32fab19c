// The shared provider contract, unchanged, for the worker-thread providers `spawn` and `fork`.
import { createHost } from 'subagent-host';
import { providerContract } from './provider-contract.js';

const ALL = { outputSchema: true, depthLimit: true, toolFilter: true, persona: true, budget: true };

for (const provider of ['spawn', 'fork']) {
  providerContract(provider, {
    capabilities: ALL,
    local: true,
    async setup() {
      const host = await createHost({ pool: { minThreads: 1, maxThreads: 2, cancelGraceMs: 500 } });
      return { host, provider };
    },
  });
}
