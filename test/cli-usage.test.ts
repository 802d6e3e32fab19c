// The command line as a user first meets it, run as a real process: the command list, help, unknown
// commands and options, and bad values of `acp`, `bench`, `demo` and `worker`, each with its exit code and where its text goes.
import { execFile, spawn } from 'node:child_process';
import { closeSync, existsSync, mkdtempSync, openSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it, onTestFinished } from 'vitest';
import { createHost } from 'subagent-host';

const cli = new URL('../dist/src/cli.js', import.meta.url).pathname;

interface Outcome {
  code: number;
  stdout: string;
  stderr: string;
}

async function runCli(...args: string[]): Promise<Outcome> {
  return runCliWith({}, ...args);
}

/** `runCli` with these environment variables set over the test's own. */
async function runCliWith(env: NodeJS.ProcessEnv, ...args: string[]): Promise<Outcome> {
  try {
    const { stdout, stderr } = await promisify(execFile)(process.execPath, [cli, ...args], { env: { ...process.env, ...env } });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const { code, stdout, stderr } = error as { code: number; stdout: string; stderr: string };
    return { code, stdout, stderr };
  }
}

const COMMANDS = ['demo', 'bench', 'ls', 'inspect', 'acp', 'worker'];

describe('subagent-host', () => {
  it('without a command says so and lists every command on stderr (a usage error), exit 2', async () => {
    const { code, stdout, stderr } = await runCli();
    expect(code).toBe(2);
    expect(stdout).toBe('');
    expect(stderr).toMatch(/^subagent-host: no command given\n\nusage: subagent-host <command> \[options\]/);
    for (const name of COMMANDS) expect(stderr).toMatch(new RegExp(`^  ${name} +\\S`, 'm'));
  });

  it.each([['--help'], ['-h'], ['help'], ['help', 'help'], ['help', '--help'], ['--help', '-h']])('%s lists the commands and exits 0', async (...flags) => {
    const { code, stdout } = await runCli(...flags);
    expect(code).toBe(0);
    expect(stdout).toContain('Run `subagent-host <command> --help` for its options.');
  });

  it('stops quietly when its reader went away (EPIPE): exit 0, no stack on stderr, the database closed', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'cli-epipe-'));
    try {
      const db = join(dir, 'pipe.db');
      const host = await createHost({ persistence: { sqlite: db }, providers: false });
      const { id } = await host.createAgent();
      await host.close();
      for (const args of [['ls', id, '--db', db, '--json'], ['demo', '--children', '1', '--provider', 'in-process', '--db', db]]) {
        const child = spawn(process.execPath, [cli, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
        // Closed before the command writes anything: its first write fails with EPIPE.
        child.stdout.destroy();
        let stderr = '';
        child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
        const code = await new Promise((resolve) => child.once('close', resolve));
        expect({ args, code, stderr }).toEqual({ args, code: 0, stderr: '' });
        expect(existsSync(`${db}-wal`)).toBe(false);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
    // Three processes (a demo among them): far longer than the default on a loaded machine.
  }, 90_000);

  // /dev/full fails every write with ENOSPC: output that was lost, not a reader that left.
  it.skipIf(!existsSync('/dev/full'))('fails with exit 1 when its output cannot be written (a full disk), saying so once, even a command that then ends as interrupted', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'cli-enospc-'));
    const full = openSync('/dev/full', 'w');
    try {
      const db = join(dir, 'full.db');
      const host = await createHost({ persistence: { sqlite: db }, providers: false });
      await host.close();
      const initialize = `${JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: 1, clientCapabilities: {} } })}\n`;
      for (const [args, input] of [
        [['ls', '--help'], ''],
        [['inspect', '--db', db, '--port', '0'], ''],
        [['demo', '--children', '1', '--provider', 'in-process', '--db', db], ''],
        [['acp'], initialize],
      ] as const) {
        const child = spawn(process.execPath, [cli, ...args], { stdio: ['pipe', full, 'pipe'] });
        // acp reads requests until its input ends: this one stays open, so only the failed write ends it.
        child.stdin!.write(input);
        let stderr = '';
        child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
        const code = await new Promise((resolve) => child.once('close', resolve));
        child.stdin!.destroy();
        expect({ args, code, stderr: stderr.replace(/ENOSPC.*/, 'ENOSPC') }).toEqual({ args, code: 1, stderr: 'subagent-host: cannot write output: Error: ENOSPC\n' });
      }
    } finally {
      closeSync(full);
      rmSync(dir, { recursive: true, force: true });
    }
  }, 90_000);

  it('help COMMAND (or --help COMMAND) prints that command’s usage, as COMMAND --help does, exit 0', async () => {
    const asked = [...COMMANDS.map((name) => ['help', name]), ['--help', 'ls']];
    const [answers, own] = await Promise.all([Promise.all(asked.map((args) => runCli(...args))), Promise.all(asked.map(([, name]) => runCli(name!, '--help')))]);
    asked.forEach((args, i) => {
      expect(own[i]!.stdout).toMatch(new RegExp(`^usage: subagent-host ${args[1]} `));
      expect({ args, ...answers[i] }).toEqual({ args, ...own[i], code: 0 });
    });
  }, 60_000);

  it('help with an unknown command or a stray argument is a usage error, exit 2', async () => {
    const unknown = await runCli('help', 'frobnicate');
    expect([unknown.code, unknown.stdout]).toEqual([2, '']);
    expect(unknown.stderr).toMatch(/^subagent-host: unknown command 'frobnicate'\n\nusage: subagent-host <command>/);
    const stray = await runCli('help', 'ls', 'extra');
    expect([stray.code, stray.stdout]).toEqual([2, '']);
    expect(stray.stderr).toMatch(/^subagent-host: unexpected argument 'extra'\n\nusage: subagent-host <command>/);
  });

  it('names an unknown command on stderr and exits 2', async () => {
    const { code, stdout, stderr } = await runCli('frobnicate');
    expect(code).toBe(2);
    expect(stdout).toBe('');
    expect(stderr).toMatch(/^subagent-host: unknown command 'frobnicate'\n/);
  });

  it.each([['constructor'], ['toString'], ['__proto__']])('takes %s, a name every object has, for an unknown command, exit 2', async (name) => {
    const { code, stdout, stderr } = await runCli(name);
    expect([code, stdout]).toEqual([2, '']);
    expect(stderr).toMatch(new RegExp(`^subagent-host: unknown command '${name}'\n\nusage: subagent-host <command>`));
  });
});

