// Tree budgets: a `scope: 'tree'` budget covers the child and every descendant it delegates to,
// across worker threads. A spent tree stops a grandchild at its step boundary, refuses new
// descendants, and stops the child itself; a descendant asking for more than is left is refused.
import { describe, expect, it } from 'vitest';
import {
  createHost,
  inProcessProvider,
  scriptedModel,
  subagentTool,
  text,
  type Host,
  type ScriptedStep,
  type SubagentResult,
  type SubagentRunEndInfo,
  type SubagentStartRequest,
  type Tool,
} from 'subagent-host';
import { closeAfterEach, deferred, holdTool, recordingTool } from './helpers.js';

const track = closeAfterEach();

const lookup = (tokens: number): ScriptedStep => ({ toolCalls: [{ name: 'lookup', input: { value: 'x' } }], usage: { inputTokens: tokens, outputTokens: 0 } });
const GRANDCHILD: ScriptedStep[] = [lookup(200), lookup(200), lookup(200), lookup(200), { text: 'grandchild never' }];

async function open(provider: string, hold: Tool): Promise<Host> {
  const host = track(await createHost({ pool: { minThreads: 0, maxThreads: 3 }, tools: [recordingTool('lookup'), hold] }));
  host.subagents.registerProvider(inProcessProvider(host));
  subagentTool(host, { provider, agentOptions: { model: { kind: 'scripted', steps: GRANDCHILD } } });
  return host;
}

function request(parent: SubagentStartRequest['parent'], steps: ScriptedStep[], budget?: SubagentStartRequest['budget']): SubagentStartRequest {
  return {
    prompt: [text('work')],
    parent,
    signal: new AbortController().signal,
    agentOptions: { model: { kind: 'scripted', steps } },
    ...(budget === undefined ? {} : { budget }),
  };
}

describe.each(['in-process', 'spawn'])('a tree budget on %s', (provider) => {
  it('stops a grandchild when the tree reaches it, refuses a new descendant, then stops the child', async () => {
    const hold = holdTool();
    const host = await open(provider, hold.tool);
    const parent = await host.createAgent();
    const ends: SubagentRunEndInfo[] = [];
    host.subagents.on('subagent/end', (info) => void ends.push(info));
    // One answer: delegate, then wait in `hold`; the step after it would be the child's next request.
    const steps: ScriptedStep[] = [
      {
        toolCalls: [
          { name: 'subagent', input: { description: 'dig', prompt: 'dig deeper' } },
          { name: 'hold', input: {} },
        ],
        usage: { inputTokens: 10, outputTokens: 0 },
      },
      { text: 'child never', usage: { inputTokens: 10, outputTokens: 0 } },
    ];
    const run = await host.subagents.start(provider, request(parent, steps, { tokens: 300, scope: 'tree' }));
    await hold.entered;
    // The grandchild spent 200 + 200 on top of the child's 10: stopped at a later boundary.
    const grandchild = ends.find((end) => end.id !== run.id);
    expect(grandchild).toMatchObject({ stopReason: 'max-tokens' });
    expect(grandchild!.usage!.totalTokens).toBeGreaterThanOrEqual(400);
    expect(grandchild!.usage!.requests).toBeLessThan(GRANDCHILD.length);
    const events = host.sessions.get(run.id)!.events;
    const toolResult = events.find((event) => event.type === 'tool/result' && (event.data as { name: string }).name === 'subagent');
    expect(JSON.stringify(toolResult?.data)).toMatch(/budget: tokens limit 300 reached \(\d+ used, tree budget\)/);

    await expect(host.subagents.start('in-process', request(run.localAgent!, [{ text: 'late' }]))).rejects.toMatchObject({
      code: 'INVALID_REQUEST',
      message: expect.stringContaining('tree budget is spent'),
    });
    hold.release();
    const result = await run.result;
    expect(result.stopReason).toBe('max-tokens');
    expect(result.diagnostic).toMatch(/^budget: tokens limit 300 reached \(\d+ used, tree budget\)$/);
    expect(result.usage).toMatchObject({ requests: 1, totalTokens: 10 });
    await run.dispose();
  });

  it('refuses a descendant whose own budget exceeds what is left of the tree, and admits one that fits', async () => {
    const hold = holdTool();
    const host = await open(provider, hold.tool);
    const parent = await host.createAgent();
    const steps: ScriptedStep[] = [{ toolCalls: [{ name: 'hold', input: {} }], usage: { inputTokens: 10, outputTokens: 0 } }, { text: 'child done' }];
    const run = await host.subagents.start(provider, request(parent, steps, { tokens: 1000, scope: 'tree' }));
    await hold.entered;
    const under = run.localAgent!;
    await expect(host.subagents.start('in-process', request(under, [{ text: 'greedy' }], { tokens: 5000 }))).rejects.toMatchObject({
      code: 'INVALID_REQUEST',
      message: expect.stringContaining('exceeds what is left'),
    });
    const fits = await host.subagents.start('in-process', request(under, [{ text: 'modest', usage: { inputTokens: 5, outputTokens: 5 } }], { tokens: 100 }));
    expect(await fits.result).toMatchObject({ stopReason: 'completed', usage: { totalTokens: 10 } });
    await fits.dispose();
    hold.release();
    expect(await run.result).toMatchObject({ stopReason: 'completed' });
    await run.dispose();
  });
});

