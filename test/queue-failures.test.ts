// The queue provider when things go wrong: bad connection strings, an unreachable or vanished
// Redis, a worker killed mid-child (error, or a restart on another worker while attempts remain),
// and a worker's SIGTERM drain. Every worker and redis-server here is a real process.
import { execFile, spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { Queue, Worker } from 'bullmq';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createHost,
  queueProvider,
  text,
  type QueueProviderOptions,
  type SessionEvent,
  type SubagentRunEndInfo,
  type SubagentStartRequest,
} from 'subagent-host';
import { QUEUE_PROTOCOL_VERSION, stringify, usageOf } from 'subagent-host/internals';
import { CLI } from './acp-helpers.js';
import { types } from './helpers.js';
import { freePort, holdingProxy, monitorRedis, onCommands, queueSuite, startRedis, startWorker, type RedisServer, type WorkerProcess } from './queue-helpers.js';

const GATE_TOOLS = new URL('./fixtures/gate-tools.mjs', import.meta.url).href;
const QUEUE_HOST = fileURLToPath(new URL('./fixtures/queue-host.mjs', import.meta.url));
const dir = mkdtempSync(join(tmpdir(), 'queue-failures-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const hang = { agentOptions: { model: { kind: 'scripted' as const, steps: [{ finish: 'hang' as const }] } } };

function gated(gate: string): Partial<SubagentStartRequest> {
  const steps = [{ toolCalls: [{ name: 'gate', input: { path: gate } }] }, { text: 'through the gate' }];
  return { agentOptions: { model: { kind: 'scripted', steps }, toolModules: [GATE_TOOLS] } };
}

function attempts(events: readonly SessionEvent[]): { pid: number; attempt: number }[] {
  return events.filter((event) => event.type === 'queue/attempt').map((event) => event.data as { pid: number; attempt: number });
}

async function waitFor(condition: () => boolean): Promise<void> {
  while (!condition()) await new Promise((resolve) => setTimeout(resolve, 10));
}

describe('queue provider options', () => {
  it.each([
    ['not-a-url', 'not a URL'],
    ['http://127.0.0.1:6379', 'protocol http:'],
    ['redis://', 'no host'],
    ['redis://127.0.0.1:6379/abc', 'database'],
    ['redis://127.0.0.1:6379/0?x=1', 'query'],
    [' redis://127.0.0.1:6379', 'spaces or control characters'],
    ['redis://127.0.0.1:6379\n', 'spaces or control characters'],
  ])('rejects the connection string %s with INVALID_OPTIONS', async (connection, words) => {
    const host = await createHost({ providers: false });
    expect(() => queueProvider(host, { connection })).toThrow(expect.objectContaining({ code: 'INVALID_OPTIONS', message: expect.stringContaining(words) as string }));
    await host.close();
  });

  it.each([
    [{ connection: 'redis://127.0.0.1', queue: 'a:b' }],
    [{ connection: 'redis://127.0.0.1', attempts: 0 }],
    [{ connection: 'redis://127.0.0.1', lockDurationMs: 1.5 }],
    [{ connection: 'redis://127.0.0.1', extra: true }],
    [{}],
  ])('rejects %j with INVALID_OPTIONS', async (options) => {
    const host = await createHost({ providers: false });
    expect(() => queueProvider(host, options as unknown as QueueProviderOptions)).toThrow(expect.objectContaining({ code: 'INVALID_OPTIONS' }));
    await host.close();
  });

  it('the worker command refuses a bad URL (usage error, exit 2) and an unreachable Redis (exit 1) with a typed message', async () => {
    const bad = spawnSync(process.execPath, [CLI, 'worker', '--redis', 'http://nowhere'], { encoding: 'utf8', timeout: 15_000 });
    expect(bad.status).toBe(2);
    expect(bad.stderr).toContain('INVALID_OPTIONS');
    const spaced = spawnSync(process.execPath, [CLI, 'worker', '--redis', ' redis://127.0.0.1:6379'], { encoding: 'utf8', timeout: 15_000 });
    expect({ status: spaced.status, stderr: spaced.stderr }).toMatchObject({ status: 2, stderr: expect.stringContaining('INVALID_OPTIONS') as string });
    const port = await freePort();
    const down = spawnSync(process.execPath, [CLI, 'worker', '--redis', `redis://127.0.0.1:${port}`], { encoding: 'utf8', timeout: 15_000 });
    expect(down.status).toBe(1);
    expect(down.stderr).toContain('START_FAILED');
  });

  it('the worker command shows the error text of the server it reached with control characters escaped: they never reach the terminal', async () => {
    // Not Redis: a peer that answers every command with an error whose text would set the clipboard (OSC 52), clear the screen and reverse the line.
    const server = createServer((socket) => onCommands(socket, () => socket.write('-ERR denied\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J\u202eevil\r\n')));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const { port } = server.address() as AddressInfo;
      const worker = await new Promise<{ code: number | null; stderr: string }>((resolve) => {
        execFile(process.execPath, [CLI, 'worker', '--redis', `redis://127.0.0.1:${port}`], { encoding: 'utf8', timeout: 15_000 }, (error, _stdout, stderr) =>
          resolve({ code: error === null ? 0 : ((error as { code?: number }).code ?? null), stderr }),
        );
      });
      expect(worker.code).toBe(1);
      expect(worker.stderr).toContain('START_FAILED');
      expect(worker.stderr).toContain('ERR denied\\x1b]52;c;cm0gLXJmIH4=\\x07\\x1b[2J\\u202eevil');
      expect(worker.stderr).not.toMatch(/[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u202e]/);
      expect(worker.stderr.endsWith('\n') && worker.stderr.split('\n').length).toBe(2);
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  });

  it("the worker command names the server's answer, not a timeout, when the worker was stopped past the connect timeout while the answer waited", async () => {
    // The worker is frozen (SIGSTOP) as its first command arrives and woken 4.5 s later, past the
    // 3.5 s connect timer, with the server's refusal waiting unread: a starved process, not a silent Redis.
    const attempt = async (): Promise<{ code: number | null; stderr: string }> => {
      let worker: ReturnType<typeof spawn> | undefined;
      let frozen = false;
      const server = createServer((socket) =>
        onCommands(socket, () => {
          if (!frozen && worker?.exitCode === null) {
            frozen = true;
            worker.kill('SIGSTOP');
            setTimeout(() => worker?.kill('SIGCONT'), 4500);
          }
          socket.write('-ERR denied while you slept\r\n');
        }),
      );
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      try {
        const { port } = server.address() as AddressInfo;
        worker = spawn(process.execPath, [CLI, 'worker', '--redis', `redis://127.0.0.1:${port}`], { stdio: ['ignore', 'ignore', 'pipe'] });
        let stderr = '';
        worker.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
        const code = await new Promise<number | null>((resolve) => worker!.once('exit', resolve));
        return { code, stderr };
      } finally {
        if (worker?.exitCode === null) worker.kill('SIGKILL');
        await new Promise((resolve) => server.close(resolve));
      }
    };
    const outcome = await attempt();
    expect(outcome).toMatchObject({ code: 1, stderr: expect.stringContaining('ERR denied while you slept') as string });
    expect(outcome.stderr).not.toContain('no answer within');
  }, 60_000);
});

describe('queue provider failures', () => {
  const suite = queueSuite();

  // A short lock lets a killed worker's job be found lost quickly; tests that do not kill a worker pass a
  // long one, so a worker starved of CPU on a loaded machine is not mistaken for a lost one.
  async function worker(queue: string, ...args: string[]): Promise<WorkerProcess> {
    // Defaults for the options `args` does not give (an option given twice is a usage error).
    const defaults = [['--lock-duration-ms', '500'], ['--concurrency', '2'], ['--pool-threads', '2']].filter(([name]) => !args.includes(name!)).flat();
    return suite.worker(['--queue', queue, ...defaults, ...args]);
  }

  function register(options: Partial<QueueProviderOptions> & { queue: string }) {
    suite.host.subagents.registerProvider(queueProvider(suite.host, { connection: suite.redis.url, lockDurationMs: 500, ...options }));
  }

  function start(request: Partial<SubagentStartRequest> = {}) {
    return suite.host.subagents.start('queue', { label: 'failing', prompt: [text('work')], parent: suite.parent, signal: new AbortController().signal, ...request });
  }

  it('rejects START_FAILED naming the server and database when Redis is not there, and leaves no child', async () => {
    const port = await freePort();
    suite.host.subagents.registerProvider(queueProvider(suite.host, { connection: `redis://127.0.0.1:${port}/3` }));
    await expect(start()).rejects.toMatchObject({ code: 'START_FAILED', message: expect.stringContaining(`Redis at 127.0.0.1:${port}/3:`) as string });
    expect(suite.host.sessions.list().map((s) => s.header.id)).toEqual([suite.parent.id]);
    await expect(suite.host.subagents.listChildren(suite.parent.id)).resolves.toEqual([]);
  });

  it('leaves nothing running after a start refused for an unreachable Redis: the host\'s process can exit at once (its own process)', async () => {
    const port = await freePort();
    const script = `
      import { createHost, queueProvider, text } from 'subagent-host';
      const host = await createHost({ providers: false });
      host.subagents.registerProvider(queueProvider(host, { connection: 'redis://127.0.0.1:${port}' }));
      const parent = await host.createAgent();
      const refused = await host.subagents.start('queue', { prompt: [text('hi')], parent, signal: new AbortController().signal }).catch((error) => error.code);
      await host.close();
      await new Promise((resolve) => setImmediate(resolve));
      // PipeWrap: this process's own stdout, a pipe to the test.
      console.log(JSON.stringify({ refused, left: process.getActiveResourcesInfo().filter((kind) => kind !== 'PipeWrap') }));`;
    const child = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8', timeout: 15_000 });
    expect(child.status, child.stderr).toBe(0);
    expect(JSON.parse(child.stdout)).toEqual({ refused: 'START_FAILED', left: [] });
  });

  it('refuses a database the server does not have (START_FAILED, worker exit 1) instead of going on in database 0', async () => {
    suite.host.subagents.registerProvider(queueProvider(suite.host, { connection: `${suite.redis.url}/99` }));
    await expect(start()).rejects.toMatchObject({ code: 'START_FAILED', message: expect.stringContaining('DB index is out of range') as string });
    const worker = spawnSync(process.execPath, [CLI, 'worker', '--redis', `${suite.redis.url}/99`], { encoding: 'utf8', timeout: 15_000 });
    expect({ status: worker.status, stdout: worker.stdout }).toEqual({ status: 1, stdout: '' });
    expect(worker.stderr).toContain('START_FAILED');
  });

  it('rejects START_FAILED with the reason of a Redis that refuses writes, before and after connecting', async () => {
    register({ queue: 'full' });
    const queued = await start();
    const admin = suite.redis.client();
    await admin.config('SET', 'maxmemory', '1');
    try {
      await expect(start()).rejects.toMatchObject({ code: 'START_FAILED', message: expect.stringContaining('OOM') as string });
      suite.host.subagents.registerProvider(queueProvider(suite.host, { connection: suite.redis.url, name: 'fresh', queue: 'full' }));
      const fresh = suite.host.subagents.start('fresh', { label: 'fresh', prompt: [text('work')], parent: suite.parent, signal: new AbortController().signal });
      await expect(fresh).rejects.toMatchObject({ code: 'START_FAILED', message: expect.stringContaining('OOM') as string });
    } finally {
      await admin.config('SET', 'maxmemory', '0');
      admin.disconnect();
    }
    queued.cancel();
    await expect(queued.result).resolves.toMatchObject({ stopReason: 'aborted' });
    await queued.dispose();
  });

  it('rejects START_FAILED with the server\'s reason when it refuses the credentials', async () => {
    const refused = suite.redis.url.replace('redis://', 'redis://nobody:wrong@');
    suite.host.subagents.registerProvider(queueProvider(suite.host, { connection: refused, name: 'refused', queue: 'refused' }));
    const starting = suite.host.subagents.start('refused', { label: 'refused', prompt: [text('work')], parent: suite.parent, signal: new AbortController().signal });
    await expect(starting).rejects.toMatchObject({ code: 'START_FAILED', message: expect.stringContaining('WRONGPASS') as string });
    const worker = spawnSync(process.execPath, [CLI, 'worker', '--redis', refused], { encoding: 'utf8', timeout: 15_000 });
    expect({ status: worker.status, stderr: worker.stderr }).toMatchObject({ status: 1, stderr: expect.stringContaining('WRONGPASS') as string });
  });

  it('a worker whose Redis user may not subscribe exits 1 with the reason, leaving nothing open', async () => {
    const admin = suite.redis.client();
    try {
      await admin.call('ACL', 'SETUSER', 'nosub', 'on', '>pw', '~*', '&*', '+@all', '-subscribe');
    } finally {
      admin.disconnect();
    }
    const url = suite.redis.url.replace('redis://', 'redis://nosub:pw@');
    const worker = spawnSync(process.execPath, [CLI, 'worker', '--redis', url], { encoding: 'utf8', timeout: 30_000 });
    expect({ status: worker.status, stderr: worker.stderr }).toMatchObject({ status: 1, stderr: expect.stringContaining('NOPERM') as string });
  });

  it('names the protocol error of a server that does not speak Redis (START_FAILED), not the aftermath', async () => {
    const server = createServer((socket) => socket.on('data', () => socket.write('HTTP/1.1 400 Bad Request\r\n\r\n')));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const { port } = server.address() as AddressInfo;
      suite.host.subagents.registerProvider(queueProvider(suite.host, { connection: `redis://127.0.0.1:${port}` }));
      await expect(start()).rejects.toMatchObject({ code: 'START_FAILED', message: expect.stringContaining('Protocol error') as string });
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  });

  it('hints that a rediss:// URL may meet a server without TLS (START_FAILED), never printing its password', async () => {
    suite.host.subagents.registerProvider(queueProvider(suite.host, { connection: suite.redis.url.replace('redis://', 'rediss://user:s3cret-pw@'), name: 'tls', queue: 'tls' }));
    const error = await suite.host.subagents.start('tls', { label: 'tls', prompt: [text('work')], parent: suite.parent, signal: new AbortController().signal }).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'START_FAILED', message: expect.stringContaining('without TLS') as string });
    expect((error as Error).message).toContain('use redis://');
    expect((error as Error).message).not.toContain('s3cret-pw');
  });

  it('a worker logs a job it cannot run with the job\'s name escaped: a name put on the queue cannot drive the terminal', async () => {
    const running = await worker('named');
    const admin = suite.redis.client();
    const queue = new Queue('named', { connection: admin });
    try {
      await queue.add('x\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J\nforged line\u202e', {});
      await waitFor(() => running.stderr.includes('failed:'));
    } finally {
      await queue.close();
      admin.disconnect();
    }
    const line = running.stderr.split('\n').find((l) => l.includes('failed:'));
    expect(line).toMatch(/^subagent-host worker\[\d+\]: job \d+ failed: SubagentError: unexpected job x\\x1b\]52;c;cm0gLXJmIH4=\\x07\\x1b\[2J\\x0aforged line\\u202e$/);
    expect(running.stderr).not.toContain('\x1b');
    expect(running.stderr).not.toContain('\u202e');
  });

  it('keeps delegating after Redis lost its data (FLUSHALL): the next child completes', async () => {
    register({ queue: 'flushed', lockDurationMs: 60_000 });
    await worker('flushed', '--lock-duration-ms', '60000');
    const first = await start();
    expect((await first.result).stopReason).toBe('completed');
    await first.dispose();
    const client = suite.redis.client();
    await client.flushall();
    await client.quit();
    const next = await start();
    expect(await next.result).toMatchObject({ stopReason: 'completed' });
    await next.dispose();
  });

  it('a child whose run was lost with Redis\'s data (FLUSHALL mid-run) is stopped on its worker: the worker\'s one slot takes the next child', async () => {
    register({ queue: 'orphan' });
    const only = await suite.worker(['--queue', 'orphan', '--lock-duration-ms', '500', '--concurrency', '1', '--pool-threads', '1']);
    const mark = join(dir, 'orphan-aborted');
    const running = join(dir, 'orphan-running');
    const steps = [{ toolCalls: [{ name: 'gate', input: { path: join(dir, 'orphan-gate-never'), abortedMark: mark, runningMark: running } }] }, { text: 'never' }];
    const lost = await start({ agentOptions: { model: { kind: 'scripted', steps }, toolModules: [GATE_TOOLS] } });
    // Stopped once the gate runs: a stop before it would end the call undispatched, the mark never written.
    await waitFor(() => existsSync(running));
    const client = suite.redis.client();
    await client.flushall();
    await client.quit();
    await expect(lost.result).resolves.toMatchObject({ stopReason: 'error' });
    await lost.dispose();
    // The child was stopped where it ran, not left holding its worker's slot.
    await waitFor(() => existsSync(mark));
    const next = await start();
    expect(await next.result).toMatchObject({ stopReason: 'completed' });
    expect(attempts(suite.host.sessions.get(next.id)!.events).map((a) => a.pid)).toEqual([only.pid]);
    await next.dispose();
  });

  it('a child its worker stopped because its host\'s reply stream was gone sends no end to the stream made anew: nobody cancelled it, so it settles error, not aborted', async () => {
    const admin = suite.redis.client();
    await admin.call('ACL', 'SETUSER', 'remaking', 'on', '>pw', '~*', '&*', '+@all');
    suite.host.subagents.registerProvider(queueProvider(suite.host, { connection: suite.redis.url.replace('redis://', 'redis://remaking:pw@'), queue: 'remade', lockDurationMs: 500 }));
    // The worker's commands from the stopped child's last events on wait until the stream is back.
    const proxy = await holdingProxy(suite.redis.port, 'aborted at the gate');
    try {
      await suite.worker(['--queue', 'remade', '--lock-duration-ms', '10000', '--concurrency', '1', '--pool-threads', '1'], proxy.url);
      const running = join(dir, 'remade-running');
      const steps = [{ toolCalls: [{ name: 'gate', input: { path: join(dir, 'remade-gate-never'), runningMark: running } }] }, { text: 'never' }];
      const run = await start({ agentOptions: { model: { kind: 'scripted', steps }, toolModules: [GATE_TOOLS] } });
      // The host read the child's events up to its call: the stream holds nothing unread.
      await waitFor(() => existsSync(running) && suite.host.sessions.get(run.id)!.events.some((event) => event.type === 'tool/call'));
      // Redis lost the stream (evicted, say); its host may not make it anew until the worker found it gone.
      await admin.call('ACL', 'SETUSER', 'remaking', '-xadd');
      const [reply] = await admin.keys('bull:remade:sah:reply:*');
      await admin.del(reply!);
      await proxy.held;
      await admin.call('ACL', 'SETUSER', 'remaking', '+xadd');
      while ((await admin.exists(reply!)) === 0) await new Promise((resolve) => setTimeout(resolve, 10));
      proxy.release();
      await expect(run.result).resolves.toMatchObject({ stopReason: 'error', diagnostic: 'the child’s job left the queue without a result' });
      await run.dispose();
    } finally {
      await proxy.close();
      await admin.quit();
    }
  });

  it('a cancel that comes after the child completed on its worker, before its host read the end, keeps the completed result', async () => {
    // The host's stream reader lags: its reads wait in a proxy until the cancel was handled.
    const proxy = await holdingProxy(suite.redis.port, 'xread');
    const admin = suite.redis.client();
    let published = false;
    let done!: () => void;
    const handled = new Promise<void>((resolve) => (done = resolve));
    let runId: string | undefined;
    const monitor = await monitorRedis(suite.redis.port, (args) => {
      if (runId === undefined) return;
      if (args[0]?.toLowerCase() === 'publish' && args[2] === runId) published = true;
      else if (published && args.some((arg) => arg.includes(runId!))) done();
    });
    try {
      suite.host.subagents.registerProvider(queueProvider(suite.host, { connection: proxy.url, queue: 'lagging', lockDurationMs: 30_000 }));
      await suite.worker(['--queue', 'lagging', '--lock-duration-ms', '30000']);
      const run = await start();
      await proxy.held;
      // Its worker sent the end and completed the job (BullMQ removed it).
      while ((await admin.exists(`bull:lagging:${run.id}`)) === 1) await new Promise((resolve) => setTimeout(resolve, 10));
      runId = run.id;
      run.cancel();
      await handled;
      // The answer to the cancel's last command reached the host (this process) before these did.
      await admin.ping();
      await admin.ping();
      proxy.release();
      expect(await run.result).toMatchObject({ stopReason: 'completed', output: [text('echo: work')] });
      await run.dispose();
    } finally {
      monitor.close();
      await admin.quit();
      await proxy.close();
    }
  });

  it('a cancel no worker heard of (its key set, its message lost) still stops the running child', async () => {
    register({ queue: 'unheard' });
    await worker('unheard', '--lock-duration-ms', '10000');
    const mark = join(dir, 'unheard-aborted');
    const running = join(dir, 'unheard-running');
    const steps = [{ toolCalls: [{ name: 'gate', input: { path: join(dir, 'unheard-gate-never'), abortedMark: mark, runningMark: running } }] }, { text: 'never' }];
    const run = await start({ agentOptions: { model: { kind: 'scripted', steps }, toolModules: [GATE_TOOLS] } });
    // Stopped once the gate runs: a stop before it would end the call undispatched, the mark never written.
    await waitFor(() => existsSync(running));
    // What a cancel leaves in Redis when its publish never reached the worker's subscriber (it was
    // reconnecting, or the host lost Redis between the two commands).
    const client = suite.redis.client();
    await client.set(`bull:unheard:sah:cancelled:${run.id}`, '1', 'PX', 60_000);
    await client.quit();
    await expect(run.result).resolves.toMatchObject({ stopReason: 'aborted' });
    expect(existsSync(mark)).toBe(true);
    await run.dispose();
  });

  it('a cancel that could not reach Redis is sent once Redis answers again: the child stops on its worker', async () => {
    // The host connects as its own Redis user, whose writes a test can refuse while the worker goes on.
    const admin = suite.redis.client();
    await admin.acl('SETUSER', 'host', 'on', '>pw', '~*', '&*', '+@all');
    const url = suite.redis.url.replace('redis://', 'redis://host:pw@');
    suite.host.subagents.registerProvider(queueProvider(suite.host, { connection: url, queue: 'retry', lockDurationMs: 2000 }));
    await worker('retry', '--lock-duration-ms', '10000');
    const mark = join(dir, 'retry-aborted');
    const running = join(dir, 'retry-running');
    const steps = [{ toolCalls: [{ name: 'gate', input: { path: join(dir, 'retry-gate-never'), abortedMark: mark, runningMark: running } }] }, { text: 'never' }];
    const run = await start({ agentOptions: { model: { kind: 'scripted', steps }, toolModules: [GATE_TOOLS] } });
    // Stopped once the gate runs: a stop before it would end the call undispatched, the mark never written.
    await waitFor(() => existsSync(running));
    await admin.acl('SETUSER', 'host', '-set');
    try {
      run.cancel();
      await expect(run.result).resolves.toMatchObject({ stopReason: 'aborted', diagnostic: 'the cancellation could not reach Redis' });
      await run.dispose();
      expect(existsSync(mark)).toBe(false);
    } finally {
      await admin.acl('SETUSER', 'host', '+set');
    }
    // The host's next watchdog check sends it.
    await waitFor(() => existsSync(mark));
    await admin.acl('DELUSER', 'host');
    await admin.quit();
  });

  it('a host whose wall clock steps forward does not judge an answering Redis silent (its watchdog measures on the monotonic clock)', async () => {
    await worker('stepped', '--lock-duration-ms', '10000');
    // A plain host process whose wall clock steps an hour at every read, its child held at a gate past three lock durations.
    const gate = join(dir, 'stepped-gate');
    const args = ['--import', fileURLToPath(new URL('./fixtures/stepping-clock.mjs', import.meta.url)), fileURLToPath(new URL('./fixtures/clock-stepped.mjs', import.meta.url))];
    const { stdout } = await promisify(execFile)(process.execPath, [...args, new URL('../dist/src/index.js', import.meta.url).href, 'queue', suite.redis.url, 'stepped', GATE_TOOLS, gate], { timeout: 20_000 });
    expect(stdout).toBe('queue completed\n');
  });

  it('a worker stops a quiet child whose host is gone (killed, its reply stream expired)', async () => {
    const taker = await worker('hostless', '--lock-duration-ms', '10000');
    const mark = join(dir, 'hostless-aborted');
    const args = [QUEUE_HOST, new URL('../dist/src/index.js', import.meta.url).href, suite.redis.url, 'hostless', GATE_TOOLS, join(dir, 'hostless-gate-never'), mark];
    const hostProcess = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'inherit'] });
    const exited = new Promise((resolve) => hostProcess.once('exit', resolve));
    await new Promise<void>((resolve) => hostProcess.stdout.on('data', (chunk: Buffer) => chunk.toString().includes('at-gate') && resolve()));
    hostProcess.kill('SIGKILL');
    await exited;
    // What its TTL does a minute later. The child writes nothing while it waits at its gate: only
    // the worker's sweep can see that nobody reads it.
    const client = suite.redis.client();
    const [reply] = await client.keys('bull:hostless:sah:reply:*');
    const [id] = await client.lrange('bull:hostless:active', 0, -1);
    await client.del(reply!);
    await waitFor(() => existsSync(mark));
    // Its job leaves the queue, and nothing of the child is left in Redis.
    while ((await client.exists(`bull:hostless:${id!}`)) === 1) await new Promise((resolve) => setTimeout(resolve, 10));
    const left = (await client.keys('bull:hostless:*')).filter((key) => key.includes(id!) || /:(wait|active|completed|failed|sah:.*)$/.test(key));
    await client.quit();
    expect(left).toEqual([]);
    expect(taker.stderr).toContain(`job ${id!}: its host is gone (its reply stream no longer exists): stopping its child`);
  });

  it('a worker does not start a child queued by a host that is gone (killed, its reply stream expired): the job leaves the queue unrun', async () => {
    const loaded = join(dir, 'hostless-queued-loaded');
    const tools = `${new URL('./fixtures/slow-tools.mjs', import.meta.url).href}?loaded=${encodeURIComponent(loaded)}`;
    const args = [QUEUE_HOST, new URL('../dist/src/index.js', import.meta.url).href, suite.redis.url, 'hostless-queued', 'queued', join(dir, 'never'), join(dir, 'never-mark'), tools];
    const hostProcess = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'inherit'] });
    const exited = new Promise((resolve) => hostProcess.once('exit', resolve));
    const id = await new Promise<string>((resolve) => hostProcess.stdout.on('data', (chunk: Buffer) => /queued (\S+)/.exec(chunk.toString())?.[1] && resolve(/queued (\S+)/.exec(chunk.toString())![1]!)));
    hostProcess.kill('SIGKILL');
    await exited;
    // What its TTL does a minute later; no worker has taken the job yet.
    const client = suite.redis.client();
    const [reply] = await client.keys('bull:hostless-queued:sah:reply:*');
    await client.del(reply!);
    const taker = await worker('hostless-queued', '--lock-duration-ms', '10000');
    while ((await client.exists(`bull:hostless-queued:${id}`)) === 1) await new Promise((resolve) => setTimeout(resolve, 10));
    await client.quit();
    expect(existsSync(loaded)).toBe(false);
    expect(taker.stderr).toContain(`job ${id} not run: its host is gone`);
  });

  it('settles a child whose log has a gap (events its worker could not write) error, saying so, and tells its worker to stop it', async () => {
    register({ queue: 'gap', lockDurationMs: 30_000 });
    const subscriber = suite.redis.client();
    const writer = suite.redis.client();
    const cancels: string[] = [];
    subscriber.on('message', (_channel: string, run: string) => void cancels.push(run));
    await subscriber.subscribe('bull:gap:sah:cancel');
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    // A worker of the protocol whose second batch Redis refused: its host gets the child's event 0, then event 3.
    const impostor = new Worker<{ reply: string }>(
      'gap',
      async (job) => {
        const send = (entry: object) => writer.xadd(job.data.reply, 'NOMKSTREAM', '*', 'e', stringify({ run: job.id, protocol: QUEUE_PROTOCOL_VERSION, ...entry }));
        await send({ kind: 'attach', placement: { hostname: 'impostor', pid: 1, threadId: 1, attempt: 1 } });
        await send({ kind: 'events', attempt: 1, events: [{ seq: 0, time: Date.now(), type: 'turn/start', data: { turn: 1 } }] });
        await send({ kind: 'events', attempt: 1, events: [{ seq: 3, time: Date.now(), type: 'step/start', data: { step: 1 } }] });
        await held;
      },
      { connection: { host: '127.0.0.1', port: suite.redis.port }, prefix: 'bull', lockDuration: 30_000 },
    );
    try {
      const run = await start();
      const result = await run.result;
      expect(result).toMatchObject({ stopReason: 'error', diagnostic: expect.stringContaining("some of the child's events never reached the host") as string });
      // Its worker, which may still run it, is told to stop it.
      await waitFor(() => cancels.includes(run.id));
      release();
      await run.dispose();
    } finally {
      release();
      await impostor.close();
      await Promise.all([subscriber.quit(), writer.quit()]);
    }
  });

  it('records where a child runs only with its first events: its log never begins without its descriptor', async () => {
    register({ queue: 'placed' });
    await worker('placed', '--lock-duration-ms', '10000');
    const gate = join(dir, 'placed-gate');
    const slow = `${new URL('./fixtures/slow-tools.mjs', import.meta.url).href}?gate=${encodeURIComponent(gate)}`;
    const run = await start({ agentOptions: { model: { kind: 'scripted', steps: [{ text: 'done' }] }, toolModules: [slow] } });
    // The worker's thread took the child (attach sent) and waits on its tool module. The host has
    // read the attach once its reader trimmed the stream down to that entry.
    const client = suite.redis.client();
    const [reply] = await client.keys('bull:placed:sah:reply:*');
    for (;;) {
      const entries = await client.xrange(reply!, '-', '+');
      if (entries.length === 1 && entries[0]![1][1]!.includes('"kind":"attach"')) break;
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    await client.quit();
    expect(suite.host.sessions.get(run.id)!.events).toStrictEqual([]);
    writeFileSync(gate, '');
    expect(await run.result).toMatchObject({ stopReason: 'completed' });
    expect(suite.host.sessions.get(run.id)!.events.slice(0, 4).map((event) => event.type)).toStrictEqual(['queue/attempt', 'inbox/accepted', 'turn/start', 'subagent/descriptor']);
    await run.dispose();
  });

  it('settles error when the worker running the child is killed', async () => {
    register({ queue: 'killed' });
    const doomed = await worker('killed');
    const run = await start(hang);
    await waitFor(() => attempts(suite.host.sessions.get(run.id)!.events).length === 1);
    doomed.child.kill('SIGKILL');
    const result = await run.result;
    expect(result).toMatchObject({ stopReason: 'error', diagnostic: expect.stringMatching(/lost worker|stalled/) as string });
    const events = suite.host.sessions.get(run.id)!.events;
    expect(events.at(-1)).toMatchObject({ type: 'turn/end', data: { reason: { kind: 'error' } } });
    await run.dispose();
  });

  it('a host thread busy for longer than the lock duration does not count as a silent Redis: the child completes', async () => {
    register({ queue: 'busy-host' });
    await worker('busy-host', '--lock-duration-ms', '30000');
    const gate = join(dir, 'busy-host-gate');
    const run = await start(gated(gate));
    await waitFor(() => attempts(suite.host.sessions.get(run.id)!.events).length === 1);
    // Three lock durations without a turn of the event loop: the watchdog's replies wait unread.
    const until = Date.now() + 1500;
    while (Date.now() < until);
    writeFileSync(gate, '');
    await expect(run.result).resolves.toMatchObject({ output: [text('through the gate')], stopReason: 'completed' });
    await run.dispose();
  });

  // Two worker processes start and a stalled-job check must run: about 4.5 s with two busy loops on
  // the cores, 13 s beside another suite, and once over 20 s in a full suite run beside them.
  it('restarts a child whose worker was killed while attempts remain; the log shows both attempts', async () => {
    register({ queue: 'retried', attempts: 2 });
    const first = await worker('retried');
    const gate = join(dir, 'retry-gate');
    const ends: SubagentRunEndInfo[] = [];
    suite.host.subagents.on('subagent/end', (end) => void ends.push(end));
    const run = await start(gated(gate));
    // Killed once the first attempt's call is in the host's log (its request and tool call, counted
    // below): its queue/attempt alone comes before any step.
    await waitFor(() => attempts(suite.host.sessions.get(run.id)!.events).length === 1 && types(suite.host.sessions.get(run.id)!.events).includes('tool/call'));
    const second = await worker('retried');
    first.child.kill('SIGKILL');
    await waitFor(() => attempts(suite.host.sessions.get(run.id)!.events).length === 2);
    writeFileSync(gate, '');
    // Usage counts both attempts: the lost one's turn (one request, one tool call) and the finishing one.
    const result = await run.result;
    expect(result).toEqual({ output: [text('through the gate')], stopReason: 'completed', usage: expect.objectContaining({ turns: 2, requests: 3, toolCalls: 2 }) });
    const events = suite.host.sessions.get(run.id)!.events;
    expect(events.filter((e) => e.type === 'subagent/descriptor')).toHaveLength(1);
    expect(usageOf(events)).toEqual(result.usage);
    expect(await suite.host.subagents.listChildren(suite.parent.id)).toEqual([expect.objectContaining({ id: run.id, usage: result.usage })]);
    expect(ends).toEqual([expect.objectContaining({ id: run.id, usage: result.usage })]);
    expect(attempts(events).map((a) => [a.attempt, a.pid])).toEqual([[1, first.pid], [2, second.pid]]);
    const restartAt = events.findIndex((e, i) => i > 0 && e.type === 'queue/attempt');
    expect(events[restartAt - 1]).toMatchObject({ type: 'turn/end', data: { reason: { kind: 'error' } } });
    expect(types(events).at(-1)).toBe('turn/end');
    await run.dispose();
  }, 60_000);

  it('a child restarted onto the worker still stopping its earlier attempt keeps its job lock there once that attempt ends, and a cancel reaches it', async () => {
    register({ queue: 'retaken', attempts: 2, lockDurationMs: 1000 });
    // The first attempt ignores its stop: a grace longer than the test keeps its thread until it is released.
    const only = await worker('retaken', '--lock-duration-ms', '1000', '--cancel-grace-ms', '120000');
    const file = (name: string) => join(dir, `retaken-${name}`);
    const input = { claim: file('claim'), release: file('release'), released: file('released'), path: file('gate-never'), runningMark: file('running'), abortedMark: file('aborted') };
    const run = await start({ agentOptions: { model: { kind: 'scripted', steps: [{ toolCalls: [{ name: 'claim-gate', input }] }, { text: 'never' }] }, toolModules: [GATE_TOOLS] } });
    let settled = false;
    void run.result.finally(() => (settled = true));
    await waitFor(() => existsSync(input.claim));
    // Redis loses the job's lock: the host restarts the child, and the worker's other slot takes it
    // while the first attempt, deaf to its stop, still holds the first.
    const client = suite.redis.client();
    const lock = `bull:retaken:${run.id}:lock`;
    await client.del(lock);
    await waitFor(() => existsSync(input.runningMark));
    writeFileSync(input.release, '');
    await waitFor(() => existsSync(input.released));
    // The first attempt has ended: the second's lock is still renewed (it would lapse within the lock duration).
    let renewals = 0;
    for (let last = await client.pttl(lock); renewals < 3 && !settled; ) {
      await new Promise((resolve) => setTimeout(resolve, 20));
      const ttl = await client.pttl(lock);
      if (ttl > last) renewals += 1;
      last = ttl;
    }
    await client.quit();
    expect(settled).toBe(false);
    run.cancel();
    await expect(run.result).resolves.toMatchObject({ stopReason: 'aborted' });
    // The cancel reached the second attempt on its worker.
    await waitFor(() => existsSync(input.abortedMark));
    expect(attempts(suite.host.sessions.get(run.id)!.events).map((a) => [a.attempt, a.pid])).toEqual([[1, only.pid], [2, only.pid]]);
    await run.dispose();
  }, 60_000);

  it('a worker drains on SIGTERM: it takes no new job, lets its child finish, and exits 0; the jobs queued meanwhile run on the next worker', async () => {
    register({ queue: 'drain', lockDurationMs: 30_000 });
    const draining = await worker('drain', '--lock-duration-ms', '30000');
    const gate = join(dir, 'drain-gate');
    const first = await start(gated(gate));
    await waitFor(() => attempts(suite.host.sessions.get(first.id)!.events).length === 1);
    draining.child.kill('SIGTERM');
    // Queued as soon as the worker says it stopped taking jobs: its blocking fetch may still be
    // open then, and a job it gets that way must go back to the queue untouched.
    while (!draining.stderr.includes('SIGTERM')) await new Promise((resolve) => setImmediate(resolve));
    const later = await Promise.all([1, 2, 3].map((n) => start({ label: `after SIGTERM ${n}`, agentOptions: { model: { kind: 'scripted', steps: [{ text: `later ${n}` }] } } })));
    writeFileSync(gate, '');
    await expect(first.result).resolves.toMatchObject({ stopReason: 'completed' });
    expect(await draining.exited).toBe(0);
    for (const run of later) expect(attempts(suite.host.sessions.get(run.id)!.events)).toEqual([]);
    const next = await worker('drain', '--lock-duration-ms', '30000');
    for (const [i, run] of later.entries()) {
      await expect(run.result).resolves.toEqual(expect.objectContaining({ stopReason: 'completed', output: [text(`later ${i + 1}`)] }));
      expect(attempts(suite.host.sessions.get(run.id)!.events)).toEqual([expect.objectContaining({ attempt: 1, pid: next.pid })]);
    }
    await Promise.all([first, ...later].map((run) => run.dispose()));
  });

  // SIGHUP: its terminal or session closed. Left to its default, it would kill the worker and its children with it.
  it.each(['SIGTERM', 'SIGHUP'] as const)('a worker cancels children still running after its drain grace on %s, then exits 0', async (signal) => {
    const queue = `grace-${signal}`;
    register({ queue, lockDurationMs: 30_000 });
    const draining = await worker(queue, '--lock-duration-ms', '30000', '--drain-grace-ms', '200');
    const run = await start(hang);
    await waitFor(() => attempts(suite.host.sessions.get(run.id)!.events).length === 1);
    draining.child.kill(signal);
    await expect(run.result).resolves.toMatchObject({ stopReason: 'aborted' });
    expect(await draining.exited).toBe(0);
    expect(draining.stderr).toContain(`${signal}: no longer taking jobs`);
    await run.dispose();
  });

  it('a worker whose log reader went away still drains on SIGTERM, rather than dying at its next log line', async () => {
    register({ queue: 'no-log-reader' });
    const draining = await worker('no-log-reader', '--drain-grace-ms', '200');
    const run = await start(hang);
    await waitFor(() => attempts(suite.host.sessions.get(run.id)!.events).length === 1);
    // Its supervisor's end of the stderr pipe closes: the drain's log lines cannot be written.
    draining.child.stderr?.destroy();
    draining.child.kill('SIGTERM');
    expect(await draining.exited).toBe(0);
    // Cancelled by the drain, not lost with the worker (that would end `error`, its lock lapsed).
    await expect(run.result).resolves.toMatchObject({ stopReason: 'aborted' });
    await run.dispose();
  });

  // As `inspect` does when its address line finds no reader: it ends as interrupted, exit 0, and its
  // log says why rather than naming a signal nobody sent.
  it('a worker whose output reader went away before its ready line stops taking jobs as interrupted, exit 0, saying why', async () => {
    const child = spawn(process.execPath, [CLI, 'worker', '--redis', suite.redis.url, '--queue', 'no-output-reader'], { stdio: ['ignore', 'pipe', 'pipe'] });
    // Closed before the worker writes anything: its ready line fails with EPIPE.
    child.stdout.destroy();
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const code = await new Promise((resolve) => child.once('close', resolve));
    const prefix = `subagent-host worker[${child.pid}]: `;
    expect({ code, stderr }).toEqual({ code: 0, stderr: `${prefix}its output's reader went away: no longer taking jobs; draining 0 running children\n${prefix}drained\n` });
  });

  it('cancels a child its worker took but that waits for a thread (more children than threads): it ends at once, not when a thread frees', async () => {
    register({ queue: 'slot', lockDurationMs: 30_000 });
    await worker('slot', '--lock-duration-ms', '30000', '--concurrency', '2', '--pool-threads', '1');
    const gate = join(dir, 'slot-gate');
    const first = await start(gated(gate));
    await waitFor(() => types(suite.host.sessions.get(first.id)!.events).includes('tool/call'));
    const second = await start(gated(gate));
    const admin = suite.redis.client();
    const queue = new Queue('slot', { connection: admin });
    while ((await queue.getJobCounts('active'))['active'] !== 2) await new Promise((resolve) => setTimeout(resolve, 20));
    await queue.close();
    admin.disconnect();
    await new Promise((resolve) => setTimeout(resolve, 300));
    second.cancel();
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise((resolve) => (timer = setTimeout(() => resolve('still waiting for a thread'), 10_000)));
    await expect(Promise.race([second.result, late])).resolves.toMatchObject({ stopReason: 'aborted' });
    clearTimeout(timer);
    expect(attempts(suite.host.sessions.get(second.id)!.events)).toEqual([]);
    writeFileSync(gate, '');
    await expect(first.result).resolves.toMatchObject({ stopReason: 'completed' });
    await Promise.all([first.dispose(), second.dispose()]);
  }, 30_000);

  it('a worker given the largest drain grace lets its running child finish on SIGTERM (no timer overflow)', async () => {
    register({ queue: 'long-grace', lockDurationMs: 30_000 });
    const draining = await worker('long-grace', '--lock-duration-ms', '30000', '--drain-grace-ms', '2147483647');
    const gate = join(dir, 'long-grace-gate');
    const run = await start(gated(gate));
    await waitFor(() => types(suite.host.sessions.get(run.id)!.events).includes('tool/call'));
    draining.child.kill('SIGTERM');
    while (!draining.stderr.includes('SIGTERM')) await new Promise((resolve) => setImmediate(resolve));
    // The drain must still be waiting for the child a moment later.
    await new Promise((resolve) => setTimeout(resolve, 500));
    writeFileSync(gate, '');
    await expect(run.result).resolves.toMatchObject({ stopReason: 'completed', output: [text('through the gate')] });
    expect(await draining.exited).toBe(0);
    expect(draining.stderr).not.toContain('TimeoutOverflowWarning');
    await run.dispose();
  });
});

