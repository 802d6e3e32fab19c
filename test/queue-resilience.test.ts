// What another program writing to the Redis cannot do to the queue provider: a host's reply stream
// replaced by a value of another type is made anew and reported, not read in vain for ever, and a
// read the server refuses is reported, not retried in silence. Real redis-server and workers.
import { describe, expect, it } from 'vitest';
import { queueProvider, text, type SubagentStartRequest } from 'subagent-host';
import { queueSuite, type WorkerProcess } from './queue-helpers.js';

describe('the queue provider against foreign data in its Redis', () => {
  const suite = queueSuite();

  async function setUp(queue: string): Promise<WorkerProcess> {
    suite.host.subagents.registerProvider(queueProvider(suite.host, { connection: suite.redis.url, queue, lockDurationMs: 30_000 }));
    return suite.worker(['--queue', queue, '--lock-duration-ms', '30000', '--concurrency', '2']);
  }

  function start(request: Partial<SubagentStartRequest> = {}) {
    return suite.host.subagents.start('queue', { prompt: [text('work')], parent: suite.parent, signal: new AbortController().signal, ...request });
  }

  it('a reply stream another program replaced with a value of another type is made anew and warned about: the next child completes', async () => {
    await setUp('foreign');
    const first = await start();
    expect(await first.result).toMatchObject({ stopReason: 'completed' });
    const admin = suite.redis.client();
    const [reply] = await admin.keys('bull:foreign:sah:reply:*');
    // A start makes it anew before queueing its child.
    await admin.set(reply!, 'not a stream');
    const next = await start();
    expect(await next.result).toMatchObject({ stopReason: 'completed', output: [text('echo: work')] });
    const made = `queue provider queue: its reply stream ${reply!} held a Redis string, not a stream, and was made anew (replies sent meanwhile are lost)`;
    expect(suite.warnings).toStrictEqual([expect.stringContaining(made)]);
    // So does the reading, with no start to come: it does not retry a read that cannot succeed for ever.
    await admin.multi().del(reply!).hset(reply!, 'field', 'value').exec();
    while ((await admin.type(reply!)) !== 'stream') await new Promise((resolve) => setTimeout(resolve, 20));
    const last = await start();
    expect(await last.result).toMatchObject({ stopReason: 'completed' });
    expect(suite.warnings).toHaveLength(2);
    expect(suite.warnings[1]).toContain(`its reply stream ${reply!} held a Redis hash, not a stream, and was made anew`);
    await admin.quit();
    await Promise.all([first, next, last].map((run) => run.dispose()));
  }, 60_000);

  it('a host whose Redis user may no longer read its reply stream warns of it, not retrying in silence; it reads again once allowed', async () => {
    const admin = suite.redis.client();
    await admin.call('ACL', 'SETUSER', 'reader', 'on', '>pw', '~*', '&*', '+@all');
    suite.host.subagents.registerProvider(queueProvider(suite.host, { connection: suite.redis.url.replace('redis://', 'redis://reader:pw@'), queue: 'revoked', lockDurationMs: 30_000 }));
    await suite.worker(['--queue', 'revoked', '--lock-duration-ms', '30000']);
    const first = await start();
    expect(await first.result).toMatchObject({ stopReason: 'completed' });
    await admin.call('ACL', 'SETUSER', 'reader', '-xread');
    while (suite.warnings.length === 0) await new Promise((resolve) => setTimeout(resolve, 20));
    expect(suite.warnings[0]).toMatch(/^queue provider queue: Redis refused to read its reply stream bull:revoked:sah:reply:\S+: ReplyError: NOPERM .*; no child's reply reaches this host until it reads again$/);
    await admin.call('ACL', 'SETUSER', 'reader', '+xread');
    const next = await start();
    expect(await next.result).toMatchObject({ stopReason: 'completed' });
    await admin.quit();
    await Promise.all([first, next].map((run) => run.dispose()));
  }, 60_000);
});