describe.each(['in-process', 'spawn'])('the subagent tool’s own budget under a tree on %s', (provider) => {
  // The model does not choose the tool's budget, so it could not act on "ask for at most that":
  // the tree above still binds the child, and its own budget stands for what it may spend of it.
  it('delegates again through the same tool once the tree has spent part of that budget; the tree still stops it', async () => {
    const host = track(await createHost({ pool: { minThreads: 0, maxThreads: 3 } }));
    host.subagents.registerProvider(inProcessProvider(host));
    // Every child spends 400 and delegates once more through the same tool: the third spends the tree.
    const steps: ScriptedStep[] = [{ toolCalls: [{ name: 'subagent', input: { description: 'nested', prompt: 'dig' } }], usage: { inputTokens: 400, outputTokens: 0 } }, { text: 'never' }];
    subagentTool(host, { provider, budget: { tokens: 1000, scope: 'tree' }, agentOptions: { model: { kind: 'scripted', steps } } });
    const ends: SubagentRunEndInfo[] = [];
    host.subagents.on('subagent/end', (end) => void ends.push(end));
    const parent = await host.createAgent({ model: scriptedModel([{ toolCalls: [{ name: 'subagent', input: { description: 'top', prompt: 'go' } }] }, { text: 'parent done' }]) });
    parent.followup([text('go')]);
    await parent.whenIdle();
    expect(ends.map((end) => [end.stopReason, end.usage?.totalTokens])).toStrictEqual([
      ['max-tokens', 400],
      ['max-tokens', 400],
      ['max-tokens', 400],
    ]);
  });
});

describe('a tree budget over spawn children waiting for a thread', () => {
  it('stops the children that got their thread after the tree was spent before any model call', async () => {
    const host = track(await createHost({ pool: { minThreads: 0, maxThreads: 1, maxNestingDepth: 1 }, tools: [recordingTool('lookup')] }));
    host.subagents.registerProvider(inProcessProvider(host));
    const burn: ScriptedStep[] = Array.from({ length: 10 }, () => lookup(300));
    subagentTool(host, { provider: 'spawn', agentOptions: { model: { kind: 'scripted', steps: burn } } });
    const ends: SubagentRunEndInfo[] = [];
    host.subagents.on('subagent/end', (end) => ends.push(end));
    const parent = await host.createAgent();
    // One step of six parallel spawn children on a single thread: five wait for it while the first spends the tree.
    const calls = Array.from({ length: 6 }, (_, i) => ({ name: 'subagent', input: { description: `w${i}`, prompt: 'burn' } }));
    const outer = await host.subagents.start('in-process', request(parent, [{ toolCalls: calls }, { text: 'outer done' }], { tokens: 1000, scope: 'tree' }));
    await outer.result;
    const inner = ends.filter((end) => end.id !== outer.id).map((end) => end.usage?.totalTokens ?? 0);
    expect(inner).toHaveLength(6);
    // The child that spent the tree is the only one that called its model; the others stopped first.
    const spenders = inner.filter((tokens) => tokens > 0);
    expect(spenders).toHaveLength(1);
    expect(spenders[0]).toBeGreaterThanOrEqual(1000);
    await outer.dispose();
  });
});

