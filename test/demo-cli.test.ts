// The demo command, run as a user runs it: every child is accounted for, chaos is contained.
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';

const cli = new URL('../dist/src/cli.js', import.meta.url).pathname;
const run = promisify(execFile);
const dir = mkdtempSync(join(tmpdir(), 'demo-'));
for (let i = 0; i < 7; i++) writeFileSync(join(dir, `file${i}.ts`), `export const value${i} = ${i};\n`.repeat(20 + i));
const empty = mkdtempSync(join(tmpdir(), 'demo-empty-'));
writeFileSync(join(empty, 'notes.bin'), 'not source');

afterAll(() => {
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
    // The same three children also ran one by one, so there is a speed-up to report.
    expect(report.sequentialMs).toBeGreaterThan(0);
    expect(report.speedup).toBeGreaterThan(0);
  });

  // The deadline cancels every child still running, so it must be far beyond a normal child on a
  // loaded machine; only the runaway child, which never ends by itself, should meet it.
  it('contains a crashing and a runaway child with --chaos while the rest finish', { timeout: 60_000 }, async () => {
    const report = await demo('--chaos', '--children', '2', '--deadline', '8000');
    expect(report.children.map((c) => c.stopReason)).toEqual(['completed', 'completed', 'error', 'aborted']);
    // Children that did not complete cannot be compared with a one-by-one run: no speed-up, and why.
    expect([report.sequentialMs, report.speedup, typeof report.noSpeedup]).toEqual([null, null, 'string']);
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
});
