// The agent loop: inbox, turns, steps, tool calls, stop reasons and cancellation.
import { describe, expect, it } from 'vitest';
import { scriptedModel, text, type ModelAdapter, type ModelChunk, type ModelRequest, type ScriptedStep, type ToolContext, type TurnEndReason } from 'subagent-host';
import { dataOf, deferred, makeRuntime, recordingTool, types } from './helpers.js';

async function agentWith(steps: ScriptedStep[], options: { tools?: ReturnType<typeof recordingTool>[]; maxStepsPerTurn?: number } = {}) {
  const runtime = makeRuntime({ tools: options.tools ?? [] });
  const model = scriptedModel(steps);
  const handle = await runtime.agents.create({
    model,
    ...(options.maxStepsPerTurn ? { agentOptions: { maxStepsPerTurn: options.maxStepsPerTurn } } : {}),
  });
  return { runtime, model, handle, agent: handle.agent };
}

function reasons(events: Parameters<typeof dataOf>[0]): TurnEndReason['kind'][] {
  return dataOf<{ reason: TurnEndReason }>(events, 'turn/end').map((d) => d.reason.kind);
}

describe('agent turns', () => {
  it('becomes running synchronously on followup and logs one whole turn', async () => {
    const { agent, handle } = await agentWith([{ text: 'hello there friend' }]);
    expect(agent.status).toBe('idle');
    agent.followup([text('hi')]);
    expect(agent.status).toBe('running');
    await agent.whenIdle();
    expect(agent.status).toBe('idle');
    expect(types(agent.session.events)).toEqual([
      'inbox/accepted', 'turn/start', 'step/start', 'user/message',
      'assistant/chunk', 'assistant/chunk', 'assistant/chunk', 'assistant/message', 'step/end', 'turn/end',
    ]);
    expect(agent.session.events.map((e) => e.seq)).toEqual(agent.session.events.map((_, i) => i));
    const [message] = dataOf<{ content: unknown }>(agent.session.events, 'assistant/message');
    expect(message?.content).toEqual([text('hello there friend')]);
    await handle.dispose();
  });

  it('echoes the last user text once the script is used up', async () => {
    const { agent, handle } = await agentWith([]);
    agent.followup([text('ping')]);
    await agent.whenIdle();
    expect(dataOf<{ content: unknown }>(agent.session.events, 'assistant/message')[0]?.content).toEqual([text('echo: ping')]);
    await handle.dispose();
  });

  it('runs queued followups as later turns in FIFO order, with history', async () => {
    const { agent, handle, model } = await agentWith([{ text: 'one' }, { text: 'two' }]);
    agent.followup([text('first')]);
    agent.followup([text('second')]);
    await agent.whenIdle();
    expect(dataOf<{ turn: number }>(agent.session.events, 'turn/start').map((d) => d.turn)).toEqual([1, 2]);
    expect(model.requests[1]?.messages).toEqual([
      { role: 'user', content: [text('first')] },
      { role: 'assistant', content: [text('one')] },
      { role: 'user', content: [text('second')] },
    ]);
    await handle.dispose();
  });

  it('runs tool calls one by one and feeds the results back', async () => {
    const tool = recordingTool('lookup');
    const { agent, handle, model } = await agentWith(
      [{ toolCalls: [{ name: 'lookup', input: { value: 'a' } }, { name: 'lookup', input: { value: 'b' } }] }, { text: 'done' }],
      { tools: [tool] },
    );
    agent.followup([text('go')]);
    await agent.whenIdle();
    expect(tool.calls).toEqual([{ value: 'a' }, { value: 'b' }]);
    expect(types(agent.session.events).filter((t) => t.startsWith('tool/') || t.startsWith('step/'))).toEqual([
      'step/start', 'tool/call', 'tool/result', 'tool/call', 'tool/result', 'step/end', 'step/start', 'step/end',
    ]);
    expect(model.requests[0]?.tools.map((t) => t.name)).toEqual(['lookup']);
    expect(model.requests[1]?.messages.at(-1)).toEqual({
      role: 'user',
      content: [
        { type: 'tool_result', callId: 'call_1', content: [text('lookup ok')] },
        { type: 'tool_result', callId: 'call_2', content: [text('lookup ok')] },
      ],
    });
    expect(reasons(agent.session.events)).toEqual(['completed']);
    await handle.dispose();
  });

  it('gives a tool its own copy of the input: a tool may change it, the logged call stays as the model sent it', async () => {
    const sorter = {
      ...recordingTool('sorter'),
      parameters: { type: 'object', properties: { items: { type: 'array', items: { type: 'number' } }, order: { type: 'string' } }, required: ['items'] },
      execute: async (raw: unknown) => {
        const input = raw as { items: number[]; order?: string };
        input.order ??= 'asc';
        input.items.sort((a, b) => a - b);
        return JSON.stringify(input);
      },
    };
    const { agent, handle } = await agentWith([{ toolCalls: [{ name: 'sorter', input: { items: [3, 1, 2] } }] }, { text: 'ok' }], { tools: [sorter] });
    agent.followup([text('go')]);
    await agent.whenIdle();
    expect(dataOf<{ content: unknown; isError?: boolean }>(agent.session.events, 'tool/result')[0]).toStrictEqual({
      turn: 1, step: 1, callId: 'call_1', name: 'sorter', content: [text('{"items":[1,2,3],"order":"asc"}')],
    });
    expect(dataOf<{ input: unknown }>(agent.session.events, 'tool/call')[0]?.input).toStrictEqual({ items: [3, 1, 2] });
    await handle.dispose();
  });

  it('reports tool input that fails its schema to the model as an error result', async () => {
    const tool = recordingTool('lookup');
    const { agent, handle } = await agentWith([{ toolCalls: [{ name: 'lookup', input: { value: 7 } }] }, { text: 'ok' }], { tools: [tool] });
    agent.followup([text('go')]);
    await agent.whenIdle();
    expect(tool.calls).toEqual([]);
    expect(dataOf<{ isError: boolean; code: string }>(agent.session.events, 'tool/result')[0]).toMatchObject({ isError: true, code: 'INVALID_TOOL_INPUT' });
    await handle.dispose();
  });

  it('ends the turn MODEL_OUTPUT_TOO_DEEP for a tool call nested deeper than a log holds, from any adapter, logging no call', async () => {
    let deep: Record<string, unknown> = {};
    for (let level = 1; level < 7000; level++) deep = { child: deep };
    // A ready adapter of the engine is not checked chunk by chunk: the turn refuses the call itself.
    const model: ModelAdapter = {
      async *stream(): AsyncGenerator<ModelChunk> {
        yield { type: 'text-delta', text: 'calling' };
        yield { type: 'tool-call', id: 'call_A', name: 'nest', input: deep };
        yield { type: 'finish', reason: 'tool-calls' };
      },
    };
    const nest = { ...recordingTool('nest'), parameters: { type: 'object', properties: { child: { $ref: '#' } } } };
    const runtime = makeRuntime({ tools: [nest] });
    const { agent, dispose } = await runtime.agents.create({ model });
    agent.followup([text('go')]);
    await agent.whenIdle();
    expect(nest.calls).toEqual([]);
    expect(dataOf(agent.session.events, 'tool/call')).toEqual([]);
    expect(dataOf(agent.session.events, 'assistant/message')).toMatchObject([{ content: [{ type: 'text', text: 'calling' }] }]);
    expect(dataOf(agent.session.events, 'turn/end')).toEqual([{ turn: 1, reason: { kind: 'error', error: {
      code: 'MODEL_OUTPUT_TOO_DEEP', message: 'the model sent a call of tool nest whose input is nested 7000 levels deep, more than the 256 a session log holds; no tool of that answer ran',
    } } }]);
    await dispose();
  });

  it('ends the turn after a tool that concludes it; later calls of that answer are answered TURN_CONCLUDED, unrun', async () => {
    const finish = { ...recordingTool('finish'), execute: async (_input: unknown, ctx: ToolContext) => (ctx.concludeTurn?.(), 'finished') };
    const later = recordingTool('later');
    const { agent, handle, model } = await agentWith(
      [{ toolCalls: [{ name: 'finish', input: { value: 'a' } }, { name: 'later', input: { value: 'b' } }] }, { text: 'never asked' }],
      { tools: [finish, later] },
    );
    agent.followup([text('go')]);
    await agent.whenIdle();
    expect(later.calls).toStrictEqual([]);
    expect(dataOf<{ name: string; isError?: boolean; code?: string }>(agent.session.events, 'tool/result').map((r) => [r.name, r.isError ?? false, r.code])).toStrictEqual([
      ['finish', false, undefined],
      ['later', true, 'TURN_CONCLUDED'],
    ]);
    expect(model.requests).toHaveLength(1);
    expect(reasons(agent.session.events)).toStrictEqual(['completed']);
    await handle.dispose();
  });

  it('shows the model a tool’s thrown non-Error value as a TOOL_FAILED result', async () => {
    const odd = {
      ...recordingTool('odd'),
      execute: () => {
        throw 'disk full' as unknown as Error;
      },
    };
    const { agent, handle } = await agentWith([{ toolCalls: [{ name: 'odd', input: { value: 'a' } }] }, { text: 'ok' }], { tools: [odd] });
    agent.followup([text('go')]);
    await agent.whenIdle();
    expect(dataOf<{ content: unknown; code: string }>(agent.session.events, 'tool/result')[0]).toMatchObject({ code: 'TOOL_FAILED', content: [text('Error: disk full')] });
    await handle.dispose();
  });

  it('answers a call to an unknown tool with UNKNOWN_TOOL', async () => {
    const { agent, handle } = await agentWith([{ toolCalls: [{ name: 'nope', input: {} }] }, { text: 'ok' }]);
    agent.followup([text('go')]);
    await agent.whenIdle();
    expect(dataOf<{ code: string }>(agent.session.events, 'tool/result')[0]?.code).toBe('UNKNOWN_TOOL');
    await handle.dispose();
  });

  it.each([
    ['max-tokens', { finish: 'max-tokens' } as ScriptedStep, 'max-tokens'],
    ['refusal', { finish: 'refusal' } as ScriptedStep, 'refusal'],
    ['error', { finish: 'error' } as ScriptedStep, 'error'],
  ])('ends the turn %s when the model finishes so', async (_name, step, kind) => {
    const { agent, handle } = await agentWith([step]);
    agent.followup([text('go')]);
    await agent.whenIdle();
    expect(reasons(agent.session.events)).toEqual([kind]);
    await handle.dispose();
  });

  it.each([
    ['the stream throws', 'throw'],
    ['the model finishes error', 'error'],
    ['the model refuses', 'refusal'],
    ['the stream ends without a finish', 'none'],
  ] as const)('keeps the tool calls of a step that fails after streaming them out of history (%s): no call without its result', async (_name, ending) => {
    const tool = recordingTool('lookup');
    const requests: ModelRequest[] = [];
    const model: ModelAdapter = {
      async *stream(request): AsyncGenerator<ModelChunk> {
        requests.push(request);
        if (requests.length > 1) return yield* [{ type: 'text-delta', text: 'ok' }, { type: 'finish', reason: 'stop' }] as ModelChunk[];
        yield { type: 'text-delta', text: 'Let me look.' };
        yield { type: 'tool-call', id: 'call_A', name: 'lookup', input: { value: 'x' } };
        if (ending === 'throw') throw new Error('socket hang up');
        if (ending !== 'none') yield { type: 'finish', reason: ending };
      },
    };
    const runtime = makeRuntime({ tools: [tool] });
    const { agent, dispose } = await runtime.agents.create({ model });
    agent.followup([text('find x')]);
    await agent.whenIdle();
    agent.followup([text('try again')]);
    await agent.whenIdle();
    expect(reasons(agent.session.events)).toEqual([ending === 'refusal' ? 'refusal' : 'error', 'completed']);
    expect(tool.calls).toHaveLength(0);
    expect(dataOf<{ content: unknown }>(agent.session.events, 'assistant/message')[0]?.content).toEqual([text('Let me look.')]);
    const sent = requests[1]!.messages.flatMap((m) => m.content);
    expect(sent.filter((block) => block.type === 'tool_call')).toEqual([]);
    await dispose();
  });

  it('takes a model stream given as a plain iterable, as `for await` does', async () => {
    const runtime = makeRuntime();
    const chunks: ModelChunk[] = [{ type: 'text-delta', text: 'from an array' }, { type: 'finish', reason: 'stop' }];
    const model = { stream: () => chunks } as unknown as ModelAdapter;
    const { agent, dispose } = await runtime.agents.create({ model });
    agent.followup([text('go')]);
    await agent.whenIdle();
    expect(dataOf<{ content: unknown }>(agent.session.events, 'assistant/message')[0]?.content).toEqual([text('from an array')]);
    expect(reasons(agent.session.events)).toEqual(['completed']);
    await dispose();
  });

  it('ends a turn that needs more steps than maxStepsPerTurn with MAX_STEPS', async () => {
    const tool = recordingTool('lookup');
    const call = { toolCalls: [{ name: 'lookup', input: { value: 'x' } }] };
    const { agent, handle } = await agentWith([call, call, call], { tools: [tool], maxStepsPerTurn: 2 });
    agent.followup([text('go')]);
    await agent.whenIdle();
    const [end] = dataOf<{ reason: TurnEndReason }>(agent.session.events, 'turn/end');
    expect(end?.reason).toMatchObject({ kind: 'error', error: { code: 'MAX_STEPS' } });
    expect(tool.calls).toHaveLength(2);
    await handle.dispose();
  });
});

