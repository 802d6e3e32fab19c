// A cancelled turn of an agent on the host's thread stops waiting, after `abandonGraceMs`, for a
// model adapter or tool that ignores its signal: the turn ends `aborted`, the agent goes on, and
// disposal and `host.close()` end instead of waiting for ever.
import { describe, expect, it } from 'vitest';
import { createHost, inProcessProvider, scriptedModel, text, type Agent, type ModelAdapter, type ModelChunk, type Tool, type TurnEndReason } from 'subagent-host';
import { dataOf, deferred } from './helpers.js';

/** Streams "partial", then waits on `gate` whatever its signal says (first call only); later calls answer "fine". */
function deafModel() {
  const gate = deferred<void>();
  const closed = deferred<void>();
  let calls = 0;
  const adapter: ModelAdapter = {
    async *stream(): AsyncGenerator<ModelChunk> {
      calls++;
      if (calls > 1) {
        yield { type: 'text-delta', text: 'fine' };
        yield { type: 'finish', reason: 'stop' };
        return;
      }
      try {
        yield { type: 'text-delta', text: 'partial' };
        await gate.promise;
        yield { type: 'text-delta', text: ' and late' };
        yield { type: 'finish', reason: 'stop' };
      } finally {
        closed.resolve();
      }
    },
  };
  return { adapter, gate, closed };
}

/** A tool that waits on its gate and never looks at its signal. */
function deafTool(name: string, concurrencySafe = false) {
  const gate = deferred<void>();
  const started = deferred<void>();
  const tool: Tool = {
    name,
    description: 'ignores cancellation',
    parameters: { type: 'object' },
    concurrencySafe,
    execute: async () => {
      started.resolve();
      await gate.promise;
      return { content: [text(`${name} finished late`)] };
    },
  };
  return { tool, gate, started };
}

/** Sends `agent` a message and resolves once its model has streamed the first chunk of the answer. */
async function streaming(agent: Agent): Promise<void> {
  const streamed = deferred<void>();
  const off = agent.subscribe((event) => {
    if (event.type === 'assistant/chunk') streamed.resolve();
  });
  agent.followup([text('go')]);
  await streamed.promise;
  off();
}

const reasonsOf = (events: Parameters<typeof dataOf>[0]) => dataOf<{ reason: TurnEndReason }>(events, 'turn/end').map((d) => d.reason);

