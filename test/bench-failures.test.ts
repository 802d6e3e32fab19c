// `subagent-host bench` when a suite does not finish: it fails midway (its Redis went away) or its
// process is killed (as the OOM killer would). Either way the run says so and exits 1, and nothing
// the suite started (a redis-server, queue workers) is left running. Linux only: reads /proc.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { CLI } from './acp-helpers.js';
import { startRedis } from './queue-helpers.js';

const linux = existsSync('/proc/self/stat');

/** The live (not zombie) processes of process group `pgid`. */
function groupMembers(pgid: number): number[] {
  const members: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
    } catch {
      continue; // Exited while we looked.
    }
    // After the command name in parentheses: state, ppid, pgrp.
    const [state, , pgrp] = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    if (state !== 'Z' && Number(pgrp) === pgid) members.push(Number(entry));
  }
  return members;
}

/** The pids of `pid`'s children. */
function childPids(pid: number): number[] {
  return readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').split(' ').filter(Boolean).map(Number);
}

/** Polls `probe` until it returns a value (processes and keys announce themselves by no event we can await). */
async function until<T>(probe: () => T | undefined | Promise<T | undefined>): Promise<T> {
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** Starts `bench SUITE` with its temp folders in a folder of the test's own. */
function bench(suite: string, env: NodeJS.ProcessEnv = {}): { child: ChildProcess; tmp: string; exited: Promise<number | null>; stderr: () => Promise<string> } {
  const tmp = mkdtempSync(join(tmpdir(), 'bench-failures-'));
  const child = spawn(process.execPath, [CLI, 'bench', suite], { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, ...env, TMPDIR: tmp } });
  let stderr = '';
  child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  // All of stderr, once no process writes to it any more (what the suite started inherits it).
  const closed = new Promise((resolve) => child.once('close', resolve));
  onTestFinished(() => rmSync(tmp, { recursive: true, force: true }));
  return { child, tmp, exited, stderr: () => closed.then(() => stderr) };
}

/** The suite process `bench` started (it leads the process group of what the suite starts). */
async function suiteOf(child: ChildProcess): Promise<number> {
  const suite = await until(() => childPids(child.pid!)[0]);
  onTestFinished(() => {
    for (const pid of groupMembers(suite)) process.kill(pid, 'SIGKILL');
  });
  return suite;
}

describe.runIf(linux)('subagent-host bench, a suite that does not finish', () => {
  it('whose Redis goes away midway says the suite failed, exits 1 and leaves none of its processes running', async () => {
    const redis = await startRedis();
    onTestFinished(() => redis.stop());
    const run = bench('queue', { REDIS_URL: redis.url });
    const suite = await suiteOf(run.child);
    // The suite's host is connected (its reply key exists): the suite is past starting its worker.
    await until(async () => ((await redis.keys()).some((key) => key.startsWith('bull:bench-overhead:sah:reply:')) ? true : undefined));
    await redis.stop();
    expect(await run.exited).toBe(1);
    // A killed process may take a moment to leave /proc on a loaded machine.
    await expect.poll(() => groupMembers(suite), { timeout: 15_000 }).toEqual([]);
    expect(await run.stderr()).toContain('suite queue failed (exit code 1)');
  }, 120_000);

  it('whose process is killed says so, exits 1, stops the redis-server and workers it started and removes its temp folder', async () => {
    const run = bench('queue');
    const suite = await suiteOf(run.child);
    // Its redis-server, then its first worker: the redis-server's folder is made before either.
    await until(() => (childPids(suite).length >= 2 ? true : undefined));
    process.kill(suite, 'SIGKILL');
    expect(await run.exited).toBe(1);
    expect(readdirSync(run.tmp)).toEqual([]);
    // A killed process may take a moment to leave /proc on a loaded machine.
    await expect.poll(() => groupMembers(suite), { timeout: 15_000 }).toEqual([]);
    expect(await run.stderr()).toContain('suite queue was killed by SIGKILL');
  }, 120_000);
});
