// Storage failures reach the caller they concern, typed: a lock held past busyTimeoutMs is
// PERSISTENCE_UNAVAILABLE, a continuable start that could not be made durable leaves no child, and
// one session's failed write is reported by that session's own flush, not by another's.
import Database from 'better-sqlite3';
import { execFile, execFileSync, spawn } from 'node:child_process';
import { chmodSync, readFileSync, readdirSync, readlinkSync, renameSync, rmSync } from 'node:fs';
import { basename } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterEach, describe, expect, it } from 'vitest';
import { createHost, sqlitePersistence, text, type Host, type Tool } from 'subagent-host';
import { continuationHost, eventually, startChild, untilEvent, userTexts, type Recorder } from './continuation-helpers.js';
import { damageSqlitePages, tempFiles } from './helpers.js';

const files = tempFiles('storage-failures-');
const hosts: Host[] = [];
afterEach(async () => {
  await Promise.all(hosts.splice(0).map((host) => host.close().catch(() => undefined)));
});

const HANG = { kind: 'scripted' as const, steps: [{ finish: 'hang' as const }] };

/** Another connection holding the write lock of `file` until `release()`. */
function lockWriters(file: string): { release(): void } {
  const other = new Database(file);
  other.exec('BEGIN IMMEDIATE');
  return {
    release() {
      other.exec('COMMIT');
      other.close();
    },
  };
}

