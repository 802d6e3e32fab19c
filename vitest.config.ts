import { availableParallelism } from 'node:os';
import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

// Tests import the package by name and run against the compiled build, so worker entries and
// the published export list are exercised exactly as users get them. Engine parts come from the
// `subagent-host/internals` subpath. Node loads the build natively (not through Vite's transform),
// as a user's process would, so V8 coverage (`npm run coverage`) maps it back to the sources.
const dist = new RegExp(`^${fileURLToPath(new URL('./dist/', import.meta.url)).replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}`);

const UNDER_LOAD = 'test/reliability.test.ts';

export default defineConfig({
  resolve: {
    // Exact matches: a plain 'subagent-host' key would also capture 'subagent-host/internals'.
    alias: [
      { find: /^subagent-host$/, replacement: fileURLToPath(new URL('./dist/src/index.js', import.meta.url)) },
      { find: /^subagent-host\/internals$/, replacement: fileURLToPath(new URL('./dist/src/internals.js', import.meta.url)) },
    ],
  },
  test: {
    pool: 'forks',
    // Every file must leave nothing running (threads, processes, handles, open files) once its hooks
    // are done; leak-guard comes after coverage-flush so that it runs after the file's own hooks.
    globalSetup: ['test/setup/orphan-guard.ts'],
    setupFiles: ['test/coverage-flush.ts', 'test/setup/leak-guard.ts'],
    server: { deps: { external: [dist] } },
    testTimeout: 20_000,
    hookTimeout: 20_000,
    projects: [
      {
        extends: true,
        // One test process per core (vitest's default leaves one core free): the files spend much of
        // their time waiting on the threads and processes they start.
        test: { name: 'suite', include: ['test/**/*.test.ts'], exclude: [UNDER_LOAD], maxWorkers: availableParallelism() },
      },
      {
        extends: true,
        // The reliability scripts bring their own two busy loops; run beside the suite, they would
        // starve it (and be starved by it) for their whole length, so they run alone, afterwards.
        test: { name: 'under-load', include: [UNDER_LOAD], maxWorkers: 1, sequence: { groupOrder: 1 } },
      },
    ],
  },
});