describe('agent steps at the limit', () => {
  it('ends a turn whose last allowed step answered as it answered; input steered meanwhile runs as the next turn', async () => {
    const runtime = makeRuntime();
    const gate = deferred();
    const requests: ModelRequest[] = [];
    const model: ModelAdapter = {
      async *stream(request) {
        requests.push(request);
        yield { type: 'text-delta', text: 'answer' };
        await gate.promise;
        yield { type: 'finish', reason: 'stop' };
      },
    };
    const handle = await runtime.agents.create({ model, agentOptions: { maxStepsPerTurn: 1 } });
    const { agent } = handle;
    const streaming = deferred();
    agent.subscribe((event) => {
      if (event.type === 'assistant/chunk') streaming.resolve();
    });
    agent.followup([text('go')]);
    await streaming.promise;
    agent.steer([text('also this')]);
    gate.resolve();
    await agent.whenIdle();
    expect(reasons(agent.session.events)).toEqual(['completed', 'completed']);
    expect(requests).toHaveLength(2);
    expect(requests[1]?.messages.at(-1)).toEqual({ role: 'user', content: [text('also this')] });
    await handle.dispose();
  });
});

describe('agent input and cancellation', () => {
  it('keeps streamed text as an interrupted message when a turn is aborted mid-stream', async () => {
    const { agent, handle } = await agentWith([{ finish: 'hang', text: 'partial answer' }]);
    agent.followup([text('go')]);
    const streamed = deferred();
    agent.subscribe((event) => {
      if (event.type === 'assistant/chunk') streamed.resolve();
    });
    await streamed.promise;
    agent.cancel();
    await agent.whenIdle();
    const [message] = dataOf<{ content: unknown; interrupted: boolean }>(agent.session.events, 'assistant/message');
    expect(message).toMatchObject({ content: [text('partial answer')], interrupted: true });
    expect(dataOf<{ reason: TurnEndReason }>(agent.session.events, 'turn/end')[0]?.reason).toEqual({ kind: 'aborted', cause: { kind: 'user' } });
    await handle.dispose();
  });

  it('discards queued input on cancel unless keepInbox is set', async () => {
    const { agent, handle } = await agentWith([{ finish: 'hang' }]);
    agent.followup([text('one')]);
    const queued = agent.followup([text('two')]);
    await Promise.resolve();
    agent.cancel({ kind: 'parent' });
    await agent.whenIdle();
    expect(dataOf<{ ids: string[] }>(agent.session.events, 'inbox/discarded')).toEqual([{ ids: [queued] }]);
    expect(reasons(agent.session.events)).toEqual(['aborted']);
    await handle.dispose();
  });

  it('parks queued input on cancel with keepInbox; the next waking input runs it first', async () => {
    const { agent, handle, model } = await agentWith([{ finish: 'hang' }, { text: 'a' }, { text: 'b' }]);
    agent.followup([text('one')]);
    agent.followup([text('two')]);
    const started = deferred();
    agent.subscribe((event) => {
      if (event.type === 'step/start') started.resolve();
    });
    await started.promise;
    agent.cancel({ kind: 'user' }, { keepInbox: true });
    await agent.whenIdle();
    expect(reasons(agent.session.events)).toEqual(['aborted']);
    expect(agent.status).toBe('idle');
    agent.followup([text('three')]);
    await agent.whenIdle();
    expect(reasons(agent.session.events)).toEqual(['aborted', 'completed', 'completed']);
    expect(model.requests.map((r) => r.messages.filter((m) => m.role === 'user').at(-1)?.content)).toEqual([
      [text('one')], [text('two')], [text('three')],
    ]);
    await handle.dispose();
  });

  it('runs a followup sent right after cancel once the aborted turn has ended', async () => {
    const { agent, handle } = await agentWith([{ finish: 'hang' }, { text: 'after' }]);
    agent.followup([text('one')]);
    await Promise.resolve();
    agent.cancel();
    agent.followup([text('two')]);
    await agent.whenIdle();
    expect(reasons(agent.session.events)).toEqual(['aborted', 'completed']);
    await handle.dispose();
  });

  it('takes steered input into the next step of the running turn', async () => {
    const gate = deferred();
    const tool = recordingTool('lookup', { gate: gate.promise });
    const { agent, handle, model } = await agentWith([{ toolCalls: [{ name: 'lookup', input: { value: 'x' } }] }, { text: 'ok' }], { tools: [tool] });
    agent.followup([text('go')]);
    await expect.poll(() => tool.calls.length, { timeout: 15_000 }).toBe(1);
    agent.steer([text('also this')]);
    gate.resolve();
    await agent.whenIdle();
    expect(dataOf(agent.session.events, 'turn/start')).toHaveLength(1);
    expect(model.requests[1]?.messages.at(-1)).toEqual({ role: 'user', content: [text('also this')] });
    await handle.dispose();
  });

  it('keeps a follow-up sent while a tool runs for the next turn, not the running turn’s next step', async () => {
    const gate = deferred();
    const tool = recordingTool('lookup', { gate: gate.promise });
    const { agent, handle, model } = await agentWith([{ toolCalls: [{ name: 'lookup', input: { value: 'x' } }] }, { text: 'ok' }, { text: 'next' }], { tools: [tool] });
    agent.followup([text('go')]);
    await expect.poll(() => tool.calls.length, { timeout: 15_000 }).toBe(1);
    agent.followup([text('later')]);
    gate.resolve();
    await agent.whenIdle();
    expect(dataOf(agent.session.events, 'turn/start')).toHaveLength(2);
    expect(model.requests[1]?.messages.at(-1)?.content).toEqual([expect.objectContaining({ type: 'tool_result' })]);
    expect(model.requests[2]?.messages.at(-1)).toEqual({ role: 'user', content: [text('later')] });
    await handle.dispose();
  });

  it('does not wake an idle agent on inject; the injected input joins the next turn', async () => {
    const { agent, handle, model } = await agentWith([{ text: 'ok' }]);
    agent.inject([text('context')]);
    expect(agent.status).toBe('idle');
    agent.followup([text('go')]);
    await agent.whenIdle();
    expect(model.requests[0]?.messages).toEqual([
      { role: 'user', content: [text('go')] },
      { role: 'user', content: [text('context')] },
    ]);
    await handle.dispose();
  });

  it('has a message queued when its inbox/accepted is delivered: a cancel there discards it, input sent there runs after it', async () => {
    const { agent, handle } = await agentWith([]);
    const stop = agent.subscribe((event) => {
      if (event.type !== 'inbox/accepted') return;
      const said = (event.data as { content: { text: string }[] }).content[0]?.text;
      if (said === '/stop') agent.cancel();
      if (said === 'x') agent.followup([text('y')]);
    });
    const context = agent.inject([text('context')]);
    const stopped = agent.followup([text('/stop')]);
    await agent.whenIdle();
    expect(dataOf<{ ids: string[] }>(agent.session.events, 'inbox/discarded').map((d) => [...d.ids].sort())).toEqual([[context, stopped].sort()]);
    expect(types(agent.session.events)).not.toContain('turn/start');
    expect(agent.pendingInput).toBe(0);
    agent.followup([text('x')]);
    await agent.whenIdle();
    stop();
    const taken = dataOf<{ content: { text: string }[] }>(agent.session.events, 'user/message').map((m) => m.content[0]?.text);
    const accepted = dataOf<{ content: { text: string }[] }>(agent.session.events, 'inbox/accepted').map((m) => m.content[0]?.text);
    expect(accepted.slice(-2)).toEqual(['x', 'y']);
    expect(taken).toEqual(['x', 'y']);
    await handle.dispose();
  });

  it('rejects empty or malformed content with INVALID_REQUEST', async () => {
    const { agent, handle } = await agentWith([]);
    expect(() => agent.followup([])).toThrow(expect.objectContaining({ code: 'INVALID_REQUEST' }));
    expect(() => agent.followup([null as never])).toThrow(expect.objectContaining({ code: 'INVALID_REQUEST' }));
    await handle.dispose();
  });

  it('does not hand a listener subscribed during a delivery the event being delivered: read-then-subscribe sees each event once', async () => {
    const { agent, handle } = await agentWith([{ text: 'hi' }]);
    const seqs: number[] = [];
    const offFirst = agent.subscribe((event) => {
      if (event.type !== 'turn/start') return;
      offFirst();
      seqs.push(...agent.session.events.map((e) => e.seq));
      agent.subscribe((later) => void seqs.push(later.seq));
    });
    agent.followup([text('go')]);
    await agent.whenIdle();
    expect(seqs).toEqual(agent.session.events.map((e) => e.seq));
    await handle.dispose();
  });

  it('reports a throwing subscriber to the logger; the turn and the other subscribers go on', async () => {
    const { agent, handle, runtime } = await agentWith([{ text: 'fine' }]);
    const seen: string[] = [];
    agent.subscribe(() => {
      throw new Error('subscriber broke');
    });
    agent.subscribe((event) => void seen.push(event.type));
    agent.followup([text('hi')]);
    await agent.whenIdle();
    expect(reasons(agent.session.events)).toStrictEqual(['completed']);
    expect(seen).toStrictEqual(types(agent.session.events));
    expect(runtime.warnings).toContain(`session ${agent.id} listener failed`);
    await handle.dispose();
  });

  it('refuses a seed whose seqs do not count up from 0 with SEQ_MISMATCH and creates no agent', async () => {
    const runtime = makeRuntime();
    const event = (seq: number) => ({ seq, time: 0, type: 'user/message', data: { id: `m${seq}`, content: [text('x')] } });
    await expect(runtime.agents.create({ seed: [event(0), event(2)] })).rejects.toMatchObject({ code: 'SEQ_MISMATCH', message: expect.stringContaining('event 1 has seq 2') });
    expect(runtime.agents.list()).toStrictEqual([]);
  });

  it('gives a running tool the turn signal and aborts it on cancel', async () => {
    const aborted = deferred<string>();
    const { runtime, model } = { runtime: makeRuntime(), model: scriptedModel([{ toolCalls: [{ name: 'wait', input: {} }] }]) };
    runtime.tools.register({
      name: 'wait',
      description: 'waits for abort',
      parameters: { type: 'object' },
      execute: (_input, ctx) =>
        new Promise((_resolve, reject) => {
          ctx.signal.addEventListener('abort', () => {
            aborted.resolve(ctx.callId);
            reject(new Error('stopped'));
          });
        }),
    });
    const { agent, dispose } = await runtime.agents.create({ model });
    agent.followup([text('go')]);
    await expect.poll(() => dataOf(agent.session.events, 'tool/call').length, { timeout: 15_000 }).toBe(1);
    agent.cancel();
    expect(await aborted.promise).toBe('call_1');
    await agent.whenIdle();
    expect(dataOf<{ code: string }>(agent.session.events, 'tool/result')[0]?.code).toBe('ABORTED');
    await dispose();
  });
});