describe('every command’s options', () => {
  // parseArgs keeps the last of an option given twice: `--db a --db b` quietly read b.
  it.each([
    ['ls', ['ls', 'S', '--db', 'a.db', '--db', 'b.db']],
    ['inspect', ['inspect', '--port', '0', '--port', '1']],
    ['demo', ['demo', '--json', '--json']],
    ['acp', ['acp', '--db', 'a.db', '--db', 'b.db']],
    ['worker', ['worker', '--redis', 'redis://127.0.0.1:1', '--redis', 'redis://127.0.0.1:2']],
  ])('(%s) refuse one given twice: a usage error naming it, exit 2, before any work', async (command, args) => {
    const { code, stdout, stderr } = await runCli(...args);
    expect([code, stdout]).toEqual([2, '']);
    expect(stderr).toMatch(new RegExp(`^subagent-host ${command}: --${args[args.length - 2]!.slice(2)} is given more than once\n\nusage: subagent-host ${command} `));
  });

  it('are quoted in a usage error with their control characters escaped, never raw', async () => {
    const stray = await runCli('ls', 'S', 'b\u001b[31mRED');
    const unknown = await runCli('ls', '--b\u001b[31mRED');
    for (const { code, stderr } of [stray, unknown]) {
      expect(code).toBe(2);
      expect(stderr).not.toContain('\u001b');
      expect(stderr).toContain('b\\x1b[31mRED');
    }
  });
});

