// SubagentService.start before publication: validation order, the request snapshot the provider
// receives, cancellation before start, and rejected or malformed starts (seam-spec S1–S5).
import { getEventListeners } from 'node:events';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { SUBAGENT_DESCRIPTOR_VERSION, SubagentError, text, type SubagentRun, type SubagentStartRequest } from 'subagent-host';
import { deferred, holed, runNodeScript } from './helpers.js';
import { NO_CAPABILITIES, fakeProvider, fakeRun, testHost, type TestHost } from './fake-provider.js';

let t: TestHost;
let events: string[];
let offs: (() => void)[];

beforeEach(async () => {
  t = await testHost();
  events = [];
  offs = [
    t.host.subagents.on('subagent/start', () => void events.push('start')),
    t.host.subagents.on('subagent/end', () => void events.push('end')),
  ];
});

afterEach(async () => {
  offs.forEach((off) => off());
  await t.host.close();
});

const schema = { type: 'object', properties: { n: { type: 'number' } }, required: ['n'] };

describe('start validation', () => {
  it('S1: rejects NO_PROVIDER for an unknown name', async () => {
    await expect(t.host.subagents.start('missing', t.request())).rejects.toMatchObject({ code: 'NO_PROVIDER' });
    // A name that is no string (not even convertible to one) is no provider's either.
    await expect(t.host.subagents.start(Object.create(null) as string, t.request())).rejects.toMatchObject({ code: 'NO_PROVIDER', message: expect.stringContaining('not a name') });
  });

  it.each([
    ['outputSchema', { outputSchema: schema }],
    ['maxDepth', { maxDepth: 2 }],
    ['maxDepth -1 (capability precedes value)', { maxDepth: -1 }],
    ['toolFilter', { toolFilter: { deny: ['x'] } }],
    ['persona', { persona: 'p' }],
  ] as [string, Partial<SubagentStartRequest>][])('S2: rejects %s on a provider without the capability, never calling it', async (_label, extra) => {
    const provider = fakeProvider('bare', { capabilities: NO_CAPABILITIES });
    t.host.subagents.registerProvider(provider);
    await expect(t.host.subagents.start('bare', t.request(extra))).rejects.toMatchObject({ code: 'UNSUPPORTED_CAPABILITY' });
    expect(provider.requests).toEqual([]);
  });

  it.each([
    ['maxDepth -1', { maxDepth: -1 }],
    ['maxDepth NaN', { maxDepth: NaN }],
    ['maxDepth 1.5', { maxDepth: 1.5 }],
    ['maxDepth -0', { maxDepth: -0 }],
    ['maxDepth 2^53', { maxDepth: 2 ** 53 }],
    ['a string-rooted outputSchema', { outputSchema: { type: 'string' } }],
    ['a oneOf-rooted outputSchema', { outputSchema: { type: 'object', oneOf: [] } }],
    ['an outputSchema with a function default', { outputSchema: { type: 'object', default: () => 1 } }],
    ['an outputSchema whose required is no array', { outputSchema: { type: 'object', required: 'n' } }],
    // Validating against it would recurse until the stack overflows.
    ['an outputSchema with a $ref cycle reaching no property', { outputSchema: { type: 'object', properties: { a: { $ref: '#/$defs/A' } }, $defs: { A: { anyOf: [{ $ref: '#/$defs/A' }] } } } }],
    ['an outputSchema pattern that is no regular expression with Unicode semantics', { outputSchema: { type: 'object', properties: { s: { type: 'string', pattern: '\\a' } } } }],
    // A value no structured output could match, a property the validator would not check, a $ref to nothing.
    ['an outputSchema const that is an object', { outputSchema: { type: 'object', properties: { a: { const: { x: 1 } } } } }],
    ['an outputSchema enum holding an array', { outputSchema: { type: 'object', properties: { a: { enum: ['x', [1]] } } } }],
    ['an outputSchema property named __proto__', { outputSchema: JSON.parse('{"type":"object","properties":{"__proto__":{"type":"string"}}}') as Record<string, unknown> }],
    ['an outputSchema $ref to a definition named like an Object method', { outputSchema: { type: 'object', properties: { a: { $ref: '#/$defs/constructor' } } } }],
    ['an empty prompt', { prompt: [] }],
    ['a missing signal', { signal: undefined }],
    ['an empty toolFilter', { toolFilter: {} }],
    ['a hole in the prompt', { prompt: holed(text('x')) }],
    ['agentOptions with an inherited key', { agentOptions: Object.assign(Object.create({ inherited: 1 }) as object, { maxTokens: 5 }) }],
    ['a hole in agentOptions.toolModules', { agentOptions: { toolModules: holed('file:///tools.js') } }],
    // A misspelt limit would give a child without it.
    ['a misspelt maxDepth', { maxdepth: 0 }],
    ['a misspelt toolFilter', { toolfilter: { deny: ['x'] } }],
    ['a field no request has', { bogus: 1 }],
    ['a parent without options', { parent: { id: 'p', session: { header: {}, events: [] } } }],
    ['a parent whose session has no events', { parent: { id: 'p', options: {}, session: { header: {} } } }],
  ] as [string, Partial<SubagentStartRequest>][])('S3: rejects %s with INVALID_REQUEST, never calling the provider', async (_label, extra) => {
    const provider = fakeProvider('full');
    t.host.subagents.registerProvider(provider);
    await expect(t.host.subagents.start('full', t.request(extra))).rejects.toMatchObject({ code: 'INVALID_REQUEST' });
    expect(provider.requests).toEqual([]);
  });

  it.each([
    ['a $ref cycle', { type: 'object', $ref: '#' }, 'request.outputSchema is an unsupported JSON schema: request.outputSchema has a $ref cycle (# → #)'],
    ['an if', { type: 'object', if: { required: ['a'] }, then: { required: ['b'] } }, 'request.outputSchema is an unsupported JSON schema: request.outputSchema has if, which the validator cannot enforce'],
    ['a function default', { type: 'object', default: () => 1 }, 'request.outputSchema must be plain JSON (outputSchema.default is a function'],
  ])('S3: words an outputSchema with %s as what it is', async (_label, outputSchema, message) => {
    const provider = fakeProvider('full');
    t.host.subagents.registerProvider(provider);
    const error = await t.host.subagents.start('full', t.request({ outputSchema })).catch((caught: unknown) => caught);
    expect(error).toMatchObject({ code: 'INVALID_REQUEST', message: expect.stringContaining(message) });
    expect((error as Error).message).not.toContain('plain JSON Schema');
    expect(provider.requests).toEqual([]);
  });

  it('checks in order: provider, capability, value, then the signal', async () => {
    t.host.subagents.registerProvider(fakeProvider('bare', { capabilities: NO_CAPABILITIES }));
    t.host.subagents.registerProvider(fakeProvider('full'));
    const aborted = AbortSignal.abort();
    const everythingWrong = t.request({ persona: 'p', maxDepth: -1, prompt: [], signal: aborted });
    await expect(t.host.subagents.start('missing', everythingWrong)).rejects.toMatchObject({ code: 'NO_PROVIDER' });
    await expect(t.host.subagents.start('bare', everythingWrong)).rejects.toMatchObject({ code: 'UNSUPPORTED_CAPABILITY' });
    await expect(t.host.subagents.start('full', everythingWrong)).rejects.toMatchObject({ code: 'INVALID_REQUEST' });
    await expect(t.host.subagents.start('full', t.request({ signal: aborted }))).rejects.toMatchObject({ code: 'CANCELLED' });
  });

  it('rejects CANCELLED with the abort reason for an already-aborted signal, without calling the provider', async () => {
    const provider = fakeProvider('full');
    t.host.subagents.registerProvider(provider);
    const reason = new Error('stop');
    await expect(t.host.subagents.start('full', t.request({ signal: AbortSignal.abort(reason) }))).rejects.toMatchObject({ code: 'CANCELLED', cause: reason });
    expect(provider.requests).toEqual([]);
    expect(events).toEqual([]);
  });
});

