// `npm run bench [-- SUITE…] [--json FILE]`: runs the suites (startup, overhead, throughput,
// listing, queue, continuation, cancel, acp), each in its own process, prints each table beside its floors, and optionally writes
// the rows as JSON.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { availableParallelism, constants, cpus, tmpdir } from 'node:os';
import { usageError } from '../src/cli/args.js';
import { outputGone } from '../src/cli/output.js';
import { USAGE, parseBenchArgs } from './args.js';
import { writeWhole } from './json-file.js';
import type { Row } from './lib.js';
import { removeTempDirs, table } from './lib.js';
import { SUITES, isSuite } from './suites.js';

/** The suite process running now: a signal that stops `bench` is passed on to its process group. */
let running: ChildProcess | undefined;

/** A suite that did not finish: its process failed (its own error is on stderr) or was killed. */
class SuiteFailed extends Error {
  constructor(name: string, code: number | null, signal: NodeJS.Signals | null) {
    super(`suite ${name} ${signal === null ? `failed (exit code ${code})` : `was killed by ${signal}`}`);
  }
}

/** Sends `signal` to process group `pgid`, if any process is left in it. */
function signalGroup(pgid: number | undefined, signal: NodeJS.Signals): void {
  try {
    if (pgid !== undefined) process.kill(-pgid, signal);
  } catch {
    // The group is gone already.
  }
}

/**
 * Runs one suite in a fresh process, so no suite measures another's heap or threads; the child
 * prints its rows as one JSON line. It leads a process group of its own, which holds what it starts
 * (a redis-server, queue workers, ACP agents). Its temp dir is a folder of its own, removed once it
 * ended, however it ended: a suite killed by SIGKILL cannot remove what it made there.
 */
function runIsolated(name: string): Promise<Row[]> {
  return new Promise((resolve, reject) => {
    const tmp = mkdtempSync(join(tmpdir(), `subagent-bench-${name}-`));
    // Retried: a process of the group, killed just now, may still be ending a write into it.
    const removeTmp = (): void => rmSync(tmp, { recursive: true, force: true, maxRetries: 5 });
    const env = { ...process.env, TMPDIR: tmp, TMP: tmp, TEMP: tmp };
    const child = spawn(process.execPath, [fileURLToPath(import.meta.url), SUITE_FLAG, name], { stdio: ['ignore', 'pipe', 'inherit'], detached: true, env });
    running = child;
    child.once('exit', () => {
      running = undefined;
      // A suite that failed or was killed may not have stopped what it started: nothing of it may
      // outlive its run (a redis-server, a queue worker would run on, orphaned).
      signalGroup(child.pid, 'SIGKILL');
    });
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    child.on('error', (error) => {
      removeTmp();
      reject(error);
    });
    // 'close', not 'exit': the rows line may still be in the pipe when the process has exited.
    child.on('close', (code, signal) => {
      removeTmp();
      if (code !== 0) return reject(new SuiteFailed(name, code, signal));
      resolve(JSON.parse(out.trim().split('\n').at(-1) ?? '[]') as Row[]);
    });
  });
}

const SUITE_FLAG = '--run-suite';

/** Runs the named suites (all when none); returns the process exit code. */
export async function runBench(args: string[]): Promise<number> {
  const parsed = parseBenchArgs(args);
  if (typeof parsed === 'number') return parsed;
  const { names, json } = parsed;
  const cpu = cpus()[0]?.model ?? 'unknown cpu';
  // SIGINT, SIGTERM and SIGHUP stop the suite running and what it started (its group is not in the
  // terminal's foreground: a Ctrl-C reaches it only through us), then end the run, exit 128 + n; a
  // reader that went away (the entry point then emits SIGINT) ends it so too, exit 0.
  let stoppedBy: NodeJS.Signals | undefined;
  const signals = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;
  const stop = (signal: NodeJS.Signals): void => {
    stoppedBy ??= signal;
    signalGroup(running?.pid, signal);
  };
  for (const signal of signals) process.on(signal, stop);
  const all: Row[] = [];
  try {
    process.stdout.write(`node ${process.version}, ${availableParallelism()} × ${cpu}\n`);
    for (const name of names) {
      if (stoppedBy !== undefined) break;
      const t0 = performance.now();
      const rows = await runIsolated(name);
      all.push(...rows);
      process.stdout.write(`\n${name} (${((performance.now() - t0) / 1000).toFixed(1)} s)\n${table(rows, all)}\n`);
    }
  } catch (error) {
    if (stoppedBy === undefined) throw error;
  } finally {
    for (const signal of signals) process.off(signal, stop);
  }
  if (stoppedBy !== undefined) return outputGone() ? 0 : 128 + constants.signals[stoppedBy];
  if (json !== undefined) {
    const rows = all.map(({ id, medianMs, p99Ms, opsPerSec, rssGrowthMb, note }) => ({
      id,
      medianMs,
      p99Ms,
      ...(opsPerSec === undefined ? {} : { opsPerSec }),
      ...(rssGrowthMb === undefined ? {} : { rssGrowthMb }),
      ...(note ? { note } : {}),
    }));
    const failed = writeWhole(json, `${JSON.stringify({ node: process.version, cpus: availableParallelism(), cpu, rows }, null, 2)}\n`);
    if (failed !== undefined) {
      process.stderr.write(`subagent-host bench: cannot write ${json}: ${failed}\n`);
      return 1;
    }
    process.stdout.write(`\nwrote ${json}\n`);
  }
  return 0;
}

async function main(args: string[]): Promise<number> {
  if (args[0] !== SUITE_FLAG) return runBench(args);
  const name = args[1] ?? '';
  if (args.length !== 2 || !isSuite(name)) {
    return usageError('bench', USAGE, `--run-suite takes one suite name (${Object.keys(SUITES).join(', ')}): it is how bench runs each suite in a process of its own`);
  }
  // A signal (passed on to this process group by `bench`) ends the suite here: its own `finally`
  // never runs, so the temp folders it holds are removed now.
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    process.once(signal, () => {
      removeTempDirs();
      process.exit(128 + constants.signals[signal]);
    });
  }
  const suite = await SUITES[name]!();
  process.stdout.write(`${JSON.stringify(await suite.run())}\n`);
  return 0;
}

/** The message for a failure of the run: a failed suite said why itself, on stderr. */
function failure(error: unknown): string {
  if (error instanceof SuiteFailed) return error.message;
  return error instanceof Error ? (error.stack ?? error.message) : String(error);
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const args = process.argv.slice(2);
  main(args).then(
    (code) => (process.exitCode = code),
    (error: unknown) => {
      process.stderr.write(`bench failed: ${failure(error)}\n`);
      process.exitCode = 1;
      // A suite that failed midway may still hold hosts, threads and processes that would keep it
      // running forever; `bench` stops what is left of its process group once it exits. Its temp
      // folders go first: the signal that stopped `bench` may have failed the suite (its agents
      // ended) before the suite's own handler for that signal ran.
      if (args[0] === SUITE_FLAG) {
        removeTempDirs();
        process.exit();
      }
    },
  );
}
