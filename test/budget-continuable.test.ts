// Budgets and usage of continuable children: a budget counts the whole child (every turn), keeps
// counting what was spent after eviction and after a restart on the same SQLite file, and a cold
// resume restores everything the child was started with.
import { afterEach, describe, expect, it } from 'vitest';
import { BUDGET_EVENT, DESCRIPTOR_EVENT, subagentTool, text, type Agent, type Host, type ModelSpec, type ScriptedStep, type SubagentBudget } from 'subagent-host';
import { recordingTool, tempFiles } from './helpers.js';
import { continuationHost, eventually, type Recorder } from './continuation-helpers.js';
import { call, lazyScript, startedId } from './tool-helpers.js';

const files = tempFiles('subagent-budget-continuable-');
const hosts: Host[] = [];
afterEach(async () => {
  for (const host of hosts.splice(0).reverse()) await host.close();
});

async function open(file: string, lingerMs?: number): Promise<Host & { recorder: Recorder }> {
  const host = await continuationHost(file, { tools: [recordingTool('lookup')], ...(lingerMs === undefined ? {} : { continuation: { lingerMs } }) });
  hosts.push(host);
  return host;
}

async function closeHost(host: Host): Promise<void> {
  hosts.splice(hosts.indexOf(host), 1);
  await host.close();
}

// Every model instance replays these from the first: one tool call (100 tokens), then an answer (0).
const STEPS: ScriptedStep[] = [
  { toolCalls: [{ name: 'lookup', input: { value: 'x' } }], usage: { inputTokens: 100, outputTokens: 0 } },
  { text: 'done', usage: { inputTokens: 0, outputTokens: 0 } },
];
const MODEL: ModelSpec = { kind: 'scripted', steps: STEPS };

function start(host: Host, parent: Agent, budget: unknown, extra: Record<string, unknown> = {}, provider = 'in-process') {
  return host.subagents.startContinuable({
    provider,
    label: 'spender',
    request: { prompt: [text('first')], parent, agentOptions: { model: MODEL, ...extra }, budget: budget as SubagentBudget },
  });
}

function budgetEvents(host: Host, childId: string) {
  return host.sessions.get(childId)!.events.filter((event) => event.type === BUDGET_EVENT).map((event) => event.data);
}

