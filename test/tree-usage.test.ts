// Tree totals: a one-shot result's `treeUsage` (and its `subagent/end`) is the child's own usage
// plus every descendant's, across worker threads, and counts the epochs of continuable descendants.
import { afterEach, describe, expect, it } from 'vitest';
import {
  subagentTool,
  text,
  type Host,
  type ScriptedStep,
  type SubagentRunEndInfo,
  type SubagentStartRequest,
} from 'subagent-host';
import { addUsage } from 'subagent-host/internals';
import { deferred, recordingTool, tempFiles } from './helpers.js';
import { continuationHost } from './continuation-helpers.js';

const files = tempFiles('subagent-tree-usage-');
let host: Host | undefined;
afterEach(async () => {
  await host?.close();
  host = undefined;
});

const delegate = (prompt: string, tokens: number): ScriptedStep => ({
  toolCalls: [{ name: 'subagent', input: { description: 'part', prompt } }],
  usage: { inputTokens: tokens, outputTokens: 1 },
});
// The grandchild: one tool call, then its answer; 30 + 2 + 40 + 3 tokens.
const GRANDCHILD: ScriptedStep[] = [
  { toolCalls: [{ name: 'lookup', input: { value: 'x' } }], usage: { inputTokens: 30, outputTokens: 2 } },
  { text: 'grandchild done', usage: { inputTokens: 40, outputTokens: 3 } },
];

function request(parent: SubagentStartRequest['parent'], steps: ScriptedStep[]): SubagentStartRequest {
  return { prompt: [text('work')], parent, signal: new AbortController().signal, agentOptions: { model: { kind: 'scripted', steps } } };
}

describe.each(['in-process', 'spawn'])('tree usage of a %s child', (provider) => {
  it('adds every descendant to the child’s own usage, on the result and on subagent/end', async () => {
    host = await continuationHost(files.file(), { tools: [recordingTool('lookup')], pool: { minThreads: 0, maxThreads: 3 }, providers: true });
    subagentTool(host, { provider, agentOptions: { model: { kind: 'scripted', steps: GRANDCHILD } } });
    const parent = await host.createAgent();
    const ends: SubagentRunEndInfo[] = [];
    host.subagents.on('subagent/end', (info) => void ends.push(info));
    // The child delegates twice (two grandchildren), then answers.
    const steps: ScriptedStep[] = [delegate('first', 10), delegate('second', 20), { text: 'child done', usage: { inputTokens: 50, outputTokens: 5 } }];
    const run = await host.subagents.start(provider, request(parent, steps));
    const result = await run.result;
    await run.dispose();
    expect(result.usage).toMatchObject({ totalTokens: 10 + 1 + 20 + 1 + 55, requests: 3, toolCalls: 2 });
    const grandchildren = ends.filter((end) => end.id !== run.id);
    expect(grandchildren).toHaveLength(2);
    for (const end of grandchildren) {
      expect(end.usage).toMatchObject({ totalTokens: 75, requests: 2, toolCalls: 1 });
      // A leaf's tree is itself: no treeUsage.
      expect(end).not.toHaveProperty('treeUsage');
    }
    const expected = addUsage(addUsage(result.usage!, grandchildren[0]!.usage!), grandchildren[1]!.usage!);
    expect(result.treeUsage).toEqual(expected);
    expect(result.treeUsage).toMatchObject({ totalTokens: 87 + 150, requests: 7, toolCalls: 4, turns: 3 });
    expect(Object.isFrozen(result.treeUsage)).toBe(true);
    expect(ends.find((end) => end.id === run.id)).toMatchObject({ usage: result.usage, treeUsage: result.treeUsage });
  });
});

describe('tree usage with continuable descendants', () => {
  it('counts what each epoch of a continuable grandchild spent, once', async () => {
    host = await continuationHost(files.file(), { tools: [recordingTool('lookup')] });
    subagentTool(host, { provider: 'in-process', mode: 'continuable', agentOptions: { model: { kind: 'scripted', steps: GRANDCHILD } } });
    const parent = await host.createAgent();
    // The child starts a continuable grandchild and waits (in `hold`) until it has settled.
    let settled!: () => void;
    const grandchildSettled = new Promise<void>((resolve) => (settled = resolve));
    host.tools.register({
      name: 'hold',
      description: 'waits for the grandchild',
      parameters: { type: 'object' },
      execute: async () => {
        await grandchildSettled;
        return 'ok';
      },
    });
    const ends: SubagentRunEndInfo[] = [];
    host.subagents.on('subagent/end', (info) => {
      ends.push(info);
      if (ends.length === 1) settled();
    });
    const steps: ScriptedStep[] = [
      delegate('keep going', 10),
      { toolCalls: [{ name: 'hold', input: {} }], usage: { inputTokens: 0, outputTokens: 0 } },
      { text: 'child done', usage: { inputTokens: 5, outputTokens: 0 } },
    ];
    const run = await host.subagents.start('in-process', request(parent, steps));
    const result = await run.result;
    await run.dispose();
    const grandchild = ends[0]!;
    expect(grandchild.usage).toMatchObject({ totalTokens: 75, turns: 1 });
    expect(result.usage).toMatchObject({ totalTokens: 16 });
    expect(result.treeUsage).toEqual(addUsage(result.usage!, grandchild.usage!));
  });
});

