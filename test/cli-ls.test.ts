// `subagent-host ls` as a user runs it: the built CLI in a child process against a database the test
// writes, checking the human lines, --tree indentation, --json entries, defaults and exit codes.
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DESCRIPTOR_EVENT, sqlitePersistence, type SessionHeader } from 'subagent-host';
import { damageSqlitePages, withUnwritableFolder } from './helpers.js';

const cliPath = fileURLToPath(new URL('../dist/src/cli.js', import.meta.url));
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'subagent-cli-ls-'));
const db = path.join(tmp, 'subagent-host.db');
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));

interface Outcome { code: number; stdout: string; stderr: string }

function ls(args: string[], cwd = tmp, dbFromEnv?: string): Promise<Outcome> {
  const env = { ...process.env };
  delete env.SUBAGENT_HOST_DB;
  if (dbFromEnv !== undefined) env.SUBAGENT_HOST_DB = dbFromEnv;
  return new Promise((resolve) => {
    execFile(process.execPath, [cliPath, 'ls', ...args], { cwd, env }, (error, stdout, stderr) => {
      resolve({ code: error ? Number(error.code ?? 1) : 0, stdout, stderr });
    });
  });
}

const NO_USAGE = { inputTokens: 0, outputTokens: 0, totalTokens: 0, requests: 0, turns: 0, toolCalls: 0, wallMs: 0 };
const lines = (text: string): string[] => text.split('\n').filter((line) => line !== '');

beforeAll(async () => {
  const store = sqlitePersistence(db);
  const sessions: [SessionHeader, unknown?][] = [
    [{ id: 'root', createdAt: 1 }],
    [{ id: 'alpha', createdAt: 2, parentSession: 'root', origin: 'subagent' }, { version: 2, mode: 'continuable', provider: 'spawn', label: 'research notes' }],
    [{ id: 'alpha-1', createdAt: 3, parentSession: 'alpha', origin: 'subagent' }, { version: 2, mode: 'one-shot', provider: 'spawn', label: 'deep' }],
    [{ id: 'beta', createdAt: 4, parentSession: 'root', origin: 'subagent' }, { version: 2, mode: 'one-shot', provider: 'fork' }],
    [{ id: 'gamma', createdAt: 5, parentSession: 'root', origin: 'subagent' }],
    [{ id: 'ordinary', createdAt: 6, parentSession: 'root' }],
  ];
  // Tokens each child spent in one model answer after its descriptor.
  const spent: Record<string, { inputTokens: number; outputTokens: number }> = { alpha: { inputTokens: 100, outputTokens: 20 }, 'alpha-1': { inputTokens: 30, outputTokens: 5 } };
  const appends: Promise<void>[] = [];
  for (const [header, descriptor] of sessions) {
    await store.create(header);
    // A child whose log began without a descriptor is corrupt (one with no events yet is not listed).
    if (header.id === 'gamma') appends.push(store.append('gamma', [{ seq: 0, time: 10, type: 'turn/start', data: { turn: 1 } }]));
    if (descriptor === undefined) continue;
    const usage = spent[header.id];
    const answer = { turn: 1, step: 1, id: `m-${header.id}`, content: [], usage };
    appends.push(
      // One finished turn: the descriptor inside it, then the answer.
      store.append(header.id, [
        { seq: 0, time: 10, type: 'turn/start', data: { turn: 1 } },
        { seq: 1, time: 10, type: DESCRIPTOR_EVENT, data: descriptor },
        ...(usage ? [{ seq: 2, time: 12, type: 'assistant/message', data: answer }] : []),
        { seq: usage ? 3 : 2, time: 12, type: 'turn/end', data: { turn: 1, reason: { kind: 'completed' } } },
      ]),
    );
  }
  await store.flush();
  await Promise.all(appends);
  await store.close();
});

