// `subagent-host bench --json FILE` and the file it writes: what it may replace, what it does when
// the write fails, and the internal `--run-suite` flag of the runner. Runs the cancel suite, the
// quickest one.
import { execFile, spawn } from 'node:child_process';
import { chmodSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it, onTestFinished } from 'vitest';
import { CLI } from './acp-helpers.js';

const RUNNER = fileURLToPath(new URL('../dist/bench/run.js', import.meta.url));

interface Outcome {
  code: number;
  stdout: string;
  stderr: string;
}

async function run(file: string, ...args: string[]): Promise<Outcome> {
  try {
    const { stdout, stderr } = await promisify(execFile)(process.execPath, [file, ...args]);
    return { code: 0, stdout, stderr };
  } catch (error) {
    const { code, stdout, stderr } = error as { code: number; stdout: string; stderr: string };
    return { code, stdout, stderr };
  }
}

/** A fresh folder of the test's own, removed after it. */
function folder(): string {
  const dir = mkdtempSync(join(tmpdir(), 'bench-json-'));
  onTestFinished(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

const PREVIOUS = `${JSON.stringify({ node: 'v20.0.0', cpus: 2, cpu: 'old cpu', rows: [{ id: 'cancel/old', medianMs: 1, p99Ms: 2 }] })}\n`;

describe('subagent-host bench --json FILE, when FILE exists', () => {
  it.each([
    ['a password file', 'root:x:0:0:root:/root:/bin/bash\n'],
    ['an empty file', ''],
    ['JSON of another shape', '{"name":"my-package","version":"1.0.0"}\n'],
    ['JSON with rows that are not a list', '{"node":"v20.0.0","cpus":2,"rows":{}}\n'],
  ])('refuses to replace %s with the usage on stderr, exit 2, before any suite runs, leaving it as it was', async (_what, content) => {
    const file = join(folder(), 'rows.json');
    writeFileSync(file, content);
    const { code, stdout, stderr } = await run(CLI, 'bench', 'cancel', '--json', file);
    expect({ code, stdout, content: readFileSync(file, 'utf8') }).toEqual({ code: 2, stdout: '', content });
    expect(stderr).toMatch(/^subagent-host bench: --json /);
    expect(stderr).toContain(`${file} exists and is not the output of an earlier bench run`);
    expect(stderr).toContain('usage: subagent-host bench ');
  });

  it('refuses a FILE that is not a regular file (/dev/null), exit 2, before any suite runs', async () => {
    const { code, stdout, stderr } = await run(CLI, 'bench', 'cancel', '--json', '/dev/null');
    expect({ code, stdout }).toEqual({ code: 2, stdout: '' });
    expect(stderr).toMatch(/^subagent-host bench: --json \/dev\/null is not a regular file/);
  });

  it('replaces the output of an earlier run with this run’s rows, leaving no other file in its folder', async () => {
    const dir = folder();
    const file = join(dir, 'rows.json');
    writeFileSync(file, PREVIOUS);
    const { code, stdout } = await run(CLI, 'bench', 'cancel', '--json', file);
    expect(code).toBe(0);
    expect(stdout).toContain(`wrote ${file}`);
    const written = JSON.parse(readFileSync(file, 'utf8')) as { node: string; rows: { id: string }[] };
    expect({ node: written.node, ids: written.rows.map((row) => row.id), files: readdirSync(dir) }).toEqual({
      node: process.version,
      ids: ['cancel/busy-child-observed', 'cancel/runaway-settled'],
      files: ['rows.json'],
    });
  }, 60_000);

  // As writing the file in place did (and as write-file-atomic does): a link kept to the latest
  // output stays a link, and the output it names is the one replaced.
  it('replaces the earlier output a symlink FILE names, and FILE stays that symlink', async () => {
    const dir = folder();
    mkdirSync(join(dir, 'runs'));
    const target = join(dir, 'runs', 'first.json');
    writeFileSync(target, PREVIOUS);
    const file = join(dir, 'latest.json');
    symlinkSync(join('runs', 'first.json'), file);
    const { code } = await run(CLI, 'bench', 'cancel', '--json', file);
    expect(code).toBe(0);
    expect(lstatSync(file).isSymbolicLink()).toBe(true);
    const written = JSON.parse(readFileSync(target, 'utf8')) as { node: string };
    expect({ node: written.node, files: readdirSync(dir).sort(), runs: readdirSync(join(dir, 'runs')) }).toEqual({ node: process.version, files: ['latest.json', 'runs'], runs: ['first.json'] });
  }, 60_000);

  it('keeps the permissions of the earlier output it replaces', async () => {
    const file = join(folder(), 'rows.json');
    writeFileSync(file, PREVIOUS, { mode: 0o600 });
    chmodSync(file, 0o600);
    const { code } = await run(CLI, 'bench', 'cancel', '--json', file);
    expect(code).toBe(0);
    expect({ mode: statSync(file).mode & 0o777, node: (JSON.parse(readFileSync(file, 'utf8')) as { node: string }).node }).toEqual({ mode: 0o600, node: process.version });
  }, 60_000);
});

describe('subagent-host bench --json FILE, when the write fails', () => {
  it('whose folder is removed during the run says so in one line naming the file, exit 1', async () => {
    const dir = join(folder(), 'out');
    mkdirSync(dir);
    const file = join(dir, 'rows.json');
    const bench = spawn(process.execPath, [CLI, 'bench', 'cancel', '--json', file], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    bench.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const closed = new Promise<number | null>((resolve) => bench.once('close', (code) => resolve(code)));
    // The first line is written once the arguments are checked, just before the suite starts.
    await new Promise((resolve) => bench.stdout.once('data', resolve));
    rmSync(dir, { recursive: true });
    expect(await closed).toBe(1);
    expect(stderr).toMatch(new RegExp(`^subagent-host bench: cannot write ${file}: [^\\n]*ENOENT[^\\n]*\\n$`));
  }, 60_000);
});

describe('the bench runner’s internal --run-suite flag', () => {
  it.each([[['nosuite']], [['toString']], [[]]])('with %j names the problem, exit 2, no stack', async (args) => {
    const { code, stdout, stderr } = await run(RUNNER, '--run-suite', ...args);
    expect({ code, stdout }).toEqual({ code: 2, stdout: '' });
    expect(stderr).toMatch(/^subagent-host bench: --run-suite takes one suite name \(startup, overhead, /);
    expect(stderr).not.toContain('    at ');
  });
});
