#!/usr/bin/env node
// npm's `prepare`: builds dist/ unless it was built by this script from the very same inputs (the
// sources, the build configuration, the lock file and the Node version). `npm ci` builds once; the
// `npx subagent-host …` that follows it in this folder prepares the folder again (npm installs it
// into its cache) and now finds the build current instead of compiling everything a second time.
// `npm run build` always builds, and first removes the stamp: only this script vouches for a build.
import { createHash } from 'node:crypto';
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const INPUTS = ['src', 'workers', 'bench', 'scripts/bundle-worker.mjs', 'tsconfig.json', 'tsconfig.build.json', 'package.json', 'package-lock.json'];
const STAMP = join(root, 'dist', '.build-inputs');
/** What the build makes; a stamp without them means nothing. */
const OUTPUTS = ['dist/src/cli.js', 'dist/src/index.js', 'dist/workers/child.cjs', 'dist/src/inspect/page.js'];

function files(path) {
  if (!existsSync(path)) return [];
  if (!statSync(path).isDirectory()) return [path];
  return readdirSync(path)
    .sort()
    .flatMap((name) => files(join(path, name)));
}

function inputsDigest() {
  const hash = createHash('sha256').update(`${process.version}\0`);
  for (const input of INPUTS) {
    for (const file of files(join(root, input))) hash.update(`${relative(root, file)}\0`).update(readFileSync(file)).update('\0');
  }
  return hash.digest('hex');
}

const digest = inputsDigest();
const current = existsSync(STAMP) && readFileSync(STAMP, 'utf8') === digest && OUTPUTS.every((output) => existsSync(join(root, output)));
if (current) {
  console.log('dist/ was built from these sources: not rebuilt (npm run build rebuilds)');
} else {
  const npm = process.env.npm_execpath;
  const build = npm ? spawnSync(process.execPath, [npm, 'run', 'build'], { cwd: root, stdio: 'inherit' }) : spawnSync('npm', ['run', 'build'], { cwd: root, stdio: 'inherit' });
  if (build.status !== 0) process.exit(build.status ?? 1);
  writeFileSync(STAMP, digest);
}
