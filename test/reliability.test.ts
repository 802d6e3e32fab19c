// The host process never aborts and never exits early: small scripts run as plain Node processes
// (vitest's own process would hide an early exit), many times, while two busy loops load the CPU.
// Each run must print its final line and exit 0.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const packageUrl = new URL('../dist/src/index.js', import.meta.url).href;
const cli = fileURLToPath(new URL('../dist/src/cli.js', import.meta.url));
const fixture = (name: string) => fileURLToPath(new URL(`./fixtures/reliability/${name}.mjs`, import.meta.url));

interface Outcome {
  code: number | null;
  signal: NodeJS.Signals | null;
  out: string;
  err: string;
}

// A bound that only catches a hang: a healthy run takes about a second even on a loaded machine.
const HANG_MS = 60_000;

function runNode(args: string[]): Promise<Outcome> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (err += chunk.toString()));
    const hang = setTimeout(() => child.kill('SIGKILL'), HANG_MS);
    child.on('close', (code, signal) => {
      clearTimeout(hang);
      resolve({ code, signal, out, err });
    });
  });
}

/**
 * Runs `count` processes, `lanes` at a time; returns a one-line account of each failed run. Four
 * lanes beside the two busy loops keep both cores oversubscribed, and take a larger share of them.
 */
async function repeat(count: number, args: string[], passed: (out: string) => boolean, lanes = 4): Promise<string[]> {
  const failures: string[] = [];
  let next = 0;
  const lane = async () => {
    while (next < count) {
      next++;
      const { code, signal, out, err } = await runNode(args);
      if (code !== 0 || !passed(out)) failures.push(`exit ${code ?? signal}; stdout ${JSON.stringify(out.slice(-80))}; stderr ${JSON.stringify(err.slice(0, 200))}`);
    }
  };
  await Promise.all(Array.from({ length: lanes }, lane));
  return failures;
}

const lastLine = (expected: string) => (out: string) => out.trimEnd().split('\n').at(-1) === expected;

let hogs: ChildProcess[] = [];
let demoDir = '';
let demoDbDir = '';

beforeAll(() => {
  hogs = [0, 1].map(() => spawn(process.execPath, ['-e', 'for (;;);'], { stdio: 'ignore' }));
  demoDir = mkdtempSync(join(tmpdir(), 'reliability-demo-'));
  demoDbDir = mkdtempSync(join(tmpdir(), 'reliability-demo-db-'));
  for (let i = 1; i <= 7; i++) writeFileSync(join(demoDir, `note-${i}.md`), `# Note ${i}\n${'some words about the topic\n'.repeat(i * 5)}`);
});

afterAll(() => {
  for (const hog of hogs) hog.kill('SIGKILL');
  rmSync(demoDir, { recursive: true, force: true });
  rmSync(demoDbDir, { recursive: true, force: true });
});

// Scripts that loop run several rounds per process: each round is one more chance to abort.
describe('under two busy loops, the host process', { timeout: 240_000 }, () => {
  it('survives starting children and closing at once (8 processes × 3 rounds)', async () => {
    expect(await repeat(8, [fixture('start-close'), packageUrl, '3'], lastLine('closed'))).toEqual([]);
  });

  it('runs the demo to its report (20 runs)', async () => {
    const report = (out: string) => {
      try {
        return (JSON.parse(out) as { children: unknown[] }).children.length === 3;
      } catch {
        return false;
      }
    };
    expect(await repeat(20, [cli, 'demo', '--json', '--children', '3', '--dir', demoDir, '--db', join(demoDbDir, 'runs.db')], report)).toEqual([]);
  });

  it('survives a runaway child terminated 50 ms after cancel, then close (8 processes × 3 rounds)', async () => {
    expect(await repeat(8, [fixture('runaway-close'), packageUrl, '3'], lastLine('aborted'))).toEqual([]);
  });

  it('settles hanging children cancelled at once, three hosts at a time (6 processes × 10 rounds × 2 children)', async () => {
    expect(await repeat(6, [fixture('cancel-hang'), packageUrl, '10'], lastLine('aborted'), 3)).toEqual([]);
  });

  it('survives a child that calls process.exit, then close (8 processes × 3 rounds)', async () => {
    expect(await repeat(8, [fixture('exit-close'), packageUrl, '3'], lastLine('error'))).toEqual([]);
  });

  it('contains a child that fills its heap with small objects, then runs the next (4 processes × 3 rounds)', async () => {
    // On Node 24 this aborted the host (exit 134) in every process before the pool capped the young generation.
    expect(await repeat(4, [fixture('oom-close'), packageUrl, '3'], lastLine('contained'))).toEqual([]);
  });

  it('stays up while only a worker child runs, and exits by itself afterwards (6 runs)', async () => {
    expect(await repeat(6, [fixture('liveness'), packageUrl], lastLine('completed'))).toEqual([]);
  });
});
