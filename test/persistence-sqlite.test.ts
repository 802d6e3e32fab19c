// SQLite-only persistence behaviour: reopening a file, durability seen from another connection,
// write conflicts between instances, corrupt rows and schema versions, retry after a failed commit.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';
import { sqlitePersistence } from 'subagent-host';
import type { SessionEvent, SessionHeader, SessionPersistence } from 'subagent-host';
import { thrown, withUnwritableFolder } from './helpers.js';

// Not exported by the package root (yet): derive it from the factory.
type SqlitePersistenceOptions = NonNullable<Parameters<typeof sqlitePersistence>[1]>;

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'subagent-sqlite-'));
let files = 0;
const newFile = (): string => path.join(tmp, `store-${files++}.db`);

const opened: { close(): unknown }[] = [];
function open(file: string, options?: SqlitePersistenceOptions): SessionPersistence {
  const persistence = sqlitePersistence(file, options);
  opened.push(persistence);
  return persistence;
}
function raw(file: string): Database.Database {
  const db = new Database(file);
  opened.push(db);
  return db;
}

afterEach(async () => {
  vi.useRealTimers();
  for (const resource of opened.splice(0).reverse()) await resource.close();
});
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));

const header = (id: string, extra: Partial<SessionHeader> = {}): SessionHeader => ({ id, createdAt: 1000, ...extra });
const ev = (seq: number, data: unknown = { n: seq }): SessionEvent => ({ seq, time: 5000 + seq, type: 'test/note', data });