describe('tree usage of a descendant that settles after its own parent', () => {
  it('passes it on to the nearest ancestor still open, so the result agrees with the listing', async () => {
    host = await continuationHost(files.file());
    // The grandchild spends 1,000 tokens, then waits in `hold` until it is cancelled.
    host.tools.register({
      name: 'hold',
      description: 'waits for its cancel',
      parameters: { type: 'object' },
      execute: (_input, ctx) => new Promise((resolve) => ctx.signal.addEventListener('abort', () => resolve('cancelled'), { once: true })),
    });
    const grandchild: ScriptedStep[] = [{ toolCalls: [{ name: 'hold', input: {} }], usage: { inputTokens: 1000, outputTokens: 0 } }, { text: 'never' }];
    subagentTool(host, { provider: 'in-process', toolName: 'background', background: true, agentOptions: { model: { kind: 'scripted', steps: grandchild } } });
    // The child starts the grandchild in the background and answers: its disposal cancels the grandchild.
    const child: ScriptedStep[] = [
      { toolCalls: [{ name: 'background', input: { description: 'dig', prompt: 'dig' } }], usage: { inputTokens: 10, outputTokens: 0 } },
      { text: 'child done', usage: { inputTokens: 10, outputTokens: 0 } },
    ];
    subagentTool(host, { provider: 'in-process', agentOptions: { model: { kind: 'scripted', steps: child } } });
    const ends: SubagentRunEndInfo[] = [];
    host.subagents.on('subagent/end', (info) => void ends.push(info));
    const parent = await host.createAgent();
    const run = await host.subagents.start('in-process', request(parent, [delegate('do it', 1), { text: 'done', usage: { inputTokens: 1, outputTokens: 0 } }]));
    const result = await run.result;
    await run.dispose();
    expect(ends.map((end) => end.stopReason)).toEqual(['completed', 'aborted', 'completed']);
    const [middle, late] = [ends[0]!, ends[1]!];
    // The middle child's result settled before its grandchild was cancelled: its tree is itself.
    expect(middle.treeUsage).toBeUndefined();
    expect(late.usage).toMatchObject({ totalTokens: 1000 });
    expect(result.treeUsage).toEqual(addUsage(addUsage(result.usage!, middle.usage!), late.usage!));
    const listed = await host.subagents.listDescendants(parent.id);
    expect(listed.find((row) => row.id === run.id)).toMatchObject({ kind: 'child', treeUsage: result.treeUsage });
  });
});

describe('tree usage of a one-shot child whose result rejects', () => {
  it('passes what its descendants spent on to its open parent, so nothing is lost with it', async () => {
    host = await continuationHost(files.file());
    const local = host.subagents.getProvider('in-process')!;
    const fail = deferred();
    // A provider whose run fails once the test says so, whatever its child did meanwhile.
    host.subagents.registerProvider({
      ...local,
      name: 'failing',
      async start(req) {
        const inner = await local.start(req);
        return {
          id: inner.id,
          localAgent: inner.localAgent,
          result: fail.promise.then(() => Promise.reject(new Error('the run failed'))),
          cancel: (reason) => inner.cancel?.(reason),
          dispose: () => inner.dispose(),
        };
      },
    });
    const parent = await host.createAgent();
    const hang: ScriptedStep[] = [{ finish: 'hang' }];
    const top = await host.subagents.start('in-process', request(parent, hang));
    const middle = await host.subagents.start('failing', request(top.localAgent!, hang));
    const leaf = await host.subagents.start('in-process', request(middle.localAgent!, [{ text: 'leaf done', usage: { inputTokens: 500, outputTokens: 5 } }]));
    const leafResult = await leaf.result;
    expect(leafResult.usage).toMatchObject({ totalTokens: 505 });
    fail.resolve();
    await expect(middle.result).rejects.toThrow('the run failed');
    top.cancel();
    const result = await top.result;
    // The failed child's own figures are unknown; its leaf's reach the top's tree.
    expect(result.treeUsage).toEqual(addUsage(result.usage!, leafResult.usage!));
    await Promise.all([leaf.dispose(), middle.dispose(), top.dispose()]);
  });
});
