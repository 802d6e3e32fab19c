// The worker entry as shipped: one CommonJS bundle that imports tool modules through the pool's
// import gate, and recognises the package's SubagentError although it carries its own copy.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { copyFileSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Script } from 'node:vm';
import { Worker } from 'node:worker_threads';
import { afterEach, describe, expect, it, onTestFinished } from 'vitest';
import { createHost, text, type Host, type ScriptedStep } from 'subagent-host';
import { dataOf } from './helpers.js';

const fixture = (name: string) => new URL(`./fixtures/reliability/${name}.mjs`, import.meta.url).href;
let host: Host | undefined;

afterEach(async () => {
  await host?.close();
  host = undefined;
});

function request(parent: Parameters<Host['subagents']['start']>[1]['parent'], steps: ScriptedStep[], toolModule: string, signal = new AbortController().signal) {
  return { prompt: [text('work')], parent, signal, agentOptions: { model: { kind: 'scripted' as const, steps }, toolModules: [toolModule] } };
}

describe('worker entry', () => {
  it('is built as one CommonJS file', () => {
    expect(existsSync(new URL('../dist/workers/child.cjs', import.meta.url))).toBe(true);
  });

  it('writes the code cache of a V8 that finds none or rejects the one it finds, and later threads take it', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'worker-entry-'));
    onTestFinished(() => rmSync(dir, { recursive: true, force: true }));
    for (const name of ['child.cjs', 'child-bundle.cjs']) copyFileSync(fileURLToPath(new URL(`../dist/workers/${name}`, import.meta.url)), join(dir, name));
    // The loader names its cache by the bundle's digest and this V8's version.
    const [, digest] = /child-bundle\.([0-9a-f]{16})\.<V8 version>\.cache/.exec(readFileSync(join(dir, 'child.cjs'), 'utf8'))!;
    const cacheName = `child-bundle.${digest}.${process.versions.v8}.cache`;
    const cacheFile = join(dir, cacheName);
    const loadInThread = async () => {
      // Under coverage the loader leaves the cache alone (a cached function has no block counts).
      const env = { ...process.env };
      delete env['NODE_V8_COVERAGE'];
      const thread = new Worker(`require(${JSON.stringify(join(dir, 'child.cjs'))});`, { eval: true, env });
      const [code] = (await once(thread, 'exit')) as [number];
      expect(code).toBe(0);
    };
    // What V8 says of the cache, in this process (whose V8 flags its threads share).
    const rejected = () => {
      const wrapper = `(function (exports, require, module, __filename, __dirname) {${readFileSync(join(dir, 'child-bundle.cjs'), 'utf8')}\n})`;
      return new Script(wrapper, { filename: join(dir, 'child-bundle.cjs'), cachedData: readFileSync(cacheFile) }).cachedDataRejected;
    };

    await loadInThread();
    expect(rejected()).toBe(false);
    writeFileSync(cacheFile, 'not a code cache');
    await loadInThread();
    expect(rejected()).toBe(false);
    // An accepted cache is left as it is (a rewrite renames a new file over it).
    const { ino } = statSync(cacheFile);
    await loadInThread();
    expect(statSync(cacheFile).ino).toBe(ino);
    expect(readdirSync(dir).sort()).toEqual(['child-bundle.cjs', cacheName, 'child.cjs'].sort());
  });

  it('that no thread can load fails each start with START_FAILED; close resolves and the process exits', async () => {
    // A plain process: a start left pending would keep it alive, which vitest's own process hides.
    const args = [fileURLToPath(fixture('entry-fails')), new URL('../dist/src/index.js', import.meta.url).href];
    const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    onTestFinished(() => {
      if (child.exitCode === null) child.kill('SIGKILL');
    });
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
    const [outcomes, ...rest] = out.split('\n');
    expect({ code, rest }).toEqual({ code: 0, rest: ['closed', ''] });
    const failure = 'SubagentError START_FAILED: no worker thread could load the worker entry: it ran out of memory (are options.pool.resourceLimits too small?)';
    expect(JSON.parse(outcomes!)).toEqual([failure, failure]);
  });

  it('keeps the code of a SubagentError thrown by a tool module that imports the package', async () => {
    host = await createHost();
    const parent = await host.createAgent();
    const run = await host.subagents.start('spawn', request(parent, [{ toolCalls: [{ name: 'refuse', input: {} }] }, { text: 'ok' }], fixture('package-error-tool')));
    expect((await run.result).stopReason).toBe('completed');
    expect(dataOf<{ code: string; isError: boolean }>(host.sessions.get(run.id)!.events, 'tool/result')[0]).toMatchObject({ code: 'UNAUTHORIZED', isError: true });
    await run.dispose();
  });
});