describe('a continuable child’s budget', () => {
  // A worker child's turns are counted where its host-side agent runs: in its thread each host-side
  // step is a turn, and a stay built mid-turn starts from the open turn's start.
  it.each(['in-process', 'spawn', 'fork'])('counts every turn of the child on %s: the turn beyond the limit stops, the parent hears why', async (provider) => {
    const host = await continuationHost(files.file(), { tools: [recordingTool('lookup')], providers: provider !== 'in-process' });
    hosts.push(host);
    const parent = await host.createAgent();
    const { childId } = await start(host, parent, { turns: 2 }, {}, provider);
    await host.recorder.until(() => host.recorder.ends.length === 1);
    await host.subagents.followup(parent, childId, [text('second')]);
    await host.recorder.until(() => host.recorder.ends.length === 2);
    expect(budgetEvents(host, childId)).toEqual([]);
    await host.subagents.followup(parent, childId, [text('third')]);
    await host.recorder.until(() => host.recorder.ends.length === 3);
    expect(host.recorder.ends.map((end) => end.stopReason)).toEqual(['completed', 'completed', 'aborted']);
    expect(budgetEvents(host, childId)).toEqual([{ limit: 'turns', max: 2, used: 3, scope: 'child' }]);
    // Each epoch's end carries what the child has spent so far, over all its turns; the stopped
    // turn made no model request.
    const [one, two, three] = host.recorder.ends.map((end) => end.usage!);
    expect([one!.turns, two!.turns, three!.turns]).toEqual([1, 2, 3]);
    expect(one!.totalTokens).toBe(100);
    expect(two!.totalTokens).toBeGreaterThan(100);
    expect(three).toMatchObject({ totalTokens: two!.totalTokens, requests: two!.requests });
    const descriptor = host.sessions.get(childId)!.events.find((event) => event.type === DESCRIPTOR_EVENT)!.data;
    expect(descriptor).toMatchObject({ budget: { turns: 2 } });
    await parent.whenIdle();
    const notices = parent.session.events.filter((event) => event.type === 'user/message').map((event) => JSON.stringify(event.data));
    expect(notices.at(-1)).toContain('It was stopped by its budget: turns limit 2 reached (3 used, child budget).');
  });

  it.each(['in-process', 'in-process-fork'])('keeps counting what a %s child spent after it is evicted and cold-resumed', async (provider) => {
    const host = await open(files.file(), 0);
    // A fork inherits this turn (1998 tokens): never counted against the child's budget.
    const parent = await host.createAgent({ agentOptions: { model: { kind: 'scripted', steps: [{ text: 'context', usage: { inputTokens: 999, outputTokens: 999 } }] } } });
    parent.followup([text('context')]);
    await parent.whenIdle();
    const { childId } = await start(host, parent, { tokens: 150 }, {}, provider);
    await host.recorder.until(() => host.recorder.ends.length === 1);
    await eventually(() => host.sessions.get(childId) === undefined);
    await host.subagents.followup(parent, childId, [text('again')]);
    await host.recorder.until(() => host.recorder.ends.length === 2);
    // The resumed model replays its steps: 100 before the resume + 100 now ≥ 150 stops the answer.
    expect(host.recorder.ends[1]).toMatchObject({ stopReason: 'max-tokens', usage: { totalTokens: 200, turns: 2, requests: 3, toolCalls: 2 } });
    await eventually(() => host.sessions.get(childId) === undefined);
    const events = (await host.persistence!.load(childId))!.events;
    expect(events.filter((event) => event.type === BUDGET_EVENT).map((event) => event.data)).toEqual([{ limit: 'tokens', max: 150, used: 200, scope: 'child' }]);
  });

  it('keeps limiting after a restart in a new host on the same SQLite file, and lists the whole spend', async () => {
    const file = files.file();
    const first = await open(file);
    const parent = await first.createAgent({ sessionId: 'budget-parent' });
    const { childId } = await start(first, parent, { tokens: 150 });
    await first.recorder.until(() => first.recorder.ends.length === 1);
    expect(first.recorder.ends[0]).toMatchObject({ stopReason: 'completed', usage: { totalTokens: 100, turns: 1 } });
    await parent.whenIdle();
    await closeHost(first);

    const second = await open(file);
    const resumed = (await second.agents.resume({ sessionId: 'budget-parent' })).agent;
    await second.subagents.followup(resumed, childId, [text('after the restart')]);
    await second.recorder.until(() => second.recorder.ends.length === 1);
    expect(second.recorder.ends[0]).toMatchObject({ stopReason: 'max-tokens', usage: { totalTokens: 200, turns: 2, requests: 3 } });
    await resumed.whenIdle();
    const rows = await second.subagents.listChildren(resumed.id);
    expect(rows).toEqual([expect.objectContaining({ id: childId, usage: second.recorder.ends[0]!.usage })]);
  });

  it('refuses bad limits, bad route overrides and a provider without the budget capability before any child', async () => {
    const host = await open(files.file());
    const parent = await host.createAgent();
    const before = host.sessions.list().length;
    await expect(start(host, parent, { tokens: -1 })).rejects.toMatchObject({ code: 'INVALID_REQUEST', message: expect.stringContaining('spec.request.budget.tokens') });
    await expect(start(host, parent, { turns: 1.5 })).rejects.toMatchObject({ code: 'INVALID_REQUEST' });
    await expect(start(host, parent, undefined, { maxTokens: 0 })).rejects.toMatchObject({ code: 'INVALID_REQUEST', message: expect.stringContaining('agentOptions.maxTokens') });
    host.subagents.registerProvider({
      name: 'no-budget',
      capabilities: { outputSchema: false, depthLimit: false, toolFilter: false, persona: false },
      inheritsParentContext: false,
      start: () => Promise.reject(new Error('never reached')),
      prepareContinuable: () => Promise.resolve({}),
    });
    await expect(
      host.subagents.startContinuable({ provider: 'no-budget', label: 'x', request: { prompt: [text('x')], parent, budget: { turns: 1 } } }),
    ).rejects.toMatchObject({ code: 'UNSUPPORTED_CAPABILITY' });
    expect(host.sessions.list()).toHaveLength(before);
    expect(host.recorder.starts).toEqual([]);
  });
});