describe('storage failures', () => {
  it('rejects PERSISTENCE_UNAVAILABLE while another connection holds the lock, and works once it is released', async () => {
    const file = files.file();
    const host = await continuationHost(file, { persistence: { sqlite: file, busyTimeoutMs: 50 } });
    hosts.push(host);
    const parent = await host.createAgent({ sessionId: 'parent' });
    await host.subagents.startContinuable({ provider: 'in-process', label: 'c', childId: 'c', request: { prompt: [text('start')], parent, agentOptions: { model: HANG } } });
    const lock = lockWriters(file);
    const unavailable = { name: 'SubagentError', code: 'PERSISTENCE_UNAVAILABLE' };
    await expect(host.subagents.followup(parent, 'c', [text('m1')])).rejects.toMatchObject(unavailable);
    await expect(host.subagents.listChildren('parent')).rejects.toMatchObject(unavailable);
    await expect(host.persistence!.flush()).rejects.toMatchObject(unavailable);
    lock.release();
    await host.subagents.followup(parent, 'c', [text('m2')]);
    expect((await host.subagents.listChildren('parent')).map((entry) => entry.id)).toStrictEqual(['c']);
  });

  // SQLite opens a file it may not write as read-only, quietly: the host would start, then fail every write.
  it('refuses a file the host may not write when it is created, as PERSISTENCE_UNAVAILABLE, leaving the file as it was', async () => {
    const file = files.file();
    await (await createHost({ persistence: { sqlite: file }, providers: false, pool: { minThreads: 0 } })).close();
    const before = readFileSync(file);
    // Root writes any file its mode forbids: an immutable one it may not.
    const root = process.getuid?.() === 0;
    if (root) execFileSync('chattr', ['+i', file]);
    else chmodSync(file, 0o444);
    try {
      await expect(createHost({ persistence: { sqlite: file }, providers: false, pool: { minThreads: 0 } })).rejects.toMatchObject({
        name: 'SubagentError',
        code: 'PERSISTENCE_UNAVAILABLE',
        message: expect.stringContaining('this process may not write it'),
      });
    } finally {
      if (root) execFileSync('chattr', ['-i', file]);
    }
    expect(readFileSync(file).equals(before)).toBe(true);
    expect(readdirSync(files.dir).filter((name) => name.startsWith(basename(file)))).toStrictEqual([basename(file)]);
  });

  it('creates a new session whose creation met the lock on a later flush, with every event, and each flush until then rejects', async () => {
    const file = files.file();
    const host = await createHost({ persistence: { sqlite: file, busyTimeoutMs: 50 }, providers: false, pool: { minThreads: 0 } });
    hosts.push(host);
    const lock = lockWriters(file);
    const agent = await host.createAgent({ sessionId: 'late' });
    const unavailable = { name: 'SubagentError', code: 'PERSISTENCE_UNAVAILABLE' };
    await expect(host.sessions.flush('late')).rejects.toMatchObject(unavailable);
    agent.followup([text('while locked')]);
    await agent.whenIdle();
    await expect(host.sessions.flush('late')).rejects.toMatchObject(unavailable);
    lock.release();
    agent.followup([text('after')]);
    await agent.whenIdle();
    await host.sessions.flush('late');
    expect((await host.persistence!.load('late'))!.events).toStrictEqual(agent.session.events);
  });

  it('does not report a creation that met the lock once a retry stored it: close() resolves', async () => {
    const file = files.file();
    const host = await createHost({ persistence: { sqlite: file, busyTimeoutMs: 50 }, providers: false, pool: { minThreads: 0 } });
    hosts.push(host);
    const lock = lockWriters(file);
    const agent = await host.createAgent({ sessionId: 'retried' });
    lock.release();
    agent.followup([text('after the lock')]);
    await agent.whenIdle();
    await host.close();
    const reopened = sqlitePersistence(file);
    try {
      expect((await reopened.load('retried'))!.events).toStrictEqual(agent.session.events);
    } finally {
      await reopened.close();
    }
  });

  it('a continuable start that could not be made durable rejects, and its running child is ended, not listed or stored', async () => {
    const file = files.file();
    const host = await continuationHost(file, { persistence: { sqlite: file, busyTimeoutMs: 50 } });
    hosts.push(host);
    const parent = await host.createAgent({ sessionId: 'parent' });
    await host.persistence!.flush();
    const lock = lockWriters(file);
    const starting = host.subagents.startContinuable({ provider: 'in-process', label: 'x', childId: 'x', request: { prompt: [text('work')], parent, agentOptions: { model: HANG } } });
    await expect(starting).rejects.toMatchObject({ code: 'PERSISTENCE_UNAVAILABLE' });
    lock.release();
    const recorder = host.recorder as Recorder;
    // Its turn was under way: the rollback ends it.
    expect(recorder.ends.map((end) => [end.id, end.stopReason])).toStrictEqual([['x', 'aborted']]);
    expect(host.agents.get('x')).toBeUndefined();
    expect(host.sessions.get('x')).toBeUndefined();
    // Not later either, by a retry or a flush of every session.
    await new Promise((resolve) => setTimeout(resolve, 200));
    await host.sessions.flush();
    await host.persistence!.flush();
    expect(await host.subagents.listChildren('parent')).toStrictEqual([]);
    await expect(host.subagents.followup(parent, 'x', [text('more')])).rejects.toMatchObject({ code: 'NOT_RESUMABLE' });
  });

  it('reports a session’s failed write to that session’s follow-up only', async () => {
    const file = files.file();
    const host = await continuationHost(file);
    hosts.push(host);
    const parent = await host.createAgent({ sessionId: 'parent' });
    for (const childId of ['victim', 'bystander']) {
      await host.subagents.startContinuable({ provider: 'in-process', label: childId, childId, request: { prompt: [text('start')], parent, agentOptions: { model: HANG } } });
    }
    for (const order of [['bystander', 'victim'], ['victim', 'bystander']]) {
      // A second writer touches `victim` (loading repairs its open turn): this host's next append to it is stale.
      const other = await createHost({ persistence: { sqlite: file }, providers: false, pool: { minThreads: 0 } });
      await other.persistence!.load('victim');
      await other.close();
      const outcomes = await Promise.allSettled(order.map((id) => host.subagents.followup(parent, id, [text(`to ${id}`)])));
      const byId = Object.fromEntries(order.map((id, index) => [id, outcomes[index]!.status]));
      expect(byId).toStrictEqual({ bystander: 'fulfilled', victim: 'rejected' });
      // The refused write ended the victim's residency: its next follow-up brings it back from the stored log.
      await host.subagents.followup(parent, 'victim', [text('again')]);
    }
  });
});