describe('subagent-host acp', () => {
  it('prints its usage on --help and exits 0', async () => {
    const { code, stdout } = await runCli('acp', '--help');
    expect(code).toBe(0);
    expect(stdout).toMatch(/^usage: subagent-host acp /);
  });

  it('names an unknown option with the usage on stderr and exits 2', async () => {
    const { code, stdout, stderr } = await runCli('acp', '--colour');
    expect(code).toBe(2);
    expect(stdout).toBe('');
    expect(stderr).toMatch(/^subagent-host acp: .*'--colour'/);
    expect(stderr).toContain('usage: subagent-host acp ');
  });

  it.each([['not a spec'], ['{"kind":"nope"}']])('refuses --model %j with INVALID_MODEL_SPEC and the usage, exit 2, before serving', async (model) => {
    const { code, stdout, stderr } = await runCli('acp', '--model', model);
    expect(code).toBe(2);
    expect(stdout).toBe('');
    expect(stderr).toMatch(/^subagent-host acp: INVALID_MODEL_SPEC: /);
    expect(stderr).toContain('usage: subagent-host acp ');
  });

  it.each([
    [{ OPENAI_BASE_URL: 'not a url' }, 'OPENAI_BASE_URL must be an http(s) URL'],
    [{ OPENAI_BASE_URL: 'https://user:sk-secret@api.example.com/v1' }, 'OPENAI_BASE_URL must be an http(s) URL'],
    [{ OPENAI_MODEL: '' }, 'OPENAI_MODEL must be a non-empty model name'],
  ])('refuses --model openai with %j naming the variable (never its value) with INVALID_MODEL_SPEC and the usage, exit 2, before serving', async (env, message) => {
    const { code, stdout, stderr } = await runCliWith({ OPENAI_API_KEY: 'sk-test', ...env }, 'acp', '--model', 'openai');
    expect({ code, stdout }).toEqual({ code: 2, stdout: '' });
    expect(stderr.startsWith(`subagent-host acp: INVALID_MODEL_SPEC: ${message}`)).toBe(true);
    expect(stderr).toContain('usage: subagent-host acp ');
    expect(stderr).not.toContain('sk-secret');
  });

  it('refuses an empty --db with INVALID_OPTIONS and the usage, exit 2, before serving', async () => {
    const { code, stdout, stderr } = await runCli('acp', '--db', '');
    expect({ code, stdout }).toEqual({ code: 2, stdout: '' });
    expect(stderr).toMatch(/^subagent-host acp: INVALID_OPTIONS: --db needs a file path\n\nusage: subagent-host acp /);
  });
});

