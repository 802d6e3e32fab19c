// Values no well-behaved caller would throw or pass, through the public API: hooks that throw, an
// Error whose message is a symbol, cancel causes that throw when read or that no port can carry (to
// a worker child), host tool throws no port can carry, and a message source with an own `__proto__`
// key (JSON from the wire). Each gives a typed outcome; none hangs or corrupts a log.
import { describe, expect, it } from 'vitest';
import { createHost, inProcessProvider, text, type Agent, type Tool, type TurnEndReason } from 'subagent-host';
import { closeAfterEach, dataOf, deferred, hostsClosedAfterEach, runNodeScript } from './helpers.js';

const packageUrl = new URL('../dist/src/index.js', import.meta.url).href;
const throwingHook = new URL('./fixtures/throwing-hook.mjs', import.meta.url).pathname;

const newHost = hostsClosedAfterEach();
const track = closeAfterEach();

describe('an agent hook that throws', () => {
  // In a plain process: before the fix the agent started turn after turn in microtasks alone, so
  // no timer (not even the test's) ever ran again.
  it.each(['turnStart', 'beforeStep'])('(%s) ends that turn error and discards its queued input; the process exits by itself', async (hook) => {
    const { code, out, err } = await runNodeScript(throwingHook, [packageUrl, hook]);
    expect({ code, err }).toEqual({ code: 0, err: '' });
    const report = JSON.parse(out) as { types: string[]; ends: TurnEndReason[] };
    expect(report.ends).toEqual([{ kind: 'error', error: { code: 'UNKNOWN', message: `Error: ${hook} failed` } }]);
    expect(report.types.filter((type) => type === 'inbox/discarded')).toHaveLength(1);
  });
});

describe('a tool that throws an Error whose message is a symbol', () => {
  it('fails its call TOOL_FAILED with that symbol as text; the turn goes on and completes', async () => {
    const tool: Tool = {
      name: 'odd',
      description: 'throws an error with a symbol for its message',
      parameters: { type: 'object' },
      execute: () => {
        const error = new Error();
        (error as { message: unknown }).message = Symbol('why');
        return Promise.reject(error);
      },
    };
    const host = await newHost([tool]);
    const agent = await host.createAgent({ agentOptions: { model: { kind: 'scripted', steps: [{ toolCalls: [{ name: 'odd', input: {} }] }, { text: 'done' }] } } });
    agent.followup([text('go')]);
    await agent.whenIdle();
    expect(dataOf(agent.session.events, 'tool/result')).toEqual([
      expect.objectContaining({ content: [text('Error: Symbol(why)')], isError: true, code: 'TOOL_FAILED' }),
    ]);
    expect(dataOf<{ reason: TurnEndReason }>(agent.session.events, 'turn/end').map((end) => end.reason)).toEqual([{ kind: 'completed' }]);
  });
});

describe('a host tool that throws a value no port can carry, called by a worker child', () => {
  const revokedError = () => {
    const { proxy, revoke } = Proxy.revocable(new Error('gone'), {});
    revoke();
    return proxy;
  };
  const thrown: [string, () => unknown, string][] = [
    ['a revoked proxy of an Error', revokedError, 'Error: <unprintable error>'],
    ['a symbol', () => Symbol('why'), 'Error: Symbol(why)'],
    ['an Error whose cause is a function', () => new Error('failed', { cause: () => 1 }), 'Error: failed'],
  ];

  it.each(thrown)('(%s) fails its call TOOL_FAILED worded as for an in-process child', async (_name, value, expected) => {
    const tool: Tool = {
      name: 'thrower',
      description: 'throws',
      parameters: { type: 'object', properties: {} },
      execute: () => Promise.reject(value()),
    };
    const host = track(await createHost({ tools: [tool], pool: { maxThreads: 1 } }));
    host.subagents.registerProvider(inProcessProvider(host));
    const parent = await host.createAgent();
    const results: unknown[] = [];
    for (const provider of ['in-process', 'spawn']) {
      const run = await host.subagents.start(provider, {
        prompt: [text('go')],
        parent,
        signal: new AbortController().signal,
        agentOptions: { model: { kind: 'scripted', steps: [{ toolCalls: [{ name: 'thrower', input: {} }] }, { text: 'done' }] } },
      });
      expect(await run.result).toMatchObject({ stopReason: 'completed' });
      results.push(...dataOf<{ content: unknown; code?: string }>(host.sessions.get(run.id)!.events, 'tool/result').map(({ content, code }) => ({ content, code })));
      await run.dispose();
    }
    const failed = { content: [text(expected)], code: 'TOOL_FAILED' };
    expect(results).toEqual([failed, failed]);
  });
});

describe('agent.cancel with a cause that cannot be read', () => {
  const revoked = () => {
    const { proxy, revoke } = Proxy.revocable({}, {});
    revoke();
    return proxy;
  };
  const causes: [string, () => unknown, TurnEndReason][] = [
    ['a revoked proxy', revoked, { kind: 'aborted', cause: { kind: 'user' } }],
    ['a throwing kind getter', () => ({ get kind(): never { throw new Error('no kind'); } }), { kind: 'aborted', cause: { kind: 'user' } }],
    ['a hook cause whose reason has no string form', () => ({ kind: 'hook', reason: Object.create(null) as object }), { kind: 'aborted', cause: { kind: 'hook', reason: '<an object>' } }],
  ];

  it.each(causes)('(%s) still ends the running turn aborted, logged', async (_name, cause, expected) => {
    const host = await newHost();
    const agent = await host.createAgent({ agentOptions: { model: { kind: 'scripted', steps: [{ finish: 'hang' }] } } });
    const stepped = deferred();
    agent.subscribe((event) => {
      if (event.type === 'step/start') stepped.resolve();
    });
    agent.followup([text('go')]);
    await stepped.promise;
    agent.cancel(cause() as Parameters<typeof agent.cancel>[0]);
    await agent.whenIdle();
    expect(dataOf<{ reason: TurnEndReason }>(agent.session.events, 'turn/end').map((end) => end.reason)).toEqual([expected]);
  });
});

