// Values no well-behaved caller would throw or pass, through the public API: hooks that throw, an
// Error whose message is a symbol, cancel causes that throw when read, and a message source with an
// own `__proto__` key (JSON from the wire). Each gives a typed outcome; none hangs or corrupts a log.
import { describe, expect, it } from 'vitest';
import { text, type Tool, type TurnEndReason } from 'subagent-host';
import { dataOf, deferred, hostsClosedAfterEach, runNodeScript } from './helpers.js';

const packageUrl = new URL('../dist/src/index.js', import.meta.url).href;
const throwingHook = new URL('./fixtures/throwing-hook.mjs', import.meta.url).pathname;

const newHost = hostsClosedAfterEach();

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

describe('a message source parsed from JSON with an own __proto__ key', () => {
  it('is refused INVALID_REQUEST naming the key, not read through as the source’s prototype', async () => {
    const host = await newHost();
    const agent = await host.createAgent();
    const source = JSON.parse('{"kind":"tool","__proto__":{"callId":"c1"}}') as { kind: 'tool'; callId: string };
    expect(() => agent.followup([text('hi')], { source })).toThrow(expect.objectContaining({ code: 'INVALID_REQUEST', message: expect.stringContaining('source.__proto__') }));
    expect(agent.session.events).toEqual([]);
  });
});