describe('subagent-host ls', () => {
  it('prints one aligned line per child: id, mode, activity, has-children mark, tokens, label', async () => {
    const { code, stdout } = await ls(['root', '--db', db]);
    expect(code).toBe(0);
    expect(lines(stdout)).toEqual([
      'alpha  continuable  inactive  +  120  research notes',
      'beta   one-shot     inactive  -    0',
      'gamma  [corrupt]',
    ]);
  });

  it('prints every descendant indented by depth with --tree, with subtree token totals', async () => {
    const { code, stdout } = await ls(['root', '--tree', '--db', db]);
    expect(code).toBe(0);
    expect(lines(stdout)).toEqual([
      'alpha      continuable  inactive  +  155  research notes',
      '  alpha-1  one-shot     inactive  -   35  deep',
      'beta       one-shot     inactive  -    0',
      'gamma      [corrupt]',
    ]);
  });

  it('prints the entries as JSON with --json', async () => {
    const children = await ls(['root', '--json', '--db', db]);
    expect(children.code).toBe(0);
    expect(JSON.parse(children.stdout)).toStrictEqual([
      { kind: 'child', id: 'alpha', mode: 'continuable', label: 'research notes', activity: 'inactive', hasChildren: true, createdAt: 2, usage: { ...NO_USAGE, inputTokens: 100, outputTokens: 20, totalTokens: 120, turns: 1, wallMs: 2 } },
      { kind: 'child', id: 'beta', mode: 'one-shot', activity: 'inactive', hasChildren: false, createdAt: 4, usage: { ...NO_USAGE, turns: 1, wallMs: 2 } },
      { kind: 'diagnostic', id: 'gamma', reason: 'corrupt' },
    ]);
    const tree = await ls(['alpha', '--json', '--tree', '--db', db]);
    expect(JSON.parse(tree.stdout)).toStrictEqual([
      { kind: 'child', id: 'alpha-1', mode: 'one-shot', label: 'deep', activity: 'inactive', hasChildren: false, createdAt: 3, usage: { ...NO_USAGE, inputTokens: 30, outputTokens: 5, totalTokens: 35, turns: 1, wallMs: 2 }, treeUsage: { ...NO_USAGE, inputTokens: 30, outputTokens: 5, totalTokens: 35, turns: 1, wallMs: 2 }, parentId: 'alpha', depth: 1 },
    ]);
  });

  it('reads ./subagent-host.db when --db is not given', async () => {
    const { code, stdout } = await ls(['alpha'], tmp);
    expect(code).toBe(0);
    expect(lines(stdout)).toEqual(['alpha-1  one-shot     inactive  -  35  deep']);
  });

  it('reads $SUBAGENT_HOST_DB when --db is not given', async () => {
    const { code, stdout } = await ls(['alpha'], os.tmpdir(), db);
    expect(code).toBe(0);
    expect(lines(stdout)).toEqual(['alpha-1  one-shot     inactive  -  35  deep']);
  });

  it('prints nothing for a session without subagent children', async () => {
    expect(await ls(['beta', '--db', db])).toMatchObject({ code: 0, stdout: '' });
  });

  it.each([
    ['no session', ['--db', 'x.db']],
    ['two sessions', ['a', 'b']],
    ['an unknown option', ['root', '--all']],
    ['--db without a file', ['root', '--db']],
    ['an empty --db', ['root', '--db', '']],
  ])('exits 2 with the usage for %s', async (_what, args) => {
    const { code, stderr } = await ls(args);
    expect(code).toBe(2);
    expect(stderr).toContain('usage: subagent-host ls SESSION');
  });

  it('prints the usage and exits 0 with --help', async () => {
    const { code, stdout } = await ls(['--help']);
    expect(code).toBe(0);
    expect(stdout).toContain('usage: subagent-host ls SESSION');
  });

  it('exits 1 without creating anything when the database does not exist', async () => {
    const missing = path.join(tmp, 'missing.db');
    const { code, stderr } = await ls(['root', '--db', missing]);
    expect(code).toBe(1);
    expect(stderr).toContain('PERSISTENCE_UNAVAILABLE');
    expect(fs.existsSync(missing)).toBe(false);
  });

  // As `inspect` says of it: a path that holds no database, not a bad option value.
  it('refuses a directory with PERSISTENCE_UNAVAILABLE and exits 1, as inspect does, creating nothing in it', async () => {
    const dir = fs.mkdtempSync(path.join(tmp, 'a-directory-'));
    const { code, stdout, stderr } = await ls(['root', '--db', dir]);
    expect([code, stdout]).toEqual([1, '']);
    expect(stderr).toMatch(new RegExp(`^subagent-host: PERSISTENCE_UNAVAILABLE: cannot open ${dir} \\(.+\\); pass --db FILE\n$`));
    expect(fs.readdirSync(dir)).toEqual([]);
  });

  it('reads an empty file as no sessions yet (a host is creating it), exit 1, and leaves it empty', async () => {
    const empty = path.join(tmp, 'empty.db');
    fs.writeFileSync(empty, '');
    const { code, stderr } = await ls(['root', '--db', empty]);
    expect([code, stderr]).toEqual([1, `subagent-host: UNKNOWN_SESSION: no session "root" in ${empty} (the file is empty: it holds no sessions yet)\n`]);
    expect(fs.statSync(empty).size).toBe(0);
  });

  it('takes an empty $SUBAGENT_HOST_DB as unset', async () => {
    const { code, stdout } = await ls(['alpha'], tmp, '');
    expect(code).toBe(0);
    expect(lines(stdout)).toEqual(['alpha-1  one-shot     inactive  -  35  deep']);
  });

  it('exits 1 for a session the database does not hold', async () => {
    const { code, stderr } = await ls(['nobody', '--db', db]);
    expect(code).toBe(1);
    expect(stderr).toContain('UNKNOWN_SESSION');
  });

  it('refuses an SQLite file subagent-host did not write, and writes nothing into it', async () => {
    for (const [name, make, why] of [
      ['other-app.db', (other: Database.Database) => other.exec('CREATE TABLE notes (body TEXT)'), 'is an SQLite database that subagent-host did not create'],
      ['blank.db', (other: Database.Database) => other.exec('CREATE TABLE t (x); DROP TABLE t'), 'is not a subagent-host database (it is empty)'],
      ['impostor.db', (other: Database.Database) => other.exec('CREATE TABLE notes (body TEXT); PRAGMA user_version = 5'), 'claims schema version 5 but its tables differ: it was not written by subagent-host'],
    ] as const) {
      const file = path.join(tmp, name);
      const other = new Database(file);
      make(other);
      other.close();
      const before = fs.readFileSync(file);
      const { code, stderr } = await ls(['root', '--db', file]);
      expect([code, stderr]).toEqual([1, `subagent-host: CORRUPT_DATA: ${file} ${why}\n`]);
      expect(fs.readFileSync(file).equals(before)).toBe(true);
    }
  });

  it('says a database in a folder it may not write cannot be opened there, and why', async () => {
    const folder = path.join(tmp, 'locked-folder');
    fs.mkdirSync(folder);
    const file = path.join(folder, 'subagent-host.db');
    fs.copyFileSync(db, file);
    const { code, stderr } = await withUnwritableFolder(folder, () => ls(['alpha', '--db', file]));
    expect([code, stderr]).toEqual([
      1,
      `subagent-host: PERSISTENCE_UNAVAILABLE: cannot open ${file}: SQLite must create subagent-host.db-shm beside it and its folder is not writable by this process; run as a user who may write that folder, or copy the file to one\n`,
    ]);
    expect(fs.readdirSync(folder)).toEqual(['subagent-host.db']);
  });

  it('answers while another process holds the database’s write lock', async () => {
    const writer = new Database(db);
    writer.exec('BEGIN IMMEDIATE');
    try {
      const { code, stdout } = await ls(['alpha', '--db', db]);
      expect(code).toBe(0);
      expect(lines(stdout)).toEqual(['alpha-1  one-shot     inactive  -  35  deep']);
    } finally {
      writer.exec('ROLLBACK');
      writer.close();
    }
  });

  it('lists a child one of whose answers is damaged (not JSON) in the file', async () => {
    const file = path.join(tmp, 'damaged.db');
    const store = sqlitePersistence(file);
    await store.create({ id: 'p', createdAt: 1 });
    await store.create({ id: 'c', createdAt: 2, parentSession: 'p', origin: 'subagent' });
    await store.append('c', [
      { seq: 0, time: 1, type: 'turn/start', data: { turn: 1 } },
      { seq: 1, time: 1, type: DESCRIPTOR_EVENT, data: { version: 2, mode: 'one-shot', provider: 'spawn', label: 'hurt' } },
      { seq: 2, time: 2, type: 'assistant/message', data: { turn: 1, step: 1, id: 'm', content: [], usage: { inputTokens: 1, outputTokens: 1 } } },
      { seq: 3, time: 2, type: 'turn/end', data: { turn: 1, reason: { kind: 'completed' } } },
    ]);
    await store.close();
    const raw = new Database(file);
    raw.prepare("UPDATE events SET data = 'not json {' WHERE session_id = 'c' AND type = 'assistant/message'").run();
    raw.close();
    const { code, stdout } = await ls(['p', '--db', file]);
    expect(code).toBe(0);
    expect(lines(stdout)).toEqual(['c  one-shot     inactive  -  2  hurt']);
  });

  it('lists a session whose parent links loop back to it (its child is its parent) and exits, never running out of memory', async () => {
    const file = path.join(tmp, 'looped.db');
    const store = sqlitePersistence(file);
    // Nothing refuses these links: a session may be stored before its parent.
    await store.create({ id: 'a', createdAt: 1, parentSession: 'b', origin: 'subagent' });
    await store.create({ id: 'b', createdAt: 2, parentSession: 'a', origin: 'subagent' });
    for (const id of ['a', 'b']) {
      await store.append(id, [
        { seq: 0, time: 1, type: 'turn/start', data: { turn: 1 } },
        { seq: 1, time: 1, type: DESCRIPTOR_EVENT, data: { version: 2, mode: 'one-shot', provider: 'spawn', label: id } },
        { seq: 2, time: 2, type: 'turn/end', data: { turn: 1, reason: { kind: 'completed' } } },
      ]);
    }
    await store.close();
    const { code, stdout, stderr } = await ls(['a', '--db', file]);
    expect([code, stderr]).toEqual([0, '']);
    expect(lines(stdout)).toEqual(['b  one-shot     inactive  +  0  b']);
  });

  it('shows control characters of a label (the model’s text) escaped, never raw', async () => {
    const file = path.join(tmp, 'labels.db');
    const store = sqlitePersistence(file);
    await store.create({ id: 'p', createdAt: 1 });
    await store.create({ id: 'c', createdAt: 2, parentSession: 'p', origin: 'subagent' });
    const label = 'fine\nforged  one-shot  inactive\u001b]0;title\u0007\u001b[31m \u202eexe.txt\u202c\u2028';
    await store.append('c', [
      { seq: 0, time: 1, type: 'turn/start', data: { turn: 1 } },
      { seq: 1, time: 1, type: DESCRIPTOR_EVENT, data: { version: 2, mode: 'one-shot', provider: 'spawn', label } },
      { seq: 2, time: 2, type: 'turn/end', data: { turn: 1, reason: { kind: 'completed' } } },
    ]);
    await store.close();
    const { code, stdout } = await ls(['p', '--db', file]);
    expect(code).toBe(0);
    // Bidirectional controls too: they would show the label reversed.
    expect(stdout).toBe('c  one-shot     inactive  -  0  fine\\x0aforged  one-shot  inactive\\x1b]0;title\\x07\\x1b[31m \\u202eexe.txt\\u202c\\u2028\n');
  });

  it.each([
    { command: 'ls', follow: [] as string[] },
    { command: 'ls --follow', follow: ['--follow'] },
  ])('$command says CORRUPT_DATA when a page of a grandchild’s log is damaged, never an untyped SQLite error', async ({ follow }) => {
    const file = path.join(tmp, `torn${follow.length}.db`);
    const store = sqlitePersistence(file);
    const turn = (text: string) => [
      { seq: 0, time: 1, type: 'turn/start', data: { turn: 1 } },
      { seq: 1, time: 1, type: DESCRIPTOR_EVENT, data: { version: 2, mode: 'one-shot', provider: 'spawn', label: 'l' } },
      { seq: 2, time: 2, type: 'assistant/message', data: { turn: 1, step: 1, id: 'm', content: [{ type: 'text', text }], usage: { inputTokens: 1, outputTokens: 1 } } },
      { seq: 3, time: 2, type: 'turn/end', data: { turn: 1, reason: { kind: 'completed' } } },
    ];
    await store.create({ id: 'p', createdAt: 1 });
    await store.create({ id: 'c', createdAt: 2, parentSession: 'p', origin: 'subagent' });
    await store.append('c', turn('short'));
    await store.create({ id: 'g', createdAt: 3, parentSession: 'c', origin: 'subagent' });
    await store.append('g', turn('x'.repeat(100_000)));
    await store.close();
    // The pages holding the grandchild's long answer overwritten (a disk error, a torn copy): the
    // children's own rows still read, the activity of every descendant does not.
    const pages = damageSqlitePages(file, "SELECT pageno FROM dbstat WHERE name = 'events' AND pagetype = 'overflow'");
    expect(pages.length).toBeGreaterThan(0);
    const { code, stderr } = await ls(['p', '--db', file, ...follow]);
    expect(code).toBe(1);
    expect(stderr).toMatch(/^subagent-host: CORRUPT_DATA: /);
  });
});