describe('a session disposed before the store created it (a lock held past busyTimeoutMs)', () => {
  /** How many events of session `id` the file holds (0 when it holds no such session), read by another connection. */
  function storedEvents(file: string, id: string): number {
    const reader = new Database(file, { readonly: true });
    try {
      return reader.prepare('SELECT count(*) FROM events WHERE session_id = ?').pluck().get(id) as number;
    } finally {
      reader.close();
    }
  }

  it('is stored with every event once the lock clears, though no flush comes: a one-shot child and a top-level agent alike', async () => {
    const file = files.file();
    const host = await continuationHost(file, { persistence: { sqlite: file, busyTimeoutMs: 50 } });
    hosts.push(host);
    const parent = await host.createAgent({ sessionId: 'parent' });
    await host.sessions.flush();
    const lock = lockWriters(file);
    const run = await host.subagents.start('in-process', { prompt: [text('hi')], label: 'one-shot', parent, signal: new AbortController().signal });
    await run.result;
    const childEvents = host.sessions.get(run.id)!.events.length;
    await expect(run.dispose()).rejects.toMatchObject({ name: 'SubagentError', code: 'PERSISTENCE_UNAVAILABLE' });
    const agent = await host.createAgent({ sessionId: 'top' });
    agent.followup([text('hello')]);
    await agent.whenIdle();
    const agentEvents = agent.session.events.length;
    await expect(host.agents.dispose('top')).rejects.toMatchObject({ name: 'SubagentError', code: 'PERSISTENCE_UNAVAILABLE' });
    expect(host.sessions.get('top')).toBeUndefined();
    lock.release();
    await eventually(() => storedEvents(file, run.id) === childEvents && storedEvents(file, 'top') === agentEvents);
    expect((await host.subagents.listChildren('parent')).map((entry) => entry.id)).toStrictEqual([run.id]);
    await host.close();
  });

  it('is stored by close() when the lock clears before it', async () => {
    const file = files.file();
    const host = await createHost({ persistence: { sqlite: file, busyTimeoutMs: 50 }, providers: false, pool: { minThreads: 0 } });
    const lock = lockWriters(file);
    const agent = await host.createAgent({ sessionId: 'top' });
    agent.followup([text('hello')]);
    await agent.whenIdle();
    const events = agent.session.events;
    await expect(host.agents.dispose('top')).rejects.toMatchObject({ code: 'PERSISTENCE_UNAVAILABLE' });
    lock.release();
    await host.close();
    const reopened = sqlitePersistence(file);
    try {
      expect((await reopened.load('top'))!.events).toStrictEqual(events);
    } finally {
      await reopened.close();
    }
  });
});

describe('host.persistence.load of a live session whose write the store refused', () => {
  it('rejects PERSISTENCE_UNAVAILABLE without reading the store, and leaves the failure to the writer’s own flush', async () => {
    const file = files.file();
    const host = await createHost({ persistence: { sqlite: file }, providers: false, pool: { minThreads: 0 } });
    hosts.push(host);
    const agent = await host.createAgent({ sessionId: 'a', agentOptions: { model: HANG } });
    agent.followup([text('start')]);
    await host.sessions.flush('a');
    // A second writer loads `a` (closing its open turn): this host's next commit of it is refused.
    const other = await createHost({ persistence: { sqlite: file }, providers: false, pool: { minThreads: 0 } });
    await other.persistence!.load('a');
    await other.close();
    agent.followup([text('refused')]);
    await expect(host.persistence!.load('a')).rejects.toMatchObject({ code: 'PERSISTENCE_UNAVAILABLE' });
    // The read reported nothing: the writer's flush still learns that its events are not stored.
    await expect(host.sessions.flush('a')).rejects.toMatchObject({ name: 'SubagentError' });
    await expect(host.persistence!.load('a')).rejects.toMatchObject({ code: 'PERSISTENCE_UNAVAILABLE' });
  });
});

describe('follow-ups sent together to a child whose write the store refuses', () => {
  it('are all rejected: none is acknowledged with its message unstored', async () => {
    const file = files.file();
    const host = await continuationHost(file);
    hosts.push(host);
    const parent = await host.createAgent({ sessionId: 'parent' });
    await host.subagents.startContinuable({ provider: 'in-process', label: 'victim', childId: 'victim', request: { prompt: [text('start')], parent, agentOptions: { model: HANG } } });
    // A second writer touches `victim` (loading repairs its open turn): this host's next commit of it is refused.
    const other = await createHost({ persistence: { sqlite: file }, providers: false, pool: { minThreads: 0 } });
    await other.persistence!.load('victim');
    await other.close();
    const messages = ['m1', 'm2', 'm3'];
    const outcomes = await Promise.allSettled(messages.map((message) => host.subagents.followup(parent, 'victim', [text(message)])));
    // The first is refused, and the child's residency ends with it; one sent after that brings it back from the stored log.
    expect(outcomes[0]).toMatchObject({ status: 'rejected', reason: { code: 'SEQ_MISMATCH' } });
    for (const outcome of outcomes) if (outcome.status === 'rejected') expect(outcome.reason).toMatchObject({ code: 'SEQ_MISMATCH' });
    const stored = new Database(file, { readonly: true });
    try {
      const texts = stored.prepare("SELECT data FROM events WHERE session_id = 'victim' AND type = 'inbox/accepted'").pluck().all() as string[];
      expect(texts.flatMap((data) => /"(m\d)"/.exec(data)?.[1] ?? [])).toStrictEqual(messages.filter((_, n) => outcomes[n]!.status === 'fulfilled'));
    } finally {
      stored.close();
    }
  });
});

