// Budgets: each limit stops a child at the step boundary where it is reached, with its stop reason
// and a diagnostic naming the figures, in this thread and in a worker thread; bad limits are refused
// before any child exists.
import { describe, expect, it } from 'vitest';
import {
  BUDGET_EVENT,
  DESCRIPTOR_EVENT,
  createHost,
  inProcessProvider,
  subagentTool,
  text,
  textOf,
  type Host,
  type ScriptedStep,
  type SubagentBudget,
  type SubagentStartRequest,
  type Tool,
} from 'subagent-host';
import { NO_START_CAPABILITIES } from 'subagent-host/internals';
import { closeAfterEach, deferred, recordingTool } from './helpers.js';

const track = closeAfterEach();

async function open(tools: Tool[] = [recordingTool('lookup')]): Promise<Host> {
  const host = track(await createHost({ pool: { minThreads: 0, maxThreads: 2 }, tools }));
  host.subagents.registerProvider(inProcessProvider(host));
  return host;
}

const lookup = (tokens: number): ScriptedStep => ({ toolCalls: [{ name: 'lookup', input: { value: 'x' } }], usage: { inputTokens: tokens, outputTokens: 0 } });

function request(parent: SubagentStartRequest['parent'], steps: ScriptedStep[], budget?: unknown): SubagentStartRequest {
  return {
    prompt: [text('work')],
    parent,
    signal: new AbortController().signal,
    agentOptions: { model: { kind: 'scripted', steps } },
    ...(budget === undefined ? {} : { budget: budget as SubagentBudget }),
  };
}

describe.each(['in-process', 'spawn'])('a child budget on %s', (provider) => {
  it('stops at the step boundary where tokens are reached, stop reason max-tokens', async () => {
    const host = await open();
    const parent = await host.createAgent();
    const run = await host.subagents.start(provider, request(parent, [lookup(100), lookup(100), lookup(100), lookup(100), { text: 'never' }], { tokens: 250 }));
    const result = await run.result;
    // Boundaries see 0, 100, 200, then 300 ≥ 250: the fourth request is never made.
    expect(result).toMatchObject({ stopReason: 'max-tokens', diagnostic: 'budget: tokens limit 250 reached (300 used, child budget)' });
    expect(result.usage).toMatchObject({ totalTokens: 300, requests: 3, toolCalls: 3 });
    // The budget is part of the durable descriptor; the reached limit is in the log.
    const events = host.sessions.get(run.id)!.events;
    expect(events.find((event) => event.type === DESCRIPTOR_EVENT)?.data).toMatchObject({ budget: { tokens: 250 } });
    expect(events.find((event) => event.type === BUDGET_EVENT)?.data).toEqual({ limit: 'tokens', max: 250, used: 300, scope: 'child' });
    await run.dispose();
  });

  it('stops once the tool calls are made, stop reason aborted', async () => {
    const host = await open();
    const parent = await host.createAgent();
    const run = await host.subagents.start(provider, request(parent, [lookup(1), lookup(1), lookup(1), { text: 'never' }], { toolCalls: 2 }));
    const result = await run.result;
    expect(result).toMatchObject({ stopReason: 'aborted', diagnostic: 'budget: toolCalls limit 2 reached (2 used, child budget)' });
    expect(result.usage).toMatchObject({ requests: 2, toolCalls: 2 });
    await run.dispose();
  });

  it('stops when a turn beyond the limit starts, stop reason aborted', async () => {
    const gate = deferred();
    const host = await open([recordingTool('lookup', { gate: gate.promise })]);
    const parent = await host.createAgent();
    const run = await host.subagents.start(provider, request(parent, [lookup(1), { text: 'first turn done' }, { text: 'never' }], { turns: 1 }));
    // Queued while the first turn waits on its tool: it would open a second turn.
    run.localAgent!.followup([text('and another thing')]);
    gate.resolve();
    const result = await run.result;
    expect(result).toMatchObject({ stopReason: 'aborted', diagnostic: 'budget: turns limit 1 reached (2 used, child budget)' });
    expect(result.usage).toMatchObject({ turns: 2, requests: 2 });
    await run.dispose();
  });

  it('stops at the first boundary after its wall time from start, stop reason aborted', async () => {
    const host = await open([
      {
        name: 'lookup',
        description: 'waits past the wall-time budget',
        parameters: { type: 'object' },
        execute: () => new Promise((resolve) => setTimeout(() => resolve('ok'), 30)),
      },
    ]);
    const parent = await host.createAgent();
    const run = await host.subagents.start(provider, request(parent, [lookup(1), { text: 'never' }], { wallMs: 5 }));
    const result = await run.result;
    expect(result.stopReason).toBe('aborted');
    expect(result.diagnostic).toMatch(/^budget: wallMs limit 5 reached \(\d+ used, child budget\)$/);
    // A thread that took longer than 5 ms to start stops even before its first request.
    expect(result.usage!.requests).toBeLessThanOrEqual(1);
    expect(textOf(result.output)).not.toContain('never');
    await run.dispose();
  });
});

