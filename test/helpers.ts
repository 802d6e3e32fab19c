// Shared test helpers: a runtime wired from public exports, deferreds, event-type listings, temp
// files, resources closed after each test and Node scripts run in processes of their own.
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, afterEach, onTestFinished } from 'vitest';
import { createHost, memoryPersistence, type Host, type ModelSpec, type SessionEvent, type SessionPersistence, type Tool } from 'subagent-host';
import { AgentRegistry, LiveSessionStore, ToolRegistry } from 'subagent-host/internals';

export interface Runtime {
  sessions: LiveSessionStore;
  tools: ToolRegistry;
  agents: AgentRegistry;
  warnings: string[];
}

export function makeRuntime(options: { persistence?: SessionPersistence; model?: ModelSpec; tools?: Tool[] } = {}): Runtime {
  const warnings: string[] = [];
  const logger = { warn: (message: string) => void warnings.push(message) };
  const sessions = new LiveSessionStore({ persistence: options.persistence, logger });
  const tools = new ToolRegistry();
  if (options.tools?.length) tools.register(...options.tools);
  const agents = new AgentRegistry({ sessions, tools, model: options.model, persistence: options.persistence, logger });
  return { sessions, tools, agents, warnings };
}

export interface Deferred<T> {
  promise: Promise<T>;
  resolve(value: T): void;
  reject(error: unknown): void;
}

export function deferred<T = void>(): Deferred<T> {
  let resolve!: (value: T) => void;
  let reject!: (error: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/** A tool that reports when a call enters it and returns 'released' once the test releases it. */
export function holdTool(name = 'hold'): { tool: Tool; entered: Promise<void>; release: () => void } {
  const entered = deferred();
  const gate = deferred();
  const tool: Tool = {
    name,
    description: 'waits for the test',
    parameters: { type: 'object', properties: {}, additionalProperties: false },
    async execute() {
      entered.resolve();
      await gate.promise;
      return 'released';
    },
  };
  return { tool, entered: entered.promise, release: () => gate.resolve() };
}

/** A tool that returns only once its call is cancelled; `entered` resolves when a call is in it. */
export function untilCancelled(name = 'until_cancelled'): { tool: Tool; entered: Promise<void> } {
  const entered = deferred();
  const tool: Tool = {
    name,
    description: 'waits for its cancellation',
    parameters: { type: 'object', properties: {}, additionalProperties: false },
    execute: (_input, ctx) =>
      new Promise((resolve) => {
        entered.resolve();
        ctx.signal.addEventListener('abort', () => resolve('cancelled'), { once: true });
      }),
  };
  return { tool, entered: entered.promise };
}

/** The event types of a log, for whole-array ordering assertions. */
export function types(events: readonly SessionEvent[]): string[] {
  return events.map((event) => event.type);
}

/** The data of the events of one type. */
export function dataOf<T = Record<string, unknown>>(events: readonly SessionEvent[], type: string): T[] {
  return events.filter((event) => event.type === type).map((event) => event.data as T);
}

/** A tool whose calls are recorded; `gate` (when given) holds each call until resolved. */
export function recordingTool(name: string, options: { gate?: Promise<void>; output?: string } = {}): Tool & { calls: unknown[] } {
  const calls: unknown[] = [];
  return {
    name,
    description: `test tool ${name}`,
    parameters: { type: 'object', properties: { value: { type: 'string' } }, required: ['value'], additionalProperties: false },
    calls,
    async execute(input) {
      calls.push(input);
      if (options.gate) await options.gate;
      return options.output ?? `${name} ok`;
    },
  };
}

/** A temp folder removed after the file's tests; `file()` names a fresh database path in it. */
export function tempFiles(prefix: string): { dir: string; file(): string } {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  let count = 0;
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));
  return { dir, file: () => path.join(dir, `store-${count++}.db`) };
}

/**
 * Runs `fn` while this process may not create files in `dir`: mode 0555, or for root (whom modes do
 * not stop) the immutable attribute (`chattr +i`, ext4), else `dir` bound read-only onto itself (a
 * file system without that attribute). Restored afterwards, also on a throw.
 */
export async function withUnwritableFolder<T>(dir: string, fn: () => Promise<T>): Promise<T> {
  let restore: () => void;
  if (process.getuid?.() !== 0) {
    fs.chmodSync(dir, 0o555);
    restore = () => fs.chmodSync(dir, 0o755);
  } else {
    try {
      execFileSync('chattr', ['+i', dir], { stdio: 'pipe' });
      restore = () => execFileSync('chattr', ['-i', dir]);
    } catch {
      execFileSync('mount', ['--bind', dir, dir]);
      restore = () => execFileSync('umount', [dir]);
      try {
        execFileSync('mount', ['-o', 'remount,ro,bind', dir]);
      } catch (error) {
        restore();
        throw error;
      }
    }
  }
  try {
    return await fn();
  } finally {
    restore();
  }
}