describe('the SQLite store on its own', () => {
  const descriptor = { seq: 1, type: 'subagent/descriptor', time: 1, data: { version: 1, mode: 'one-shot' } };

  it('types a lock held past busyTimeoutMs for create and for the repair a load writes', async () => {
    const file = files.file();
    const store = sqlitePersistence(file, { busyTimeoutMs: 50 });
    await store.create({ id: 'open-turn', createdAt: 1 });
    await store.append('open-turn', [{ seq: 0, type: 'turn/start', time: 1, data: { turn: 1 } }]);
    await store.flush();
    const lock = lockWriters(file);
    const unavailable = { name: 'SubagentError', code: 'PERSISTENCE_UNAVAILABLE' };
    await expect(store.create({ id: 'new', createdAt: 2 })).rejects.toMatchObject(unavailable);
    // The open turn gets a closing event on load: a write, refused while locked.
    await expect(store.load('open-turn')).rejects.toMatchObject(unavailable);
    lock.release();
    expect((await store.load('open-turn'))!.events.map((event) => event.type)).toStrictEqual(['turn/start', 'turn/end']);
    await store.close();
  });

  it('rejects each append still queued when close() could not commit it, with close()’s error: none is left pending', async () => {
    const file = files.file();
    const store = sqlitePersistence(file, { busyTimeoutMs: 50, flushIntervalMs: 60_000 });
    await store.create({ id: 'queued', createdAt: 1 });
    const lock = lockWriters(file);
    const appended = store.append('queued', [{ seq: 0, type: 'turn/start', time: 1, data: { turn: 1 } }]);
    const outcome = appended.then(
      () => 'stored',
      (error: unknown) => error,
    );
    try {
      const closing = await store.close().then(
        () => undefined,
        (error: unknown) => error,
      );
      expect(closing).toMatchObject({ name: 'SubagentError', code: 'PERSISTENCE_UNAVAILABLE' });
      // Settled by the time close() rejects: a macrotask later, every reaction to it has run.
      const settled = await Promise.race([outcome, new Promise((resolve) => setImmediate(() => resolve('pending')))]);
      expect(settled).toBe(closing);
    } finally {
      lock.release();
    }
  });

  it('types a page of the log damaged after the store opened as CORRUPT_DATA, not as a passing failure', async () => {
    const file = files.file();
    const writer = sqlitePersistence(file);
    await writer.create({ id: 'damaged', createdAt: 1 });
    await writer.append('damaged', [{ seq: 0, type: 'turn/start', time: 1, data: { turn: 1 } }, { seq: 1, type: 'turn/end', time: 1, data: { turn: 1, reason: { kind: 'completed' } } }]);
    await writer.close();
    damageSqlitePages(file, "SELECT rootpage FROM sqlite_schema WHERE name = 'events'", 0xa5);
    const store = sqlitePersistence(file);
    await expect(store.load('damaged')).rejects.toMatchObject({ code: 'CORRUPT_DATA', message: expect.stringContaining('the database file is damaged') });
    await store.close();
  });

  it('drops a batch SQLite refuses for its own session alone; the other sessions’ events are stored', async () => {
    const file = files.file();
    const store = sqlitePersistence(file);
    await store.create({ id: 'good', createdAt: 1 });
    await store.create({ id: 'bad', createdAt: 2 });
    // Turn times whose sum is no longer finite: the timing column refuses the row.
    const bad = store.append('bad', [
      { seq: 0, type: 'turn/start', time: -1e308, data: { turn: 1 } },
      descriptor,
      { seq: 2, type: 'turn/end', time: 1e308, data: { turn: 1, reason: { kind: 'completed' } } },
      { seq: 3, type: 'turn/start', time: -1e308, data: { turn: 2 } },
      { seq: 4, type: 'turn/end', time: 1e308, data: { turn: 2, reason: { kind: 'completed' } } },
    ]);
    const good = store.append('good', [{ seq: 0, type: 'custom', time: 1, data: { x: 1 } }]);
    await store.flush();
    await expect(bad).rejects.toMatchObject({ code: 'PERSISTENCE_UNAVAILABLE', message: expect.stringContaining('refused the events of session "bad"') });
    await good;
    await store.close();
    const reopened = sqlitePersistence(file);
    expect((await reopened.load('good'))!.events).toHaveLength(1);
    expect((await reopened.load('bad'))!.events).toHaveLength(0);
    await reopened.close();
  });

  it('drops an event past SQLite’s length limit for its own session alone; the other sessions’ writes go on', async () => {
    const file = files.file();
    const store = sqlitePersistence(file);
    await store.create({ id: 'good', createdAt: 1 });
    await store.create({ id: 'huge', createdAt: 2 });
    // Past 10^9 UTF-8 bytes: better-sqlite3 refuses to bind it (a RangeError, not an SQLITE_TOOBIG
    // code), which once failed every commit after it, for every session, for good.
    const huge = store.append('huge', [{ seq: 0, type: 'custom', time: 1, data: { text: '€'.repeat(334_000_000) } }]);
    const good = store.append('good', [{ seq: 0, type: 'custom', time: 1, data: { x: 1 } }]);
    await store.flush();
    await expect(huge).rejects.toMatchObject({ code: 'PERSISTENCE_UNAVAILABLE', message: expect.stringContaining('refused the events of session "huge"') });
    await good;
    await store.append('good', [{ seq: 1, type: 'custom', time: 2, data: { x: 2 } }]);
    await store.close();
    const reopened = sqlitePersistence(file);
    expect((await reopened.load('good'))!.events).toHaveLength(2);
    expect((await reopened.load('huge'))!.events).toHaveLength(0);
    await reopened.close();
  }, 120_000);

  it('stores token counts whose sum passes 2^53 as the largest safe count', async () => {
    const file = files.file();
    const store = sqlitePersistence(file);
    await store.create({ id: 'big', createdAt: 1, parentSession: 'root', origin: 'subagent' });
    const huge = { inputTokens: 2 ** 52, outputTokens: 0 };
    const message = (seq: number) => ({ seq, type: 'assistant/message', time: 2, data: { turn: 1, step: 1, content: [], usage: huge } });
    await store.append('big', [{ seq: 0, type: 'turn/start', time: 1, data: { turn: 1 } }, descriptor, message(2), message(3), message(4)]);
    await store.flush();
    const [record] = await store.childRecords('root');
    expect(record?.listed?.usage).toMatchObject({ inputTokens: Number.MAX_SAFE_INTEGER, totalTokens: Number.MAX_SAFE_INTEGER });
    await store.close();
  });

  it('lists a child whose input and output counts each fit but whose total does not with the largest safe total', async () => {
    const store = sqlitePersistence(files.file());
    await store.create({ id: 'big', createdAt: 1, parentSession: 'root', origin: 'subagent' });
    const half = { inputTokens: 2 ** 52, outputTokens: 2 ** 52 };
    await store.append('big', [{ seq: 0, type: 'turn/start', time: 1, data: { turn: 1 } }, descriptor, { seq: 2, type: 'assistant/message', time: 2, data: { turn: 1, step: 1, content: [], usage: half } }]);
    await store.flush();
    const [record] = await store.childRecords('root');
    expect(record?.listed?.usage).toMatchObject({ inputTokens: 2 ** 52, outputTokens: 2 ** 52, totalTokens: Number.MAX_SAFE_INTEGER });
    await store.close();
  });

  it('refuses CORRUPT_DATA, leaves the file as it was and keeps no handle open, for a file that claims this schema with other tables', () => {
    const file = files.file();
    const foreign = new Database(file);
    foreign.exec('CREATE TABLE sessions (id TEXT PRIMARY KEY)');
    foreign.pragma('user_version = 5');
    foreign.close();
    const before = readFileSync(file);
    const handles = () => readdirSync('/proc/self/fd').filter((fd) => {
      try {
        return readlinkSync(`/proc/self/fd/${fd}`).startsWith(file);
      } catch {
        return false;
      }
    }).length;
    for (let i = 0; i < 3; i++) expect(() => sqlitePersistence(file)).toThrow(expect.objectContaining({ code: 'CORRUPT_DATA' }));
    expect(handles()).toBe(0);
    // Not switched to WAL (that rewrites the header) before its tables were checked.
    expect(readFileSync(file).equals(before)).toBe(true);
  });
});