describe('subagent-host demo', () => {
  it('prints its usage on --help and exits 0 without running anything', async () => {
    const { code, stdout, stderr } = await runCli('demo', '--help');
    expect([code, stderr]).toEqual([0, '']);
    expect(stdout).toMatch(/^usage: subagent-host demo \[options\]/);
    expect(stdout).toContain('--json');
  });

  it('names an unknown option with the usage on stderr and exits 2', async () => {
    const { code, stdout, stderr } = await runCli('demo', '--colour');
    expect([code, stdout]).toEqual([2, '']);
    expect(stderr).toMatch(/^subagent-host demo: .*'--colour'/);
    expect(stderr).toContain('usage: subagent-host demo ');
  });

  it.each([
    [['--provider', 'thread'], '--provider must be spawn, fork or in-process'],
    [['--children', '65'], '--children must be an integer from 1 to 64'],
    [['--children', '1e1'], '--children must be an integer from 1 to 64'],
    [['--children', '0x3'], '--children must be an integer from 1 to 64'],
    [['--deadline', '0'], '--deadline must be a whole number of milliseconds from 1 to 2147483647'],
    [['--deadline', '3000000000'], '--deadline must be a whole number of milliseconds from 1 to 2147483647'],
    [['--dir', ''], '--dir needs a directory path'],
    [['--model', 'gpt'], '--model must be scripted or openai'],
    [['--db', ''], '--db needs a file path'],
  ])('refuses %j with one line naming the flag and exits 2 before any work', async (args, message) => {
    const { code, stdout, stderr } = await runCli('demo', ...args);
    expect({ code, stdout }).toEqual({ code: 2, stdout: '' });
    const [line, usage] = stderr.split('\n\n');
    expect(line).toBe(`subagent-host demo: INVALID_OPTIONS: ${message}`);
    expect(usage).toMatch(/^usage: subagent-host demo \[options\]/);
  });

  it('refuses --model openai with a malformed OPENAI_BASE_URL with one line naming the variable and exits 2 before any work', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'demo-env-'));
    try {
      const db = join(dir, 'sessions.db');
      const env = { OPENAI_BASE_URL: 'api.example.com/v1', OPENAI_MODEL: 'm', OPENAI_API_KEY: 'sk-test' };
      const result = await runCliWith(env, 'demo', '--provider', 'in-process', '--children', '1', '--model', 'openai', '--db', db);
      expect(result).toEqual({
        code: 2,
        stdout: '',
        stderr: 'subagent-host demo: --model openai: OPENAI_BASE_URL must be an http(s) URL without user name, password or #fragment, such as https://api.openai.com/v1\n',
      });
      // Refused before the run: no database was made.
      expect(existsSync(db)).toBe(false);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it.each([
    ['a text file', (dir: string) => (writeFileSync(join(dir, 'notes.db'), 'notes, not a database\n'.repeat(100)), join(dir, 'notes.db')), 'CORRUPT_DATA: '],
    ['a directory', (dir: string) => dir, 'INVALID_OPTIONS: '],
  ])('refuses --db naming %s with one line and exits 2 before any work', async (_what, make, code) => {
    const dir = mkdtempSync(join(tmpdir(), 'demo-db-'));
    try {
      for (const extra of [[], ['--continuable']]) {
        const result = await runCli('demo', '--provider', 'in-process', '--children', '1', '--db', make(dir), ...extra);
        expect({ code: result.code, stdout: result.stdout }).toEqual({ code: 2, stdout: '' });
        expect(result.stderr).toMatch(new RegExp(`^subagent-host demo: ${code}[^\n]*\n$`));
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('subagent-host demo and acp --db', () => {
  // SQLite takes /dev/null for an empty database and writes its rollback journal beside it: as root,
  // a file /dev/null-journal. The check before the run must refuse it without writing anything.
  const journal = '/dev/null-journal';
  it.skipIf(!existsSync('/dev/null') || existsSync(journal))('refuses a --db that is not a regular file (/dev/null) with one line, exit 2, creating nothing beside it', async () => {
    try {
      for (const args of [['demo', '--provider', 'in-process', '--children', '1'], ['acp']]) {
        const { code, stdout, stderr } = await runCli(...args, '--db', '/dev/null');
        expect({ args, code, stdout, stderr }).toEqual({ args, code: 2, stdout: '', stderr: `subagent-host ${args[0]}: INVALID_OPTIONS: path "/dev/null" cannot be opened: it is not a regular file\n` });
        expect(existsSync(journal)).toBe(false);
      }
    } finally {
      // A failing run as root left it in /dev.
      rmSync(journal, { force: true });
    }
  });
});

describe('subagent-host worker', () => {
  it('prints its usage on --help and exits 0 without connecting', async () => {
    const { code, stdout } = await runCli('worker', '--help');
    expect(code).toBe(0);
    expect(stdout).toMatch(/^usage: subagent-host worker --redis URL/);
    // The usage names every option described below it.
    const [synopsis, ...rest] = stdout.split('\n\n');
    const described = [...rest.join('\n\n').matchAll(/^ {2}(--[a-z-]+)/gm)].map((match) => match[1]!);
    expect(described).toHaveLength(7);
    for (const option of described) expect(synopsis).toContain(option);
  });

  it.each([[['--bogus']], [['stray']]])('names the bad argument %j with the usage on stderr and exits 2 without connecting', async (args) => {
    const { code, stdout, stderr } = await runCli('worker', ...args);
    expect([code, stdout]).toEqual([2, '']);
    expect(stderr).toMatch(new RegExp(`^subagent-host worker: .*'${args[0]}'`));
    expect(stderr).toContain('usage: subagent-host worker --redis URL');
  });

  // The values are checked before Redis is contacted: nothing listens on port 1.
  it.each([
    [['--queue', 'my queue'], '--queue must be 1–100 letters, digits, _ . or -'],
    [['--concurrency', '0'], '--concurrency must be a whole number from 1 to 1024, got "0"'],
    [['--concurrency', '1e3'], '--concurrency must be a whole number from 1 to 1024, got "1e3"'],
    [['--drain-grace-ms', '1.5'], '--drain-grace-ms must be a whole number from 1 to 2147483647, got "1.5"'],
    [['--drain-grace-ms', '3000000000'], '--drain-grace-ms must be a whole number from 1 to 2147483647, got "3000000000"'],
    [['--cancel-grace-ms', '0'], '--cancel-grace-ms must be a whole number from 1 to 2147483647, got "0"'],
    [['--lock-duration-ms', '1'], '--lock-duration-ms must be a whole number from 100 to 3600000, got "1"'],
    [['--lock-duration-ms', '3000000000'], '--lock-duration-ms must be a whole number from 100 to 3600000, got "3000000000"'],
  ])('refuses %j with INVALID_OPTIONS and the usage, exit 2', async (args, message) => {
    const { code, stdout, stderr } = await runCli('worker', '--redis', 'redis://127.0.0.1:1', ...args);
    expect({ code, stdout }).toEqual({ code: 2, stdout: '' });
    const [line, usage] = stderr.split('\n\n');
    expect(line).toBe(`subagent-host worker: INVALID_OPTIONS: ${message}`);
    expect(usage).toMatch(/^usage: subagent-host worker --redis URL/);
  });
});

describe('subagent-host bench', () => {
  it('prints its usage with the suite names on --help and exits 0 without running a suite', async () => {
    const { code, stdout, stderr } = await runCli('bench', '--help');
    expect([code, stderr]).toEqual([0, '']);
    expect(stdout).toMatch(/^usage: subagent-host bench \[SUITE…\] \[--json FILE\]\n/);
    expect(stdout).toContain('startup, overhead, throughput, listing, queue, continuation, cancel, acp');
  });

  it.each([
    [['--bogus'], "Unknown option '--bogus'"],
    [['listing', 'nosuite'], 'unknown suite: nosuite'],
    [['toString'], 'unknown suite: toString'],
    [['cancel', '--json', ''], '--json needs a file path'],
    [['cancel', '--json', '/nonexistent-dir/rows.json'], '--json cannot be written: /nonexistent-dir is not a writable directory'],
    [['cancel', '--json', '/nonexistent-dir/'], '--json /nonexistent-dir/ names a directory, not a file'],
    [['cancel', '--json', '/nonexistent-dir/a.json', '--json', '/nonexistent-dir/b.json'], '--json is given more than once'],
    [['cancel', 'cancel'], 'suite named more than once: cancel'],
    [['cancel', 'overhead', 'cancel', 'overhead'], 'suite named more than once: cancel, overhead'],
  ])('refuses %j with the usage on stderr and exits 2 before any suite runs', async (args, message) => {
    const { code, stdout, stderr } = await runCli('bench', ...args);
    expect({ code, stdout }).toEqual({ code: 2, stdout: '' });
    expect(stderr).toMatch(/^subagent-host bench: /);
    expect(stderr).toContain(message);
    expect(stderr).toContain('usage: subagent-host bench ');
  });
});

/** The pids of `pid`'s children (Linux: /proc). */
function childPids(pid: number): number[] {
  return readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').split(' ').filter(Boolean).map(Number);
}

/** Whether process `pid` exists. */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe('subagent-host bench, stopped', () => {
  it.skipIf(!existsSync(`/proc/${process.pid}/task/${process.pid}/children`)).each(['SIGTERM', 'SIGHUP', 'SIGINT'] as const)(
    'on %s stops the suite process it started before it exits, leaving nothing running',
    async (signal) => {
      const bench = spawn(process.execPath, [cli, 'bench', 'overhead'], { stdio: ['ignore', 'pipe', 'pipe'] });
      const exited = new Promise<[number | null, string | null]>((resolve) => bench.once('exit', (code, sig) => resolve([code, sig])));
      // A suite that leaves no file behind when it is stopped. Its first line is written just before it starts.
      await new Promise((resolve) => bench.stdout.once('data', resolve));
      let suites: number[] = [];
      while (suites.length === 0) {
        suites = childPids(bench.pid!);
        if (suites.length === 0) await new Promise((resolve) => setTimeout(resolve, 10));
      }
      try {
        bench.kill(signal);
        const [code, killedBy] = await exited;
        expect({ left: suites.filter(alive), code, killedBy }).toEqual({ left: [], code: { SIGTERM: 143, SIGHUP: 129, SIGINT: 130 }[signal], killedBy: null });
      } finally {
        for (const pid of suites.filter(alive)) process.kill(pid, 'SIGKILL');
      }
    },
    60_000,
  );
});

describe('subagent-host bench, stopped while a suite holds a temp folder', () => {
  it.each(['continuation', 'acp'])('removes the %s suite’s temp folder before it exits', async (suite) => {
    const tmp = mkdtempSync(join(tmpdir(), 'bench-stopped-'));
    onTestFinished(() => rmSync(tmp, { recursive: true, force: true }));
    const bench = spawn(process.execPath, [cli, 'bench', suite], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, TMPDIR: tmp } });
    const exited = new Promise<number | null>((resolve) => bench.once('exit', (code) => resolve(code)));
    // The suite makes its folder as it starts, after it is ready for a signal, in the temp dir bench
    // gave its process (a folder of `tmp`).
    const suiteFolders = (): string[] => readdirSync(tmp).flatMap((dir) => readdirSync(join(tmp, dir)));
    while (suiteFolders().length === 0) await new Promise((resolve) => setTimeout(resolve, 10));
    const held = suiteFolders();
    bench.kill('SIGTERM');
    expect({ code: await exited, held: held.length, left: readdirSync(tmp) }).toEqual({ code: 143, held: 1, left: [] });
  }, 60_000);
});

describe('option values read by a command', () => {
  it('a failure that is not a SubagentError is a bug, not a usage error: it propagates (exit 1 from the command line)', async () => {
    const { readValues } = await import('../dist/src/cli/args.js');
    const bug = new TypeError('not a usage error');
    expect(() =>
      readValues('worker', 'usage: …', () => {
        throw bug;
      }),
    ).toThrow(bug);
    expect(readValues('worker', 'usage: …', () => ({ concurrency: 4 }))).toEqual({ concurrency: 4 });
  });
});
