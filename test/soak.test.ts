// The soak (`npm run soak -- --delegations 200`) in its own plain Node process: random cancels,
// disposes, thread crashes, runaway and out-of-memory children; every run ends once, nothing leaks.
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { expect, it } from 'vitest';

const root = fileURLToPath(new URL('..', import.meta.url));
const { scripts } = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { scripts: Record<string, string> };
// What `npm run soak -- <args>` runs with the arguments: npm appends them to the script's last command.
const [node, ...soakArgs] = scripts['soak']!.split('&&').at(-1)!.trim().split(/\s+/);

// npm test runs the suite under NODE_V8_COVERAGE, which Node passes to every child process whatever
// its env: an out-of-memory thread then cannot write its profile, and Node says so on stderr. That
// line (Node's, about coverage) is the one stderr line the soak tolerates, and only under coverage.
const COVERAGE_WRITE_FAILED = /^Failed to stringify coverage profile result\n/gm;

it('settles 200 mixed delegations exactly once each and leaves nothing behind (npm run soak -- --delegations 200)', { timeout: 180_000 }, async () => {
  expect(node).toBe('node');
  const child = spawn(process.execPath, [...soakArgs, '--delegations', '200'], { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (err += chunk.toString()));
  // Only catches a hang (the soak never calls process.exit, so a leaked handle hangs it).
  const hang = setTimeout(() => child.kill('SIGKILL'), 150_000);
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  clearTimeout(hang);
  if (process.env.NODE_V8_COVERAGE !== undefined) err = err.replace(COVERAGE_WRITE_FAILED, '');
  expect({ code, err }).toEqual({ code: 0, err: '' });
  expect(out).toMatch(/^soak: 200 delegations .*failures 0; seed \d+; .*; leaks: none\n$/);
});
