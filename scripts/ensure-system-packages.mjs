#!/usr/bin/env node
// Installs the Debian packages the tests drive (real binaries, never downloaded by npm) when they are
// missing: as root through apt-get, otherwise it stops and prints the command to run.
import { existsSync } from 'node:fs';
import { spawnSync } from 'node:child_process';

/** Each binary the tests need and the Debian package that provides it. */
const REQUIRED = [{ binary: '/usr/bin/chromium', package: 'chromium' }];

const missing = REQUIRED.filter((entry) => !existsSync(entry.binary));
if (missing.length > 0) {
  const packages = [...new Set(missing.map((entry) => entry.package))];
  const command = `apt-get update && apt-get install -y ${packages.join(' ')}`;
  const names = missing.map((entry) => entry.binary).join(', ');
  if (process.getuid?.() !== 0) {
    process.stderr.write(`The tests need ${names}. Install it as root:\n  sudo sh -c '${command}'\n`);
    process.exit(1);
  }
  process.stdout.write(`Installing ${packages.join(', ')} for ${names}…\n`);
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  for (const args of [['update'], ['install', '-y', '--no-install-recommends', ...packages]]) {
    const result = spawnSync('apt-get', args, { stdio: 'inherit', env });
    if (result.status !== 0) {
      process.stderr.write(`apt-get ${args.join(' ')} failed (exit ${String(result.status ?? result.signal)}); run: ${command}\n`);
      process.exit(1);
    }
  }
  const still = missing.filter((entry) => !existsSync(entry.binary));
  if (still.length > 0) {
    process.stderr.write(`Installed ${packages.join(', ')} but ${still.map((entry) => entry.binary).join(', ')} is still missing.\n`);
    process.exit(1);
  }
}
