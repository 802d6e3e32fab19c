// What environment an ACP child process receives: the fixture agent prints its whole environment,
// so every assertion is about what really arrived in a real child under each `inheritEnv` mode.
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { acpProvider, createHost, text, type AcpProviderOptions, type Agent, type Host } from 'subagent-host';
import { FIXTURE_AGENT } from './acp-helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'acp-env-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

// A typical service environment: credentials under names a deny-list misses, and inside URLs.
const AMBIENT: Record<string, string> = {
  DATABASE_URL: 'postgres://app:s3cret@db/prod',
  REDIS_URL: 'redis://:pw@cache:6379',
  DB_PASS: 'hunter2',
  MYSQL_PWD: 'hunter3',
  GITHUB_PAT: 'ghp_example',
  SENTRY_DSN: 'https://abc@o1.ingest.sentry.io/2',
  APP_PRIVATE_PEM: '-----BEGIN PRIVATE-----',
  ACP_TEST_TOKEN: 'ambient secret',
  ACP_TEST_PLAIN: 'plain',
  ACP_TEST_NOTE: 'see https://user:pass@example.com/x',
  HTTP_PROXY: 'http://proxy.internal:3128',
  HTTPS_PROXY: 'http://me:pw@proxy.internal:3128',
  LANG: 'C.UTF-8',
  LC_TIME: 'C.UTF-8',
  XDG_CONFIG_HOME: join(dir, 'config'),
};
const USERINFO = /:\/\/[^/?#\s@]*@/;
const WIDENED = ['DB_PASS', 'MYSQL_PWD', 'GITHUB_PAT', 'SENTRY_DSN', 'APP_PRIVATE_PEM', 'ACP_TEST_TOKEN'];
const WITH_USERINFO = ['DATABASE_URL', 'REDIS_URL', 'ACP_TEST_NOTE', 'HTTPS_PROXY'];

describe('ACP child environment', () => {
  let host: Host;
  let parent: Agent;
  const saved = new Map<string, string | undefined>();

  beforeEach(async () => {
    for (const [name, value] of Object.entries(AMBIENT)) {
      saved.set(name, process.env[name]);
      process.env[name] = value;
    }
    host = await createHost({ providers: false });
    parent = await host.createAgent({ header: { cwd: dir } });
  });

  afterEach(async () => {
    await host.close();
    for (const [name, value] of saved) {
      if (value === undefined) delete process.env[name];
      else process.env[name] = value;
    }
  });

  /** The environment the child saw, as it printed it. */
  async function childEnv(extra: Partial<AcpProviderOptions> = {}, command: Pick<AcpProviderOptions, 'command' | 'args'> = { command: process.execPath, args: [FIXTURE_AGENT, '--env'] }) {
    host.subagents.registerProvider(acpProvider(host, { ...command, disposeEofGraceMs: 2000, disposeGraceMs: 200, ...extra }));
    const run = await host.subagents.start('acp', { label: 'env', prompt: [text('env')], parent, signal: new AbortController().signal });
    const result = await run.result;
    await run.dispose();
    expect(result.stopReason).toBe('completed');
    const env = JSON.parse((result.output[0] as { text: string }).text) as Record<string, string>;
    // Node's child_process adds NODE_V8_COVERAGE to any env it is given (under `npm run coverage`).
    if (env['NODE_V8_COVERAGE'] === process.env['NODE_V8_COVERAGE']) delete env['NODE_V8_COVERAGE'];
    return env;
  }

  it('passes only the allow-list by default: PATH, HOME, locale and proxies without userinfo', async () => {
    const env = await childEnv();
    for (const name of [...WIDENED, ...WITH_USERINFO, 'ACP_TEST_PLAIN', 'VITEST', 'NODE_OPTIONS']) expect(env).not.toHaveProperty(name);
    expect(Object.values(env).filter((value) => USERINFO.test(value))).toEqual([]);
    expect({ PATH: env['PATH'], HOME: env['HOME'], LANG: env['LANG'], LC_TIME: env['LC_TIME'] }).toEqual({
      PATH: process.env['PATH'],
      HOME: process.env['HOME'],
      LANG: 'C.UTF-8',
      LC_TIME: 'C.UTF-8',
    });
    expect([env['XDG_CONFIG_HOME'], env['HTTP_PROXY']]).toEqual([AMBIENT['XDG_CONFIG_HOME'], AMBIENT['HTTP_PROXY']]);
  });

  it("'all-but-credentials' passes the rest but drops credential-shaped names and URL-userinfo values", async () => {
    const env = await childEnv({ inheritEnv: 'all-but-credentials' });
    for (const name of [...WIDENED, ...WITH_USERINFO]) expect(env).not.toHaveProperty(name);
    expect(Object.values(env).filter((value) => USERINFO.test(value))).toEqual([]);
    expect([env['ACP_TEST_PLAIN'], env['HTTP_PROXY'], env['PATH']]).toEqual(['plain', AMBIENT['HTTP_PROXY'], process.env['PATH']]);
  });

  it('an explicit list passes exactly those names and globs, values untouched', async () => {
    const env = await childEnv({ inheritEnv: ['PATH', 'ACP_TEST_*', 'DATABASE_URL'] });
    expect(env).toEqual({
      PATH: process.env['PATH'],
      ACP_TEST_TOKEN: 'ambient secret',
      ACP_TEST_PLAIN: 'plain',
      ACP_TEST_NOTE: AMBIENT['ACP_TEST_NOTE'],
      DATABASE_URL: AMBIENT['DATABASE_URL'],
    });
  });

  it.each([['minimal'], ['all-but-credentials'], [[] as string[]]] as const)('configured env arrives unchanged on top of %j', async (inheritEnv) => {
    const configured = { OPENAI_API_KEY: 'given', DATABASE_URL: 'postgres://given:pw@db/x', HOME: dir };
    const env = await childEnv({ inheritEnv, env: configured });
    expect({ OPENAI_API_KEY: env['OPENAI_API_KEY'], DATABASE_URL: env['DATABASE_URL'], HOME: env['HOME'] }).toEqual(configured);
  });

  describe('an agent launched like codex-acp (`#!/usr/bin/env node`, needs HOME and PATH)', () => {
    const script = join(dir, 'codex-like.mjs');
    writeFileSync(script, `#!/usr/bin/env node\nawait import(${JSON.stringify(pathToFileURL(FIXTURE_AGENT).href)});\n`);
    chmodSync(script, 0o755);

    it('starts with the default environment', async () => {
      const env = await childEnv({}, { command: script, args: ['--env', '--needs-home'] });
      expect(env['HOME']).toBe(process.env['HOME']);
    });

    it('does not start without them (so the test above can fail)', async () => {
      await expect(childEnv({ inheritEnv: [], stderr: 'ignore' }, { command: script, args: ['--env', '--needs-home'] })).rejects.toMatchObject({ code: 'START_FAILED' });
    });
  });

  it.each([['everything'], [['A=B']], [['']]])('rejects inheritEnv %j with INVALID_OPTIONS', (inheritEnv) => {
    expect(() => acpProvider(host, { command: process.execPath, inheritEnv: inheritEnv as never })).toThrow(expect.objectContaining({ code: 'INVALID_OPTIONS' }));
  });
});