describe('budget validation', () => {
  it.each([
    ['a negative limit', { tokens: -1 }],
    ['a fractional limit', { turns: 1.5 }],
    ['an infinite limit', { wallMs: Number.POSITIVE_INFINITY }],
    ['NaN', { toolCalls: Number.NaN }],
    ['an unknown limit', { dollars: 5 }],
    ['an unknown scope', { tokens: 5, scope: 'world' }],
    ['a non-object', 42],
  ])('refuses %s with INVALID_REQUEST before any child exists', async (_what, budget) => {
    const host = await open();
    const parent = await host.createAgent();
    const before = host.sessions.list().length;
    let starts = 0;
    host.subagents.on('subagent/start', () => void starts++);
    for (const provider of ['in-process', 'spawn']) {
      await expect(host.subagents.start(provider, request(parent, [], budget))).rejects.toMatchObject({ code: 'INVALID_REQUEST', message: expect.stringContaining('request.budget') });
    }
    expect(host.sessions.list()).toHaveLength(before);
    expect(starts).toBe(0);
  });

  it('says why a whole number past Number.MAX_SAFE_INTEGER is refused (it is whole, but no count reaches it exactly)', async () => {
    const host = await open();
    const parent = await host.createAgent();
    await expect(host.subagents.start('in-process', request(parent, [], { tokens: Number.MAX_VALUE }))).rejects.toMatchObject({
      code: 'INVALID_REQUEST',
      message: expect.stringMatching(/^request\.budget\.tokens: .*no larger than Number\.MAX_SAFE_INTEGER/),
    });
  });

  it('takes a limit of -0 as 0 (a negative zero does not survive the descriptor’s JSON round trip)', async () => {
    const host = await open();
    const parent = await host.createAgent();
    const run = await host.subagents.start('in-process', request(parent, [{ text: 'never said' }], { tokens: -0 }));
    const result = await run.result;
    expect(result.stopReason).toBe('max-tokens');
    expect(result.diagnostic).toContain('tokens limit 0');
    await run.dispose();
  });

  it('refuses a budget for a provider that cannot enforce one with UNSUPPORTED_CAPABILITY', async () => {
    const host = await open();
    const parent = await host.createAgent();
    let started = 0;
    host.subagents.registerProvider({
      name: 'bare',
      capabilities: NO_START_CAPABILITIES,
      inheritsParentContext: false,
      start: () => {
        started++;
        return Promise.reject(new Error('never reached'));
      },
    });
    await expect(host.subagents.start('bare', request(parent, [], { tokens: 10 }))).rejects.toMatchObject({ code: 'UNSUPPORTED_CAPABILITY' });
    expect(started).toBe(0);
  });

  it('refuses a bad budget in the subagent tool config with INVALID_OPTIONS', async () => {
    const host = await open();
    expect(() => subagentTool(host, { provider: 'in-process', budget: { tokens: -5 } })).toThrow(expect.objectContaining({ code: 'INVALID_OPTIONS' }));
  });
});