describe('a worker child’s agent.cancel with a cause its thread could not take', () => {
  const deep = () => {
    let value: object = { kind: 'user' };
    for (let level = 0; level < 10_000; level++) value = { kind: 'user', value };
    return value;
  };
  const causes: [string, () => unknown, TurnEndReason][] = [
    ['a function', () => () => 'why', { kind: 'aborted', cause: { kind: 'user' } }],
    ['a symbol', () => Symbol('why'), { kind: 'aborted', cause: { kind: 'user' } }],
    ['null', () => null, { kind: 'aborted', cause: { kind: 'user' } }],
    ['a user cause with a function field', () => ({ kind: 'user', then: undefined, call: () => 1 }), { kind: 'aborted', cause: { kind: 'user' } }],
    ['a hook cause whose reason is a function', () => ({ kind: 'hook', reason: Object.assign(() => 1, { toString: () => 'deadline' }) }), { kind: 'aborted', cause: { kind: 'hook', reason: 'deadline' } }],
    ['an object nested 10,000 levels deep', deep, { kind: 'aborted', cause: { kind: 'user' } }],
  ];

  // As an agent on the host's thread logs it: before the fix the cancel never reached the thread
  // (its port refused the value), the thread was terminated after the grace, and the log kept the
  // raw value (a function; a deep object overflowed the stack freezing it and crashed the host).
  it.each(causes)('(%s) ends the spawn child’s turn aborted at once, logged as an in-process child’s', async (_name, cause, expected) => {
    const host = track(await createHost({ pool: { maxThreads: 1 } }));
    const parent = await host.createAgent();
    const run = await host.subagents.start('spawn', {
      prompt: [text('go')],
      parent,
      signal: new AbortController().signal,
      agentOptions: { model: { kind: 'scripted', steps: [{ finish: 'hang' }] } },
    });
    const stepped = deferred();
    const session = host.sessions.get(run.id)!;
    if (session.events.some((event) => event.type === 'step/start')) stepped.resolve();
    const off = session.subscribe((event) => {
      if (event.type === 'step/start') stepped.resolve();
    });
    await stepped.promise;
    off();
    run.localAgent!.cancel(cause() as Parameters<Agent['cancel']>[0]);
    const result = await run.result;
    expect(result).toMatchObject({ stopReason: 'aborted' });
    expect(result.diagnostic).toBeUndefined();
    expect(dataOf<{ reason: TurnEndReason }>(session.events, 'turn/end').map((end) => end.reason)).toEqual([expected]);
    await run.dispose();
  });
});

describe('a message source parsed from JSON with an own __proto__ key', () => {
  it('is refused INVALID_REQUEST naming the key, not read through as the source’s prototype', async () => {
    const host = await newHost();
    const agent = await host.createAgent();
    const source = JSON.parse('{"kind":"tool","__proto__":{"callId":"c1"}}') as { kind: 'tool'; callId: string };
    expect(() => agent.followup([text('hi')], { source })).toThrow(expect.objectContaining({ code: 'INVALID_REQUEST', message: expect.stringContaining('source.__proto__') }));
    expect(agent.session.events).toEqual([]);
  });
});

describe('a run cancelled with a reason that cannot be read', () => {
  const reasons: [string, () => unknown][] = [
    ['a revoked proxy', () => {
      const { proxy, revoke } = Proxy.revocable({}, {});
      revoke();
      return proxy;
    }],
    ['a proxy whose every trap throws', () => new Proxy({}, { get: () => { throw new Error('get'); }, has: () => { throw new Error('has'); }, ownKeys: () => { throw new Error('ownKeys'); }, getPrototypeOf: () => { throw new Error('proto'); } })],
  ];
  const cases = (['in-process', 'spawn'] as const).flatMap((provider) => (['run.cancel', 'the caller’s signal'] as const).flatMap((how) => reasons.map(([name, reason]) => [provider, how, name, reason] as const)));

  // Before the fix run.cancel read the reason's `kind` unguarded: it threw without settling the run
  // (later cancels did nothing), and from the caller's signal the throw escaped its abort listener
  // and ended the process.
  it.each(cases)('(%s, by %s, %s) settles aborted; the host goes on', async (provider, how, _name, reason) => {
    const host = track(await createHost({ pool: { maxThreads: 1 } }));
    host.subagents.registerProvider(inProcessProvider(host));
    const parent = await host.createAgent();
    const controller = new AbortController();
    const run = await host.subagents.start(provider, { prompt: [text('go')], parent, signal: controller.signal, agentOptions: { model: { kind: 'scripted', steps: [{ finish: 'hang' }] } } });
    if (how === 'run.cancel') run.cancel(reason());
    else controller.abort(reason());
    expect(await run.result).toMatchObject({ stopReason: 'aborted' });
    await run.dispose();
    const next = await host.subagents.start(provider, { prompt: [text('again')], parent, signal: new AbortController().signal });
    expect(await next.result).toMatchObject({ stopReason: 'completed' });
    await next.dispose();
  });
});
