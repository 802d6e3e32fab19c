// Helpers of the queue tests: a private loopback redis-server per test file (no persistence, its
// temp dir removed afterwards) and `subagent-host worker` processes that announce readiness.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { connect, createServer, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, beforeEach } from 'vitest';
import { createHost, type Agent, type Host } from 'subagent-host';
import { CLI } from './acp-helpers.js';

/** A free loopback TCP port (bound once, then released). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

function exited(child: ChildProcess): Promise<number | null> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(child.exitCode);
  return new Promise((resolve) => child.once('exit', (code) => resolve(code)));
}

/** Resolves with the first line of `child`'s stdout that `match` accepts. */
function lineOf(child: ChildProcess, match: (line: string) => boolean, what: string): Promise<string> {
  return new Promise((resolve, reject) => {
    let buffer = '';
    const onData = (chunk: Buffer) => {
      buffer += chunk.toString();
      const line = buffer.split('\n').find(match);
      if (line !== undefined) {
        child.stdout?.off('data', onData);
        resolve(line);
      }
    };
    child.stdout?.on('data', onData);
    child.once('exit', (code) => reject(new Error(`${what} exited (${code}) before it was ready: ${buffer}`)));
  });
}

export interface RedisServer {
  url: string;
  port: number;
  /** A fresh client (the caller quits it). */
  client(): Redis;
  /** Keys now in the server. */
  keys(): Promise<string[]>;
  /** Connected clients, as the server counts them (the one asking excluded). */
  clients(): Promise<number>;
  /** Freezes the server (SIGSTOP): its sockets stay open, nothing is answered until `resume()`. */
  pause(): void;
  resume(): void;
  stop(): Promise<void>;
}

/** Starts `redis-server` on `port` (a free loopback port by default) in a temp dir, without persistence. */
export async function startRedis(port?: number): Promise<RedisServer> {
  port ??= await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'queue-redis-'));
  const child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  await lineOf(child, (line) => line.includes('Ready to accept connections'), 'redis-server');
  const url = `redis://127.0.0.1:${port}`;
  const client = () => new Redis(url, { maxRetriesPerRequest: 1 }).on('error', () => undefined);
  let stopping: Promise<void> | undefined;
  return {
    url,
    port,
    client,
    async keys() {
      const redis = client();
      try {
        return (await redis.keys('*')).sort();
      } finally {
        redis.disconnect();
      }
    },
    async clients() {
      const redis = client();
      try {
        return String(await redis.client('LIST')).trim().split('\n').length - 1;
      } finally {
        redis.disconnect();
      }
    },
    pause() {
      child.kill('SIGSTOP');
    },
    resume() {
      child.kill('SIGCONT');
    },
    stop() {
      stopping ??= (async () => {
        child.kill('SIGKILL');
        await exited(child);
        rmSync(dir, { recursive: true, force: true });
      })();
      return stopping;
    },
  };
}

/** The Redis and queue worker a file's tests share: started before the first test, stopped after the last. */
export interface SharedQueue {
  readonly redis: RedisServer;
  readonly worker: WorkerProcess;
}

/** Registers the hooks that start a Redis and one queue worker (`startWorker` args) for the file's tests. */
export function sharedQueue(workerArgs: string[]): SharedQueue {
  const shared: { redis?: RedisServer; worker?: WorkerProcess } = {};
  beforeAll(async () => {
    shared.redis = await startRedis();
    shared.worker = await startWorker(shared.redis.url, workerArgs);
  }, 30_000);
  afterAll(async () => {
    await shared.worker?.stop();
    await shared.redis?.stop();
  }, 30_000);
  return {
    get redis() {
      return shared.redis!;
    },
    get worker() {
      return shared.worker!;
    },
  };
}