describe('a cancelled turn and what ignores its signal', () => {
  it('ends the turn aborted once a model stream ignored the cancel for the grace; the agent takes its next turn', async () => {
    const host = await createHost({ providers: false, abandonGraceMs: 50 });
    const { adapter, gate, closed } = deafModel();
    const agent = await host.createAgent({ model: adapter });
    await streaming(agent);
    agent.cancel();
    await agent.whenIdle();
    expect(reasonsOf(agent.session.events)).toEqual([{ kind: 'aborted', cause: { kind: 'user' } }]);
    expect(dataOf<{ content: unknown; interrupted: boolean }>(agent.session.events, 'assistant/message')).toEqual([
      expect.objectContaining({ content: [text('partial')], interrupted: true }),
    ]);
    // The stream, let go at last, is closed and nothing it yields reaches the log.
    const logged = agent.session.events.length;
    gate.resolve();
    await closed.promise;
    expect(agent.session.events.length).toBe(logged);
    agent.followup([text('again')]);
    await agent.whenIdle();
    expect(reasonsOf(agent.session.events).map((r) => r.kind)).toEqual(['aborted', 'completed']);
    await host.close();
  });

  it('answers a tool call that ignores the cancel ABANDONED and ends the turn; the late result is dropped', async () => {
    const deaf = deafTool('deaf');
    const host = await createHost({ providers: false, abandonGraceMs: 50, tools: [deaf.tool] });
    const agent = await host.createAgent({ model: scriptedModel([{ toolCalls: [{ name: 'deaf', input: {} }] }]) });
    agent.followup([text('go')]);
    await deaf.started.promise;
    agent.cancel();
    await agent.whenIdle();
    const results = dataOf<{ code?: string; isError?: boolean; content: { text: string }[] }>(agent.session.events, 'tool/result');
    expect(results).toHaveLength(1);
    expect(results[0]).toMatchObject({ code: 'ABANDONED', isError: true });
    expect(results[0]?.content[0]?.text).toMatch(/did not stop within 50 ms of the cancel/);
    expect(reasonsOf(agent.session.events)).toEqual([{ kind: 'aborted', cause: { kind: 'user' } }]);
    const logged = agent.session.events.length;
    deaf.gate.resolve();
    await new Promise((resolve) => setImmediate(resolve));
    expect(agent.session.events.length).toBe(logged);
    await host.close();
  });

  it('abandons every deaf call of a parallel batch at once, keeping model order', async () => {
    const one = deafTool('one', true);
    const two = deafTool('two', true);
    const host = await createHost({ providers: false, abandonGraceMs: 50, tools: [one.tool, two.tool] });
    const agent = await host.createAgent({ model: scriptedModel([{ toolCalls: [{ name: 'one', input: {} }, { name: 'two', input: {} }] }]) });
    agent.followup([text('go')]);
    await Promise.all([one.started.promise, two.started.promise]);
    agent.cancel();
    await agent.whenIdle();
    expect(dataOf<{ name: string; code?: string }>(agent.session.events, 'tool/result').map((r) => [r.name, r.code])).toEqual([
      ['one', 'ABANDONED'],
      ['two', 'ABANDONED'],
    ]);
    one.gate.resolve();
    two.gate.resolve();
    await host.close();
  });

  it('lets host.close() end while a top-level agent waits on a deaf model (close cancels, then abandons)', async () => {
    const host = await createHost({ providers: false, abandonGraceMs: 50 });
    const { adapter, gate } = deafModel();
    const agent = await host.createAgent({ model: adapter });
    await streaming(agent);
    await host.close();
    expect(reasonsOf(agent.session.events).map((r) => r.kind)).toEqual(['aborted']);
    gate.resolve();
  });

  it('settles an in-process child whose tool ignores the cancel aborted, and its run disposes', async () => {
    const deaf = deafTool('deaf');
    const host = await createHost({ providers: false, abandonGraceMs: 50, tools: [deaf.tool] });
    host.subagents.registerProvider(inProcessProvider(host));
    const parent = await host.createAgent({});
    const controller = new AbortController();
    const run = await host.subagents.start('in-process', {
      prompt: [text('go')],
      parent,
      signal: controller.signal,
      agentOptions: { model: { kind: 'scripted', steps: [{ toolCalls: [{ name: 'deaf', input: {} }] }] } },
    });
    await deaf.started.promise;
    controller.abort();
    expect((await run.result).stopReason).toBe('aborted');
    await run.dispose();
    deaf.gate.resolve();
    await host.close();
  });

  it('waits for a tool that honours the cancel late but within the grace, and keeps its own answer', async () => {
    const host = await createHost({ providers: false, abandonGraceMs: 60_000 });
    const running = deferred<void>();
    const tool: Tool = {
      name: 'slow_stop',
      description: 'stops a while after its signal',
      parameters: { type: 'object' },
      execute: (_input, ctx) =>
        new Promise((_resolve, reject) => {
          ctx.signal.addEventListener('abort', () => setTimeout(() => reject(new Error('stopped after cleaning up')), 30));
          running.resolve();
        }),
    };
    host.tools.register(tool);
    const agent = await host.createAgent({ model: scriptedModel([{ toolCalls: [{ name: 'slow_stop', input: {} }] }]) });
    agent.followup([text('go')]);
    // Cancelled once the call runs (a cancel before it would end the call ABORTED_BEFORE_DISPATCH).
    await running.promise;
    agent.cancel();
    await agent.whenIdle();
    expect(dataOf<{ code?: string; content: { text: string }[] }>(agent.session.events, 'tool/result')[0]).toMatchObject({
      code: 'ABORTED',
      content: [{ text: 'Error: stopped after cleaning up' }],
    });
    await host.close();
  });

  it('refuses an abandonGraceMs that is not a usable number of milliseconds, typed', async () => {
    for (const abandonGraceMs of [-1, Number.NaN, 2 ** 31, '50']) {
      await expect(createHost({ providers: false, abandonGraceMs: abandonGraceMs as number })).rejects.toMatchObject({
        code: 'INVALID_OPTIONS',
        message: expect.stringMatching(/options\.abandonGraceMs must be a number of milliseconds/),
      });
    }
    const host = await createHost({ providers: false });
    await expect(host.createAgent({ abandon: 'no' as unknown as boolean })).rejects.toMatchObject({ code: 'INVALID_OPTIONS', message: expect.stringMatching(/options\.abandon must be true or false/) });
    await host.close();
  });
});