describe('sqlitePersistence', () => {
  it('reads back headers, events and order from a reopened file', async () => {
    const file = newFile();
    const first = open(file);
    const child = header('child', { createdAt: 1, parentSession: 'root', origin: 'subagent', delegationDepth: 1, seedLength: 0 });
    await first.create(header('root', { cwd: '/w' }));
    await first.create(child);
    await first.append('root', [ev(0), ev(1)]);
    await first.close();

    const second = open(file);
    expect(await second.list()).toStrictEqual([child, header('root', { cwd: '/w' })]);
    expect(await second.list({ parentSession: 'root' })).toStrictEqual([child]);
    expect(await second.load('root')).toStrictEqual({ header: header('root', { cwd: '/w' }), events: [ev(0), ev(1)] });
    await second.append('root', [ev(2)]);
    expect((await second.load('root'))?.events).toHaveLength(3);
  });

  it('creates a new file readable by its owner only', () => {
    const file = newFile();
    open(file);
    expect(fs.statSync(file).mode & 0o777).toBe(0o600);
  });

  it('makes appends visible to another connection once flush resolves', async () => {
    const file = newFile();
    const writer = open(file, { flushIntervalMs: 60_000 });
    await writer.create(header('s'));
    const appended = writer.append('s', [ev(0), ev(1)]);
    await writer.flush();
    await appended;
    expect((await open(file).load('s'))?.events).toEqual([ev(0), ev(1)]);
  });

  it('commits what code its commit woke appends and flushes, before that later flush resolves', async () => {
    const file = newFile();
    const writer = open(file, { flushIntervalMs: 60_000 });
    await writer.create(header('s'));
    // A session store's listener does this: once its events are stored, it appends and flushes more.
    const later = writer.append('s', [ev(0)]).then(async () => {
      const appended = writer.append('s', [ev(1)]);
      await writer.flush();
      expect((await open(file).load('s'))?.events).toEqual([ev(0), ev(1)]);
      await appended;
    });
    const flushed = writer.flush();
    await Promise.all([later, flushed]);
  });

  it('refuses queued events at commit with SEQ_MISMATCH when another writer appended first', async () => {
    const file = newFile();
    const a = open(file);
    await a.create(header('s'));
    const b = open(file, { flushIntervalMs: 60_000 });
    const stale = b.append('s', [ev(0, 'from b')]);
    await a.append('s', [ev(0, 'from a')]);
    await a.flush();
    await b.flush();
    await expect(stale).rejects.toMatchObject({ code: 'SEQ_MISMATCH' });
    // Until b loads the session again, none of its appends lands after a's event, also one whose seq lines up.
    await expect(b.append('s', [ev(1, 'from b')])).rejects.toMatchObject({ code: 'SEQ_MISMATCH', message: expect.stringContaining('load it again') });
    expect((await b.load('s'))?.events).toEqual([ev(0, 'from a')]);
    await Promise.all([b.append('s', [ev(1, 'from b')]), b.flush()]);
    expect((await b.load('s'))?.events).toEqual([ev(0, 'from a'), ev(1, 'from b')]);
  });

  it('appends in order to sessions evicted from its bounded next-seq cache, with events queued or committed', async () => {
    const p = open(':memory:', { flushIntervalMs: 60_000 });
    await p.create(header('committed'));
    const writes = [p.append('committed', [ev(0)])];
    await p.flush();
    await p.create(header('queued'));
    writes.push(p.append('queued', [ev(0)]));
    // More sessions than the cache holds (1,024), each written after the two above.
    for (let i = 0; i < 1500; i++) await p.create(header(`other-${i}`));
    writes.push(p.append('committed', [ev(1)]), p.append('queued', [ev(1)]));
    await p.flush();
    await Promise.all(writes);
    expect((await p.load('committed'))?.events).toEqual([ev(0), ev(1)]);
    expect((await p.load('queued'))?.events).toEqual([ev(0), ev(1)]);
  });

  it('keeps a batch whose commit failed and commits it on the next flush', async () => {
    const file = newFile();
    vi.useFakeTimers();
    const p = open(file, { busyTimeoutMs: 0, flushIntervalMs: 10 });
    await p.create(header('s'));
    const lock = raw(file);
    lock.exec('BEGIN IMMEDIATE');
    let settled = false;
    const appended = p.append('s', [ev(0)]);
    void appended.then(() => (settled = true));
    vi.advanceTimersByTime(10);
    await expect(p.flush()).rejects.toMatchObject({ name: 'SubagentError', code: 'PERSISTENCE_UNAVAILABLE', cause: { code: 'SQLITE_BUSY' } });
    expect(settled).toBe(false);
    lock.exec('ROLLBACK');
    await p.flush();
    await appended;
    expect((await p.load('s'))?.events).toEqual([ev(0)]);
  });

  it('rejects an event row holding invalid JSON as CORRUPT_DATA', async () => {
    const file = newFile();
    const p = open(file);
    await p.create(header('s'));
    await p.append('s', [ev(0), ev(1)]);
    raw(file).prepare("UPDATE events SET data = '{broken' WHERE session_id = 's' AND seq = 1").run();
    await expect(p.load('s')).rejects.toMatchObject({ code: 'CORRUPT_DATA' });
  });

  it('rejects a log with a missing event row as CORRUPT_DATA', async () => {
    const file = newFile();
    const p = open(file);
    await p.create(header('s'));
    await p.append('s', [ev(0), ev(1), ev(2)]);
    raw(file).prepare("DELETE FROM events WHERE session_id = 's' AND seq = 1").run();
    await expect(p.load('s')).rejects.toMatchObject({ code: 'CORRUPT_DATA' });
  });

  it('refuses a file with an unknown schema version as CORRUPT_DATA', async () => {
    const file = newFile();
    await open(file).close();
    raw(file).pragma('user_version = 99');
    expect(thrown(() => open(file))).toMatchObject({ code: 'CORRUPT_DATA' });
  });

  it('refuses a file of a newer schema version as CORRUPT_DATA also while a newer writer holds its write lock', async () => {
    const file = newFile();
    await open(file).close();
    const newer = raw(file);
    newer.pragma('user_version = 99');
    // Refusing it writes nothing: it does not wait for the lock, nor say the file is locked.
    newer.exec('BEGIN IMMEDIATE');
    expect(thrown(() => open(file, { busyTimeoutMs: 0 }))).toMatchObject({ code: 'CORRUPT_DATA', message: expect.stringContaining('has schema version 99') });
    newer.exec('ROLLBACK');
  });

  it('refuses an SQLite database it did not create as CORRUPT_DATA, leaving its bytes as they were (not switched to WAL)', () => {
    const file = newFile();
    const other = new Database(file);
    other.exec('CREATE TABLE notes (body TEXT)');
    other.close();
    const before = fs.readFileSync(file);
    expect(thrown(() => open(file))).toMatchObject({ code: 'CORRUPT_DATA' });
    expect(fs.readFileSync(file).equals(before)).toBe(true);
    expect(fs.existsSync(`${file}-wal`)).toBe(false);
  });

  it.each([1, 2, 3, 4])('refuses a database claiming older schema version %i without its tables as CORRUPT_DATA, leaving its bytes as they were', (version) => {
    const file = newFile();
    const other = new Database(file);
    other.exec('CREATE TABLE notes (body TEXT)');
    other.pragma(`user_version = ${version}`);
    other.close();
    const before = fs.readFileSync(file);
    expect(thrown(() => open(file))).toMatchObject({ code: 'CORRUPT_DATA', message: expect.stringContaining(`claims schema version ${version}`) });
    expect(fs.readFileSync(file).equals(before)).toBe(true);
  });

  it('refuses a file that is not a database as CORRUPT_DATA', () => {
    const file = newFile();
    fs.writeFileSync(file, 'this is not sqlite, just some text that is long enough to have a header'.repeat(10));
    expect(thrown(() => open(file))).toMatchObject({ code: 'CORRUPT_DATA' });
  });

  it.each([
    ['an empty path', '', {}],
    ['a path with a NUL character', path.join(tmp, 'a\0b.db'), {}],
    ['a negative flushIntervalMs', ':memory:', { flushIntervalMs: -1 }],
    ['a fractional busyTimeoutMs', ':memory:', { busyTimeoutMs: 1.5 }],
    ['an unknown option', ':memory:', { flushEvery: 5 }],
    ['an unknown synchronous setting', ':memory:', { synchronous: 'off' }],
  ])('rejects %s as INVALID_OPTIONS', (_name, file, options) => {
    expect(thrown(() => open(file, options as SqlitePersistenceOptions))).toMatchObject({ code: 'INVALID_OPTIONS' });
  });

  it('commits appends on its own after the batch interval', async () => {
    const file = newFile();
    const p = open(file, { flushIntervalMs: 1 });
    await p.create(header('s'));
    await p.append('s', [ev(0)]);
    expect(raw(file).prepare('SELECT count(*) FROM events').pluck().get()).toBe(1);
  });
});