describe('a session id that is already stored', () => {
  it('is refused for a new agent, and a log the store refused to create writes nothing into the stored one', async () => {
    const file = files.file();
    const first = await createHost({ persistence: { sqlite: file }, providers: false });
    const stored = await first.createAgent({ sessionId: 'x' });
    stored.followup([text('hello')]);
    await stored.whenIdle();
    const count = stored.session.events.length;
    await first.close();

    const host = await createHost({ persistence: { sqlite: file }, providers: false });
    hosts.push(host);
    await expect(host.createAgent({ sessionId: 'x' })).rejects.toMatchObject({ code: 'DUPLICATE_SESSION', message: expect.stringContaining('resume') });
    expect((await host.persistence!.load('x'))!.events).toHaveLength(count);
  });

  it.each(['one SQLite file', 'one persistence object'])('is refused to the second of two hosts on %s that create it at once, which keeps no agent', async (shared) => {
    const file = files.file();
    const store = shared === 'one SQLite file' ? undefined : sqlitePersistence(file);
    const open = async () => {
      const host = await createHost({ persistence: store ?? { sqlite: file }, providers: false, pool: { minThreads: 0 } });
      hosts.push(host);
      return host;
    };
    const [first, second] = [await open(), await open()];
    // Both pass the stored-id check before either agent exists: the store's own refusal decides.
    const outcomes = await Promise.allSettled([first.createAgent({ sessionId: 'user-7' }), second.createAgent({ sessionId: 'user-7' })]);
    const created = outcomes.flatMap((outcome) => (outcome.status === 'fulfilled' ? [outcome.value] : []));
    const refused = outcomes.flatMap((outcome) => (outcome.status === 'rejected' ? [outcome.reason as unknown] : []));
    expect(created).toHaveLength(1);
    expect(refused).toMatchObject([{ name: 'SubagentError', code: 'DUPLICATE_SESSION' }]);
    const loser = outcomes[0]!.status === 'rejected' ? first : second;
    expect(loser.agents.list()).toStrictEqual([]);
    expect(loser.sessions.get('user-7')).toBeUndefined();
    created[0]!.followup([text('mine')]);
    await created[0]!.whenIdle();
    await Promise.all(hosts.splice(0).map((host) => host.close()));
    const reader = store ?? sqlitePersistence(file);
    try {
      expect((await reader.load('user-7'))!.events).toStrictEqual(created[0]!.session.events);
    } finally {
      await reader.close();
    }
  });

  it('gets no events of a new log whose creation the store refused, and each flush that drops some rejects', async () => {
    const file = files.file();
    // A session stored with its header only (its events never came): the next seq is 0.
    const store = sqlitePersistence(file);
    await store.create({ id: 'y', createdAt: 1, cwd: '/old', parentSession: 'someone', origin: 'subagent' });
    await store.close();
    const host = await createHost({ persistence: { sqlite: file }, providers: false });
    hosts.push(host);
    // The live store behind host.sessions, as providers use it for their children's mirrors.
    const live = host.sessions as unknown as { create(header: { id: string; createdAt: number; cwd?: string }): { append(type: string, data: unknown): unknown } };
    const intruder = live.create({ id: 'y', createdAt: Date.now(), cwd: '/elsewhere' });
    intruder.append('custom', { from: 'intruder' });
    await expect(host.sessions.flush('y')).rejects.toMatchObject({ code: 'DUPLICATE_SESSION' });
    // Each later flush that drops events says so too: none of them is durable.
    intruder.append('custom', { from: 'intruder', again: true });
    await expect(host.sessions.flush('y')).rejects.toMatchObject({ code: 'DUPLICATE_SESSION' });
    await host.persistence!.flush();
    expect((await host.persistence!.load('y'))!.events).toStrictEqual([]);
  });
});