describe('start request snapshot', () => {
  it('S4: hands the provider a new object equal to the request plus its one-shot descriptor', async () => {
    const provider = fakeProvider('full');
    t.host.subagents.registerProvider(provider);
    const controller = new AbortController();
    const request = t.request({ label: 'lbl', signal: controller.signal, outputSchema: schema, maxDepth: 4, persona: 'p', toolFilter: { deny: ['x'] } });
    const run = await t.host.subagents.start('full', request);
    const received = provider.requests[0]!;
    expect(received).not.toBe(request);
    const { signal, parent, ...data } = received;
    const { signal: _s, parent: _p, ...sent } = request;
    expect(data).toEqual({ ...sent, descriptor: { version: SUBAGENT_DESCRIPTOR_VERSION, mode: 'one-shot', provider: 'full', label: 'lbl' } });
    expect(parent).toBe(t.parent);
    expect(signal.aborted).toBe(false);
    controller.abort();
    expect(signal.aborted).toBe(true);
    await run.dispose();
  });

  // The capture tool's validator enforces these (see the provider contract): the start takes them as given.
  it.each([
    ['whose allOf branch has no type', { type: 'object', allOf: [{ properties: { n: { type: 'number' } }, required: ['n'] }] }],
    ['whose property has constraints but no type', { type: 'object', properties: { s: { minLength: 3 } } }],
    ['whose array items have constraints but no type', { type: 'object', properties: { l: { type: 'array', items: { properties: { n: { type: 'number' } } } } } }],
    ['with constraints beside a $ref', { type: 'object', $defs: { n: { type: 'object' } }, properties: { a: { $ref: '#/$defs/n', required: ['x'], maxProperties: 2 } } }],
    ['with a typed subschema beside a $ref', { type: 'object', $defs: { n: { type: 'number' } }, properties: { a: { $ref: '#/$defs/n', type: 'integer', maximum: 3 } } }],
  ])('S4: hands the provider an outputSchema %s as given', async (_label, outputSchema) => {
    const provider = fakeProvider('full');
    t.host.subagents.registerProvider(provider);
    const run = await t.host.subagents.start('full', t.request({ outputSchema }));
    expect(provider.requests[0]?.outputSchema).toEqual(outputSchema);
    await run.dispose();
  });

  it('S4: leaves the label out of the descriptor when none was given', async () => {
    const provider = fakeProvider('full');
    t.host.subagents.registerProvider(provider);
    const run = await t.host.subagents.start('full', t.request());
    expect(provider.requests[0]?.descriptor).toEqual({ version: SUBAGENT_DESCRIPTOR_VERSION, mode: 'one-shot', provider: 'full' });
    await run.dispose();
  });

  it('copies prompt, schema, options and filter when start is called, out of reach of later mutation', async () => {
    const gate = deferred();
    const seen: string[] = [];
    const provider = fakeProvider('full', {
      async start(request) {
        await gate.promise;
        seen.push(JSON.stringify([request.prompt, request.outputSchema, request.agentOptions, request.toolFilter]));
        return fakeRun();
      },
    });
    t.host.subagents.registerProvider(provider);
    const prompt = [text('original')];
    const outputSchema = { type: 'object', properties: { n: { type: 'number' } } };
    const agentOptions = { model: { kind: 'scripted' as const, steps: [{ text: 'a' }] }, maxTokens: 10 };
    const toolFilter = { deny: ['x'] };
    const expected = JSON.stringify([prompt, outputSchema, agentOptions, toolFilter]);
    const starting = t.host.subagents.start('full', t.request({ prompt, outputSchema, agentOptions, toolFilter }));
    prompt[0] = text('mutated');
    prompt.push(text('more'));
    (outputSchema.properties as Record<string, unknown>)['n'] = { type: 'string' };
    agentOptions.model.steps.push({ text: 'b' });
    agentOptions.maxTokens = 99;
    toolFilter.deny.push('y');
    gate.resolve();
    const run = await starting;
    expect(seen).toEqual([expected]);
    await run.dispose();
  });
});

