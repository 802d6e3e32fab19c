// What another program writing to the Redis cannot do to the queue provider: a host's reply stream
// replaced by a value of another type is made anew and reported, not read in vain for ever, and a
// read the server refuses is reported, not retried in silence. Real redis-server and workers.
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createHost, queueProvider, text, type Agent, type Host, type SubagentStartRequest } from 'subagent-host';
import { startRedis, startWorker, type RedisServer, type WorkerProcess } from './queue-helpers.js';

describe('the queue provider against foreign data in its Redis', () => {
  let redis: RedisServer;
  let host: Host;
  let parent: Agent;
  let warnings: string[];
  const workers: WorkerProcess[] = [];

  beforeAll(async () => {
    redis = await startRedis();
  });
  afterAll(async () => {
    await redis.stop();
  });
  beforeEach(async () => {
    warnings = [];
    host = await createHost({ providers: false, logger: { warn: (message) => void warnings.push(message) } });
    parent = await host.createAgent();
  });
  afterEach(async () => {
    await host.close();
    await Promise.all(workers.splice(0).map((worker) => worker.stop('SIGKILL')));
  });

  async function setUp(queue: string): Promise<WorkerProcess> {
    host.subagents.registerProvider(queueProvider(host, { connection: redis.url, queue, lockDurationMs: 30_000 }));
    const started = await startWorker(redis.url, ['--queue', queue, '--lock-duration-ms', '30000', '--concurrency', '2']);
    workers.push(started);
    return started;
  }

  function start(request: Partial<SubagentStartRequest> = {}) {
    return host.subagents.start('queue', { prompt: [text('work')], parent, signal: new AbortController().signal, ...request });
  }

  it('a reply stream another program replaced with a value of another type is made anew and warned about: the next child completes', async () => {
    await setUp('foreign');
    const first = await start();
    expect(await first.result).toMatchObject({ stopReason: 'completed' });
    const admin = redis.client();
    const [reply] = await admin.keys('bull:foreign:sah:reply:*');
    // A start makes it anew before queueing its child.
    await admin.set(reply!, 'not a stream');
    const next = await start();
    expect(await next.result).toMatchObject({ stopReason: 'completed', output: [text('echo: work')] });
    const made = `queue provider queue: its reply stream ${reply!} held a Redis string, not a stream, and was made anew (replies sent meanwhile are lost)`;
    expect(warnings).toStrictEqual([expect.stringContaining(made)]);
    // So does the reading, with no start to come: it does not retry a read that cannot succeed for ever.
    await admin.multi().del(reply!).hset(reply!, 'field', 'value').exec();
    while ((await admin.type(reply!)) !== 'stream') await new Promise((resolve) => setTimeout(resolve, 20));
    const last = await start();
    expect(await last.result).toMatchObject({ stopReason: 'completed' });
    expect(warnings).toHaveLength(2);
    expect(warnings[1]).toContain(`its reply stream ${reply!} held a Redis hash, not a stream, and was made anew`);
    await admin.quit();
    await Promise.all([first, next, last].map((run) => run.dispose()));
  }, 60_000);

  it('a host whose Redis user may no longer read its reply stream warns of it, not retrying in silence; it reads again once allowed', async () => {
    const admin = redis.client();
    await admin.call('ACL', 'SETUSER', 'reader', 'on', '>pw', '~*', '&*', '+@all');
    host.subagents.registerProvider(queueProvider(host, { connection: redis.url.replace('redis://', 'redis://reader:pw@'), queue: 'revoked', lockDurationMs: 30_000 }));
    workers.push(await startWorker(redis.url, ['--queue', 'revoked', '--lock-duration-ms', '30000']));
    const first = await start();
    expect(await first.result).toMatchObject({ stopReason: 'completed' });
    await admin.call('ACL', 'SETUSER', 'reader', '-xread');
    while (warnings.length === 0) await new Promise((resolve) => setTimeout(resolve, 20));
    expect(warnings[0]).toMatch(/^queue provider queue: Redis refused to read its reply stream bull:revoked:sah:reply:\S+: ReplyError: NOPERM .*; no child's reply reaches this host until it reads again$/);
    await admin.call('ACL', 'SETUSER', 'reader', '+xread');
    const next = await start();
    expect(await next.result).toMatchObject({ stopReason: 'completed' });
    await admin.quit();
    await Promise.all([first, next].map((run) => run.dispose()));
  }, 60_000);
});