describe('a session another host wrote meanwhile', () => {
  const resumeWriter = fileURLToPath(new URL('./fixtures/resume-writer.mjs', import.meta.url));
  const packageUrl = new URL('../dist/src/index.js', import.meta.url).href;

  it('gets none of the stale host’s later events, also one whose seq lines up with the stored log', async () => {
    const file = files.file();
    const host = await createHost({ persistence: { sqlite: file }, providers: false });
    hosts.push(host);
    const stale = await host.createAgent({ sessionId: 'shared' });
    stale.followup([text('first turn')]);
    await stale.whenIdle();
    await host.sessions.flush();
    const base = stale.session.events.length;
    // Another process resumes the session this host still holds and appends three events to it.
    const { stdout } = await promisify(execFile)(process.execPath, [resumeWriter, packageUrl, file, 'shared', '3']);
    const reader = sqlitePersistence(file);
    const written = (await reader.load('shared'))!.events;
    expect(written).toHaveLength(Number(stdout));
    expect(written.length).toBeGreaterThanOrEqual(base + 3);
    // The stale host goes on, one event per write: one of them has the seq the stored log goes on
    // at, and would land after the other host's events, as if it belonged to that history.
    for (let n = 0; stale.session.events.length <= written.length + 1; n++) {
      stale.inject([text(`stale ${n}`)]);
      await expect(host.sessions.flush()).rejects.toMatchObject({ name: 'SubagentError', code: 'SEQ_MISMATCH' });
    }
    expect((await reader.load('shared'))!.events).toStrictEqual(written);
    await reader.close();
  });
});