describe('the subagent tool in continuable mode', () => {
  it('starts each child with the configured budget', async () => {
    const host = await open(files.file());
    subagentTool(host, { provider: 'in-process', mode: 'continuable', budget: { turns: 1 } });
    const parent = await host.createAgent({ model: lazyScript([call('subagent', { description: 'scout', prompt: 'look' }), { text: 'waiting' }]) });
    parent.followup([text('go')]);
    await host.recorder.until(() => host.recorder.ends.length === 1);
    await parent.whenIdle();
    const childId = startedId(parent, 0);
    await host.subagents.followup(parent, childId, [text('more')]);
    await host.recorder.until(() => host.recorder.ends.length === 2);
    expect(host.recorder.ends.map((end) => end.stopReason)).toEqual(['completed', 'aborted']);
    expect(budgetEvents(host, childId)).toEqual([{ limit: 'turns', max: 1, used: 2, scope: 'child' }]);
  });
});

/** Starts an in-process one-shot child of `parent` under a tree budget of 100 tokens, its model scripted with `steps`. */
function startUnderTree(host: Host, parent: Agent, steps: ScriptedStep[]) {
  return host.subagents.start('in-process', {
    prompt: [text('work')], parent, signal: new AbortController().signal, agentOptions: { model: { kind: 'scripted', steps } }, budget: { tokens: 100, scope: 'tree' },
  });
}

/** A step that calls the test's `drive` tool. */
const DRIVE: ScriptedStep = { toolCalls: [{ name: 'drive', input: {} }], usage: { inputTokens: 0, outputTokens: 0 } };

