// The queue provider: one delegation through one local worker process (overhead), and delegations
// per second with 100 in flight over two worker processes. Uses REDIS_URL when set, else starts a
// private loopback redis-server (no persistence) for the suite.
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:net';
import { fileURLToPath } from 'node:url';
import { createHost, queueProvider } from '../src/index.js';
import { delegateOnce, latency, throughput, removeTempDir, suiteTempDir, type Row, type Suite } from './lib.js';

const CLI = fileURLToPath(new URL('../src/cli.js', import.meta.url));

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer().once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

/** Spawns `command` and resolves once a stdout line contains `ready`. */
function launch(command: string, args: string[], ready: string, quiet = false): Promise<ChildProcess> {
  // Workers log their drain on stderr, which would interleave with the table.
  const child = spawn(command, args, { stdio: ['ignore', 'pipe', quiet ? 'ignore' : 'inherit'] });
  return new Promise((resolve, reject) => {
    let out = '';
    child.stdout?.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      if (out.includes(ready)) resolve(child);
    });
    child.once('exit', (code) => reject(new Error(`${command} exited (${code}) before it was ready`)));
    child.once('error', reject);
  });
}

function stop(child: ChildProcess, signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    child.once('exit', () => resolve());
    child.kill(signal);
  });
}

async function measure(url: string): Promise<Row[]> {
  const rows: Row[] = [];
  const worker = (queue: string) => launch(process.execPath, [CLI, 'worker', '--redis', url, '--queue', queue, '--concurrency', '50', '--pool-threads', '2'], 'ready ', true);

  const one = await worker('bench-overhead');
  const host = await createHost({ providers: false });
  host.subagents.registerProvider(queueProvider(host, { connection: url, queue: 'bench-overhead' }));
  const parent = await host.createAgent();
  rows.push(await latency('queue/overhead', () => delegateOnce(host, 'queue', parent), { iterations: 300, warmup: 30 }));
  await host.close();
  await stop(one);

  const two = await Promise.all([worker('bench-throughput'), worker('bench-throughput')]);
  const fleet = await createHost({ providers: false });
  fleet.subagents.registerProvider(queueProvider(fleet, { connection: url, queue: 'bench-throughput' }));
  const delegator = await fleet.createAgent();
  const delegate = () => delegateOnce(fleet, 'queue', delegator);
  await throughput('warm-up', 200, 50, delegate);
  rows.push(await throughput('queue/throughput-2-workers', 2000, 100, delegate));
  await fleet.close();
  await Promise.all(two.map((child) => stop(child)));
  return rows;
}

export const queueSuite: Suite = {
  name: 'queue',
  async run() {
    const given = process.env['REDIS_URL'];
    if (given) return measure(given);
    const port = await freePort();
    const dir = suiteTempDir('bench-redis-');
    const args = ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir];
    const redis = await launch('redis-server', args, 'Ready to accept connections');
    try {
      return await measure(`redis://127.0.0.1:${port}`);
    } finally {
      await stop(redis, 'SIGKILL');
      removeTempDir(dir);
    }
  },
};