describe('failed and malformed starts', () => {
  it('S5: passes a provider rejection through and emits no events', async () => {
    const failure = new Error('provider failed');
    t.host.subagents.registerProvider(fakeProvider('bad', { start: () => Promise.reject(failure) }));
    const controller = new AbortController();
    await expect(t.host.subagents.start('bad', t.request({ signal: controller.signal }))).rejects.toBe(failure);
    expect(events).toEqual([]);
    expect(t.host.subagents.activeRuns).toBe(0);
    // The start's one listener on the caller's signal goes with the failed start.
    expect(getEventListeners(controller.signal, 'abort')).toEqual([]);
  });

  it('turns a provider start that throws synchronously into a rejection', async () => {
    const failure = new Error('sync throw');
    t.host.subagents.registerProvider(
      fakeProvider('throws', {
        start: () => {
          throw failure;
        },
      }),
    );
    await expect(t.host.subagents.start('throws', t.request())).rejects.toBe(failure);
    expect(events).toEqual([]);
  });

  it.each([
    ['no id', { localAgent: undefined, result: Promise.resolve(), dispose: () => Promise.resolve() }],
    ['a numeric id', { id: 7, localAgent: undefined, result: Promise.resolve(), dispose: () => Promise.resolve() }],
    ['no result promise', { id: 'c', localAgent: undefined, result: 'done', dispose: () => Promise.resolve() }],
    ['no dispose', { id: 'c', localAgent: undefined, result: Promise.resolve() }],
    ['null', null],
  ])('rejects CONTRACT_VIOLATION for a run with %s and emits no events', async (_label, raw) => {
    t.host.subagents.registerProvider(fakeProvider('odd', { start: () => Promise.resolve(raw as unknown as SubagentRun) }));
    await expect(t.host.subagents.start('odd', t.request())).rejects.toMatchObject({ code: 'CONTRACT_VIOLATION' });
    expect(events).toEqual([]);
    expect(t.host.subagents.activeRuns).toBe(0);
  });

  it('disposes a malformed run that has a dispose before rejecting', async () => {
    let disposed = 0;
    const raw = { id: '', localAgent: undefined, result: Promise.resolve(), dispose: () => void disposed++ };
    t.host.subagents.registerProvider(fakeProvider('odd', { start: () => Promise.resolve(raw as unknown as SubagentRun) }));
    await expect(t.host.subagents.start('odd', t.request())).rejects.toMatchObject({ code: 'CONTRACT_VIOLATION' });
    expect(disposed).toBe(1);
  });

  it.each([
    ['keeps its own typed error for a malformed run with a dispose that throws synchronously', { id: '' }],
    ['gives the caller a run whose dispose throws synchronously, the host closing meanwhile, and close() still settles', { id: 'c' }],
  ])('%s', async (label, fields) => {
    const raw = {
      ...fields,
      localAgent: undefined,
      result: Promise.resolve({ output: [], stopReason: 'completed' }),
      dispose: () => {
        throw new Error('dispose blew up');
      },
    };
    let closing: Promise<void> | undefined;
    t.host.subagents.registerProvider(
      fakeProvider('odd', {
        start: async () => {
          if (label.includes('closing')) closing = t.host.close();
          return raw as unknown as SubagentRun;
        },
      }),
    );
    const starting = t.host.subagents.start('odd', t.request());
    if (closing) await expect(starting).resolves.toMatchObject({ id: 'c' });
    else await expect(starting).rejects.toMatchObject({ code: 'CONTRACT_VIOLATION' });
    await closing;
    expect(t.host.subagents.activeRuns).toBe(0);
  });

  it('rejects CLOSED after the host closed, without calling the provider', async () => {
    const provider = fakeProvider('full');
    t.host.subagents.registerProvider(provider);
    await t.host.close();
    await expect(t.host.subagents.start('full', t.request())).rejects.toMatchObject({ code: 'CLOSED' });
    expect(provider.requests).toEqual([]);
  });

  it('cancels a start racing host.close(); a run its provider still started is the caller’s, and close() disposes it', async () => {
    const gate = deferred();
    const raw = fakeRun();
    let providerSignal: AbortSignal | undefined;
    t.host.subagents.registerProvider(
      fakeProvider('slow', {
        async start(request) {
          providerSignal = request.signal;
          await gate.promise;
          return raw;
        },
      }),
    );
    const starting = t.host.subagents.start('slow', t.request());
    const closing = t.host.close();
    expect(providerSignal?.aborted).toBe(true);
    gate.resolve();
    // Rejected, it would be a start that never started whose child exists (a local child's log is stored and listed).
    const run = await starting;
    expect(run.id).toBe(raw.id);
    await closing;
    expect(raw.disposeCalls).toBe(1);
    await expect(run.result).resolves.toMatchObject({ stopReason: 'aborted' });
    expect(events).toEqual(['start', 'end']);
    expect(t.host.subagents.activeRuns).toBe(0);
  });

  it('rejects CLOSED, the cancellation as its cause, a start whose provider gives up CANCELLED when host.close() aborts it', async () => {
    t.host.subagents.registerProvider(
      fakeProvider('yielding', {
        start: (request) =>
          new Promise<SubagentRun>((_resolve, reject) => {
            request.signal.addEventListener('abort', () => reject(new SubagentError('CANCELLED', 'the start was cancelled')), { once: true });
          }),
      }),
    );
    const starting = t.host.subagents.start('yielding', t.request()).catch((error: unknown) => error);
    await t.host.close();
    const error = await starting;
    expect(error).toMatchObject({ code: 'CLOSED', message: 'the host closed while the child was starting' });
    expect((error as Error).cause).toMatchObject({ code: 'CANCELLED' });
  });
});

