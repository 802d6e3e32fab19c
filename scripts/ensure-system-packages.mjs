#!/usr/bin/env node
// Installs the Debian packages the test suite needs when their binaries are missing: as root it
// runs apt-get; otherwise it prints the exact command and exits 1, so a test run never starts half
// equipped. Add a { binary, package } entry for each system tool a test starts.
import { spawnSync } from 'node:child_process';

const REQUIRED = [
  // The inspector's browser tests drive Debian's Chromium through playwright-core (no download).
  { binary: '/usr/bin/chromium', package: 'chromium' },
  // The queue provider's tests and benchmarks start their own loopback Redis.
  { binary: 'redis-server', package: 'redis-server' },
];

function onPath(binary) {
  return spawnSync('sh', ['-c', `command -v ${binary}`], { stdio: 'ignore' }).status === 0;
}

const missing = REQUIRED.filter(({ binary }) => !onPath(binary));
if (missing.length === 0) process.exit(0);

const packages = [...new Set(missing.map((entry) => entry.package))];
const command = `apt-get update && apt-get install -y ${packages.join(' ')}`;
if (process.getuid?.() !== 0) {
  process.stderr.write(`missing system packages for the tests: ${packages.join(', ')}\nrun as root: ${command}\n`);
  process.exit(1);
}
process.stdout.write(`installing system packages: ${packages.join(', ')}\n`);
for (const args of [['update'], ['install', '-y', '--no-install-recommends', ...packages]]) {
  const result = spawnSync('apt-get', args, { stdio: 'inherit', env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' } });
  if (result.status !== 0) {
    process.stderr.write(`apt-get ${args.join(' ')} failed (exit ${result.status})\n`);
    process.exit(1);
  }
}
const still = missing.filter(({ binary }) => !onPath(binary));
if (still.length > 0) {
  process.stderr.write(`still missing after install: ${still.map((entry) => entry.binary).join(', ')}\n`);
  process.exit(1);
}
