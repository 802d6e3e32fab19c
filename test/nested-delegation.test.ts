// Nested foreground delegation never deadlocks the pool: worker children that call the host's
// `subagent` tool settle on a 2-thread pool, and the thread count stays within
// maxThreads × (1 + maxNestingDepth) — in this process and in plain Node processes.
import { describe, expect, it } from 'vitest';
import * as api from 'subagent-host';
import { THREAD_BOUND, runScenario, type ScenarioSummary } from './fixtures/nested-scenarios.mjs';
import { runNodeScript } from './helpers.js';

const packageUrl = new URL('../dist/src/index.js', import.meta.url).href;
const runner = new URL('./fixtures/nested-delegation.mjs', import.meta.url).pathname;

const depthErrors = (n: number) => Array.from({ length: n }, () => 'DEPTH_EXCEEDED');

// What each tree must do: how many children start, which host-tool errors the deepest ones see.
const cases: Array<{ name: string; roots: number; children: number; errorCodes: string[]; minThreads: number }> = [
  { name: 'two children each delegating once', roots: 2, children: 4, errorCodes: [], minThreads: 2 },
  // Depth 1 to 4 in each chain; depth 4's own call passes the tool's maxDepth 4. A chain holds
  // four threads at once on a 2-thread pool: only lent slots make that possible.
  { name: 'two chains of foreground delegations 4 deep', roots: 2, children: 8, errorCodes: depthErrors(2), minThreads: 4 },
  { name: 'six children each delegating twice in parallel', roots: 6, children: 18, errorCodes: [], minThreads: 2 },
  // Binary recursion under a tool maxDepth of 10: the pool's maxNestingDepth 3 stops it at four
  // generations (1 + 2 + 4 + 8 children per root), each of the 8 deepest refused twice.
  { name: 'a fan-out recursion past the pool nesting limit', roots: 2, children: 30, errorCodes: depthErrors(32), minThreads: 4 },
];

function check(summary: ScenarioSummary, expected: (typeof cases)[number]): void {
  expect(summary).toMatchObject({
    rootStops: Array.from({ length: expected.roots }, () => 'completed'),
    children: expected.children,
    ended: expected.children,
    errorCodes: expected.errorCodes,
    bound: THREAD_BOUND,
  });
  expect(summary.maxThreads).toBeLessThanOrEqual(THREAD_BOUND);
  expect(summary.maxThreads).toBeGreaterThanOrEqual(expected.minThreads);
}

describe('nested foreground delegation on a 2-thread pool', () => {
  it.each(cases)('$name: every child settles, threads stay within the bound', async (expected) => {
    check(await runScenario(api, expected.name, { watchdogMs: 60_000 }), expected);
  }, 90_000);
});

describe('nested foreground delegation in a plain process', () => {
  it.each(cases)('$name: the process finishes, threads stay within the bound', async (expected) => {
    const { code, out, err } = await runNodeScript(runner, [packageUrl, expected.name]);
    expect({ code, err }).toEqual({ code: 0, err: '' });
    check(JSON.parse(out) as ScenarioSummary, expected);
  }, 120_000);
});

describe('cancelling a worker child whose subagent call is out', () => {
  const workerTools = new URL('./fixtures/worker-tools.mjs', import.meta.url).href;

  it('settles the child after its grandchild, counting it, and leaves nothing running once disposed', async () => {
    const host = await api.createHost({ pool: { minThreads: 1, maxThreads: 2, cancelGraceMs: 300 } });
    try {
      // The grandchild ignores its cancel: it ends only when its thread is terminated after the grace.
      api.subagentTool(host, { provider: 'spawn', agentOptions: { toolModules: [workerTools], model: { kind: 'scripted', steps: [{ toolCalls: [{ name: 'spin', input: {} }] }] } } });
      const ends: string[] = [];
      const started: string[] = [];
      host.subagents.on('subagent/start', (info) => void started.push(info.id));
      host.subagents.on('subagent/end', (info) => void ends.push(info.id));
      const parent = await host.createAgent();
      const steps = [{ toolCalls: [{ name: 'subagent', input: { description: 'nested', prompt: 'go' } }] }, { text: 'done' }];
      const run = await host.subagents.start('spawn', { prompt: [api.text('go')], parent, signal: new AbortController().signal, agentOptions: { model: { kind: 'scripted', steps } } });
      await expect.poll(() => started.length, { timeout: 10_000 }).toBe(2);
      await expect.poll(async () => (await host.persistence!.load(started[1]!))?.events.some((event) => event.type === 'tool/call'), { timeout: 10_000 }).toBe(true);
      run.cancel();
      const result = await run.result;
      expect(result.stopReason).toBe('aborted');
      expect(ends).toEqual([started[1], run.id]);
      expect(result.treeUsage?.totalTokens).toBeGreaterThan(result.usage!.totalTokens);
      await run.dispose();
      const rows = await host.subagents.listDescendants(parent.id);
      expect(rows.map((row) => row.kind === 'child' && row.activity)).toEqual(['inactive', 'inactive']);
    } finally {
      await host.close();
    }
  }, 30_000);
});