describe('parallel tool calls', () => {
  it('runs consecutive concurrency-safe calls together and commits results in model order', async () => {
    const started: string[] = [];
    const gates = new Map([['a', deferred()], ['b', deferred()]]);
    const runtime = makeRuntime();
    runtime.tools.register({
      name: 'wait',
      description: 'waits for its gate',
      parameters: { type: 'object', properties: { id: { type: 'string' } }, required: ['id'] },
      concurrencySafe: true,
      async execute(input) {
        const { id } = input as { id: string };
        started.push(id);
        await gates.get(id)!.promise;
        return `done ${id}`;
      },
    });
    const model = scriptedModel([{ toolCalls: [{ name: 'wait', input: { id: 'a' } }, { name: 'wait', input: { id: 'b' } }] }, { text: 'ok' }]);
    const { agent, dispose } = await runtime.agents.create({ model });
    agent.followup([text('go')]);
    await expect.poll(() => started, { timeout: 15_000 }).toEqual(['a', 'b']);
    gates.get('b')!.resolve();
    gates.get('a')!.resolve();
    await agent.whenIdle();
    expect(dataOf<{ callId: string }>(agent.session.events, 'tool/result').map((d) => d.callId)).toEqual(['call_1', 'call_2']);
    await dispose();
  });
});
