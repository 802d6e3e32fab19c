// A session log stores each message, tool result and answer as one JSON text, which V8 cannot build
// past 2^29 characters. Content whose strings hold more than 2^26 characters (64 Mi; six times as
// many escaped, at worst, still fits) is refused where it enters, and a model's answer is cut there:
// before, such content was taken, the run completed, and the session's log was silently not stored.
import { afterEach, describe, expect, it } from 'vitest';
import { createHost, inProcessProvider, text, type ContentBlock, type Host, type ModelChunk } from 'subagent-host';
import { continuationHost } from './continuation-helpers.js';
import { dataOf, recordingTool, tempFiles } from './helpers.js';

const CAP = 2 ** 26;
/** A text block whose strings (`type`, `text` and the two keys: 12 characters beside the text) hold `chars` characters. */
const textOf = (chars: number, character = 'x') => text(character.repeat(chars - 12));
const refused = (path: string, chars: number) =>
  `${path} holds ${chars} characters of strings (keys included), more than the ${CAP} (64 Mi) one message, tool result or input may hold (a session log stores it as one JSON text); pass large data by reference (a file path or a URL)`;

const files = tempFiles('content-size-');
const hosts: Host[] = [];
afterEach(async () => {
  await Promise.all(hosts.splice(0).map((host) => host.close()));
});

async function sqliteHost(file: string, options: Parameters<typeof createHost>[0] = {}) {
  const host = await createHost({ providers: false, persistence: { sqlite: file }, ...options });
  hosts.push(host);
  host.subagents.registerProvider(inProcessProvider(host));
  return host;
}

/** The stored log of session `id` in `file`, read by a new host. */
async function storedEvents(file: string, id: string) {
  const host = await createHost({ providers: false, persistence: { sqlite: file } });
  hosts.push(host);
  const { agent } = await host.agents.resume({ sessionId: id });
  return agent.session.events;
}

describe('content of more than 2^26 characters', () => {
  it('a prompt of 90 Mi control characters (540 Mi escaped: no JSON text could hold it) is refused, not taken and lost', async () => {
    const host = await sqliteHost(files.file());
    const parent = await host.createAgent();
    const starting = host.subagents.start('in-process', { prompt: [textOf(90 * 2 ** 20, '\u0001')], parent, signal: new AbortController().signal });
    await expect(starting).rejects.toMatchObject({ code: 'INVALID_REQUEST', message: `request.${refused('prompt', 90 * 2 ** 20)}` });
    expect(host.sessions.list().map((session) => session.header.id)).toStrictEqual([parent.id]);
  });

  it('a prompt of exactly 2^26 is taken and stored whole; one more character is refused', async () => {
    const file = files.file();
    const host = await sqliteHost(file);
    const parent = await host.createAgent({ sessionId: 'parent' });
    const signal = new AbortController().signal;
    await expect(host.subagents.start('in-process', { prompt: [textOf(CAP + 1)], parent, signal })).rejects.toMatchObject({
      code: 'INVALID_REQUEST',
      message: `request.${refused('prompt', CAP + 1)}`,
    });
    // Held at 65 places, one block of 1 Mi is written out at each: counted at each.
    const shared = textOf(2 ** 20);
    await expect(host.subagents.start('in-process', { prompt: Array.from({ length: 65 }, () => shared), parent, signal })).rejects.toMatchObject({
      code: 'INVALID_REQUEST',
      message: `request.${refused('prompt', 65 * 2 ** 20)}`,
    });
    const run = await host.subagents.start('in-process', { prompt: [textOf(CAP)], parent, signal });
    expect((await run.result).stopReason).toBe('completed');
    await run.dispose();
    await host.close();
    hosts.splice(hosts.indexOf(host), 1);
    const [message] = dataOf<{ content: ContentBlock[] }>(await storedEvents(file, run.id), 'user/message');
    expect(message?.content).toStrictEqual([textOf(CAP)]);
  }, 120_000);

  it('an agent follow-up, a continuable start and a continuable follow-up are refused before anything is accepted', async () => {
    const host = await continuationHost(files.file());
    hosts.push(host);
    const agent = await host.createAgent();
    expect(() => agent.followup([textOf(CAP + 1)])).toThrow(expect.objectContaining({ code: 'INVALID_REQUEST', message: `message ${refused('content', CAP + 1)}` }));
    expect(agent.status).toBe('idle');
    const parent = await host.createAgent();
    await expect(host.subagents.startContinuable({ provider: 'in-process', label: 'c', request: { prompt: [textOf(CAP + 1)], parent } })).rejects.toMatchObject({ code: 'INVALID_REQUEST' });
    const { childId } = await host.subagents.startContinuable({ provider: 'in-process', label: 'c', request: { prompt: [text('hi')], parent } });
    await host.recorder.until(() => host.recorder.ends.length === 1);
    const accepted = () => dataOf(host.sessions.get(childId)?.events ?? [], 'inbox/accepted').length;
    expect(accepted()).toBe(1);
    await expect(host.subagents.followup(parent, childId, [textOf(CAP + 1)])).rejects.toMatchObject({ code: 'INVALID_REQUEST', message: `message ${refused('content', CAP + 1)}` });
    expect(accepted()).toBe(1);
  });

  it('a tool result of more is a CONTRACT_VIOLATION the model sees; the run completes and its log is stored', async () => {
    const file = files.file();
    const tool = { name: 'dump', description: '', parameters: { type: 'object' }, execute: async () => ({ content: [textOf(CAP + 1)] }) };
    const host = await sqliteHost(file, { tools: [tool], model: { kind: 'scripted', steps: [{ toolCalls: [{ name: 'dump', input: {} }] }, { text: 'done' }] } });
    const agent = await host.createAgent({ sessionId: 'a' });
    agent.followup([text('go')]);
    await agent.whenIdle();
    await host.close();
    hosts.splice(hosts.indexOf(host), 1);
    const events = await storedEvents(file, 'a');
    expect(dataOf(events, 'tool/result')).toMatchObject([{ isError: true, code: 'CONTRACT_VIOLATION', content: [text(`Error: tool dump returned ${refused('content', CAP + 1)}`)] }]);
    expect(dataOf(events, 'turn/end')).toStrictEqual([{ turn: 1, reason: { kind: 'completed' } }]);
  });

  it.each(['in-process', 'spawn'])('a tool result returned as one string of more is refused as its text block would be (%s child); the log is stored', async (provider) => {
    const file = files.file();
    const tool = { name: 'dump', description: '', parameters: { type: 'object' }, execute: async () => 'x'.repeat(CAP - 11) };
    const host = await sqliteHost(file, { providers: true, tools: [tool], pool: { maxThreads: 1 } });
    const parent = await host.createAgent();
    const run = await host.subagents.start(provider, {
      prompt: [text('go')],
      parent,
      signal: new AbortController().signal,
      agentOptions: { model: { kind: 'scripted', steps: [{ toolCalls: [{ name: 'dump', input: {} }] }, { text: 'done' }] } },
    });
    expect(await run.result).toMatchObject({ stopReason: 'completed' });
    const id = run.id;
    await run.dispose();
    await host.close();
    hosts.splice(hosts.indexOf(host), 1);
    const events = await storedEvents(file, id);
    expect(dataOf(events, 'tool/result')).toMatchObject([{ isError: true, code: 'CONTRACT_VIOLATION', content: [text(`Error: tool dump returned ${refused('content', CAP + 1)}`)] }]);
    expect(dataOf(events, 'turn/end')).toStrictEqual([{ turn: 1, reason: { kind: 'completed' } }]);
  });
});

