// The benchmark suites by name, each loaded only in the process that runs it.
import type { Suite } from './lib.js';

export const SUITES: Record<string, () => Promise<Suite>> = {
  startup: async () => (await import('./startup.bench.js')).startupSuite,
  overhead: async () => (await import('./overhead.bench.js')).overheadSuite,
  throughput: async () => (await import('./throughput.bench.js')).throughputSuite,
  listing: async () => (await import('./listing.bench.js')).listingSuite,
  queue: async () => (await import('./queue.bench.js')).queueSuite,
  continuation: async () => (await import('./continuation.bench.js')).continuationSuite,
  cancel: async () => (await import('./cancel.bench.js')).cancelSuite,
  acp: async () => (await import('./acp.bench.js')).acpSuite,
};

/** Whether `name` is a suite's (not a name every object has, such as `toString`). */
export function isSuite(name: string): boolean {
  return Object.hasOwn(SUITES, name);
}