describe('a continuable child another host took over', () => {
  const takeoverWriter = fileURLToPath(new URL('./fixtures/takeover-writer.mjs', import.meta.url));
  const packageUrl = new URL('../dist/src/index.js', import.meta.url).href;

  it('stops here once the store refuses its events: input it accepted before runs in the other host only', async () => {
    const file = files.file();
    let open!: () => void;
    const opened = new Promise<void>((resolve) => (open = resolve));
    const gate: Tool = { name: 'gate', description: 'Waits until the test opens it.', parameters: { type: 'object', properties: {} }, execute: async () => (await opened, 'open') };
    const host = await continuationHost(file, { tools: [gate] });
    hosts.push(host);
    const parent = await host.createAgent({ sessionId: 'parent' });
    // Its first turn waits at the gate, then its next model call waits until the turn is stopped.
    const model = { kind: 'scripted' as const, steps: [{ toolCalls: [{ name: 'gate', input: {} }] }, { finish: 'hang' as const }] };
    await startChild(host, parent, 'first', { childId: 'child', model });
    const child = host.agents.get('child')!;
    await untilEvent(child, 'tool/call');
    await host.subagents.followup(parent, 'child', [text('queued')]);
    // Another process resumes the parent this host still holds and sends the child a message: it
    // brings the child back from the stored log, where the accepted message is pending.
    await promisify(execFile)(process.execPath, [takeoverWriter, packageUrl, file, 'parent', 'child']);
    open();
    // Its next event is refused as out of sequence: the child stops, and never takes the message the other host ran.
    await host.recorder.until(() => host.recorder.ends.length === 1);
    expect(host.recorder.ends).toMatchObject([{ id: 'child', stopReason: 'aborted' }]);
    await eventually(() => host.sessions.get('child') === undefined);
    expect(userTexts(child.session.events)).toStrictEqual(['first']);
    const reader = sqlitePersistence(file);
    try {
      expect(userTexts((await reader.load('child'))!.events)).toStrictEqual(['first', 'queued']);
    } finally {
      await reader.close();
    }
  });
});

describe('the database file deleted or replaced while a host has it open', () => {
  const packageUrl = new URL('../dist/src/index.js', import.meta.url).href;
  /** Runs `script` (an ES module given `sqlitePersistence` and the path) in another process; its stdout. */
  async function inAnotherProcess(script: string, file: string): Promise<string> {
    const { stdout } = await promisify(execFile)(process.execPath, [
      '--input-type=module',
      '-e',
      `const { sqlitePersistence } = await import(process.argv[1]); const file = process.argv[2]; ${script}`,
      packageUrl,
      file,
    ]);
    return stdout;
  }

  it('acknowledges no follow-up once the file is deleted: it rejects PERSISTENCE_UNAVAILABLE, as close() does', async () => {
    const file = files.file();
    const host = await continuationHost(file);
    hosts.push(host);
    const parent = await host.createAgent({ sessionId: 'parent' });
    await startChild(host, parent, 'start', { childId: 'c', model: HANG });
    await host.subagents.followup(parent, 'c', [text('stored')]);
    rmSync(file);
    // SQLite in WAL mode would commit it to the deleted file: accepted, and gone with the process.
    const gone = { name: 'SubagentError', code: 'PERSISTENCE_UNAVAILABLE', message: expect.stringContaining('was deleted while this store had it open') };
    await expect(host.subagents.followup(parent, 'c', [text('lost')])).rejects.toMatchObject(gone);
    await expect(host.close()).rejects.toMatchObject(gone);
  });

  it('writes nothing into the file another process moved to its path: a later open there finds none of its new sessions', async () => {
    const file = files.file();
    const host = await createHost({ persistence: { sqlite: file }, providers: false, pool: { minThreads: 0 } });
    hosts.push(host);
    await host.createAgent({ sessionId: 'before' });
    await host.sessions.flush();
    // Another process makes a store of its own, which then takes the path of this host's file.
    const replacement = files.file();
    await inAnotherProcess("const store = sqlitePersistence(file); await store.create({ id: 'theirs', createdAt: 1 }); await store.close();", replacement);
    renameSync(replacement, file);
    const late = await host.createAgent({ sessionId: 'late' });
    late.followup([text('after the replacement')]);
    await late.whenIdle();
    await expect(host.sessions.flush()).rejects.toMatchObject({ code: 'PERSISTENCE_UNAVAILABLE', message: expect.stringContaining('replaced by another file') });
    // Its commits would go to the -wal file the new file shares by name: another process would read them as that file's.
    const listed = await inAnotherProcess('const store = sqlitePersistence(file); console.log(JSON.stringify((await store.list()).map((header) => header.id))); await store.close();', file);
    expect(JSON.parse(listed)).not.toContain('late');
  });
});

describe('a background commit that failed', () => {
  it('is tried again later, though no append or flush comes', async () => {
    const file = files.file();
    const store = sqlitePersistence(file, { busyTimeoutMs: 20, flushIntervalMs: 5 });
    await store.create({ id: 's', createdAt: 1 });
    const lock = lockWriters(file);
    const appended = store.append('s', [{ seq: 0, type: 'custom', time: 1, data: { n: 1 } }]);
    // The write-behind timer (5 ms, armed by the append) fires before this one and meets the lock;
    // without a retry of its own, `appended` would never settle.
    await new Promise((resolve) => setTimeout(resolve, 200));
    lock.release();
    await appended;
    const reader = new Database(file, { readonly: true });
    expect(reader.prepare('SELECT count(*) AS n FROM events').get()).toStrictEqual({ n: 1 });
    reader.close();
    await store.close();
  });
});

