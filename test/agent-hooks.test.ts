// Agent hooks (`createAgent({ hooks })`) that misbehave without throwing: async ones (awaited until
// the turn is cancelled, a beforeTool checkpoint's too), verdicts of the wrong shape (typed
// CONTRACT_VIOLATION, never logged as given), a beforeTool checkpoint the turn is cancelled during
// (the tool body never starts), and one that throws (that call fails, the turn goes on).
import { describe, expect, it } from 'vitest';
import { createHost, text, type AgentHooks, type Tool, type TurnEndReason } from 'subagent-host';
import { closeAfterEach, dataOf, deferred, hostsClosedAfterEach, runNodeScript } from './helpers.js';

const packageUrl = new URL('../dist/src/index.js', import.meta.url).href;
const oddHook = new URL('./fixtures/odd-hook.mjs', import.meta.url).pathname;

const newHost = hostsClosedAfterEach();
const track = closeAfterEach();

const ends = (events: Parameters<typeof dataOf>[0]) => dataOf<{ reason: TurnEndReason }>(events, 'turn/end').map((end) => end.reason);

describe('a hook that misbehaves in a process of its own', () => {
  // Before the fix: an unhandled rejection, and a store write failing outside any turn; both crash Node.
  it.each([
    ['async-turnStart-rejects', { kind: 'error', error: { code: 'UNKNOWN', message: 'Error: turnStart failed' } }],
    ['bigint-in-verdict', { kind: 'aborted', cause: { kind: 'hook', reason: 'over budget' } }],
  ])('(%s) ends the turn typed, and the process exits 0 by itself', async (which, expected) => {
    const { code, out, err } = await runNodeScript(oddHook, [packageUrl, which]);
    expect({ code, err }).toEqual({ code: 0, err: '' });
    expect(JSON.parse(out)).toEqual([expected]);
  });
});

describe('an async beforeStep', () => {
  it('is awaited: resolving undefined lets the turn run and complete', async () => {
    const host = await newHost();
    const agent = await host.createAgent({ hooks: { beforeStep: async () => undefined } });
    agent.followup([text('hi')]);
    await agent.whenIdle();
    expect(ends(agent.session.events)).toEqual([{ kind: 'completed' }]);
    expect(dataOf(agent.session.events, 'user/message')).toHaveLength(1);
  });

  it('that never settles leaves the turn cancellable: it ends aborted', async () => {
    const host = await newHost();
    const asked = deferred();
    const agent = await host.createAgent({
      hooks: {
        beforeStep: () => {
          asked.resolve();
          return new Promise(() => {});
        },
      },
    });
    agent.followup([text('hi')]);
    await asked.promise;
    agent.cancel();
    await agent.whenIdle();
    expect(ends(agent.session.events)).toEqual([{ kind: 'aborted', cause: { kind: 'user' } }]);
  });
});

describe('a beforeStep verdict of the wrong shape', () => {
  const odd: [string, unknown][] = [
    ['an unknown kind', { kind: 'bogus' }],
    ['a completed turn', { kind: 'completed' }],
    ['a string', 'stop'],
    ['true', true],
  ];
  it.each(odd)('(%s) ends the turn error CONTRACT_VIOLATION naming the verdicts it may return', async (_name, verdict) => {
    const host = await newHost();
    const hooks = { beforeStep: () => verdict } as unknown as AgentHooks;
    const agent = await host.createAgent({ hooks });
    agent.followup([text('hi')]);
    await agent.whenIdle();
    expect(ends(agent.session.events)).toEqual([
      { kind: 'error', error: { code: 'CONTRACT_VIOLATION', message: expect.stringContaining("it must return { kind: 'max-tokens' }, { kind: 'aborted', cause }") } },
    ]);
    expect(dataOf(agent.session.events, 'inbox/discarded')).toHaveLength(1);
  });

  it('is logged as a copy: the hook’s own object is not frozen', async () => {
    const host = await newHost();
    const verdict = { kind: 'aborted' as const, cause: { kind: 'hook' as const, reason: 'stop here' } };
    const agent = await host.createAgent({ hooks: { beforeStep: () => verdict } });
    agent.followup([text('hi')]);
    await agent.whenIdle();
    expect(ends(agent.session.events)).toEqual([verdict]);
    expect(Object.isFrozen(verdict)).toBe(false);
  });
});

describe('a beforeTool checkpoint the turn is cancelled during', () => {
  it('never starts the tool body: the call ends ABORTED_BEFORE_DISPATCH', async () => {
    let ran = false;
    const tool: Tool = {
      name: 'effect',
      description: 'has a side effect',
      parameters: { type: 'object' },
      execute: () => {
        ran = true;
        return Promise.resolve('done');
      },
    };
    const host = await newHost([tool]);
    const checkpoint = deferred();
    const reached = deferred();
    const agent = await host.createAgent({
      agentOptions: { model: { kind: 'scripted', steps: [{ toolCalls: [{ name: 'effect', input: {} }] }, { text: 'after' }] } },
      hooks: {
        beforeTool: () => {
          reached.resolve();
          return checkpoint.promise;
        },
      },
    });
    agent.followup([text('go')]);
    await reached.promise;
    agent.cancel();
    checkpoint.resolve();
    await agent.whenIdle();
    expect(ran).toBe(false);
    expect(dataOf(agent.session.events, 'tool/result')).toEqual([expect.objectContaining({ isError: true, code: 'ABORTED_BEFORE_DISPATCH' })]);
    expect(ends(agent.session.events)).toEqual([{ kind: 'aborted', cause: { kind: 'user' } }]);
  });
});