describe('queue provider when Redis goes away mid-run', () => {
  it('settles the in-flight child error after a bounded wait, then refuses starts', async () => {
    const redis = await startRedis();
    const host = await createHost({ providers: false });
    let worker: WorkerProcess | undefined;
    try {
      worker = await startWorker(redis.url, ['--queue', 'vanish', '--lock-duration-ms', '500', '--drain-grace-ms', '100']);
      host.subagents.registerProvider(queueProvider(host, { connection: redis.url, queue: 'vanish', lockDurationMs: 500 }));
      const parent = await host.createAgent();
      const run = await host.subagents.start('queue', { label: 'orphan', prompt: [text('work')], parent, signal: new AbortController().signal, ...hang });
      await waitFor(() => attempts(host.sessions.get(run.id)!.events).length === 1);
      await redis.stop();
      const lost = `the connection to Redis at 127.0.0.1:${redis.port} has been lost for more than 500 ms`;
      await expect(run.result).resolves.toMatchObject({ stopReason: 'error', diagnostic: expect.stringContaining(lost) as string });
      await run.dispose();
      // With Redis still gone, the next start is refused at once and leaves nothing behind.
      const next = host.subagents.start('queue', { label: 'refused', prompt: [text('work')], parent, signal: new AbortController().signal });
      await expect(next).rejects.toMatchObject({ code: 'START_FAILED' });
      expect(host.sessions.list().map((s) => s.header.id)).toEqual([parent.id]);
      // Its worker, told to stop with Redis still gone, drains and exits 0 (its quits would wait for ever).
      worker.child.kill('SIGTERM');
      expect(await worker.exited).toBe(0);
    } finally {
      await host.close();
      await worker?.stop('SIGKILL');
      await redis.stop();
    }
  });

  it('settles the in-flight child error when Redis stops answering with its socket open (frozen), removes the disposed child’s job once it answers again, and closes without waiting for it', async () => {
    const redis = await startRedis();
    const host = await createHost({ providers: false });
    let worker: WorkerProcess | undefined;
    try {
      worker = await startWorker(redis.url, ['--queue', 'frozen', '--lock-duration-ms', '500']);
      host.subagents.registerProvider(queueProvider(host, { connection: redis.url, queue: 'frozen', lockDurationMs: 500 }));
      const parent = await host.createAgent();
      const run = await host.subagents.start('queue', { label: 'stuck', prompt: [text('work')], parent, signal: new AbortController().signal, ...hang });
      await waitFor(() => attempts(host.sessions.get(run.id)!.events).length === 1);
      redis.pause();
      const silent = `Redis at 127.0.0.1:${redis.port} is connected but has not answered for more than 500 ms`;
      await expect(run.result).resolves.toMatchObject({ stopReason: 'error', diagnostic: expect.stringContaining(silent) as string });
      const events = host.sessions.get(run.id)!.events;
      expect(events.at(-1)).toMatchObject({ type: 'turn/end', data: { reason: { kind: 'error', error: { message: expect.stringContaining(silent) as string } } } });
      await run.dispose();
      // Once Redis answers again, the watchdog removes what dispose could not (before the fix the job
      // stayed for good, failed as stalled, and the cancel key for an hour).
      redis.resume();
      while ((await redis.keys()).some((key) => key.includes(run.id) || key.endsWith(':failed'))) await new Promise((resolve) => setTimeout(resolve, 50));
      await host.close();
    } finally {
      await host.close();
      await worker?.stop('SIGKILL');
      await redis.stop();
    }
  });

  it('leaves nothing running once a host whose Redis went away has closed: its process can exit at once (its own process)', async () => {
    const redis = await startRedis();
    const script = `
      import { createHost, queueProvider, text } from 'subagent-host';
      const host = await createHost({ providers: false });
      host.subagents.registerProvider(queueProvider(host, { connection: '${redis.url}', queue: 'gone', lockDurationMs: 500 }));
      const parent = await host.createAgent();
      const run = await host.subagents.start('queue', { prompt: [text('hi')], parent, signal: new AbortController().signal });
      console.log('queued');
      const { stopReason } = await run.result;
      await host.close();
      // Whatever the close left to run at once has run after this timer.
      await new Promise((resolve) => setTimeout(resolve, 10));
      console.log(JSON.stringify({ stopReason, left: process.getActiveResourcesInfo().filter((kind) => kind !== 'PipeWrap') }));`;
    const child = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
    try {
      let out = '';
      child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
      const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
      await waitFor(() => out.includes('queued\n') || child.exitCode !== null);
      await redis.stop();
      expect(await exited).toBe(0);
      expect(JSON.parse(out.split('\n')[1]!)).toEqual({ stopReason: 'error', left: [] });
    } finally {
      child.kill('SIGKILL');
      await redis.stop();
    }
  });

  it('a start while Redis is frozen, then gone, says which and names the server, never its password (START_FAILED)', async () => {
    const redis = await startRedis();
    const host = await createHost({ providers: false });
    try {
      const admin = redis.client();
      await admin.call('ACL', 'SETUSER', 'host', 'on', '>s3cret-pw', '~*', '&*', '+@all');
      admin.disconnect();
      const connection = redis.url.replace('redis://', 'redis://host:s3cret-pw@');
      host.subagents.registerProvider(queueProvider(host, { connection, queue: 'outage', lockDurationMs: 60_000 }));
      const parent = await host.createAgent();
      const start = () => host.subagents.start('queue', { label: 'outage', prompt: [text('work')], parent, signal: new AbortController().signal });
      // The first start connects; its child stays queued (no worker).
      await (await start()).dispose();
      redis.pause();
      const frozen = await start().catch((error: unknown) => error);
      redis.resume();
      const at = `Redis at 127.0.0.1:${redis.port}`;
      expect(frozen).toMatchObject({ code: 'START_FAILED', message: expect.stringContaining(`${at} is connected but did not answer`) as string });
      await redis.stop();
      const gone = await start().catch((error: unknown) => error);
      expect(gone).toMatchObject({ code: 'START_FAILED', message: expect.stringContaining(`the connection to ${at} is lost`) as string });
      for (const error of [frozen, gone]) expect((error as Error).message).not.toContain('s3cret-pw');
      expect(host.sessions.list().map((s) => s.header.id)).toEqual([parent.id]);
    } finally {
      await host.close();
      await redis.stop();
    }
  });

  it('a start fails fast (START_FAILED, naming the server) once the watchdog finds Redis frozen, and queues nothing when Redis wakes', async () => {
    const redis = await startRedis();
    const host = await createHost({ providers: false });
    const admin = redis.client();
    const queue = new Queue('judged', { connection: admin });
    try {
      host.subagents.registerProvider(queueProvider(host, { connection: redis.url, queue: 'judged', lockDurationMs: 500 }));
      const parent = await host.createAgent();
      const start = () => host.subagents.start('queue', { label: 'judged', prompt: [text('work')], parent, signal: new AbortController().signal });
      // No worker: this child stays queued until the watchdog gives up on Redis.
      const queued = await start();
      redis.pause();
      // One start waits on the frozen server when the verdict comes, the next comes after it.
      const during = await start().catch((error: unknown) => error);
      const lost = await queued.result;
      const after = await start().catch((error: unknown) => error);
      redis.resume();
      const silent = `Redis at 127.0.0.1:${redis.port} is connected but has not answered for more than 500 ms`;
      expect(lost).toMatchObject({ stopReason: 'error', diagnostic: expect.stringContaining(silent) as string });
      for (const error of [during, after]) expect(error).toMatchObject({ code: 'START_FAILED', message: expect.stringContaining(silent) as string });
      // Once Redis answers again a start succeeds; the starts given up on left no job behind.
      let next: Awaited<ReturnType<typeof start>> | undefined;
      while (next === undefined) next = await start().catch(() => new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), 10)));
      expect((await queue.getJobs()).map((job) => job.id).sort()).toEqual([queued.id, next.id].sort());
      expect(host.sessions.list().map((s) => s.header.id).sort()).toEqual([parent.id, queued.id, next.id].sort());
      await Promise.all([queued.dispose(), next.dispose()]);
    } finally {
      redis.resume();
      await queue.close();
      admin.disconnect();
      await host.close();
      await redis.stop();
    }
  });

  // The add is held on its way (a network gone silent) until the start was given up on: by its
  // command's timeout (a lock duration past it, as by default), or by the watchdog's verdict with
  // attempts left. Then Redis takes the add, and what was sent after it.
  it.each([
    ['its command timed out', { lockDurationMs: 10_000 }],
    ['the watchdog judged Redis silent, attempts left', { lockDurationMs: 500, attempts: 2 }],
  ])('a start given up on while its job was on its way (%s) leaves no child to run once Redis takes the job', async (why, options) => {
    const redis = await startRedis();
    const proxy = await holdingProxy(redis.port, 'held-child');
    const host = await createHost({ providers: false });
    const admin = redis.client();
    const queue = new Queue('held', { connection: admin });
    let worker: WorkerProcess | undefined;
    try {
      // One child at a time, in queue order: a job left behind runs before the next child does.
      worker = await startWorker(redis.url, ['--queue', 'held', '--lock-duration-ms', '10000', '--concurrency', '1', '--pool-threads', '1']);
      host.subagents.registerProvider(queueProvider(host, { connection: proxy.url, queue: 'held', ...options }));
      const parent = await host.createAgent();
      const start = (prompt: string, request: Partial<SubagentStartRequest> = {}) =>
        host.subagents.start('queue', { label: 'held', prompt: [text(prompt)], parent, signal: new AbortController().signal, ...request });
      // A first child connects and has Redis load BullMQ's scripts, so the held add is the one that queues.
      const warm = await start('warm');
      expect(await warm.result).toMatchObject({ stopReason: 'completed' });
      await warm.dispose();
      const open = join(dir, 'held-open');
      writeFileSync(open, '');
      const mark = join(dir, `held-ran-${options.lockDurationMs}`);
      const steps = [{ toolCalls: [{ name: 'spin-gate', input: { path: open, mark } }] }, { text: 'ran' }];
      const given = start('held-child', { agentOptions: { model: { kind: 'scripted', steps }, toolModules: [GATE_TOOLS] } }).catch((error: unknown) => error);
      await proxy.held;
      expect(await given).toMatchObject({ code: 'START_FAILED', message: expect.stringContaining(`Redis at 127.0.0.1:${new URL(proxy.url).port}`) as string });
      proxy.release();
      let next: Awaited<ReturnType<typeof start>> | undefined;
      while (next === undefined) next = await start('next').catch(() => new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), 10)));
      expect(await next.result).toMatchObject({ stopReason: 'completed' });
      // The given-up child never ran, and no job of it is left: nobody would have waited for it.
      expect(existsSync(mark), why).toBe(false);
      expect((await queue.getJobs()).map((job) => job.id).filter((id) => id !== next.id)).toEqual([]);
      expect(host.sessions.list().map((s) => s.header.id).sort()).toEqual([parent.id, next.id].sort());
      await next.dispose();
    } finally {
      proxy.release();
      await host.close();
      await queue.close();
      admin.disconnect();
      await worker?.stop('SIGKILL');
      await proxy.close();
      await redis.stop();
    }
  }, 40_000);

  it('a worker logs an outage of its Redis once when it begins and once when it ends, not at every reconnection attempt', async () => {
    const redis = await startRedis();
    const worker = await startWorker(redis.url, ['--queue', 'flaky', '--lock-duration-ms', '60000']);
    const host = await createHost({ providers: false });
    let again: RedisServer | undefined;
    try {
      await redis.stop();
      await waitFor(() => worker.stderr.includes('ECONNREFUSED'));
      // Not a timed assertion: the outage lasts long enough for several reconnection attempts to fail.
      await new Promise((resolve) => setTimeout(resolve, 3000));
      again = await startRedis(redis.port);
      host.subagents.registerProvider(queueProvider(host, { connection: again.url, queue: 'flaky', lockDurationMs: 60_000 }));
      const parent = await host.createAgent();
      const run = await host.subagents.start('queue', { label: 'after', prompt: [text('work')], parent, signal: new AbortController().signal });
      expect(await run.result).toMatchObject({ stopReason: 'completed' });
      await run.dispose();
      expect(worker.stderr.match(/ECONNREFUSED/g)).toHaveLength(1);
      expect(worker.stderr).toContain(`Redis at 127.0.0.1:${redis.port} is unreachable`);
      await waitFor(() => worker.stderr.includes(`reconnected to Redis at 127.0.0.1:${redis.port}`));
    } finally {
      await host.close();
      await worker.stop('SIGKILL');
      await again?.stop();
    }
  });

  it('a worker with no child running exits at once on SIGTERM when its Redis is gone, whatever its drain grace', async () => {
    const redis = await startRedis();
    const worker = await startWorker(redis.url, ['--queue', 'idle', '--drain-grace-ms', String(2 ** 31 - 1)]);
    try {
      await redis.stop();
      expect(await worker.stop('SIGTERM')).toBe(0);
      expect(worker.stderr).toContain('drained');
    } finally {
      await worker.stop('SIGKILL');
    }
  });
});