describe("a model's answer of more than 2^26 characters", () => {
  const tooLarge = {
    code: 'MODEL_OUTPUT_TOO_LARGE',
    message: `the model sent an answer whose text, reasoning and tool input hold more than ${CAP} characters (64 Mi), more than a session log stores in one message; it was cut there and no tool of it ran`,
  };

  it('is cut before the delta that passes it: the turn ends MODEL_OUTPUT_TOO_LARGE, no tool runs, and the log (the answer up to there) is stored', async () => {
    const file = files.file();
    const delta = 'x'.repeat(2 ** 22);
    const model = {
      async *stream(): AsyncGenerator<ModelChunk> {
        yield { type: 'reasoning-delta', text: delta };
        for (let index = 0; index < 100; index++) yield { type: 'text-delta', text: delta };
        yield { type: 'tool-call', id: 'call_A', name: 'effect', input: {} };
        yield { type: 'finish', reason: 'tool-calls' };
      },
    };
    const effect = recordingTool('effect');
    const host = await sqliteHost(file, { tools: [effect] });
    const agent = await host.createAgent({ sessionId: 'a', model });
    agent.followup([text('go')]);
    await agent.whenIdle();
    expect(effect.calls).toStrictEqual([]);
    await host.close();
    hosts.splice(hosts.indexOf(host), 1);
    const events = await storedEvents(file, 'a');
    expect(dataOf(events, 'turn/end')).toStrictEqual([{ turn: 1, reason: { kind: 'error', error: tooLarge } }]);
    const [answer] = dataOf<{ content: { type: string; text: string }[] }>(events, 'assistant/message');
    expect(answer?.content.map((block) => [block.type, block.text.length])).toStrictEqual([
      ['reasoning', 2 ** 22],
      ['text', 15 * 2 ** 22],
    ]);
  }, 120_000);

  it('counts tool input too: a call that passes it ends the turn, and no tool of the answer runs', async () => {
    const half = 'x'.repeat(2 ** 25);
    const model = {
      async *stream(): AsyncGenerator<ModelChunk> {
        yield { type: 'text-delta', text: half };
        yield { type: 'tool-call', id: 'call_A', name: 'effect', input: {} };
        yield { type: 'tool-call', id: 'call_B', name: 'effect', input: { data: half } };
        yield { type: 'finish', reason: 'tool-calls' };
      },
    };
    const effect = recordingTool('effect');
    const host = await createHost({ providers: false, tools: [effect] });
    hosts.push(host);
    const agent = await host.createAgent({ model });
    agent.followup([text('go')]);
    await agent.whenIdle();
    expect(effect.calls).toStrictEqual([]);
    expect(dataOf(agent.session.events, 'turn/end')).toStrictEqual([{ turn: 1, reason: { kind: 'error', error: tooLarge } }]);
  });

  it('a scripted step of exactly 2^26 characters of text is answered whole', async () => {
    const host = await createHost({ providers: false, model: { kind: 'scripted', steps: [{ text: 'x'.repeat(CAP) }] } });
    hosts.push(host);
    const agent = await host.createAgent();
    agent.followup([text('go')]);
    await agent.whenIdle();
    expect(dataOf(agent.session.events, 'turn/end')).toStrictEqual([{ turn: 1, reason: { kind: 'completed' } }]);
    expect(dataOf<{ content: { text: string }[] }>(agent.session.events, 'assistant/message')[0]?.content[0]?.text.length).toBe(CAP);
  }, 60_000);
});