/** A tool that records whether its body ran. */
function effectTool(): { tool: Tool; ran: () => boolean } {
  let ran = false;
  const tool: Tool = {
    name: 'effect',
    description: 'has a side effect',
    parameters: { type: 'object' },
    execute: () => {
      ran = true;
      return Promise.resolve('done');
    },
  };
  return { tool, ran: () => ran };
}

const callsEffect = { kind: 'scripted' as const, steps: [{ toolCalls: [{ name: 'effect', input: {} }] }, { text: 'after' }] };

// Before the fix, beforeTool was awaited without the turn's signal: a checkpoint that never settled
// (say one waiting on a store that never answers) held the cancelled turn for abandonGraceMs, which
// then answered the call ABANDONED, or for ever on an agent created with `abandon: false`, and so
// did host.close() (it cancels the turn, then waits for it). turnStart and beforeStep stopped waiting at the cancel.
describe('a beforeTool checkpoint that never settles', () => {
  /** An agent of a host with `abandonGraceMs: 200` whose turn has called `effect` and waits in a `beforeTool` that never settles. */
  async function waitingInBeforeTool(options: { abandon?: false } = {}) {
    const effect = effectTool();
    const host = track(await createHost({ providers: false, tools: [effect.tool], abandonGraceMs: 200 }));
    const reached = deferred();
    const agent = await host.createAgent({
      ...options,
      agentOptions: { model: callsEffect },
      hooks: {
        beforeTool: () => {
          reached.resolve();
          return new Promise<void>(() => {});
        },
      },
    });
    agent.followup([text('go')]);
    await reached.promise;
    return { effect, host, agent };
  }

  it('is awaited until the turn is cancelled: the call ends ABORTED_BEFORE_DISPATCH at once, not ABANDONED after abandonGraceMs', { timeout: 10_000 }, async () => {
    const { effect, host, agent } = await waitingInBeforeTool();
    agent.cancel();
    await agent.whenIdle();
    expect(effect.ran()).toBe(false);
    expect(dataOf(agent.session.events, 'tool/result')).toEqual([expect.objectContaining({ isError: true, code: 'ABORTED_BEFORE_DISPATCH' })]);
    expect(ends(agent.session.events)).toEqual([{ kind: 'aborted', cause: { kind: 'user' } }]);
    await host.close();
  });

  it.each(['a cancel', 'host.close()'])('leaves the turn of an agent created with abandon: false (no grace at all) to end at %s', { timeout: 10_000 }, async (how) => {
    const { effect, host, agent } = await waitingInBeforeTool({ abandon: false });
    if (how === 'a cancel') {
      agent.cancel();
      await agent.whenIdle();
    }
    await host.close();
    expect(effect.ran()).toBe(false);
    expect(dataOf(agent.session.events, 'tool/result')).toEqual([expect.objectContaining({ code: 'ABORTED_BEFORE_DISPATCH' })]);
    expect(ends(agent.session.events)).toEqual([{ kind: 'aborted', cause: { kind: how === 'a cancel' ? 'user' : 'disposed' } }]);
  });
});

describe('a beforeTool checkpoint that throws or rejects', () => {
  it.each(['throws', 'rejects'])('(%s) fails that call alone: its body never runs, the model gets the error, and the turn goes on', async (how) => {
    const effect = effectTool();
    const host = await newHost([effect.tool]);
    const agent = await host.createAgent({
      agentOptions: { model: callsEffect },
      hooks: {
        beforeTool: () => {
          if (how === 'throws') throw new Error('checkpoint failed');
          return Promise.reject(new Error('checkpoint failed'));
        },
      },
    });
    agent.followup([text('go')]);
    await agent.whenIdle();
    expect(effect.ran()).toBe(false);
    expect(dataOf(agent.session.events, 'tool/result')).toEqual([expect.objectContaining({ isError: true, code: 'TOOL_FAILED', content: [text('Error: checkpoint failed')] })]);
    expect(ends(agent.session.events)).toEqual([{ kind: 'completed' }]);
  });
});

describe('a model adapter that rewrites its request’s messages in place', () => {
  it('changes that request only: the next step and turn are sent the history as logged', async () => {
    const tool: Tool = { name: 'look', description: 'answers', parameters: { type: 'object' }, execute: () => Promise.resolve('the secret result') };
    const host = await newHost([tool]);
    const sent: string[] = [];
    let calls = 0;
    const agent = await host.createAgent({
      model: {
        async *stream(request) {
          sent.push(JSON.stringify(request.messages.map((message) => message.content)));
          // Redacts what it sends, in place: replaces each message's content, and adds to a tool results' one.
          for (const message of request.messages) {
            if (message.content.every((block) => block.type === 'tool_result')) {
              try {
                (message.content as unknown[]).push(text('extra'));
              } catch {
                // Frozen, as every logged message's content is.
              }
            }
            message.content = message.content.map((block) => (block.type === 'text' ? text(block.text.replace('secret', '***')) : block));
          }
          await Promise.resolve();
          calls++;
          if (calls === 1) yield { type: 'tool-call', id: 'c1', name: 'look', input: {} };
          else yield { type: 'text-delta', text: 'ok' };
          yield { type: 'finish', reason: calls === 1 ? 'tool-calls' : 'stop' };
        },
      },
    });
    agent.followup([text('my secret')]);
    await agent.whenIdle();
    agent.followup([text('again')]);
    await agent.whenIdle();
    expect(sent).toHaveLength(3);
    const last = JSON.parse(sent[2]!) as unknown[];
    expect(last[0]).toEqual([text('my secret')]);
    expect(last[2]).toEqual([{ type: 'tool_result', callId: 'c1', content: [text('the secret result')] }]);
  });
});