describe('a tree budget with wallMs over a member without a log on this thread', () => {
  it('cancels the member when the time runs out, though nothing else is counted meanwhile', async () => {
    const host = track(await createHost({ pool: { minThreads: 0 }, providers: false }));
    host.subagents.registerProvider(inProcessProvider(host));
    let cancelled = false;
    // A remote child that answers only when cancelled: its parent waits in the tool call meanwhile.
    host.subagents.registerProvider({
      name: 'remote',
      capabilities: { outputSchema: false, depthLimit: true, toolFilter: false, persona: false },
      inheritsParentContext: false,
      start: async () => {
        let settle!: (result: SubagentResult) => void;
        const result = new Promise<SubagentResult>((resolve) => (settle = resolve));
        const cancel = () => {
          cancelled = true;
          settle({ output: [], stopReason: 'aborted' });
        };
        return { id: 'remote-1', localAgent: undefined, result, cancel, dispose: async () => undefined };
      },
    });
    subagentTool(host, { provider: 'remote', toolName: 'remote' });
    const parent = await host.createAgent();
    const steps: ScriptedStep[] = [{ toolCalls: [{ name: 'remote', input: { description: 'd', prompt: 'p' } }] }, { text: 'after the remote' }];
    const run = await host.subagents.start('in-process', request(parent, steps, { wallMs: 100, scope: 'tree' }));
    const result = await run.result;
    expect(cancelled).toBe(true);
    expect(result.stopReason).toBe('aborted');
    expect(result.diagnostic).toMatch(/^budget: wallMs limit 100 reached \(\d+ used, tree budget\)$/);
    // The member's own result says why it was cancelled, so its parent's model hears it was the budget.
    const answer = host.sessions.get(run.id)!.events.find((event) => event.type === 'tool/result')!.data as { content: { text: string }[] };
    expect(answer.content[0]!.text).toMatch(/^subagent run was stopped by its budget\nDiagnostic: budget: wallMs limit 100 reached \(\d+ used, tree budget\)$/);
    await run.dispose();
  });
});

describe('a tree budget with a wallMs past a timer’s reach', () => {
  it('arms no timer that would fire at once', async () => {
    const warnings: string[] = [];
    const onWarning = (warning: Error) => void warnings.push(warning.name);
    process.on('warning', onWarning);
    try {
      const host = track(await createHost({ pool: { minThreads: 0 }, providers: false }));
      host.subagents.registerProvider(inProcessProvider(host));
      const parent = await host.createAgent();
      const run = await host.subagents.start('in-process', request(parent, [{ text: 'done' }], { wallMs: 30 * 24 * 3600 * 1000, scope: 'tree' }));
      expect((await run.result).stopReason).toBe('completed');
      await run.dispose();
      await new Promise((resolve) => setImmediate(resolve));
      expect(warnings).not.toContain('TimeoutOverflowWarning');
    } finally {
      process.off('warning', onWarning);
    }
  });
});

describe.each(['in-process', 'spawn', 'fork'])('a tree budget over a %s child that never waits', (provider) => {
  // Its tools are in its own thread and answer at once: the thread may not yield between steps, so the
  // host's stop would reach it only after its turn. Its own spend stops it where it runs.
  const shoutModule = new URL('./fixtures/tool-module.mjs', import.meta.url).href;
  const shout: ScriptedStep = { toolCalls: [{ name: 'shout', input: { value: 'x' } }] };

  it('stops the child at the limit, as in-process', async () => {
    const host = track(await createHost({ pool: { minThreads: 1, maxThreads: 2 } }));
    host.subagents.registerProvider(inProcessProvider(host));
    const parent = await host.createAgent();
    const run = await host.subagents.start(provider, {
      ...request(parent, [], { toolCalls: 2, scope: 'tree' }),
      agentOptions: { toolModules: [shoutModule], model: { kind: 'scripted', steps: [...Array<ScriptedStep>(10).fill(shout), { text: 'never' }] } },
    });
    const result: SubagentResult = await run.result;
    expect(result).toMatchObject({ stopReason: 'aborted', diagnostic: 'budget: toolCalls limit 2 reached (2 used, tree budget)' });
    expect(result.usage?.toolCalls).toBe(2);
    await run.dispose();
  });

  it('stops a grandchild at what was left of its parent’s tree', async () => {
    const host = track(await createHost({ pool: { minThreads: 1, maxThreads: 3 } }));
    host.subagents.registerProvider(inProcessProvider(host));
    subagentTool(host, { provider, agentOptions: { toolModules: [shoutModule], model: { kind: 'scripted', steps: [...Array<ScriptedStep>(6).fill(shout), { text: 'grandchild done' }] } } });
    const parent = await host.createAgent();
    const delegate: ScriptedStep = { toolCalls: [{ name: 'subagent', input: { description: 'g', prompt: 'go' } }] };
    const run = await host.subagents.start(provider, {
      ...request(parent, []),
      budget: { toolCalls: 3, scope: 'tree' },
      agentOptions: { model: { kind: 'scripted', steps: [delegate, { text: 'child done' }] } },
    });
    const result = await run.result;
    expect(result).toMatchObject({ stopReason: 'aborted', diagnostic: 'budget: toolCalls limit 3 reached (3 used, tree budget)' });
    expect(result.treeUsage?.toolCalls).toBe(3);
    await run.dispose();
  });
});

