import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

// Tests import the package by name and run against the compiled build, so worker entries and
// the published export list are exercised exactly as users get them.
export default defineConfig({
  resolve: {
    alias: { 'subagent-host': fileURLToPath(new URL('./dist/src/index.js', import.meta.url)) },
  },
  test: {
    include: ['test/**/*.test.ts'],
    pool: 'forks',
    testTimeout: 20_000,
    hookTimeout: 20_000,
  },
});