describe('a tree budget above a continuable child', () => {
  it('counts the continuable grandchild, stops it when the tree is spent and refuses a new one', async () => {
    const host = await open(files.file());
    const spend: ScriptedStep = { toolCalls: [{ name: 'lookup', input: { value: 'x' } }], usage: { inputTokens: 60, outputTokens: 0 } };
    // The grandchild spends only once the child waits in `hold`: the child's own boundaries see no race.
    const waitForHold: ScriptedStep = { toolCalls: [{ name: 'gate', input: {} }], usage: { inputTokens: 0, outputTokens: 0 } };
    subagentTool(host, { provider: 'in-process', mode: 'continuable', agentOptions: { model: { kind: 'scripted', steps: [waitForHold, spend, spend, spend, { text: 'never' }] } } });
    let holding!: () => void;
    const childHolding = new Promise<void>((resolve) => (holding = resolve));
    host.tools.register({ name: 'gate', description: 'waits for the child to hold', parameters: { type: 'object' }, execute: async () => (await childHolding, 'go') });
    let settled!: () => void;
    const grandchildSettled = new Promise<void>((resolve) => (settled = resolve));
    host.subagents.on('subagent/end', () => settled());
    let refusal: unknown;
    host.tools.register({
      name: 'hold',
      description: 'waits for the grandchild, then tries another',
      parameters: { type: 'object' },
      execute: async (_input, ctx) => {
        holding();
        await grandchildSettled;
        refusal = await host.subagents
          .startContinuable({ provider: 'in-process', label: 'late', request: { prompt: [text('x')], parent: ctx.agent } })
          .catch((error: unknown) => error);
        return 'ok';
      },
    });
    const parent = await host.createAgent();
    const steps: ScriptedStep[] = [
      { toolCalls: [{ name: 'subagent', input: { description: 'spend', prompt: 'spend' } }], usage: { inputTokens: 10, outputTokens: 0 } },
      { toolCalls: [{ name: 'hold', input: {} }], usage: { inputTokens: 0, outputTokens: 0 } },
      { text: 'never' },
    ];
    const run = await startUnderTree(host, parent, steps);
    const result = await run.result;
    // 10 (child) + 60 + 60 (grandchild) = 130 ≥ 100: the grandchild's third request is never made.
    expect(result).toMatchObject({ stopReason: 'max-tokens', diagnostic: 'budget: tokens limit 100 reached (130 used, tree budget)' });
    const grandchild = host.recorder.ends.find((end) => end.id !== run.id)!;
    expect(grandchild).toMatchObject({ stopReason: 'max-tokens', usage: { totalTokens: 120, requests: 3 } });
    expect(budgetEvents(host, grandchild.id)).toEqual([{ limit: 'tokens', max: 100, used: 130, scope: 'tree' }]);
    expect(refusal).toMatchObject({ code: 'INVALID_REQUEST', message: expect.stringContaining("ancestor's tree budget is spent") });
    await run.dispose();
  });

  it('counts what a continuable grandchild spent before its eviction once when it resumes', async () => {
    const host = await open(files.file(), 0);
    const spend = (tokens: number): ScriptedStep => ({ text: 'spent', usage: { inputTokens: tokens, outputTokens: 0 } });
    let outcome: unknown;
    host.tools.register({
      name: 'drive',
      description: 'starts a continuable child, lets it be evicted, then sends it a follow-up',
      parameters: { type: 'object' },
      execute: async (_input, ctx) => {
        const { childId } = await host.subagents.startContinuable({
          provider: 'in-process',
          label: 'spender',
          request: { prompt: [text('one')], parent: ctx.agent, agentOptions: { model: { kind: 'scripted', steps: [spend(40)] } } },
        });
        const ends = () => host.recorder.ends.filter((end) => end.id === childId);
        await host.recorder.until(() => ends().length === 1);
        await eventually(() => host.sessions.get(childId) === undefined);
        await host.subagents.followup(ctx.agent, childId, [text('two')]);
        await host.recorder.until(() => ends().length === 2);
        outcome = ends().map((end) => [end.stopReason, end.usage?.totalTokens]);
        return 'driven';
      },
    });
    const parent = await host.createAgent();
    const run = await startUnderTree(host, parent, [DRIVE, spend(0)]);
    // 40 before the eviction, 40 after: 80 < 100, though the resumed child's log holds both turns.
    expect(await run.result).toMatchObject({ stopReason: 'completed', treeUsage: { totalTokens: 80 } });
    expect(outcome).toEqual([
      ['completed', 40],
      ['completed', 80],
    ]);
    await run.dispose();
  });
});