/** The Redis a describe block's tests share, and each test's own host, parent agent and queue workers. */
export interface QueueSuite {
  readonly redis: RedisServer;
  /** The test's host (no built-in providers), closed after the test. */
  readonly host: Host;
  /** An agent of the test's host, to be the parent of its children. */
  readonly parent: Agent;
  /** The warnings the test's host logged, in order. */
  readonly warnings: string[];
  /** Starts `subagent-host worker --redis url …args` (the suite's Redis by default); killed (SIGKILL) after the test. */
  worker(args: string[], url?: string): Promise<WorkerProcess>;
}

/**
 * Registers the hooks of a describe block whose tests share one Redis (started before the first,
 * stopped after the last) and each get a fresh host and parent; the workers a test starts through
 * the suite are killed after it, once its host has closed.
 */
export function queueSuite(): QueueSuite {
  const state: { redis?: RedisServer; host?: Host; parent?: Agent; warnings: string[] } = { warnings: [] };
  const workers: WorkerProcess[] = [];
  beforeAll(async () => {
    state.redis = await startRedis();
  }, 30_000);
  afterAll(async () => {
    await state.redis?.stop();
  }, 30_000);
  beforeEach(async () => {
    const warnings: string[] = [];
    state.warnings = warnings;
    state.host = await createHost({ providers: false, logger: { warn: (message) => void warnings.push(message) } });
    state.parent = await state.host.createAgent();
  });
  afterEach(async () => {
    await state.host?.close();
    await Promise.all(workers.splice(0).map((worker) => worker.stop('SIGKILL')));
  });
  return {
    get redis() {
      return state.redis!;
    },
    get host() {
      return state.host!;
    },
    get parent() {
      return state.parent!;
    },
    get warnings() {
      return state.warnings;
    },
    async worker(args, url = state.redis!.url) {
      const started = await startWorker(url, args);
      workers.push(started);
      return started;
    },
  };
}

/** A Redis MONITOR: the arguments of every command the server runs go to `onCommand` until `close`. */
export interface RedisMonitor {
  close(): void;
}

const ESCAPES: Record<string, string> = { n: '\n', r: '\r', t: '\t', a: '\x07', b: '\b' };

/** The arguments of one MONITOR line: its quoted strings, unescaped (the client part is not quoted). */
function monitoredArgs(line: string): string[] {
  return [...line.matchAll(/"((?:[^"\\]|\\.)*)"/g)].map((match) =>
    match[1]!.replace(/\\(x[0-9a-fA-F]{2}|.)/g, (_, escape: string) => (escape.length === 3 ? String.fromCharCode(parseInt(escape.slice(1), 16)) : (ESCAPES[escape] ?? escape))),
  );
}

/**
 * MONITOR on a raw socket, resolved once the server has started it. Not ioredis's `monitor()`: a
 * command echoed in the same read as MONITOR's OK reaches its client before it switches to
 * monitoring, which then fails with "Command queue state error" (seen under load).
 */
export async function monitorRedis(port: number, onCommand: (args: string[]) => void): Promise<RedisMonitor> {
  const socket = connect(port, '127.0.0.1');
  socket.setEncoding('utf8');
  // Closing it is the only way a monitor ends: the reset that may follow is expected.
  socket.on('error', () => {});
  let buffer = '';
  const started = new Promise<void>((resolve, reject) => {
    socket.once('close', () => reject(new Error('the Redis MONITOR connection closed before it started')));
    socket.on('data', (chunk: string) => {
      buffer += chunk;
      for (let end = buffer.indexOf('\r\n'); end >= 0; end = buffer.indexOf('\r\n')) {
        const line = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        if (line === '+OK') resolve();
        else if (line.startsWith('-')) reject(new Error(`Redis refused MONITOR: ${line.slice(1)}`));
        else onCommand(monitoredArgs(line));
      }
    });
  });
  socket.write('MONITOR\r\n');
  await started;
  return { close: () => socket.destroy() };
}

export interface WorkerProcess {
  pid: number;
  child: ChildProcess;
  /** Everything the worker wrote to stderr so far. */
  readonly stderr: string;
  /** Sends `signal` and resolves with the exit code. */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
  exited: Promise<number | null>;
}

