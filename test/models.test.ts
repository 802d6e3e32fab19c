// Model specs: validation, the scripted model and user adapters loaded by module specifier.
import { getEventListeners } from 'node:events';
import { describe, expect, it } from 'vitest';
import { createHost, scriptedModel, text, type ModelChunk, type ModelSpec } from 'subagent-host';
import { createModel } from 'subagent-host/internals';
import { holed, makeRuntime, tempFiles } from './helpers.js';

const files = tempFiles('models-');

const fixture = (name: string) => new URL(`./fixtures/${name}`, import.meta.url).href;

async function collect(stream: AsyncIterable<ModelChunk>): Promise<ModelChunk[]> {
  const out: ModelChunk[] = [];
  for await (const chunk of stream) out.push(chunk);
  return out;
}

const request = (words: string) => ({ messages: [{ role: 'user' as const, content: [text(words)] }], tools: [], signal: new AbortController().signal });

describe('createModel', () => {
  it.each<[string, unknown]>([
    ['an unknown kind', { kind: 'magic' }],
    ['a scripted step of no known shape', { kind: 'scripted', steps: [{ say: 'x' }] }],
    ['openai without a model', { kind: 'openai', baseURL: 'http://127.0.0.1:1' }],
    ['openai with a non-URL baseURL', { kind: 'openai', baseURL: 'localhost', model: 'm' }],
    // Headers fetch cannot send as given: a set content-length made every request hang.
    ['openai with a content-length header', { kind: 'openai', baseURL: 'http://127.0.0.1:1', model: 'm', headers: { 'Content-Length': '5' } }],
    ['openai with a transfer-encoding header', { kind: 'openai', baseURL: 'http://127.0.0.1:1', model: 'm', headers: { 'transfer-encoding': 'chunked' } }],
    ['module without a specifier', { kind: 'module' }],
    ['a hole in the scripted steps', { kind: 'scripted', steps: holed({ text: 'x' }) }],
    ['a tool call without input', { kind: 'scripted', steps: [{ toolCalls: [{ name: 't' }] }] }],
    // JSON drops it: the spec stored for a cold resume would lack the input, and be refused there.
    ['a tool call whose input is undefined', { kind: 'scripted', steps: [{ toolCalls: [{ name: 't', input: undefined }] }] }],
    ['a negative token count', { kind: 'scripted', steps: [{ text: 'x', usage: { inputTokens: -1, outputTokens: 0 } }] }],
    ['a scripted spec with an inherited key', Object.assign(Object.create({ extra: 1 }) as object, { kind: 'scripted' })],
    ['a module spec with an empty export', { kind: 'module', specifier: 'x', export: '' }],
    ['not an object', 'scripted'],
  ])('rejects %s with INVALID_MODEL_SPEC', async (_name, spec) => {
    await expect(createModel(spec as ModelSpec)).rejects.toMatchObject({ code: 'INVALID_MODEL_SPEC' });
  });

  it.each<[string, unknown]>([
    ['of an unknown field', { say: 'x' }],
    ['whose text is no string', { text: 5 }],
    ['with an unknown finish', { finish: 'stop' }],
  ])('names the step shapes when a scripted step is of none (one %s)', async (_name, step) => {
    await expect(createModel({ kind: 'scripted', steps: [step] } as ModelSpec)).rejects.toMatchObject({
      code: 'INVALID_MODEL_SPEC',
      message: expect.stringContaining('model spec.steps[0]: must be one of { text, usage? }, { toolCalls: [{ name, input }, …], text?, usage? } or { finish: max-tokens | refusal | error | hang, text?, usage? }'),
    });
  });

  it('loads a user adapter from a module export and passes its options', async () => {
    const model = await createModel({ kind: 'module', specifier: fixture('echo-model.mjs'), export: 'createEchoModel', options: { prefix: '> ' } });
    expect(await collect(model.stream(request('hey')))).toEqual([{ type: 'text-delta', text: '> hey' }, { type: 'finish', reason: 'stop' }]);
  });

  it.each([
    ['a missing module', { kind: 'module', specifier: fixture('missing.mjs') }],
    ['an export that is not a function', { kind: 'module', specifier: fixture('echo-model.mjs'), export: 'notAFactory' }],
    ['a factory that returns no adapter', { kind: 'module', specifier: fixture('echo-model.mjs'), export: 'createNothing' }],
    ['a factory that throws', { kind: 'module', specifier: fixture('echo-model.mjs'), export: 'createByThrowing' }],
  ] as const)('rejects %s with INVALID_MODEL_SPEC', async (_name, spec) => {
    await expect(createModel(spec)).rejects.toMatchObject({ code: 'INVALID_MODEL_SPEC' });
  });

  it.each(['number-id', 'bigint-input', 'unknown-finish', 'undefined-text', 'string-usage', 'unknown-type', 'not-an-object', 'empty-id', 'number-name', 'bad-failure', 'bad-status', 'nan-status'])(
    'ends a user adapter\'s stream at a chunk that breaks the contract (%s): error MODEL_CONTRACT, nothing of it passed on',
    async (breach) => {
      const model = await createModel({ kind: 'module', specifier: fixture('echo-model.mjs'), export: 'createContractBreakingModel', options: { breach } });
      const chunks = await collect(model.stream(request('hey')));
      expect(chunks).toMatchObject([
        { type: 'text-delta', text: 'good ' },
        { type: 'finish', reason: 'error', failure: { code: 'MODEL_CONTRACT', message: expect.stringContaining('yielded a chunk that is not a ModelChunk') } },
      ]);
      expect(chunks).toHaveLength(2);
    },
  );

  it('ends the step of a user adapter whose stream() returns no iterable with MODEL_CONTRACT, naming the module, its export and the fix', async () => {
    const specifier = fixture('echo-model.mjs');
    const model = await createModel({ kind: 'module', specifier, export: 'createPromiseStreamModel' });
    expect(await collect(model.stream(request('hey')))).toStrictEqual([
      {
        type: 'finish',
        reason: 'error',
        failure: { code: 'MODEL_CONTRACT', message: `model module ${specifier} (export 'createPromiseStreamModel'): stream() returned a promise, not an async iterable of ModelChunk; declare it \`async *stream(request)\`` },
      },
    ]);
  });

  it.each<[string, unknown, RegExp]>([
    ['a function in a scripted tool input', { kind: 'scripted', steps: [{ toolCalls: [{ name: 't', input: { run() {} } }] }] }, /toolCalls\[0\]\.input: must be plain JSON \(input\.run is a function/],
    ['a BigInt in a scripted tool input', { kind: 'scripted', steps: [{ toolCalls: [{ name: 't', input: { n: 1n } }] }] }, /input\.n is a bigint/],
    ['a Date in a scripted tool input', { kind: 'scripted', steps: [{ toolCalls: [{ name: 't', input: { d: new Date(0) } }] }] }, /input\.d is a class instance/],
    ['NaN in a module\'s options', { kind: 'module', specifier: 'x', options: { x: Number.NaN } }, /options: must be plain JSON \(options\.x is NaN/],
    ['a getter that throws in a module\'s options', { kind: 'module', specifier: 'x', options: { get x(): number { throw new Error('boom'); } } }, /options could not be read/],
  ])('rejects %s with INVALID_MODEL_SPEC naming it (specs go into logs and across threads)', async (_name, spec, message) => {
    await expect(createModel(spec as ModelSpec)).rejects.toMatchObject({ code: 'INVALID_MODEL_SPEC', message: expect.stringMatching(message) });
  });

  it.each([true, false])('passes a user adapter\'s chunks that keep the contract through (optional fields: %s), and drops extra fields', async (full) => {
    const model = await createModel({ kind: 'module', specifier: fixture('echo-model.mjs'), export: 'createFullContractModel', options: { full } });
    expect(await collect(model.stream(request('hey')))).toStrictEqual([
      { type: 'reasoning-delta', text: 'hm' },
      { type: 'tool-call', id: 'c1', name: 'clock', input: { at: [1, 'two', null] } },
      { type: 'usage', usage: full ? { inputTokens: 3, outputTokens: 2, cacheReadTokens: 1, reasoningTokens: 1 } : { inputTokens: 3, outputTokens: 2 } },
      { type: 'finish', reason: 'error', failure: full ? { code: 'RATE', message: 'slow down', status: 429 } : { code: 'RATE', message: 'slow down' } },
    ]);
  });

  it('ends the turn of an agent whose adapter breaks the contract with error MODEL_CONTRACT, and its stored log loads back', async () => {
    const file = files.file();
    const model: ModelSpec = { kind: 'module', specifier: fixture('echo-model.mjs'), export: 'createContractBreakingModel', options: { breach: 'number-id' } };
    const host = await createHost({ providers: false, persistence: { sqlite: file }, model });
    const agent = await host.createAgent({ sessionId: 'a' });
    agent.followup([text('go')]);
    await agent.whenIdle();
    await host.close();
    const again = await createHost({ providers: false, persistence: { sqlite: file } });
    try {
      const { agent: loaded } = await again.agents.resume({ sessionId: 'a' });
      const end = loaded.session.events.findLast((event) => event.type === 'turn/end');
      expect(end?.data).toMatchObject({ reason: { kind: 'error', error: { code: 'MODEL_CONTRACT' } } });
    } finally {
      await again.close();
    }
  });

  it('fails agent creation with INVALID_MODEL_SPEC before anything is published', async () => {
    const runtime = makeRuntime();
    await expect(runtime.agents.create({ agentOptions: { model: { kind: 'nope' } as never } })).rejects.toMatchObject({ code: 'INVALID_MODEL_SPEC' });
    expect(runtime.agents.list()).toEqual([]);
    expect(runtime.sessions.list()).toEqual([]);
  });
});

describe('scripted model', () => {
  it('streams text word by word, then echoes once the steps are used up', async () => {
    const model = scriptedModel([{ text: 'two words' }]);
    expect(await collect(model.stream(request('a')))).toEqual([
      { type: 'text-delta', text: 'two ' },
      { type: 'text-delta', text: 'words' },
      // One token per started 4 characters: 'a' in, 'two words' out.
      { type: 'usage', usage: { inputTokens: 1, outputTokens: 3 } },
      { type: 'finish', reason: 'stop' },
    ]);
    expect(await collect(model.stream(request('again')))).toEqual([
      { type: 'text-delta', text: 'echo: ' },
      { type: 'text-delta', text: 'again' },
      { type: 'usage', usage: { inputTokens: 2, outputTokens: 3 } },
      { type: 'finish', reason: 'stop' },
    ]);
    expect(model.requests).toHaveLength(2);
  });

  it('echoes the latest user text, past user messages without text, and nothing when there is none', async () => {
    const model = scriptedModel();
    const image = { type: 'image' as const, mimeType: 'image/png', data: 'iVBORw0KGgo=' };
    const messages = [
      { role: 'user' as const, content: [text('first')] },
      { role: 'assistant' as const, content: [text('ok')] },
      { role: 'user' as const, content: [image] },
    ];
    const echoed = async (history: typeof messages) => {
      const chunks = await collect(model.stream({ messages: history, tools: [], signal: new AbortController().signal }));
      return chunks.flatMap((chunk) => (chunk.type === 'text-delta' ? [chunk.text] : [])).join('');
    };
    expect(await echoed(messages)).toBe('echo: first');
    expect(await echoed(messages.slice(2))).toBe('echo: ');
  });

  it('reports the usage a step states, and none for a step told to fail', async () => {
    const model = scriptedModel([{ text: 'x', usage: { inputTokens: 100, outputTokens: 5 } }, { finish: 'error' }]);
    expect(await collect(model.stream(request('a')))).toContainEqual({ type: 'usage', usage: { inputTokens: 100, outputTokens: 5 } });
    expect(await collect(model.stream(request('a')))).toEqual([
      { type: 'finish', reason: 'error', failure: { code: 'SCRIPTED_ERROR', message: 'the scripted model was told to fail' } },
    ]);
  });

  it('numbers tool calls with a counter across requests', async () => {
    const model = scriptedModel([
      { toolCalls: [{ name: 't', input: { n: 1 } }, { name: 't', input: { n: 2 } }] },
      { toolCalls: [{ name: 't', input: {} }], text: 'calling' },
    ]);
    const ids = async () => (await collect(model.stream(request('x')))).flatMap((c) => (c.type === 'tool-call' ? [c.id] : []));
    expect(await ids()).toEqual(['call_1', 'call_2']);
    expect(await ids()).toEqual(['call_3']);
  });

  it('hangs until the request is aborted', async () => {
    const model = scriptedModel([{ finish: 'hang' }]);
    const controller = new AbortController();
    let finished = false;
    const done = collect(model.stream({ ...request('x'), signal: controller.signal })).finally(() => (finished = true));
    // The generator is running and waiting on the signal (its listener is the handshake) ...
    await expect.poll(() => getEventListeners(controller.signal, 'abort').length, { timeout: 10_000 }).toBe(1);
    // ... and after every pending callback has run, it has still produced nothing.
    await new Promise((resolve) => setImmediate(resolve));
    expect(finished).toBe(false);
    controller.abort();
    expect(await done).toEqual([{ type: 'finish', reason: 'aborted' }]);
  });

  it('builds a model per agent from the spec, so each agent consumes its own steps', async () => {
    const runtime = makeRuntime({ model: { kind: 'scripted', steps: [{ text: 'first answer' }] } });
    const a = await runtime.agents.create();
    const b = await runtime.agents.create();
    a.agent.followup([text('x')]);
    b.agent.followup([text('y')]);
    await Promise.all([a.agent.whenIdle(), b.agent.whenIdle()]);
    const answers = [a, b].map((h) => h.agent.session.events.filter((e) => e.type === 'assistant/message').map((e) => (e.data as { content: unknown }).content));
    expect(answers).toEqual([[[text('first answer')]], [[text('first answer')]]]);
    await Promise.all([a.dispose(), b.dispose()]);
  });
});
