import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

// Tests import the package by name and run against the compiled build, so worker entries and
// the published export list are exercised exactly as users get them. Engine parts come from the
// `subagent-host/internals` subpath. Node loads the build natively (not through Vite's transform),
// as a user's process would, so V8 coverage (`npm run coverage`) maps it back to the sources.
const dist = new RegExp(`^${fileURLToPath(new URL('./dist/', import.meta.url)).replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}`);

export default defineConfig({
  resolve: {
    // Exact matches: a plain 'subagent-host' key would also capture 'subagent-host/internals'.
    alias: [
      { find: /^subagent-host$/, replacement: fileURLToPath(new URL('./dist/src/index.js', import.meta.url)) },
      { find: /^subagent-host\/internals$/, replacement: fileURLToPath(new URL('./dist/src/internals.js', import.meta.url)) },
    ],
  },
  test: {
    include: ['test/**/*.test.ts'],
    pool: 'forks',
    setupFiles: ['test/coverage-flush.ts'],
    server: { deps: { external: [dist] } },
    testTimeout: 20_000,
    hookTimeout: 20_000,
  },
});