/** Starts `subagent-host worker --redis url …args` and waits for its ready line. */
export async function startWorker(url: string, args: string[] = []): Promise<WorkerProcess> {
  const child = spawn(process.execPath, [CLI, 'worker', '--redis', url, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const done = exited(child);
  await lineOf(child, (line) => line.startsWith('ready '), 'subagent-host worker');
  return {
    pid: child.pid!,
    child,
    get stderr() {
      return stderr;
    },
    exited: done,
    stop(signal = 'SIGTERM') {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      return done;
    },
  };
}

export interface HoldingProxy {
  /** The proxy's redis:// URL. */
  url: string;
  /** Resolves once a client sent the marker and the proxy began holding what it sends. */
  held: Promise<void>;
  /** Forwards what was held, in order, and forwards everything from then on. */
  release(): void;
  close(): Promise<void>;
}

/**
 * A loopback TCP proxy to the Redis on `port`. The first chunk a client sends that contains
 * `marker`, and everything that client sends after it, is held (a network gone silent one way:
 * the server neither gets the command nor answers) until `release()`. It holds once.
 */
export async function holdingProxy(port: number, marker: string): Promise<HoldingProxy> {
  const sockets = new Set<Socket>();
  let holding: { client: Socket; upstream: Socket; chunks: Buffer[] } | undefined;
  let releasedOnce = false;
  let onHeld!: () => void;
  const held = new Promise<void>((resolve) => (onHeld = resolve));
  const server = createServer((client) => {
    const upstream = connect(port, '127.0.0.1');
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.on('error', () => undefined);
      socket.once('close', () => {
        sockets.delete(socket);
        client.destroy();
        upstream.destroy();
      });
    }
    upstream.pipe(client);
    client.on('data', (chunk: Buffer) => {
      if (holding === undefined && !releasedOnce && chunk.includes(marker)) {
        holding = { client, upstream, chunks: [] };
        onHeld();
      }
      if (holding?.client === client) holding.chunks.push(chunk);
      else upstream.write(chunk);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port: own } = server.address() as { port: number };
  return {
    url: `redis://127.0.0.1:${own}`,
    held,
    release() {
      const pending = holding;
      releasedOnce = true;
      holding = undefined;
      // One write: the server reads what was held back to back, as a network that comes back delivers it.
      if (pending !== undefined && pending.chunks.length > 0) pending.upstream.write(Buffer.concat(pending.chunks));
    },
    async close() {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const socket of sockets) socket.destroy();
      await closed;
    },
  };
}

/**
 * Calls `each` once per RESP command the peer sends over `socket` (an array of bulk strings, as
 * clients send), however TCP cuts or joins them: a peer that answers per `data` event would leave a
 * client waiting for the answer to a second command that came in the same chunk.
 */
export function onCommands(socket: Socket, each: () => void): void {
  let pending = Buffer.alloc(0);
  socket.on('data', (chunk: Buffer) => {
    pending = Buffer.concat([pending, chunk]);
    for (let end = commandEnd(pending); end > 0; end = commandEnd(pending)) {
      pending = pending.subarray(end);
      each();
    }
  });
}

/** Where the first complete command in `buffer` ends, or 0 while it is incomplete. */
function commandEnd(buffer: Buffer): number {
  const line = (from: number): [string, number] | undefined => {
    const at = buffer.indexOf('\r\n', from);
    return at < 0 ? undefined : [buffer.toString('latin1', from, at), at + 2];
  };
  const head = line(0);
  if (!head || !head[0].startsWith('*')) return head ? head[1] : 0;
  let at = head[1];
  for (let items = Number(head[0].slice(1)); items > 0; items -= 1) {
    const size = line(at);
    if (!size) return 0;
    at = size[1] + Number(size[0].slice(1)) + 2;
    if (at > buffer.length) return 0;
  }
  return at;
}