describe('a spent tree budget above an evicted continuable child', () => {
  it('refuses the follow-up that would resume it, saying the child cannot be resumed under the tree', async () => {
    const host = await open(files.file(), 0);
    let refusal: unknown;
    host.tools.register({
      name: 'drive',
      description: 'starts a continuable child that spends the tree, lets it be evicted, then sends it a follow-up',
      parameters: { type: 'object' },
      execute: async (_input, ctx) => {
        const { childId } = await host.subagents.startContinuable({
          provider: 'in-process',
          label: 'spender',
          request: { prompt: [text('one')], parent: ctx.agent, agentOptions: { model: { kind: 'scripted', steps: [{ text: 'spent', usage: { inputTokens: 150, outputTokens: 0 } }] } } },
        });
        await host.recorder.until(() => host.recorder.ends.some((end) => end.id === childId));
        await eventually(() => host.sessions.get(childId) === undefined);
        refusal = await host.subagents.followup(ctx.agent, childId, [text('two')]).catch((error: unknown) => error);
        return 'driven';
      },
    });
    const parent = await host.createAgent();
    const run = await startUnderTree(host, parent, [DRIVE, { text: 'never' }]);
    expect(await run.result).toMatchObject({ stopReason: 'max-tokens' });
    expect(refusal).toMatchObject({
      code: 'INVALID_REQUEST',
      message: "an ancestor's tree budget is spent (budget: tokens limit 100 reached (150 used, tree budget)); an evicted or stored child cannot be resumed under it to take this message",
    });
    await run.dispose();
  });
});

describe('a continuable child’s tree budget', () => {
  it('counts its one-shot descendants, and after a cold resume what its subtree already spent', async () => {
    const host = await open(files.file(), 0);
    subagentTool(host, { provider: 'in-process', agentOptions: { model: { kind: 'scripted', steps: [{ text: 'part done', usage: { inputTokens: 60, outputTokens: 0 } }] } } });
    const parent = await host.createAgent();
    // Each model instance replays: delegate (10 tokens), then answer (0).
    const steps: ScriptedStep[] = [
      { toolCalls: [{ name: 'subagent', input: { description: 'part', prompt: 'part' } }], usage: { inputTokens: 10, outputTokens: 0 } },
      { text: 'done', usage: { inputTokens: 0, outputTokens: 0 } },
    ];
    const { childId } = await host.subagents.startContinuable({
      provider: 'in-process',
      label: 'owner',
      request: { prompt: [text('first')], parent, agentOptions: { model: { kind: 'scripted', steps } }, budget: { tokens: 130, scope: 'tree' } },
    });
    const ends = () => host.recorder.ends.filter((end) => end.id === childId);
    await host.recorder.until(() => ends().length === 1);
    expect(ends()[0]).toMatchObject({ stopReason: 'completed', usage: { totalTokens: 10 } });
    await eventually(() => host.sessions.get(childId) === undefined);
    await host.subagents.followup(parent, childId, [text('again')]);
    await host.recorder.until(() => ends().length === 2);
    // 70 spent before the resume (10 own + 60 below), then 10 + 60 more: 140 ≥ 130 stops the answer.
    expect(ends()[1]).toMatchObject({ stopReason: 'max-tokens', usage: { totalTokens: 20 } });
    await eventually(() => host.sessions.get(childId) === undefined);
    const events = (await host.persistence!.load(childId))!.events;
    expect(events.filter((event) => event.type === BUDGET_EVENT).map((event) => event.data)).toEqual([{ limit: 'tokens', max: 130, used: 140, scope: 'tree' }]);
  });
});

describe('cold resume of a continuable child', () => {
  it('restores its tool modules, maxTokens and maxStepsPerTurn', async () => {
    const host = await open(files.file(), 0);
    const parent = await host.createAgent();
    const shout: ScriptedStep[] = [{ toolCalls: [{ name: 'shout', input: { value: 'hey' } }] }, { text: 'ok' }];
    const { childId } = await host.subagents.startContinuable({
      provider: 'in-process',
      label: 'shouter',
      request: {
        prompt: [text('first')],
        parent,
        agentOptions: { model: { kind: 'scripted', steps: shout }, toolModules: [new URL('./fixtures/tool-module.mjs', import.meta.url).href], maxTokens: 777, maxStepsPerTurn: 5 },
      },
    });
    await host.recorder.until(() => host.recorder.ends.length === 1);
    await eventually(() => host.sessions.get(childId) === undefined);
    const options: unknown[] = [];
    host.subagents.registerContinuableSetup((child) => {
      options.push(child.options);
      return () => undefined;
    });
    await host.subagents.followup(parent, childId, [text('second')]);
    expect(options).toEqual([expect.objectContaining({ maxTokens: 777, maxStepsPerTurn: 5, toolModules: [expect.stringContaining('tool-module.mjs')] })]);
    await host.recorder.until(() => host.recorder.ends.length === 2);
    // The resumed model replays its steps: the module's tool answers in the second turn too.
    const results = (await host.persistence!.load(childId))!.events.filter((event) => event.type === 'tool/result').map((event) => event.data);
    expect(results).toEqual([expect.objectContaining({ content: [text('HEY')] }), expect.objectContaining({ content: [text('HEY')] })]);
    expect(host.recorder.ends.map((end) => end.stopReason)).toEqual(['completed', 'completed']);
  });
});

