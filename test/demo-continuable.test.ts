// `demo --continuable` as a user runs it: every child and follow-up accounted for in --json, the tree
// `ls --tree --json` prints afterwards from the same database, compared as a whole, and what the inspector shows of it.
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { interruptCli } from './helpers.js';
import { rawGet, startInspect } from './inspect-helpers.js';

const cli = new URL('../dist/src/cli.js', import.meta.url).pathname;
const run = promisify(execFile);
const dir = mkdtempSync(join(tmpdir(), 'demo-continuable-'));
for (let i = 0; i < 5; i++) writeFileSync(join(dir, `file${i}.ts`), `export const value${i} = ${i};\n`.repeat(20 + i));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

interface Report {
  mode: string;
  provider: string;
  parentId: string;
  db: string;
  files: number;
  children: { id: string; label: string; status: string; turns: number; reports: string[] }[];
  followups: number;
  followupsRefused: number;
  interrupted: boolean;
  turn: string;
  answer: string;
}

describe('subagent-host demo --continuable', () => {
  it('accounts for every child, report and follow-up, and leaves the tree for ls', async () => {
    const db = join(dir, 'run.db');
    const { stdout } = await run(process.execPath, [cli, 'demo', '--continuable', '--json', '--children', '2', '--dir', dir, '--db', db], { timeout: 120_000 });
    const report = JSON.parse(stdout) as Report;
    const ids = report.children.map((child) => child.id);
    expect({ ...report, parentId: 'P', children: report.children.map((child) => ({ ...child, id: 'C' })), totalMs: 0 }).toEqual({
      mode: 'continuable',
      provider: 'spawn',
      model: 'scripted',
      parentId: 'P',
      db,
      files: 5,
      children: [
        { id: 'C', label: 'chunk 1/2', status: 'completed', turns: 2, reports: ['partial finding: 3 files, 69 lines, 396 tokens'] },
        { id: 'C', label: 'chunk 2/2', status: 'completed', turns: 2, reports: ['partial finding: 2 files, 46 lines, 264 tokens'] },
      ],
      followups: 2,
      followupsRefused: 0,
      interrupted: false,
      totalMs: 0,
      turn: 'completed',
      answer: 'Started 2 continuable children and sent each a follow-up; all are idle. Heard 2 partial findings and 2 lists of largest files so far.',
    });
    expect(new Set(ids).size).toBe(2);

    const listed = JSON.parse((await run(process.execPath, [cli, 'ls', report.parentId, '--tree', '--json', '--db', db], { timeout: 60_000 })).stdout) as Record<string, unknown>[];
    const normalized = listed.map((entry) => {
      const usage = entry.usage as Record<string, number>;
      return {
        ...entry,
        id: `child ${ids.indexOf(String(entry.id))}`,
        parentId: entry.parentId === report.parentId ? 'parent' : entry.parentId,
        createdAt: typeof entry.createdAt,
        usage: { ...usage, inputTokens: typeof usage.inputTokens, outputTokens: typeof usage.outputTokens, totalTokens: typeof usage.totalTokens, wallMs: typeof usage.wallMs },
        // The children delegate nothing: each tree total is the child's own usage.
        treeUsage: JSON.stringify(entry.treeUsage) === JSON.stringify(usage) ? 'usage' : entry.treeUsage,
      };
    });
    const usage = { inputTokens: 'number', outputTokens: 'number', totalTokens: 'number', requests: 4, turns: 2, toolCalls: 2, wallMs: 'number' };
    expect(normalized).toEqual([
      { kind: 'child', id: 'child 0', mode: 'continuable', label: 'chunk 1/2', activity: 'inactive', hasChildren: false, createdAt: 'number', usage, treeUsage: 'usage', parentId: 'parent', depth: 1 },
      { kind: 'child', id: 'child 1', mode: 'continuable', label: 'chunk 2/2', activity: 'inactive', hasChildren: false, createdAt: 'number', usage, treeUsage: 'usage', parentId: 'parent', depth: 1 },
    ]);

    // The inspector shows the parent hearing each child: its report, then its settled notice.
    const inspector = await startInspect(db);
    try {
      const answer = await rawGet(inspector.url, `/api/sessions/${encodeURIComponent(report.parentId)}`);
      const entries = (JSON.parse(answer.body) as { entries: { kind: string; title: string; text?: string }[] }).entries;
      const heard = entries.filter((entry) => entry.kind === 'report' || entry.kind === 'notice');
      for (const id of ids) {
        expect(heard.map((entry) => entry.title)).toContain(`report from ${id}`);
        expect(heard.map((entry) => entry.title)).toContain(`notice: ${id} settled`);
      }
      expect(heard.find((entry) => entry.title === `report from ${ids[0]}`)?.text).toContain('partial finding: 3 files, 69 lines, 396 tokens');
      const tree = JSON.parse((await rawGet(inspector.url, `/api/roots/${encodeURIComponent(report.parentId)}/tree`)).body) as { nodes: { id: string; mode: string; label: string }[] };
      expect(tree.nodes.map(({ id, mode, label }) => ({ id, mode, label }))).toEqual([
        { id: ids[0], mode: 'continuable', label: 'chunk 1/2' },
        { id: ids[1], mode: 'continuable', label: 'chunk 2/2' },
      ]);
    } finally {
      expect(await inspector.stop()).toBe(0);
    }
  }, 180_000);

  it('prints each child with its turns and reports, the answer, and an ls command that works when pasted into a shell', async () => {
    mkdirSync(join(dir, 'saved runs'), { recursive: true });
    const db = join(dir, 'saved runs', 'text.db');
    const { stdout } = await run(process.execPath, [cli, 'demo', '--continuable', '--provider', 'in-process', '--children', '2', '--dir', dir, '--db', db], { timeout: 120_000 });
    expect(stdout.split('\n')[0]).toBe(`Asking a scripted planner to analyse 5 files under ${dir} with 2 continuable 'in-process' children…`);
    expect(stdout).toMatch(/^ {2}chunk 1\/2 +done in \d+ ms — 2 turns, 1 report: partial finding: 3 files, 69 lines, 396 tokens$/m);
    const summary = stdout.slice(stdout.indexOf('\n\n'));
    expect(summary.replace(/[0-9a-f-]{36}/g, 'ID').replace(/\d+ ms\./, 'N ms.')).toBe(
      [
        '',
        '',
        '  chunk 1/2: 2 turns, completed; reported: partial finding: 3 files, 69 lines, 396 tokens',
        '  chunk 2/2: 2 turns, completed; reported: partial finding: 2 files, 46 lines, 264 tokens',
        '',
        "  The model's answer:",
        '    Started 2 continuable children and sent each a follow-up; all are idle. Heard 2 partial findings and 2 lists of largest files so far.',
        '  2 children, 2 follow-ups, N ms.',
        '',
        `Saved to ${db}. Parent session: ID`,
        `  subagent-host ls ID --tree --db '${db}'`,
        '',
      ].join('\n'),
    );
    const ls = /^ {2}(subagent-host ls .+)$/m.exec(stdout)?.[1] ?? '';
    const pasted = await run('/bin/sh', ['-c', `${ls.replace(/^subagent-host /, `'${process.execPath}' '${cli}' `)} --json`], { timeout: 60_000 });
    expect((JSON.parse(pasted.stdout) as { label: string }[]).map((entry) => entry.label)).toEqual(['chunk 1/2', 'chunk 2/2']);
  }, 180_000);

  it('after Ctrl-C says it was interrupted and counts the children stopped, never started and the follow-ups refused', { timeout: 120_000 }, async () => {
    // 64 chunks of a large folder: Ctrl-C as the first child runs stops the started children mid-turn
    // and refuses what the planner asks for afterwards (more children, follow-ups).
    const big = new URL('../node_modules/typescript/lib', import.meta.url).pathname;
    const db = join(dir, 'interrupted.db');
    const { ended, stdout, stderr } = await interruptCli(cli, ['demo', '--continuable', '--children', '64', '--dir', big, '--db', db], /^ {2}chunk \d+\/64 +running since/m, 100_000);
    const output = `stdout:\n${stdout}\nstderr:\n${stderr}`;
    expect(ended, output).toBe(130);
    expect(stderr).toContain(`subagent-host demo: interrupted; its children were stopped and ${db} closed`);
    const rows = [...stdout.matchAll(/^ {2}chunk \d+\/64: (\d+) (turns?), ([^;]+); reported: .*$/gm)].map(([, turns, word, status]) => ({ turns: Number(turns), word, status: status! }));
    // Every child the planner asked for is listed, started or not, and "1 turn" is singular.
    expect(rows, output).toHaveLength(64);
    for (const row of rows) expect(row.word).toBe(row.turns === 1 ? 'turn' : 'turns');
    const unstarted = rows.filter((row) => row.status === 'not started');
    for (const row of unstarted) expect(row.turns).toBe(0);
    const started = rows.length - unstarted.length;
    const stopped = rows.filter((row) => row.status === 'aborted').length;
    expect(stopped + unstarted.length, output).toBeGreaterThan(0);
    const summary = /^ {2}64 children, (\d+) follow-ups?(?: \((\d+) refused\))?, \d+ ms\.$/m.exec(stdout);
    expect(summary, output).not.toBeNull();
    const [accepted, refused] = [Number(summary![1]), Number(summary![2] ?? 0)];
    expect(accepted + refused).toBeLessThanOrEqual(started);
    const never = unstarted.length === 0 ? '' : `, ${unstarted.length} never started (cancelled before ${unstarted.length === 1 ? 'it' : 'they'} ran)`;
    expect(stdout).toContain(
      `\n  Interrupted (Ctrl-C): the host closed, so ${stopped} of the ${started} started ${started === 1 ? 'child' : 'children'} stopped before finishing${never} and ${refused} follow-up${refused === 1 ? ' was' : 's were'} refused.\n`,
    );
    // The model's answer claims no follow-up the host refused and no child it did not start.
    expect(stdout).not.toContain('sent each a follow-up; all are idle');
    if (!stdout.includes("The model's turn ended")) {
      const claimed = `Started ${started} of 64 continuable children${unstarted.length === 0 ? '' : ` (${unstarted.length} refused)`}; sent ${accepted} of ${started} follow-ups${refused === 0 ? '' : ` (${refused} refused)`}. Heard `;
      expect(stdout).toContain(`  The model's answer:\n    ${claimed}`);
    }
  });

  it('refuses --chaos and real models with exit code 2 before any work', async () => {
    const failure = await run(process.execPath, [cli, 'demo', '--continuable', '--chaos', '--dir', dir, '--db', join(dir, 'never.db')]).catch((error: { code: number; stderr: string }) => error);
    expect(failure).toMatchObject({ code: 2, stderr: expect.stringContaining('--continuable runs the scripted models without --chaos') });
  }, 60_000);

  it('refuses --deadline, which cancels one-shot children only, with exit code 2 before any work', async () => {
    // Continuable children are never cancelled by a deadline: taking the option would ignore it silently.
    const db = join(dir, 'never-deadline.db');
    const failure = await run(process.execPath, [cli, 'demo', '--continuable', '--deadline', '100', '--dir', dir, '--db', db]).catch((error: { code: number; stdout: string; stderr: string }) => error);
    expect(failure).toMatchObject({ code: 2, stdout: '', stderr: expect.stringContaining('INVALID_OPTIONS: --deadline cancels one-shot children only') });
    expect(existsSync(db)).toBe(false);
  }, 60_000);
});
