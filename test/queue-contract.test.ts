// The shared provider contract, unchanged, for the `queue` provider: a private redis-server and one
// `subagent-host worker` process serve every test of the suite.
import { afterAll, beforeAll } from 'vitest';
import { createHost, queueProvider } from 'subagent-host';
import { providerContract } from './provider-contract.js';
import { startRedis, startWorker, type RedisServer, type WorkerProcess } from './queue-helpers.js';

// Long enough that a worker starved of CPU is not failed as stalled: no test here loses a worker.
const LOCK_MS = 30_000;
let redis: RedisServer;
let worker: WorkerProcess;
/** The server's clients with only the worker connected: a closed host leaves none beyond them. */
let workerClients: number;

beforeAll(async () => {
  redis = await startRedis();
  worker = await startWorker(redis.url, ['--queue', 'contract', '--concurrency', '4', '--pool-threads', '2', '--lock-duration-ms', String(LOCK_MS)]);
  workerClients = await redis.clients();
}, 30_000);

afterAll(async () => {
  await worker?.stop();
  await redis?.stop();
}, 30_000);

providerContract('queue', {
  capabilities: { outputSchema: true, depthLimit: true, toolFilter: false, persona: true },
  local: false,
  async setup() {
    const host = await createHost({ providers: false });
    host.subagents.registerProvider(queueProvider(host, { connection: redis.url, queue: 'contract', lockDurationMs: LOCK_MS }));
    return { host, provider: 'queue' };
  },
  async leftovers() {
    const extra = (await redis.clients()) - workerClients;
    return extra > 0 ? [`${extra} Redis connection(s) beyond the worker's`] : [];
  },
});
