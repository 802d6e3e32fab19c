#!/usr/bin/env node
// The vitest suite with V8 coverage from every isolate it starts (test processes, worker threads, CLI
// and host child processes), mapped through the build's source maps to src/ and workers/; writes
// coverage/index.html, prints the figures, then checks the per-file floor.
//   node scripts/coverage.mjs [vitest args]            the per-file table (`npm run coverage`)
//   node scripts/coverage.mjs --summary [vitest args]  totals only (`npm test`)
// The floor is checked after a run of the whole suite; vitest arguments other than options (file
// filters) run part of it, and then the floor is not checked.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { coverageReport } from './coverage-map.mjs';

const root = fileURLToPath(new URL('..', import.meta.url));
const reportsDirectory = path.join(root, 'coverage');
const tempDirectory = path.join(reportsDirectory, 'tmp');
const summaryOnly = process.argv[2] === '--summary';
const vitestArgs = process.argv.slice(summaryOnly ? 3 : 2);
const partial = vitestArgs.some((arg) => !arg.startsWith('-'));

fs.rmSync(reportsDirectory, { recursive: true, force: true });
fs.mkdirSync(tempDirectory, { recursive: true });

// Node writes each isolate's coverage into NODE_V8_COVERAGE when it exits: child processes inherit
// the variable and worker threads write their own file; test/coverage-flush.ts covers vitest's processes.
const vitest = spawnSync(process.execPath, [path.join(root, 'node_modules/vitest/vitest.mjs'), 'run', ...vitestArgs], {
  cwd: root,
  stdio: 'inherit',
  env: { ...process.env, NODE_V8_COVERAGE: tempDirectory },
});
if (vitest.status !== 0) {
  console.error(`coverage: the test run failed (exit ${vitest.status ?? vitest.signal}); no report.`);
  process.exit(1);
}

// Raw V8 data names the build (dist/src/*.js and the bundled worker entry dist/workers/child.cjs);
// their source maps name src/*.ts and workers/*.ts, the files reported.
const report = await coverageReport({ root, tempDirectory, reportsDirectory, reporter: [summaryOnly ? 'text-summary' : 'text', 'html', 'json-summary'] });
await report.run();
fs.rmSync(tempDirectory, { recursive: true, force: true });

if (partial) {
  console.log('coverage floor: not checked (part of the suite ran).');
  process.exit(0);
}
const floor = spawnSync(process.execPath, [path.join(root, 'scripts/coverage-floor.mjs')], { cwd: root, stdio: 'inherit' });
process.exit(floor.status ?? 1);