describe('sqlitePersistence with damaged rows and unusable paths', () => {
  it.each([
    ['a session column', "UPDATE sessions SET delegation_depth = -1 WHERE id = 's'", 'sessions.delegation_depth'],
    ['an event column', "UPDATE events SET type = '' WHERE session_id = 's' AND seq = 1", 'event 1 is invalid'],
  ])('rejects a load as CORRUPT_DATA naming %s this store never writes', async (_name, damage, named) => {
    const file = newFile();
    const p = open(file);
    await p.create(header('s'));
    await p.append('s', [ev(0), ev(1)]);
    await p.flush();
    raw(file).prepare(damage).run();
    const error = await p.load('s').catch((caught: unknown) => caught);
    expect(error).toMatchObject({ code: 'CORRUPT_DATA' });
    expect(String(error)).toContain(named);
  });

  it('rejects a child listing as CORRUPT_DATA naming the origin this store never writes', async () => {
    const file = newFile();
    const p = open(file);
    await p.create(header('parent'));
    await p.create(header('child', { parentSession: 'parent', origin: 'subagent' }));
    raw(file).prepare("UPDATE sessions SET origin = 'robot' WHERE id = 'child'").run();
    const error = await p.childRecords('parent').catch((caught: unknown) => caught);
    expect(error).toMatchObject({ code: 'CORRUPT_DATA' });
    expect(String(error)).toContain('sessions.origin');
  });

  it('reports the projections of a row with a next_seq it never writes as unreadable', async () => {
    const file = newFile();
    const p = open(file);
    await p.create(header('s'));
    raw(file).prepare("UPDATE sessions SET next_seq = -1 WHERE id = 's'").run();
    expect((await p.projections(['s'])).get('s')).toMatchObject({ ok: false, error: { code: 'CORRUPT_DATA' } });
  });

  it('rebuilds lost projection states from the log on the next append, or keeps appending to a damaged log', async () => {
    const file = newFile();
    const p = open(file);
    for (const id of ['reference', 'intact', 'damaged']) {
      await p.create(header(id));
      await p.append(id, [ev(0), ev(1)]);
    }
    await p.append('reference', [ev(2)]);
    await p.flush();
    const db = raw(file);
    const states = (db.prepare('SELECT name FROM pragma_table_info(?)').pluck().all('sessions') as string[]).filter((name) => /^(identity|timing|usage)_/.test(name));
    db.prepare(`UPDATE sessions SET ${states.map((name) => `${name} = NULL`).join(', ')} WHERE id <> 'reference'`).run();
    db.prepare("UPDATE events SET data = '{broken' WHERE session_id = 'damaged' AND seq = 1").run();
    await p.append('intact', [ev(2)]);
    await p.append('damaged', [ev(2)]);
    await p.flush();
    const found = await p.projections(['reference', 'intact', 'damaged']);
    expect(found.get('intact')).toEqual(found.get('reference'));
    expect(found.get('damaged')).toMatchObject({ ok: false, error: { code: 'CORRUPT_DATA' } });
    expect(db.prepare("SELECT count(*) FROM events WHERE session_id = 'damaged'").pluck().get()).toBe(3);
  });

  it.each([
    ['in a directory that does not exist', () => path.join(tmp, 'missing', 'store.db'), 'cannot be created'],
    ['that is a directory', () => fs.mkdtempSync(path.join(tmp, 'dir-')), 'cannot be opened'],
  ])('rejects a path %s as INVALID_OPTIONS', (_name, file, why) => {
    const error = thrown(() => open(file()));
    expect(error).toMatchObject({ code: 'INVALID_OPTIONS' });
    expect(String(error)).toContain(why);
  });

  // SQLite would take it for an empty database and leave its journal beside it: as root, a file in /dev.
  it.skipIf(!fs.existsSync('/dev/null') || fs.existsSync('/dev/null-journal'))('rejects a path that is no regular file (/dev/null) as INVALID_OPTIONS, writing nothing beside it', () => {
    try {
      const error = thrown(() => open('/dev/null'));
      expect(error).toMatchObject({ code: 'INVALID_OPTIONS', message: 'path "/dev/null" cannot be opened: it is not a regular file' });
      expect(fs.existsSync('/dev/null-journal')).toBe(false);
    } finally {
      fs.rmSync('/dev/null-journal', { force: true });
    }
  });

  it('rejects a store in a folder it may not write (no -shm beside it) as PERSISTENCE_UNAVAILABLE saying so', async () => {
    const folder = fs.mkdtempSync(path.join(tmp, 'locked-'));
    const file = path.join(folder, 'store.db');
    await open(file).close();
    const error = await withUnwritableFolder(folder, async () => thrown(() => open(file)));
    expect(error).toMatchObject({ code: 'PERSISTENCE_UNAVAILABLE', message: expect.stringContaining('its folder is not writable by this process') });
  });

  it('rejects a store another connection holds locked as PERSISTENCE_UNAVAILABLE once busyTimeoutMs passes', () => {
    const file = newFile();
    raw(file).exec('BEGIN EXCLUSIVE');
    const error = thrown(() => open(file, { busyTimeoutMs: 0 }));
    expect(error).toMatchObject({ code: 'PERSISTENCE_UNAVAILABLE' });
    expect(String(error)).toContain('database is locked');
  });
});