/** Returns `track(resource)`: each tracked resource is closed after the test, newest first. */
export function closeAfterEach(): <T extends { close(): unknown }>(resource: T) => T {
  const opened: { close(): unknown }[] = [];
  afterEach(async () => {
    for (const resource of opened.splice(0).reverse()) await resource.close();
  });
  return (resource) => {
    opened.push(resource);
    return resource;
  };
}

/** Returns `newHost(tools?)`: a host without providers holding `tools`, closed after each test. */
export function hostsClosedAfterEach(): (tools?: Tool[]) => Promise<Host> {
  const track = closeAfterEach();
  return async (tools = []) => track(await createHost({ providers: false, tools }));
}

/** `[value, <hole>]`: a sparse array, which validation must read as holding `undefined`. */
export function holed<T>(value: T): T[] {
  const values = [value];
  values.length = 2;
  return values;
}

/** What `fn` throws (fails the test if it does not throw). */
export function thrown(fn: () => unknown): unknown {
  try {
    fn();
  } catch (error) {
    return error;
  }
  throw new Error('expected a throw');
}

/** A store passing every call on to `inner`, but those `overrides` replace (a store that fails, holds or counts on demand). */
export function storeOver(inner: SessionPersistence, overrides: Partial<SessionPersistence> = {}): SessionPersistence {
  return {
    create: (header) => inner.create(header),
    append: (id, events) => inner.append(id, events),
    load: (id) => inner.load(id),
    list: (filter) => inner.list(filter),
    childRecords: (id) => inner.childRecords(id),
    descendantRecords: (id) => inner.descendantRecords(id),
    projections: (ids) => inner.projections(ids),
    flush: () => inner.flush(),
    close: () => inner.close(),
    ...overrides,
  };
}

/**
 * A memory store that is fully write-behind: appends are buffered and reach the store only on
 * `flush()` (the durability barrier of the SessionPersistence contract), so a dispose that does not
 * flush leaves the stored log behind the live one.
 */
export function writeBehindPersistence(): SessionPersistence {
  const inner = memoryPersistence();
  const buffered: [string, SessionEvent[]][] = [];
  const flush = async () => {
    for (const [id, events] of buffered.splice(0)) await inner.append(id, events);
    await inner.flush();
  };
  return {
    create: (header) => inner.create(header),
    append: async (id, events) => void buffered.push([id, [...events]]),
    load: (id) => inner.load(id),
    list: (filter) => inner.list(filter),
    childRecords: (id) => inner.childRecords(id),
    descendantRecords: (id) => inner.descendantRecords(id),
    projections: (ids) => inner.projections(ids),
    flush,
    close: async () => {
      await flush();
      await inner.close();
    },
  };
}

/**
 * Runs `node script ...args` in a process of its own (killed if the test ends first); resolves with
 * its exit code and output once it exits.
 */
export async function runNodeScript(script: string, args: string[]): Promise<{ code: number | null; out: string; err: string }> {
  const child = spawn(process.execPath, [script, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  onTestFinished(() => {
    if (child.exitCode === null) child.kill('SIGKILL');
  });
  let out = '';
  let err = '';
  child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (err += chunk.toString()));
  const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
  return { code, out, err };
}

/**
 * Overwrites whole pages of a SQLite file with `byte` (a disk error, a torn copy): the pages `query`
 * names (one column of page numbers, e.g. a table's `rootpage` in `sqlite_schema`, or `pageno` in
 * `dbstat`), after a checkpoint so they are in the file itself. Returns those page numbers.
 */
export function damageSqlitePages(file: string, query: string, byte = 0xff): number[] {
  const db = new Database(file);
  db.pragma('wal_checkpoint(TRUNCATE)');
  const pages = db.prepare(query).pluck().all() as number[];
  const size = db.pragma('page_size', { simple: true }) as number;
  db.close();
  const fd = fs.openSync(file, 'r+');
  for (const page of pages) fs.writeSync(fd, Buffer.alloc(size, byte), 0, size, (page - 1) * size);
  fs.closeSync(fd);
  return pages;
}

/**
 * Runs `subagent-host` (`cli`, the built CLI) with `args` and sends it `signal` (SIGINT by default)
 * once its stdout has a line matching `at`; resolves with its exit code (or `still running after N s` once `limitMs`
 * passed, when it is killed) and what it wrote.
 */
export async function interruptCli(cli: string, args: string[], at: RegExp, limitMs: number, signal: NodeJS.Signals = 'SIGINT'): Promise<{ ended: number | string | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, [cli, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  let sent = false;
  child.stdout.on('data', (chunk: Buffer) => {
    stdout += chunk.toString();
    if (!sent && at.test(stdout)) {
      sent = true;
      child.kill(signal);
    }
  });
  child.stderr.on('data', (chunk: Buffer) => void (stderr += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
  let timer: NodeJS.Timeout | undefined;
  const hung = new Promise<string>((resolve) => (timer = setTimeout(() => resolve(`still running after ${limitMs / 1000} s`), limitMs)));
  try {
    const ended = await Promise.race([exited, hung]);
    return { ended, stdout, stderr };
  } finally {
    clearTimeout(timer);
    child.kill('SIGKILL');
  }
}