describe('a run whose id is taken', () => {
  const script = new URL('./fixtures/run-id-clash.mjs', import.meta.url).pathname;
  const packageUrl = new URL('../dist/src/index.js', import.meta.url).href;

  // In a plain process: before the fix the host's thread looped for ever walking the tree's parent
  // links (its parent's id, an ancestor's).
  it('is refused CONTRACT_VIOLATION and disposed when it is the parent’s id or an ancestor’s (through the subagent tool); a running child’s is taken', async () => {
    const { code, out, err } = await runNodeScript(script, [packageUrl]);
    expect({ code, err }).toEqual({ code: 0, err: '' });
    const report = JSON.parse(out) as Record<string, unknown>;
    const refused = (what: string) => ({ code: 'CONTRACT_VIOLATION', message: expect.stringContaining(`is ${what}; a child's id must not be one of its lineage's`) });
    expect(report['parent']).toEqual(refused('its parent’s id'));
    expect(report['running']).toEqual({ started: 'running' });
    expect(report['ancestor']).toMatchObject({ stopReason: 'completed', toolResult: expect.stringContaining('is the id of one of its ancestors') });
    // Each refused run was disposed, and the two running ones once they were.
    expect(report['disposed']).toHaveLength(4);
    expect(report['activeRuns']).toBe(0);
  });
});