/**
 * Another process holding the write lock of `file` (a store in rollback mode, as a new file is before
 * its first opener switches it to WAL: that opener holds it while it switches) for `holdMs` after it
 * says so, or until `release()` when `holdMs` is undefined; `released` is the time it let go.
 */
async function writeLockedByAnotherProcess(file: string, holdMs?: number): Promise<{ released: Promise<number>; release: () => void }> {
  const child = spawn(
    process.execPath,
    ['-e', `const db = new (require('better-sqlite3'))(process.argv[1]); db.exec('BEGIN IMMEDIATE');
const letGo = () => { db.exec('COMMIT'); db.close(); console.log(Date.now()); };
console.log('locked'); if (process.argv[2] === '') process.stdin.resume().on('end', letGo); else setTimeout(letGo, Number(process.argv[2]));`, file, holdMs === undefined ? '' : String(holdMs)],
    { stdio: ['pipe', 'pipe', 'inherit'] },
  );
  let out = '';
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => (out += chunk));
  const exited = new Promise<void>((resolve, reject) => child.once('exit', (code) => (code === 0 ? resolve() : reject(new Error(`lock holder exited ${code}: ${out}`)))));
  await Promise.race([new Promise<void>((resolve) => child.stdout.on('data', () => out.startsWith('locked\n') && resolve())), exited]);
  if (holdMs !== undefined) child.stdin.end();
  return { released: exited.then(() => Number(out.split('\n')[1])), release: () => child.stdin.end() };
}