/** Another process holding the write lock of `file` until `release()`, which resolves once it let go. */
async function lockedByAnotherProcess(file: string): Promise<{ release(): Promise<void> }> {
  const child = spawn(
    process.execPath,
    ['-e', `const db = new (require('better-sqlite3'))(process.argv[1]); db.exec('BEGIN IMMEDIATE'); console.log('locked');
process.stdin.resume().on('end', () => { db.exec('COMMIT'); db.close(); });`, file],
    { stdio: ['pipe', 'pipe', 'inherit'] },
  );
  const exited = new Promise<void>((resolve, reject) => child.once('exit', (code) => (code === 0 ? resolve() : reject(new Error(`lock holder exited ${code}`)))));
  await Promise.race([new Promise((resolve) => child.stdout.once('data', resolve)), exited]);
  return {
    release() {
      child.stdin.end();
      return exited;
    },
  };
}

/** Counts the ticks of a 5 ms interval on this thread; `until(n)` resolves at the n-th. */
function ticker(): { ticks(): number; until(n: number): Promise<void>; stop(): void } {
  let ticks = 0;
  const waiters: { n: number; resolve: () => void }[] = [];
  const interval = setInterval(() => {
    ticks += 1;
    for (const waiter of waiters.filter((w) => w.n <= ticks)) waiter.resolve();
  }, 5);
  return {
    ticks: () => ticks,
    until: (n) => new Promise<void>((resolve) => waiters.push({ n, resolve })),
    stop: () => clearInterval(interval),
  };
}

describe('another process holding the write lock', () => {
  it('does not stop the host’s thread: a flush waits for it on timers and resolves once it is let go', async () => {
    const file = files.file();
    // Generous: the flushes resolve as soon as the lock is let go, well before this.
    const host = await createHost({ persistence: { sqlite: file, busyTimeoutMs: 10_000 }, providers: false, pool: { minThreads: 0 } });
    hosts.push(host);
    const agent = await host.createAgent({ sessionId: 'a' });
    await host.sessions.flush();
    const lock = await lockedByAnotherProcess(file);
    const clock = ticker();
    try {
      agent.followup([text('while locked')]);
      await agent.whenIdle();
      const flushes = [host.sessions.flush('a'), host.persistence!.flush(), host.persistence!.flush()];
      // A background commit or a flush waiting for the lock on this thread would keep these from running.
      await clock.until(40);
      await lock.release();
      await Promise.all(flushes);
    } finally {
      clock.stop();
      await lock.release();
    }
    expect((await host.persistence!.load('a'))!.events).toStrictEqual(agent.session.events);
  });

  it('does not stop the host’s thread while close() waits for it, and close() then rejects PERSISTENCE_UNAVAILABLE', async () => {
    const file = files.file();
    const host = await continuationHost(file, { persistence: { sqlite: file, busyTimeoutMs: 300 } });
    const parent = await host.createAgent({ sessionId: 'parent' });
    for (const childId of ['c1', 'c2', 'c3', 'c4']) await startChild(host, parent, 'start', { childId, model: HANG });
    await host.sessions.flush();
    const lock = await lockedByAnotherProcess(file);
    const clock = ticker();
    try {
      await expect(host.close()).rejects.toMatchObject({ name: 'SubagentError', code: 'PERSISTENCE_UNAVAILABLE' });
      // Without pauses on timers, the waits of close() leave this interval no turn at all.
      expect(clock.ticks()).toBeGreaterThan(10);
    } finally {
      clock.stop();
      await lock.release();
    }
  });
});

describe('a wall clock that steps forward', () => {
  it('does not cut a flush’s wait for the lock short: busyTimeoutMs is measured on the monotonic clock', async () => {
    // In a plain process whose wall clock steps an hour at every read: a 300 ms lock within a 10 s busyTimeoutMs.
    const file = files.file();
    const fixture = (name: string) => fileURLToPath(new URL(`./fixtures/${name}`, import.meta.url));
    const packageUrl = new URL('../dist/src/index.js', import.meta.url).href;
    const { stdout } = await promisify(execFile)(process.execPath, ['--import', fixture('stepping-clock.mjs'), fixture('clock-stepped.mjs'), packageUrl, 'flush', file], { timeout: 15_000 });
    expect(stdout).toBe('flush ok\n');
  });
});
