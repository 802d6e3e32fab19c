// The demo command, run as a user runs it: every child is accounted for, chaos is contained, and the
// text a terminal shows (progress lines, or a redrawn bar on a TTY, then the report) says what ran.
import { execFile, spawn } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import Database from 'better-sqlite3';
import { afterAll, describe, expect, it } from 'vitest';
import { createHost } from 'subagent-host';
import { interruptCli } from './helpers.js';

const cli = new URL('../dist/src/cli.js', import.meta.url).pathname;
const run = promisify(execFile);
const dir = mkdtempSync(join(tmpdir(), 'demo-'));
for (let i = 0; i < 7; i++) writeFileSync(join(dir, `file${i}.ts`), `export const value${i} = ${i};\n`.repeat(20 + i));
// Not analysed: dependencies, and a link whose target is gone (every run below counts 7 files).
mkdirSync(join(dir, 'node_modules'));
writeFileSync(join(dir, 'node_modules', 'dependency.ts'), 'export const dependency = 1;\n');
symlinkSync(join(dir, 'deleted.ts'), join(dir, 'dangling.ts'));
const empty = mkdtempSync(join(tmpdir(), 'demo-empty-'));
writeFileSync(join(empty, 'notes.bin'), 'not source');

// Where the text runs save: a folder whose name a shell must quote.
const saved = mkdtempSync(join(tmpdir(), 'demo-text-'));
mkdirSync(join(saved, "it's saved"));

afterAll(() => {
  rmSync(saved, { recursive: true, force: true });
  rmSync(dir, { recursive: true, force: true });
  rmSync(empty, { recursive: true, force: true });
});

interface Report {
  provider: string;
  children: { id: string; stopReason: string; ms: number; tokens: number | null; turns: number | null }[];
  totalMs: number;
  sequentialMs: number | null;
  speedup: number | null;
  noSpeedup?: string;
  chunks: { planned: number; delegated: number; missing: string[] };
}

let runs = 0;

async function demo(...args: string[]): Promise<Report> {
  // Each run saves its sessions to a database of its own, never to ./subagent-host.db.
  const db = join(dir, `run-${++runs}.db`);
  const { stdout } = await run(process.execPath, [cli, 'demo', '--json', '--dir', dir, '--db', db, ...args], { timeout: 60_000 });
  return JSON.parse(stdout) as Report;
}