describe('opening one new store from several processes', () => {
  it('waits while another process switches the new file to WAL, instead of failing with "database is locked"', async () => {
    const file = newFile();
    await open(file).close();
    const rollback = new Database(file);
    rollback.pragma('journal_mode = DELETE');
    rollback.close();
    // The switch to WAL upgrades a read lock to a write lock, which SQLite refuses at once (its busy
    // handler would deadlock) while another connection holds one. A holder that let go before the
    // open began proves nothing: again.
    for (let attempt = 0; ; attempt++) {
      const holder = await writeLockedByAnotherProcess(file, 300);
      const began = Date.now();
      const store = open(file, { busyTimeoutMs: 30_000 });
      const released = await holder.released;
      await store.close();
      if (began < released || attempt === 4) {
        expect(began).toBeLessThan(released);
        break;
      }
      const back = new Database(file);
      back.pragma('journal_mode = DELETE');
      back.close();
    }
    const check = raw(file);
    expect(check.pragma('journal_mode', { simple: true })).toBe('wal');
  });
});

describe('another writer committing while this store reads', () => {
  const EVENTS_QUERY = 'SELECT seq, type, time, data FROM events WHERE session_id = ? ORDER BY seq';

  /** Runs `commit` (another connection's write) right before this process next reads a session's events. */
  function beforeEventsRead(commit: () => void): () => void {
    const prepare = Database.prototype.prepare;
    let pending: (() => void) | undefined = commit;
    Database.prototype.prepare = function (this: Database.Database, sql: string) {
      const statement = prepare.call(this, sql);
      if (sql === EVENTS_QUERY) {
        const all = statement.all.bind(statement);
        statement.all = ((...args: unknown[]) => {
          const run = pending;
          pending = undefined;
          run?.();
          return all(...(args as [string]));
        }) as typeof statement.all;
      }
      return statement;
    } as typeof prepare;
    return () => void (Database.prototype.prepare = prepare);
  }

  it('loads the log as of one moment: a commit between reading the row and its events is not mistaken for corruption', async () => {
    const file = newFile();
    const writer = open(file);
    await writer.create(header('s'));
    await writer.append('s', [ev(0)]);
    await writer.flush();
    const restore = beforeEventsRead(() => {
      const other = new Database(file);
      other.prepare('INSERT INTO events (session_id, seq, type, time, data) VALUES (?, 1, ?, 1, ?)').run('s', 'test/note', '{}');
      other.prepare('UPDATE sessions SET next_seq = 2 WHERE id = ?').run('s');
      other.close();
    });
    let reader: SessionPersistence;
    try {
      reader = open(file);
      await expect(reader.load('s')).resolves.toMatchObject({ events: [{ seq: 0 }] });
    } finally {
      restore();
    }
    expect((await reader.load('s'))!.events.map((event) => event.seq)).toStrictEqual([0, 1]);
  });

  it('answers projections it had to rebuild while another connection holds the write lock, and keeps them once it can', async () => {
    const file = newFile();
    const writer = open(file);
    await writer.create(header('s'));
    await writer.append('s', [ev(0)]);
    await writer.close();
    const other = raw(file);
    // States not stored (as after an upgrade): a read rebuilds them from the log and writes them back.
    other.exec('UPDATE sessions SET identity_mode = NULL, timing_settled = NULL, usage_input = NULL');
    other.exec('BEGIN IMMEDIATE');
    const reader = open(file, { busyTimeoutMs: 20 });
    const locked = (await reader.projections(['s'])).get('s');
    expect(locked).toMatchObject({ ok: true });
    other.exec('COMMIT');
    expect(other.prepare('SELECT usage_input FROM sessions').pluck().get()).toBeNull();
    expect((await reader.projections(['s'])).get('s')).toStrictEqual(locked);
    expect(other.prepare('SELECT usage_input FROM sessions').pluck().get()).toBe(0);
  });

  it('does not wait for another process’s write lock to keep projections it rebuilt, however long busyTimeoutMs is', async () => {
    const file = newFile();
    const writer = open(file);
    const ids = ['a', 'b', 'c'];
    for (const id of ids) {
      await writer.create(header(id));
      await writer.append(id, [ev(0)]);
    }
    await writer.close();
    // States not stored (as after an upgrade): each read rebuilds them, and would write them back.
    raw(file).exec('UPDATE sessions SET identity_mode = NULL, timing_settled = NULL, usage_input = NULL');
    const reader = open(file, { busyTimeoutMs: 60_000 });
    // It holds the lock until told: an answer at all means the read did not wait for it (a cache
    // write waiting for the lock, once per session, would block this thread 60 s each, past the timeout).
    const holder = await writeLockedByAnotherProcess(file);
    try {
      const read = await reader.projections(ids);
      expect([...read.values()].map((entry) => entry.ok)).toStrictEqual([true, true, true]);
    } finally {
      holder.release();
      await holder.released;
    }
  });
});

describe('text SQLite cannot keep as it is', () => {
  it('refuses ids, paths and event types with a lone UTF-16 surrogate before storing them', async () => {
    const store = open(newFile());
    for (const header of [{ id: 'a\uD800', createdAt: 1 }, { id: 'b', createdAt: 1, cwd: '/x\uDC00' }, { id: 'c', createdAt: 1, parentSession: '\uD800p', origin: 'subagent' as const }]) {
      await expect(store.create(header)).rejects.toMatchObject({ code: 'INVALID_OPTIONS', message: expect.stringContaining('lone UTF-16 surrogate') });
    }
    await store.create({ id: 'ok', createdAt: 1 });
    await expect(store.append('ok', [{ seq: 0, type: 'custom\uD800', time: 1, data: {} }])).rejects.toMatchObject({ code: 'CORRUPT_DATA' });
    // A paired surrogate is a character like any other.
    await store.create({ id: 'emoji \uD83D\uDE00', createdAt: 1 });
    expect((await store.load('emoji \uD83D\uDE00'))?.header.id).toBe('emoji \uD83D\uDE00');
    expect((await store.list()).map((header) => header.id)).toStrictEqual(['ok', 'emoji \uD83D\uDE00']);
  });
});