describe('queue provider when Redis refuses writes mid-run', () => {
  it('a child some of whose events Redis refused (out of memory) settles error and is stopped on its worker: its one slot takes the next child', async () => {
    const redis = await startRedis();
    const host = await createHost({ providers: false });
    const admin = redis.client();
    let worker: WorkerProcess | undefined;
    try {
      worker = await startWorker(redis.url, ['--queue', 'oom', '--lock-duration-ms', '30000', '--concurrency', '1', '--pool-threads', '1']);
      host.subagents.registerProvider(queueProvider(host, { connection: redis.url, queue: 'oom', lockDurationMs: 30_000 }));
      const parent = await host.createAgent();
      const held = join(dir, 'oom-held');
      const opened = join(dir, 'oom-gate');
      // The second step's answer (3 MB, twice: its chunk and its message) is more than Redis may still take.
      const steps = [
        { toolCalls: [{ name: 'gate', input: { path: held } }] },
        { text: 'x'.repeat(3_000_000), toolCalls: [{ name: 'gate', input: { path: opened } }] },
        { toolCalls: [{ name: 'gate', input: { path: join(dir, 'oom-gate-never') } }] },
        { text: 'never' },
      ];
      const lost = await host.subagents.start('queue', {
        label: 'oom',
        prompt: [text('work')],
        parent,
        signal: new AbortController().signal,
        agentOptions: { model: { kind: 'scripted', steps }, toolModules: [GATE_TOOLS] },
      });
      const used = Number(/used_memory:(\d+)/.exec(await admin.info('memory'))![1]);
      await admin.config('SET', 'maxmemory-policy', 'noeviction');
      await admin.config('SET', 'maxmemory', String(used + 1_000_000));
      writeFileSync(held, '');
      // Once Redis refused the big batch, it takes writes again, and the child's later events arrive.
      while (!/errorstat_OOM:count=/.test(await admin.info('errorstats'))) await new Promise((resolve) => setTimeout(resolve, 20));
      await admin.config('SET', 'maxmemory', '0');
      writeFileSync(opened, '');
      const result = await lost.result;
      // Said by the host (a gap in the log), the worker (its end) or the queue (the end refused too).
      expect(result).toMatchObject({ stopReason: 'error', diagnostic: expect.stringMatching(/events|OOM/) as string });
      await lost.dispose();
      // The child was stopped where it ran, not left at the gate that never opens, holding the worker's one slot.
      const next = await host.subagents.start('queue', { label: 'next', prompt: [text('work')], parent, signal: new AbortController().signal });
      expect(await next.result).toMatchObject({ stopReason: 'completed' });
      await next.dispose();
      expect(worker.stderr).toContain(`job ${lost.id}: its events could not be sent to its host: ReplyError: OOM command not allowed`);
    } finally {
      admin.disconnect();
      await host.close();
      await worker?.stop('SIGKILL');
      await redis.stop();
    }
  }, 30_000);
});

describe('queue connection over a long life', () => {
  let redis: RedisServer;
  beforeAll(async () => {
    redis = await startRedis();
  });
  afterAll(async () => {
    await redis.stop();
  });

  it('keeps no reply batch of a read that is over (one read a second while idle, for the connection\'s whole life)', async () => {
    const script = fileURLToPath(new URL('./fixtures/queue-reply-retention.mjs', import.meta.url));
    const dist = new URL('../dist/', import.meta.url).href;
    const ran = await new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
      execFile(process.execPath, ['--expose-gc', script, dist, redis.url], { encoding: 'utf8', timeout: 30_000 }, (error, stdout, stderr) =>
        resolve({ code: error === null ? 0 : ((error as { code?: number }).code ?? null), stdout, stderr }),
      );
    });
    expect({ code: ran.code, stderr: ran.stderr }).toStrictEqual({ code: 0, stderr: '' });
    expect(JSON.parse(ran.stdout)).toStrictEqual({ reads: true, reachable: 'at most the last two' });
  }, 40_000);
});