describe.each(['spawn', 'fork'])('a tree budget on a continuable %s child whose tools answer in its thread', (provider) => {
  // The tool is loaded in the child's thread: no step of its turn waits for the host, so only a
  // check in that thread stops the turn at the step where the tree is spent.
  const shoutModule = new URL('./fixtures/tool-module.mjs', import.meta.url).href;
  const shout: ScriptedStep = { toolCalls: [{ name: 'shout', input: { value: 'x' } }], usage: { inputTokens: 100, outputTokens: 0 } };
  // Every model instance replays these from the first (a stay built anew too): 200 tokens, then a long run.
  const steps: ScriptedStep[] = [shout, { text: 'done', usage: { inputTokens: 100, outputTokens: 0 } }, ...Array<ScriptedStep>(20).fill(shout), { text: 'never' }];

  async function child(lingerMs: number | undefined, tokens: number) {
    const host = await continuationHost(files.file(), { providers: true, ...(lingerMs === undefined ? {} : { continuation: { lingerMs } }) });
    hosts.push(host);
    const parent = await host.createAgent();
    const { childId } = await host.subagents.startContinuable({
      provider,
      label: 'burner',
      request: { prompt: [text('first')], parent, agentOptions: { model: { kind: 'scripted', steps }, toolModules: [shoutModule] }, budget: { tokens, scope: 'tree' } },
    });
    const ends = () => host.recorder.ends.filter((end) => end.id === childId);
    await host.recorder.until(() => ends().length === 1);
    expect(ends()[0]).toMatchObject({ stopReason: 'completed', usage: { totalTokens: 200 } });
    return { host, parent, childId, ends };
  }

  it('stops a follow-up turn at the step where the tree is spent, each step counted once', async () => {
    const { host, parent, childId, ends } = await child(undefined, 500);
    await host.subagents.followup(parent, childId, [text('more')]);
    await host.recorder.until(() => ends().length === 2);
    expect(ends()[1]).toMatchObject({ stopReason: 'max-tokens', usage: { totalTokens: 500 } });
    // The tree's own count (`used`) is the log's: each step the thread counted ahead is not counted again here.
    expect(budgetEvents(host, childId)).toEqual([{ limit: 'tokens', max: 500, used: 500, scope: 'tree' }]);
  });

  it('after an eviction and a cold resume, stops the turn in its new thread, its earlier spend counted once', async () => {
    const { host, parent, childId, ends } = await child(0, 300);
    await eventually(() => host.sessions.get(childId) === undefined);
    await host.subagents.followup(parent, childId, [text('again')]);
    await host.recorder.until(() => ends().length === 2);
    // 200 before the eviction, 100 after: the resumed turn's answer is never asked for.
    expect(ends()[1]).toMatchObject({ stopReason: 'max-tokens', usage: { totalTokens: 300 } });
    await eventually(() => host.sessions.get(childId) === undefined);
    const events = (await host.persistence!.load(childId))!.events;
    expect(events.filter((event) => event.type === BUDGET_EVENT).map((event) => event.data)).toEqual([{ limit: 'tokens', max: 300, used: 300, scope: 'tree' }]);
  });
});