describe('subagent-host demo', () => {
  it.each(['spawn', 'fork', 'in-process'])('accounts for every child with --provider %s', async (provider) => {
    const report = await demo('--provider', provider, '--children', '3');
    expect(report.provider).toBe(provider);
    expect(report.children.map((c) => c.stopReason)).toEqual(['completed', 'completed', 'completed']);
    expect(new Set(report.children.map((c) => c.id)).size).toBe(3);
    // Each child asked its (deterministic) model twice in one turn, and says what that cost.
    for (const child of report.children) expect(child).toMatchObject({ tokens: expect.any(Number), turns: 1 });
    expect(report.children.every((c) => (c.tokens ?? 0) > 0)).toBe(true);
    expect(report.totalMs).toBeGreaterThan(0);
    expect(report.chunks).toEqual({ planned: 3, delegated: 3, missing: [] });
    // The same three children also ran one by one, so there is a speed-up to report, unless that
    // run took more than the cores can explain (a loaded machine: these jobs take tens of ms), which
    // the report then says instead.
    expect(report.sequentialMs).toBeGreaterThan(0);
    if (report.speedup === null) expect(report.noSpeedup).toMatch(/more than (\d+ cores|in-process children, which share the host's one thread,) can explain/);
    else expect(report.speedup).toBeGreaterThan(0);
  });

  // The deadline cancels every child still running, so it must be far beyond a normal child on a
  // loaded machine; only the runaway child, which never ends by itself, should meet it.
  it('contains a crashing and a runaway child with --chaos while the rest finish', { timeout: 60_000 }, async () => {
    const report = await demo('--chaos', '--children', '2', '--deadline', '8000');
    expect(report.children.map((c) => c.stopReason)).toEqual(['completed', 'completed', 'error', 'aborted']);
    // Children that did not complete cannot be compared with a one-by-one run: no speed-up, and why.
    expect([report.sequentialMs, report.speedup, typeof report.noSpeedup]).toEqual([null, null, 'string']);
  });

  it('leaves in its database the run and one warm-up root, the run newest; the one-by-one runs save elsewhere and leave nothing', async () => {
    const db = join(dir, 'roots.db');
    const temp = mkdtempSync(join(tmpdir(), 'demo-tmp-'));
    try {
      const { stdout } = await run(process.execPath, [cli, 'demo', '--json', '--children', '2', '--dir', dir, '--db', db], {
        timeout: 60_000,
        env: { ...process.env, TMPDIR: temp },
      });
      const report = JSON.parse(stdout) as Report & { parentId: string };
      // The one-by-one runs happened (their file lived in TMPDIR).
      expect(report.sequentialMs).toBeGreaterThan(0);
      expect(readdirSync(temp)).toEqual([]);
      const host = await createHost({ persistence: { sqlite: db }, providers: false });
      try {
        const sessions = await host.persistence!.list();
        const roots = sessions.filter((header) => header.parentSession === undefined).sort((a, b) => b.createdAt - a.createdAt);
        expect(roots).toHaveLength(2);
        expect(roots[0]!.id).toBe(report.parentId);
        const listed = await host.subagents.listChildren(report.parentId);
        expect(listed.map((child) => child.id).sort()).toEqual(report.children.map((child) => child.id).sort());
        const warmUps = await host.subagents.listChildren(roots[1]!.id);
        expect(warmUps.length).toBeGreaterThan(0);
        expect(new Set(warmUps.map((child) => (child.kind === 'child' ? child.label : child.kind)))).toEqual(new Set(['warm-up']));
        expect(sessions).toHaveLength(2 + listed.length + warmUps.length);
      } finally {
        await host.close();
      }
    } finally {
      rmSync(temp, { recursive: true, force: true });
    }
  });

  it('saves to $SUBAGENT_HOST_DB when no --db is given', async () => {
    const db = join(saved, 'from-env.db');
    const { stdout } = await run(process.execPath, [cli, 'demo', '--json', '--provider', 'in-process', '--children', '1', '--dir', dir], {
      timeout: 60_000,
      env: { ...process.env, SUBAGENT_HOST_DB: db },
    });
    expect((JSON.parse(stdout) as { db: string }).db).toBe(db);
    expect(existsSync(db)).toBe(true);
  });

  it('rejects bad options with exit code 2', async () => {
    await expect(run(process.execPath, [cli, 'demo', '--children', 'zero'])).rejects.toMatchObject({ code: 2 });
    await expect(run(process.execPath, [cli, 'demo', '--provider', 'in-process', '--chaos'])).rejects.toMatchObject({ code: 2 });
  });

  it.each([
    ['a missing --dir', ['--dir', join(dir, 'missing')], {}],
    ['a --dir that is a file', ['--dir', join(dir, 'file0.ts')], {}],
    ['an empty --dir', ['--dir', empty], {}],
    ['--model openai without its environment', ['--dir', dir, '--model', 'openai'], { OPENAI_BASE_URL: '', OPENAI_MODEL: '', OPENAI_API_KEY: '', DEEPSEEK_API_KEY: '' }],
    ['--model openai without a key', ['--dir', dir, '--model', 'openai'], { OPENAI_BASE_URL: 'http://127.0.0.1:9/v1', OPENAI_MODEL: 'm', OPENAI_API_KEY: '' }],
  ])('rejects %s with one line and exit code 2 before any work', async (_name, args, env) => {
    const failed = await run(process.execPath, [cli, 'demo', ...args], { env: { ...process.env, ...env } }).catch((error: unknown) => error);
    expect(failed).toMatchObject({ code: 2, stdout: '' });
    expect((failed as { stderr: string }).stderr).toMatch(/^subagent-host demo: [^\n]+\n$/);
  });

  // SQLite opens a file it may not write as read-only, quietly: the demo would start, then fail (exit 1).
  it('rejects a --db file it may not write with one line and exit code 2, before any work', async () => {
    const db = join(mkdtempSync(join(tmpdir(), 'demo-readonly-')), 'sessions.db');
    const host = await createHost({ persistence: { sqlite: db }, providers: false });
    await host.close();
    // Root writes any file its mode forbids: an immutable one it may not.
    const root = process.getuid?.() === 0;
    if (root) await run('chattr', ['+i', db]);
    else chmodSync(db, 0o444);
    try {
      const failed = await run(process.execPath, [cli, 'demo', '--children', '1', '--db', db]).catch((error: unknown) => error);
      expect(failed).toMatchObject({ code: 2, stdout: '' });
      expect((failed as { stderr: string }).stderr).toMatch(/^subagent-host demo: cannot use .*sessions\.db: SQLite may not write it \([^\n]*readonly[^\n]*\)\n$/);
    } finally {
      if (root) await run('chattr', ['-i', db]);
      rmSync(dirname(db), { recursive: true, force: true });
    }
  });

  it('names the variables that are set and those missing for --model openai', async () => {
    const env = { ...process.env, OPENAI_BASE_URL: '', OPENAI_MODEL: 'm', OPENAI_API_KEY: '', DEEPSEEK_API_KEY: '' };
    const failed = await run(process.execPath, [cli, 'demo', '--dir', dir, '--model', 'openai'], { env }).catch((error: { stderr: string }) => error);
    expect((failed as { stderr: string }).stderr).toBe(
      'subagent-host demo: --model openai needs OPENAI_BASE_URL, OPENAI_MODEL, OPENAI_API_KEY: OPENAI_MODEL is set, OPENAI_BASE_URL and OPENAI_API_KEY not\n',
    );
  });
});

describe('subagent-host demo interrupted during its one-by-one comparison run', () => {
  it('stops that run too: exit 130, no report', { timeout: 180_000 }, async () => {
    // A large folder, so the one-by-one run lasts; the demo makes its folder under TMPDIR. The deadline
    // is far off: on a loaded machine the children take longer than the default 20 s to read it.
    const big = new URL('../node_modules/typescript', import.meta.url).pathname;
    const temp = mkdtempSync(join(tmpdir(), 'demo-sigint-'));
    const db = join(dir, `run-${++runs}.db`);
    const child = spawn(process.execPath, [cli, 'demo', '--children', '2', '--dir', big, '--db', db, '--deadline', '600000'], { env: { ...process.env, TMPDIR: temp }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => void (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => void (stderr += chunk.toString()));
    let code: number | null | undefined;
    const exited = new Promise<number | null>((resolve) => child.once('exit', (exit) => resolve((code = exit))));
    try {
      while (!readdirSync(temp).some((name) => name.startsWith('subagent-host-baseline-'))) {
        // A demo that ended before its one-by-one run says why, rather than the test waiting out its timeout.
        if (code !== undefined) throw new Error(`the demo exited ${code} before its one-by-one run:\n${stdout}\n${stderr}`);
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
      child.kill('SIGINT');
      let timer: NodeJS.Timeout | undefined;
      const hung = new Promise<string>((resolve) => (timer = setTimeout(() => resolve('still running 60 s after SIGINT'), 60_000)));
      const ended = await Promise.race([exited, hung]);
      clearTimeout(timer);
      expect(ended, `stdout:\n${stdout}\nstderr:\n${stderr}`).toBe(130);
      expect(stdout).not.toContain('speed-up');
      expect(readdirSync(temp)).toEqual([]);
    } finally {
      child.kill('SIGKILL');
      rmSync(temp, { recursive: true, force: true });
    }
  });
});

describe('subagent-host demo interrupted while children wait for a thread', () => {
  it('reports the children that never ran as not started, not as errors', { timeout: 90_000 }, async () => {
    // More chunks than threads or parallel tool calls (16), of a large folder: most never start.
    const big = new URL('../node_modules/typescript/lib', import.meta.url).pathname;
    const db = join(dir, `run-${++runs}.db`);
    // Ctrl-C as the first child runs: the others wait for a thread or for a tool slot.
    const { ended, stdout, stderr } = await interruptCli(cli, ['demo', '--children', '64', '--dir', big, '--db', db], /^ {2}chunk \d+\/64 +running since/m, 80_000);
    expect(ended, `stdout:\n${stdout}\nstderr:\n${stderr}`).toBe(130);
    const started = new Set([...stdout.matchAll(/^ {2}(chunk \d+\/64) +running since/gm)].map((m) => m[1]));
    const rows = [...stdout.matchAll(/^ {2}(chunk \d+\/64) +(\S+(?: started)?) +(\d+) ms +\S+ +\S+ {2}(\S*)$/gm)].map(([, label, result, ms, id]) => ({ label: label!, result, ms, id }));
    expect(rows).toHaveLength(64);
    const unstarted = rows.filter((row) => !started.has(row.label));
    expect(unstarted.length).toBeGreaterThan(0);
    // What never ran is not an error, took no time and has no session; what ran was stopped.
    for (const row of unstarted) expect(row).toEqual({ label: row.label, result: 'not started', ms: '0', id: '' });
    for (const row of rows.filter((r) => started.has(r.label))) expect(['aborted', 'completed']).toContain(row.result);
    expect(stdout).not.toMatch(/ended error| error in /);
    expect(stdout).toContain(`; ${unstarted.length} of them never started: cancelled before they ran).`);
    expect(stdout).toContain(` ${unstarted.length} children never started (cancelled before they ran); a speed-up is measured only when every child completed.`);
    const queued = [...stdout.matchAll(/^ {2}(chunk \d+\/64) +queued$/gm)].map((m) => m[1]!).filter((label) => !started.has(label));
    for (const label of queued) expect(stdout).toMatch(new RegExp(`^ {2}${label.replace('/', '\\/')} +not started after \\d+ ms queued — cancelled before it ran$`, 'm'));
  });
});

describe('subagent-host demo stopped by its terminal closing (SIGHUP) or by SIGTERM', () => {
  it.each([
    ['SIGHUP', 129],
    ['SIGTERM', 143],
  ] as const)('stops on %s as on Ctrl-C, exit %i (128 + the signal), and no turn it began is left open in its database', { timeout: 90_000 }, async (signal, code) => {
    const big = new URL('../node_modules/typescript/lib', import.meta.url).pathname;
    const db = join(dir, `run-${++runs}.db`);
    const { ended, stdout, stderr } = await interruptCli(cli, ['demo', '--children', '8', '--dir', big, '--db', db], /^ {2}chunk \d+\/8 +running since/m, 80_000, signal);
    expect(ended, `stdout:\n${stdout}\nstderr:\n${stderr}`).toBe(code);
    const saved = new Database(db, { readonly: true });
    try {
      const turns = saved.prepare("SELECT session_id AS id, SUM(type = 'turn/start') AS started, SUM(type = 'turn/end') AS ended FROM events GROUP BY session_id").all() as { id: string; started: number; ended: number }[];
      expect(turns.length).toBeGreaterThan(1);
      expect(turns.filter((turn) => turn.started !== turn.ended)).toEqual([]);
    } finally {
      saved.close();
    }
  });
});

describe('subagent-host demo --provider in-process interrupted while its children run', () => {
  it('stops them on Ctrl-C, though they analyse on its own thread: each ends aborted, not completed', { timeout: 120_000 }, async () => {
    // A large folder: each chunk is seconds of synchronous analysis on the thread that must see the Ctrl-C.
    const big = new URL('../node_modules/typescript/lib', import.meta.url).pathname;
    const db = join(dir, `run-${++runs}.db`);
    const args = ['demo', '--provider', 'in-process', '--children', '4', '--dir', big, '--db', db, '--deadline', '600000'];
    const { ended, stdout, stderr } = await interruptCli(cli, args, /^ {2}chunk \d+\/4 +running since/m, 100_000);
    expect(ended, `stdout:\n${stdout}\nstderr:\n${stderr}`).toBe(130);
    const rows = [...stdout.matchAll(/^ {2}(chunk \d+\/4) +(\S+) +\d+ ms +\S+ +\S+ {2}\S*$/gm)].map(([, label, result]) => ({ label, result }));
    expect(rows).toEqual([1, 2, 3, 4].map((n) => ({ label: `chunk ${n}/4`, result: 'aborted' })));
  });
});

describe('subagent-host demo with more children asked than files', () => {
  it('says how many children it plans, one per file', async () => {
    const db = join(saved, 'more-children.db');
    const { stdout } = await run(process.execPath, [cli, 'demo', '--provider', 'in-process', '--children', '9', '--dir', dir, '--db', db], { timeout: 60_000 });
    expect(stdout.split('\n')[0]).toBe(`Asking a scripted planner to delegate the analysis of 7 files under ${dir} to 7 'in-process' children…`);
    expect(stdout).toContain('chunk 7/7');
  });
});

describe('subagent-host demo without --json', () => {
  it('prints each child queued, running and done, then the table, the speed-up and commands that work when pasted into a shell', async () => {
    const db = join(saved, "it's saved", 'run.db');
    const { stdout } = await run(process.execPath, [cli, 'demo', '--provider', 'in-process', '--children', '2', '--dir', dir, '--db', db], { timeout: 60_000 });
    const lines = stdout.split('\n');
    expect(lines[0]).toBe(`Asking a scripted planner to delegate the analysis of 7 files under ${dir} to 2 'in-process' children…`);
    for (const label of ['chunk 1/2', 'chunk 2/2']) {
      const progress = lines.filter((line) => line.startsWith(`  ${label.padEnd(14)} `)).map((line) => line.slice(17).replace(/\d+ ms/, 'N ms'));
      // Three progress lines, then the child's row in the table.
      expect(progress.slice(0, 3)).toEqual(['queued', 'running since N ms', 'done in N ms']);
      expect(progress[3]).toMatch(/^completed +N ms +\d+ +1 {2}[0-9a-f-]{36}$/);
    }
    expect(stdout).toMatch(/^ {2}child +result +time +tokens +turns {2}session$/m);
    expect(stdout).toMatch(/^ {2}The model delegated 2 children covering all 2 chunks \(up to [12] running at once\)\.$/m);
    expect(stdout).toMatch(
      /The 2 children took \d+ ms taking turns on the host's thread \('in-process'\); the same children one by one in-process: \d+ ms \(speed-up ×[01]\.\d\d\)\.$|No speed-up: the one-by-one run took ×\d+\.\d\d the parallel run's time, more than in-process children, which share the host's one thread, can explain/m,
    );

    const quoted = `'${join(saved, "it'\\''s saved", 'run.db')}'`;
    expect(stdout).toContain(`\n    subagent-host inspect --db ${quoted}\n`);
    const ls = /^ {4}(subagent-host ls \S+ --tree --db .+)$/m.exec(stdout)?.[1] ?? '';
    expect(ls.endsWith(`--db ${quoted}`)).toBe(true);
    const pasted = await run('/bin/sh', ['-c', `${ls.replace(/^subagent-host /, `'${process.execPath}' '${cli}' `)} --json`]);
    const listed = JSON.parse(pasted.stdout) as { label: string }[];
    expect(listed.map((entry) => entry.label)).toEqual(['chunk 1/2', 'chunk 2/2']);
  });

  // The progress lines and the report share one clock, started with the job: the threads' warm-up
  // before it is no part of when a child ran. Every child ran within the job, so it ended by its end.
  it('times the progress lines from the start of the job the report times', async () => {
    const db = join(saved, 'clock.db');
    const { stdout } = await run(process.execPath, [cli, 'demo', '--provider', 'spawn', '--children', '2', '--dir', dir, '--db', db], { timeout: 60_000 });
    const job = Number(/the whole job took (\d+) ms/.exec(stdout)?.[1]);
    const since = new Map([...stdout.matchAll(/^ {2}(chunk \d\/2) +running since (\d+) ms$/gm)].map(([, label, ms]) => [label!, Number(ms)]));
    const ran = [...stdout.matchAll(/^ {2}(chunk \d\/2) +done in (\d+) ms$/gm)].map(([, label, ms]) => ({ label: label!, ended: since.get(label!)! + Number(ms) }));
    expect(ran.map((child) => child.label).sort()).toEqual(['chunk 1/2', 'chunk 2/2']);
    // Each figure is rounded to the millisecond: the two of a child's end by up to 1 ms, the job's by up to 0.5 ms.
    for (const child of ran) expect(child.ended, stdout).toBeLessThanOrEqual(job + 2);
  });

  // `script` (util-linux) runs the demo on a pseudo-terminal, as a user's shell does.
  it('redraws the children and a progress bar in place on a terminal', async () => {
    const db = join(saved, 'tty.db');
    const command = [process.execPath, cli, 'demo', '--provider', 'in-process', '--children', '2', '--dir', dir, '--db', db].map((word) => `'${word}'`).join(' ');
    const { stdout } = await run('script', ['-qec', command, '/dev/null'], { timeout: 60_000 });
    // Each redraw moves up over the previous one and clears every line it rewrites.
    expect(stdout).toMatch(/\x1b\[3A\x1b\[2K {2}chunk 1\/2 +\S/);
    expect(stdout).toMatch(/\x1b\[2K {2}\[#{24}\] 2\/2 children, \d+\.\d s\r?\n/);
    expect(stdout).not.toMatch(/^ {2}chunk 1\/2 +queued\r?$/m);
    expect(stdout).toContain('The model delegated 2 children covering all 2 chunks');
  });
});
