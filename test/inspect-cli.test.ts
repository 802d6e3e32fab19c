// `subagent-host inspect` options and databases as a user meets them: which file it reads without
// --db, files it cannot read (each a typed message and exit 1, never a server), empty and
// out-of-range values (exit 2), a port in use, IPv6 loopback, --open with and without a browser
// opener on the PATH, and a damaged database shown as far as it can be read (a damaged row of a log
// among the others).
import { execFile } from 'node:child_process';
import { chmodSync, copyFileSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer, type AddressInfo } from 'node:net';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import Database from 'better-sqlite3';
import { beforeAll, describe, expect, it } from 'vitest';
import { createHost, inProcessProvider, sqlitePersistence, text } from 'subagent-host';
import { damageSqlitePages, tempFiles, withUnwritableFolder } from './helpers.js';
import { cli, rawGet, startInspectWith, storedParentWithChild } from './inspect-helpers.js';

const files = tempFiles('inspect-cli-');
const db = files.file();
const LONG = `Please look at ${'every file of this rather large repository '.repeat(5)}`;

interface Outcome {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs `inspect` to its end (only failures end by themselves); never rejects. */
function inspect(args: string[], options: { cwd?: string; env?: NodeJS.ProcessEnv } = {}): Promise<Outcome> {
  return new Promise((resolve) => {
    execFile(process.execPath, [cli, 'inspect', ...args], { timeout: 30_000, ...options }, (error, stdout, stderr) => {
      resolve({ code: error ? Number((error as { code?: unknown }).code) : 0, stdout, stderr });
    });
  });
}

beforeAll(async () => {
  const host = await createHost({ providers: false, persistence: { sqlite: db } });
  try {
    const root = await host.createAgent();
    root.followup([text(LONG)]);
    await root.whenIdle();
    const short = await host.createAgent();
    short.followup([text('A short title'), { type: 'image', mimeType: 'image/png', data: 'iVBORw0KGgo=' }]);
    await short.whenIdle();
  } finally {
    await host.close();
  }
});

describe('subagent-host inspect options', () => {
  it.each([
    [['--db', ''], '--db needs a file path'],
    [['--host', ''], '--host needs an interface address'],
    [['--port', '65536'], '--port must be an integer from 0 to 65535'],
    [['--port=-1'], '--port must be an integer from 0 to 65535'],
  ])('refuses %j with the usage on stderr and exits 2', async (args, message) => {
    const { code, stdout, stderr } = await inspect([...(args[0] === '--db' ? [] : ['--db', db]), ...args]);
    expect([code, stdout]).toEqual([2, '']);
    expect(stderr).toMatch(new RegExp(`^subagent-host inspect: ${message.replace(/[-[\]]/g, '\\$&')}\n\nusage: subagent-host inspect `));
  });

  it('reads $SUBAGENT_HOST_DB without --db, and ./subagent-host.db without either', async () => {
    const cwd = join(files.dir, 'empty-cwd');
    mkdirSync(cwd);
    const missing = join(files.dir, 'from-env.db');
    const fromEnv = await inspect(['--port', '0'], { cwd, env: { ...process.env, SUBAGENT_HOST_DB: missing } });
    expect([fromEnv.code, fromEnv.stderr]).toEqual([1, `subagent-host: PERSISTENCE_UNAVAILABLE: no database at ${missing}; pass --db FILE\n`]);
    const env = { ...process.env };
    delete env['SUBAGENT_HOST_DB'];
    const fromCwd = await inspect(['--port', '0'], { cwd, env });
    expect([fromCwd.code, fromCwd.stderr]).toEqual([1, 'subagent-host: PERSISTENCE_UNAVAILABLE: no database at subagent-host.db; pass --db FILE\n']);
    expect([existsSync(missing), existsSync(join(cwd, 'subagent-host.db'))]).toEqual([false, false]);
  });
});

describe('subagent-host inspect on a file it cannot read', () => {
  it('refuses a directory with PERSISTENCE_UNAVAILABLE and exits 1', async () => {
    const dir = join(files.dir, 'a-directory');
    mkdirSync(dir);
    const { code, stdout, stderr } = await inspect(['--db', dir, '--port', '0']);
    expect([code, stdout]).toEqual([1, '']);
    expect(stderr).toMatch(new RegExp(`^subagent-host: PERSISTENCE_UNAVAILABLE: cannot open ${dir} \\(.+\\); pass --db FILE\n$`));
  });

  it('refuses a file that is not SQLite with CORRUPT_DATA and exits 1', async () => {
    const notes = join(files.dir, 'notes.txt');
    writeFileSync(notes, 'these are notes, not a database\n'.repeat(100));
    const { code, stderr } = await inspect(['--db', notes, '--port', '0']);
    expect([code, stderr]).toEqual([1, `subagent-host: CORRUPT_DATA: ${notes} is not a readable SQLite database\n`]);
  });

  it('says a database in a folder it may not write cannot be opened there (no -shm beside it), and exits 1', async () => {
    const folder = join(files.dir, 'locked-folder');
    mkdirSync(folder);
    const file = join(folder, 'subagent-host.db');
    copyFileSync(db, file);
    const { code, stdout, stderr } = await withUnwritableFolder(folder, () => inspect(['--db', file, '--port', '0']));
    expect([code, stdout, stderr]).toEqual([
      1,
      '',
      `subagent-host: PERSISTENCE_UNAVAILABLE: cannot open ${file}: SQLite must create subagent-host.db-shm beside it and its folder is not writable by this process; run as a user who may write that folder, or copy the file to one\n`,
    ]);
  });

  it("refuses another program's SQLite database with CORRUPT_DATA naming the schema version, and leaves it as it was", async () => {
    const foreign = join(files.dir, 'foreign.db');
    const other = new Database(foreign);
    other.exec('CREATE TABLE notes (body TEXT)');
    other.close();
    const before = readFileSync(foreign);
    const { code, stderr } = await inspect(['--db', foreign, '--port', '0']);
    expect(code).toBe(1);
    expect(stderr).toBe(`subagent-host: CORRUPT_DATA: ${foreign} is an SQLite database that subagent-host did not create\n`);
    expect(readFileSync(foreign).equals(before)).toBe(true);
  });

  it('says why it cannot read an SQLite database without tables, a newer one, or one that claims our schema with other tables, and leaves no file beside them', async () => {
    const cases: [string, (db: Database.Database) => void, string][] = [
      // Not 0 bytes (a file a host is still creating reads as no sessions yet): an SQLite header, no tables.
      ['empty.db', (db) => db.exec('CREATE TABLE t (x); DROP TABLE t'), 'is not a subagent-host database (it is empty)'],
      ['newer.db', (db) => db.exec('CREATE TABLE sessions (x); PRAGMA user_version = 99'), 'was written by a newer subagent-host (schema version 99); this build reads version 5'],
      ['claims.db', (db) => db.exec('CREATE TABLE notes (body TEXT); PRAGMA user_version = 5'), 'claims schema version 5 but its tables differ: it was not written by subagent-host'],
    ];
    for (const [name, make, why] of cases) {
      const file = join(files.dir, name);
      const db = new Database(file);
      make(db);
      db.close();
      const { code, stderr } = await inspect(['--db', file, '--port', '0']);
      expect([code, stderr]).toEqual([1, `subagent-host: CORRUPT_DATA: ${file} ${why}\n`]);
      expect(existsSync(`${file}-wal`) || existsSync(`${file}-shm`)).toBe(false);
    }
  });
});

describe('the inspector’s reader on a file of another schema', () => {
  it('names what the file is for each schema version it cannot read, and closes it', async () => {
    const { InspectReader } = await import('../dist/src/inspect/reader.js');
    const cases: [string, string, string][] = [
      ['v0-empty.db', 'CREATE TABLE t (x); DROP TABLE t', 'is not a subagent-host database (it is empty)'],
      ['v0-other.db', 'CREATE TABLE notes (body TEXT)', 'is an SQLite database that subagent-host did not create'],
      ['v2.db', 'CREATE TABLE sessions (x); PRAGMA user_version = 2', 'has schema version 2; this build reads version 5: open it once with `subagent-host ls` to upgrade it'],
      ['v99.db', 'CREATE TABLE sessions (x); PRAGMA user_version = 99', 'was written by a newer subagent-host (schema version 99); this build reads version 5'],
      ['negative.db', 'CREATE TABLE sessions (x); PRAGMA user_version = -3', 'is not a subagent-host database (schema version -3)'],
    ];
    for (const [name, sql, why] of cases) {
      const file = join(files.dir, name);
      const db = new Database(file);
      db.exec(sql);
      db.close();
      expect(() => new InspectReader(file)).toThrow(expect.objectContaining({ code: 'CORRUPT_DATA', message: `${file} ${why}` }));
      // Nothing holds it: a writer takes it at once.
      const writer = new Database(file, { timeout: 0 });
      writer.exec('BEGIN EXCLUSIVE; COMMIT');
      writer.close();
    }
  });
});

describe('subagent-host inspect --open', () => {
  const OPENER = process.platform === 'darwin' ? 'open' : 'xdg-open';
  /** Waits (bounded) until `file` exists. */
  async function appears(file: string): Promise<boolean> {
    for (let i = 0; i < 300 && !existsSync(file); i++) await sleep(100);
    return existsSync(file);
  }

  it('hands the URL it serves to the platform opener', async () => {
    const bin = join(files.dir, 'opener-bin');
    mkdirSync(bin);
    // A stand-in for the opener that records what it was asked to open (shell built-ins only: PATH is just `bin`).
    writeFileSync(join(bin, OPENER), '#!/bin/sh\nprintf \'%s\\n\' "$1" > "${0%/*}/opened"\n');
    chmodSync(join(bin, OPENER), 0o755);
    const server = await startInspectWith({ ...process.env, PATH: bin }, db, '--open');
    try {
      expect(await appears(join(bin, 'opened'))).toBe(true);
      expect(readFileSync(join(bin, 'opened'), 'utf8').trim()).toBe(server.url);
    } finally {
      expect(await server.stop()).toBe(0);
    }
  });

  it('says how to open the page itself when no opener can run, and keeps serving', async () => {
    const bin = join(files.dir, 'empty-bin');
    mkdirSync(bin);
    const server = await startInspectWith({ ...process.env, PATH: bin }, db, '--open');
    try {
      for (let i = 0; i < 300 && !server.output().includes('could not run'); i++) await sleep(100);
      expect(server.output()).toContain(`subagent-host inspect: could not run ${OPENER} (spawn ${OPENER} ENOENT); open ${server.url} yourself\n`);
      const roots = await rawGet(server.url, '/api/roots');
      expect(roots.status).toBe(200);
    } finally {
      expect(await server.stop()).toBe(0);
    }
  });
});

describe('subagent-host inspect roots', () => {
  it('titles each root, newest first, with the text of its first message, cut at 120 characters; a root without children has an empty tree', async () => {
    const server = await startInspectWith(process.env, db);
    try {
      const roots = JSON.parse((await rawGet(server.url, '/api/roots')).body) as { id: string; title?: string }[];
      expect(roots.map((root) => root.title)).toEqual(['A short title', `${LONG.trim().slice(0, 120)}…`]);
      const tree = JSON.parse((await rawGet(server.url, `/api/roots/${roots[0]!.id}/tree`)).body) as { root: { id: string }; nodes: unknown[] };
      expect([tree.root.id, tree.nodes]).toEqual([roots[0]!.id, []]);
    } finally {
      expect(await server.stop()).toBe(0);
    }
    // It only read the file: SQLite's -wal and -shm files of its connection are gone with it.
    expect([existsSync(`${db}-wal`), existsSync(`${db}-shm`)]).toEqual([false, false]);
  });
});

describe('subagent-host inspect while another process writes', () => {
  it('leaves out a child still being created (stored, no events of its own yet), as `ls` does, rather than noting it has no descriptor', async () => {
    const file = files.file();
    const { parentId } = await storedParentWithChild(file, 'done');
    // A child's header is stored before its first turn writes its descriptor: what a reader sees
    // when it reads between the two commits of a host running in another process.
    const store = sqlitePersistence(file);
    await store.create({ id: 'being-created', createdAt: Date.now(), parentSession: parentId, origin: 'subagent' });
    await store.close();
    const server = await startInspectWith(process.env, file);
    try {
      const tree = JSON.parse((await rawGet(server.url, `/api/roots/${parentId}/tree`)).body) as { nodes: { label?: string; problem?: string }[] };
      expect(tree.nodes.map(({ label, problem }) => ({ label, problem }))).toStrictEqual([{ label: 'done', problem: undefined }]);
    } finally {
      expect(await server.stop()).toBe(0);
    }
  });

  it("takes nothing of a fork's seed for the fork: one being created is left out, one without its own descriptor is noted", async () => {
    const file = files.file();
    const { parentId } = await storedParentWithChild(file, 'done');
    // Forks of a continuable child: the seed holds that child's descriptor, then the end-seed marker.
    const seed = [
      { seq: 0, time: 1, type: 'subagent/descriptor', data: { version: 2, mode: 'continuable', provider: 'fork', label: 'ancestor' } },
      { seq: 1, time: 1, type: 'session/end-seed', data: {} },
    ];
    const store = sqlitePersistence(file);
    for (const id of ['being-created', 'begun']) await store.create({ id, createdAt: Date.now(), parentSession: parentId, origin: 'subagent', seedLength: 1 });
    await store.append('being-created', seed);
    await store.append('begun', [...seed, { seq: 2, time: 2, type: 'turn/start', data: { turn: 1 } }]);
    await store.close();
    const server = await startInspectWith(process.env, file);
    try {
      const tree = JSON.parse((await rawGet(server.url, `/api/roots/${parentId}/tree`)).body) as { nodes: { mode?: string; label?: string; problem?: string }[] };
      expect(tree.nodes.map(({ mode, label, problem }) => ({ mode, label, problem }))).toStrictEqual([
        { mode: 'one-shot', label: 'done', problem: undefined },
        { mode: undefined, label: undefined, problem: 'no readable descriptor' },
      ]);
    } finally {
      expect(await server.stop()).toBe(0);
    }
  });
});

describe('subagent-host inspect listening', () => {
  // A port in use is no bad option value (the same command works once it is free): a failure to
  // start, as the worker's unreachable Redis is, exit 1 without the usage.
  it('fails START_FAILED on a port another server holds and exits 1, without the usage', async () => {
    const holder = createServer();
    await new Promise<void>((resolve) => holder.listen(0, '127.0.0.1', resolve));
    try {
      const { port } = holder.address() as AddressInfo;
      const { code, stdout, stderr } = await inspect(['--db', db, '--port', String(port)]);
      expect([code, stdout]).toEqual([1, '']);
      expect(stderr).toMatch(new RegExp(`^subagent-host: START_FAILED: cannot listen on 127\\.0\\.0\\.1:${port}: [^\n]*EADDRINUSE[^\n]*\n$`));
    } finally {
      await new Promise((resolve) => holder.close(resolve));
    }
  });

  it.each([['::1'], ['[::1]']])('serves on the IPv6 loopback given as %s with a bracketed URL', async (host) => {
    const server = await startInspectWith(process.env, db, '--host', host);
    try {
      expect(server.url).toMatch(/^http:\/\/\[::1\]:\d+\/$/);
      expect(server.output()).not.toContain('warning');
      expect((await rawGet(server.url, '/api/roots')).status).toBe(200);
    } finally {
      expect(await server.stop()).toBe(0);
    }
  });
});

describe('subagent-host inspect on a damaged database', () => {
  it('lists what it can read, takes a child\'s mode and label from its log, notes a child whose descriptor is damaged, and shows a damaged row of a log as unreadable', async () => {
    const damaged = files.file();
    const host = await createHost({ providers: false, persistence: { sqlite: damaged } });
    let parentId: string;
    try {
      host.subagents.registerProvider(inProcessProvider(host));
      const parent = await host.createAgent();
      parent.followup([text('the first message')]);
      await parent.whenIdle();
      for (const label of ['one', 'two']) {
        const run = await host.subagents.start('in-process', { label, prompt: [text('hello')], parent, signal: new AbortController().signal });
        await run.result;
        await run.dispose();
      }
      parentId = parent.id;
    } finally {
      await host.close();
    }
    // Stored states (typed columns) are rebuilt by the next writer (NULL until then, as after an upgrade);
    // the parent's first event is damaged.
    const file = new Database(damaged);
    const states = (file.prepare('PRAGMA table_info(sessions)').all() as { name: string }[]).map((column) => column.name).filter((name) => /^(identity|timing|usage)_/.test(name));
    expect(states).toContain('identity_mode');
    file.prepare(`UPDATE sessions SET ${states.map((name) => `${name} = NULL`).join(', ')}`).run();
    const [, second] = (file.prepare('SELECT id FROM sessions WHERE parent_session = ? ORDER BY create_order').all(parentId) as { id: string }[]).map((row) => row.id);
    file.prepare("UPDATE events SET data = '{damaged' WHERE session_id = ? AND type = 'subagent/descriptor'").run(second);
    file.prepare("UPDATE events SET data = '{damaged' WHERE session_id = @id AND seq = (SELECT min(seq) FROM events WHERE session_id = @id AND type = 'user/message')").run({ id: parentId });
    file.close();

    const server = await startInspectWith(process.env, damaged);
    try {
      const roots = JSON.parse((await rawGet(server.url, '/api/roots')).body) as { id: string; title?: string }[];
      expect(roots).toEqual([expect.objectContaining({ id: parentId })]);
      expect(roots[0]!.title).toBeUndefined();
      const tree = JSON.parse((await rawGet(server.url, `/api/roots/${parentId}/tree`)).body) as { nodes: { mode?: string; label?: string; problem?: string }[] };
      expect(tree.nodes.map(({ mode, label, problem }) => ({ mode, label, problem }))).toEqual([
        { mode: 'one-shot', label: 'one', problem: undefined },
        { mode: undefined, label: undefined, problem: 'no readable descriptor' },
      ]);
      const log = await rawGet(server.url, `/api/sessions/${parentId}`);
      expect([log.status, log.type.split(';')[0]]).toEqual([200, 'application/json']);
      const kinds = (JSON.parse(log.body) as { entries: { kind: string }[] }).entries.map((entry) => entry.kind);
      expect(kinds.filter((kind) => kind === 'unreadable')).toHaveLength(1);
      expect(kinds).toContain('turn-end');
    } finally {
      expect(await server.stop()).toBe(0);
    }
  });

  it('titles a root whose first message holds a null block from its text blocks', async () => {
    const odd = files.file();
    const host = await createHost({ providers: false, persistence: { sqlite: odd } });
    try {
      const root = await host.createAgent();
      root.followup([text('replaced below')]);
      await root.whenIdle();
    } finally {
      await host.close();
    }
    const file = new Database(odd);
    file.prepare(`UPDATE events SET data = '{"content":[null,{"type":"text","text":"still a title"}]}' WHERE type = 'user/message'`).run();
    file.close();
    const server = await startInspectWith(process.env, odd);
    try {
      const roots = await rawGet(server.url, '/api/roots');
      expect(roots.status).toBe(200);
      expect((JSON.parse(roots.body) as { title?: string }[]).map((root) => root.title)).toEqual(['still a title']);
    } finally {
      expect(await server.stop()).toBe(0);
    }
  });

  it('answers a file whose pages are damaged with 500 CORRUPT_DATA, never an untyped SQLite error', async () => {
    const broken = files.file();
    const host = await createHost({ providers: false, persistence: { sqlite: broken } });
    try {
      const root = await host.createAgent();
      root.followup([text('hello')]);
      await root.whenIdle();
    } finally {
      await host.close();
    }
    // The events table's first page overwritten (a disk error, a bad copy): the schema still reads.
    damageSqlitePages(broken, "SELECT rootpage FROM sqlite_schema WHERE name = 'events'");
    const server = await startInspectWith(process.env, broken);
    try {
      const roots = await rawGet(server.url, '/api/roots');
      expect([roots.status, (JSON.parse(roots.body) as { error: { code: string } }).error.code]).toEqual([500, 'CORRUPT_DATA']);
    } finally {
      expect(await server.stop()).toBe(0);
    }
  });
});