describe.each(['spawn', 'fork'])('a tree budget over concurrent %s children that never wait', (provider) => {
  // Each child's tools are in its own thread and answer at once: no thread yields between steps, so
  // none hears the host's stop mid-turn; each stops on the tree's spend as the threads share it.
  const shoutModule = new URL('./fixtures/tool-module.mjs', import.meta.url).href;
  const STEP = 100;
  const shout: ScriptedStep = { toolCalls: [{ name: 'shout', input: { value: 'x' } }], usage: { inputTokens: STEP, outputTokens: 0 } };

  it('stops every child once the tree is spent, one step past it at most each', async () => {
    const children = 3;
    // Every child calls this host tool first: none goes on before all have started, each from an unspent tree.
    let arrived = 0;
    const all = deferred();
    const barrier: Tool = {
      name: 'barrier',
      description: 'waits for every child',
      parameters: { type: 'object', properties: {}, additionalProperties: false },
      async execute() {
        if (++arrived === children) all.resolve();
        await all.promise;
        return 'go';
      },
    };
    const host = track(await createHost({ pool: { minThreads: children, maxThreads: children }, tools: [barrier] }));
    host.subagents.registerProvider(inProcessProvider(host));
    const wait: ScriptedStep = { toolCalls: [{ name: 'barrier', input: {} }], usage: { inputTokens: 0, outputTokens: 0 } };
    const steps: ScriptedStep[] = [wait, ...Array<ScriptedStep>(30).fill(shout), { text: 'never' }];
    subagentTool(host, { provider, agentOptions: { toolModules: [shoutModule], model: { kind: 'scripted', steps } } });
    const ends: (SubagentRunEndInfo & { stops: unknown[] })[] = [];
    host.subagents.on('subagent/end', (end) => {
      const stops = host.sessions.get(end.id)?.events.filter((event) => event.type === 'subagent/budget').map((event) => event.data) ?? [];
      ends.push({ ...end, stops });
    });
    const parent = await host.createAgent();
    const calls = Array.from({ length: children }, (_, i) => ({ name: 'subagent', input: { description: `w${i}`, prompt: 'burn' } }));
    const free = { inputTokens: 0, outputTokens: 0 };
    const outer = await host.subagents.start('in-process', request(parent, [{ toolCalls: calls, usage: free }, { text: 'outer done', usage: free }], { tokens: 1000, scope: 'tree' }));
    const result = await outer.result;
    const inner = ends.filter((end) => end.id !== outer.id);
    expect(inner).toHaveLength(children);
    for (const end of inner) {
      expect(end.stopReason).toBe('max-tokens');
      expect(end.stops).toMatchObject([{ limit: 'tokens', max: 1000, scope: 'tree' }]);
    }
    const spent = inner.reduce((sum, end) => sum + (end.usage?.totalTokens ?? 0), 0);
    expect(spent).toBeGreaterThanOrEqual(1000);
    expect(spent).toBeLessThanOrEqual(1000 + children * STEP);
    expect(result.treeUsage?.totalTokens).toBe(spent);
    await outer.dispose();
  });
});

describe('a tree budget at its edges', () => {
  it('admits a descendant asking for exactly what is left of the tree', async () => {
    const hold = holdTool();
    const host = await open('in-process', hold.tool);
    const parent = await host.createAgent();
    const steps: ScriptedStep[] = [{ toolCalls: [{ name: 'hold', input: {} }], usage: { inputTokens: 10, outputTokens: 0 } }, { text: 'child done' }];
    const run = await host.subagents.start('in-process', request(parent, steps, { tokens: 1000, scope: 'tree' }));
    await hold.entered;
    const under = run.localAgent!;
    const refusal: unknown = await host.subagents.start('in-process', request(under, [{ text: 'greedy' }], { tokens: 5000 })).catch((error: unknown) => error);
    const left = Number(/tree budget \((\d+)\)/.exec((refusal as Error).message)?.[1]);
    expect(left).toBe(990);
    const exact = await host.subagents.start('in-process', request(under, [{ text: 'exact' }], { tokens: left }));
    expect(await exact.result).toMatchObject({ stopReason: 'completed' });
    await exact.dispose();
    hold.release();
    expect(await run.result).toMatchObject({ stopReason: 'completed' });
    await run.dispose();
  });

});
