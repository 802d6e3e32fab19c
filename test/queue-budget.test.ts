// Tree budgets over queue children: the host counts a queue child's spend into its covering trees as
// its events arrive (once, not again at its end), and a spent tree stops the child on its worker at
// its next step boundary, as it would a worker child.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHost, inProcessProvider, queueProvider, text, type Agent, type Host, type ScriptedStep, type SubagentBudget, type SubagentRun, type SubagentStartRequest } from 'subagent-host';
import { closeAfterEach, holdTool } from './helpers.js';
import { monitorRedis, startRedis, startWorker, type RedisServer, type WorkerProcess } from './queue-helpers.js';

const GATE_TOOLS = new URL('./fixtures/gate-tools.mjs', import.meta.url).href;
const QUEUE = 'budget';
// No test here loses a worker: the lock outlasts any stall of a loaded machine.
const LOCK_MS = 30_000;

let redis: RedisServer;
let worker: WorkerProcess;
const dir = mkdtempSync(join(tmpdir(), 'queue-budget-'));
const track = closeAfterEach();

beforeAll(async () => {
  redis = await startRedis();
  worker = await startWorker(redis.url, ['--queue', QUEUE, '--concurrency', '4', '--pool-threads', '2', '--lock-duration-ms', String(LOCK_MS)]);
}, 30_000);

afterAll(async () => {
  await worker?.stop();
  await redis?.stop();
  rmSync(dir, { recursive: true, force: true });
}, 30_000);

const FREE = { inputTokens: 0, outputTokens: 0 };
const spend = (tokens: number, gate: string): ScriptedStep => ({ toolCalls: [{ name: 'gate', input: { path: gate } }], usage: { inputTokens: tokens, outputTokens: 0 } });

function request(parent: Agent, steps: ScriptedStep[], extra: Partial<SubagentStartRequest> = {}): SubagentStartRequest {
  return { prompt: [text('work')], parent, signal: new AbortController().signal, agentOptions: { model: { kind: 'scripted', steps }, toolModules: [GATE_TOOLS] }, ...extra };
}

/** Resolves once the host's copy of `run`'s log holds a call of the gate at `gate` (true), or `over()` (false). */
async function atGate(host: Host, run: SubagentRun, gate: string, over = () => false): Promise<boolean> {
  const called = () =>
    host.sessions.get(run.id)?.events.some((event) => event.type === 'tool/call' && (event.data as { input?: { path?: string } }).input?.path === gate) === true;
  while (!called()) {
    if (over()) return false;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return true;
}

/** A host with a queue provider and an in-process child holding a tree budget; children start under that child. */
async function openTree(budget: SubagentBudget): Promise<{ host: Host; owner: SubagentRun; under: Agent; release: () => void }> {
  const hold = holdTool();
  const host = track(await createHost({ tools: [hold.tool], providers: false }));
  host.subagents.registerProvider(inProcessProvider(host));
  host.subagents.registerProvider(queueProvider(host, { connection: redis.url, queue: QUEUE, lockDurationMs: LOCK_MS }));
  const parent = await host.createAgent();
  const owner = await host.subagents.start('in-process', { ...request(parent, [{ toolCalls: [{ name: 'hold', input: {} }], usage: FREE }, { text: 'owner done', usage: FREE }]), budget });
  await hold.entered;
  return { host, owner, under: owner.localAgent!, release: hold.release };
}

describe('a tree budget over a queue child', () => {
  it('counts the child’s spend as its events arrive, and once: what is left is exact while it runs and after it ends', async () => {
    const { host, owner, under, release } = await openTree({ tokens: 2000, scope: 'tree' });
    const gate = join(dir, 'counted');
    const child = await host.subagents.start('queue', request(under, [spend(600, gate), { text: 'done', usage: { inputTokens: 100, outputTokens: 0 } }]));
    await atGate(host, child, gate);
    await expect(host.subagents.start('in-process', request(under, [{ text: 'greedy' }], { budget: { tokens: 1401 } }))).rejects.toMatchObject({
      code: 'INVALID_REQUEST',
      message: expect.stringContaining("exceeds what is left of an ancestor's tree budget (1400)"),
    });
    writeFileSync(gate, '');
    expect(await child.result).toMatchObject({ stopReason: 'completed', usage: { totalTokens: 700 } });
    await expect(host.subagents.start('in-process', request(under, [{ text: 'greedy' }], { budget: { tokens: 1301 } }))).rejects.toMatchObject({
      message: expect.stringContaining('(1300)'),
    });
    const fits = await host.subagents.start('in-process', request(under, [{ text: 'fits', usage: FREE }], { budget: { tokens: 1300 } }));
    expect(await fits.result).toMatchObject({ stopReason: 'completed' });
    release();
    expect(await owner.result).toMatchObject({ stopReason: 'completed', treeUsage: { totalTokens: 700 } });
    await Promise.all([child.dispose(), fits.dispose(), owner.dispose()]);
  });

  it('stops the running child at its next step boundary once a sibling spends the tree, and refuses new members', async () => {
    const { host, owner, under, release } = await openTree({ tokens: 1000, scope: 'tree' });
    const [first, second] = [join(dir, 'first'), join(dir, 'second')];
    const child = await host.subagents.start('queue', request(under, [spend(600, first), spend(600, second), { text: 'never' }]));
    await atGate(host, child, first);
    // The stop is in the worker's hands once it read the stop's key after the host set it.
    const key = `bull:${QUEUE}:sah:budget:${child.id}`;
    let set = false;
    let read!: () => void;
    const fetched = new Promise<void>((resolve) => (read = resolve));
    const monitor = await monitorRedis(redis.port, (args) => {
      const command = args[0]?.toLowerCase();
      if (command === 'set' && args[1] === key) set = true;
      else if (set && command === 'get' && args[1] === key) read();
    });
    // The sibling's 500 on top of the queue child's 600 spend the tree.
    const sibling = await host.subagents.start('in-process', request(under, [{ text: 'sibling', usage: { inputTokens: 500, outputTokens: 0 } }]));
    await sibling.result;
    await expect(host.subagents.start('in-process', request(under, [{ text: 'late' }]))).rejects.toMatchObject({
      code: 'INVALID_REQUEST',
      message: expect.stringContaining('tree budget is spent'),
    });
    try {
      await fetched;
    } finally {
      monitor.close();
    }
    writeFileSync(first, '');
    // The worker passes the stop to the child's thread while it waits at a gate: it stops at the first one, or at the second.
    let settled = false;
    const result = child.result.finally(() => (settled = true));
    const opened = atGate(host, child, second, () => settled).then((called) => called && writeFileSync(second, ''));
    expect(await result).toMatchObject({ stopReason: 'max-tokens', diagnostic: expect.stringMatching(/^budget: tokens limit 1000 reached \(\d+ used, tree budget\)$/) });
    const stops = host.sessions.get(child.id)!.events.filter((event) => event.type === 'subagent/budget');
    expect(stops.map((event) => event.data)).toMatchObject([{ limit: 'tokens', max: 1000, scope: 'tree' }]);
    await opened;
    release();
    await owner.result;
    await Promise.all([child.dispose(), sibling.dispose(), owner.dispose()]);
  });
});
