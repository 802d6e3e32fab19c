// Content that enters a log (prompts, messages, follow-ups) must be content blocks of plain JSON:
// anything a session log or a thread port cannot carry is refused INVALID_REQUEST where it enters,
// before any child exists, instead of failing later where nobody asked for it.
import { afterEach, describe, expect, it } from 'vitest';
import { createHost, inProcessProvider, text, type ContentBlock, type Host, type MessageSource } from 'subagent-host';
import { continuationHost } from './continuation-helpers.js';
import { tempFiles } from './helpers.js';

const files = tempFiles('content-boundaries-');
const hosts: Host[] = [];
afterEach(async () => {
  await Promise.all(hosts.splice(0).map((host) => host.close()));
});

const cycle: Record<string, unknown> = { type: 'text', text: 'c' };
cycle['self'] = cycle;

/** Tool results nested `depth` deep: far past the 256 levels a log holds, deep enough to overflow a naive recursive check. */
function nestedResults(depth: number): ContentBlock {
  let block: ContentBlock = { type: 'text', text: 'x' };
  for (let level = 0; level < depth; level++) block = { type: 'tool_result', callId: 'c', content: [block] };
  return block;
}

/**
 * A block holding a chain of `levels` objects at `c`, and again `deeper` levels down under `w`: the
 * check walks the chain once (at its first place), and must still find it too deep at its second.
 */
function heldShallowAndDeep(levels: number, deeper: number): ContentBlock {
  let chain: Record<string, unknown> = {};
  for (let level = 0; level < levels; level++) chain = { n: chain };
  let wrapped: Record<string, unknown> = { c: chain };
  for (let level = 0; level < deeper; level++) wrapped = { w: wrapped };
  return { type: 'text', text: 'x', c: chain, w: wrapped } as ContentBlock;
}

const unfit: [string, unknown, RegExp][] = [
  ['a bigint', { type: 'text', text: 'x', n: 1n }, /prompt\[0\]\.n is a bigint/],
  ['a function', { type: 'text', text: 'x', run() {} }, /prompt\[0\]\.run is a function/],
  ['a cycle', cycle, /prompt\[0\]\.self refers back/],
  ['a Date as text', { type: 'text', text: new Date(0) }, /prompt\[0\]\.text must be a string/],
  ['a number as text', { type: 'text', text: 5 }, /prompt\[0\]\.text must be a string/],
  ['an unknown block type', { type: 'video', url: 'x' }, /prompt\[0\]\.type must be one of/],
  ['an image without base64 data', { type: 'image', mimeType: 'image/png', data: 123 }, /prompt\[0\]\.data must be/],
  // A model's API refuses such an image, and the history would resend it on every later turn.
  ['an image whose data is not base64', { type: 'image', mimeType: 'image/png', data: 'not base64!!' }, /prompt\[0\]\.data must be the image's bytes as padded base64/],
  ['an image whose base64 is unpadded', { type: 'image', mimeType: 'image/png', data: 'AAA' }, /prompt\[0\]\.data must be the image's bytes as padded base64/],
  ['an image whose base64 has padding before its end', { type: 'image', mimeType: 'image/png', data: 'A=B=' }, /prompt\[0\]\.data must be the image's bytes as padded base64/],
  ['an image whose base64 has three padding characters', { type: 'image', mimeType: 'image/png', data: 'A===' }, /prompt\[0\]\.data must be the image's bytes as padded base64/],
  ['an image without data', { type: 'image', mimeType: 'image/png', data: '' }, /prompt\[0\]\.data must be the image's bytes as padded base64/],
  ['an image without a mimeType', { type: 'image', mimeType: '', data: 'AAAA' }, /prompt\[0\]\.mimeType must be an image media type/],
  ['an image whose mimeType is no image type', { type: 'image', mimeType: 'text/html', data: 'aGVsbG8=' }, /prompt\[0\]\.mimeType must be an image media type/],
  ['a class instance', new (class Block { type = 'text'; text = 'x'; })(), /prompt\[0\] is a class instance/],
  ['NaN', { type: 'tool_call', id: 'c', name: 'n', input: { x: Number.NaN } }, /input\.x is NaN/],
  ['a getter that throws', { type: 'text', get text(): string { throw new Error('boom'); } }, /could not be read/],
  ['tool results nested 20,000 deep', nestedResults(20_000), /prompt\[0\](\.content\[0\])+\.content is nested more than 256 levels deep/],
  ['an object nested 200 deep held at a second place 100 levels deeper', heldShallowAndDeep(200, 100), /prompt\[0\](\.w)+\.c is nested more than 256 levels deep/],
  ['a nested tool result with a bad block', { type: 'tool_result', callId: 'c', content: [{ type: 'text' }] }, /prompt\[0\]\.content\[0\]\.text must be a string/],
];

describe('content blocks at the boundaries', () => {
  it.each(unfit)('start() refuses a prompt with %s: INVALID_REQUEST naming the field, no child', async (_name, block, message) => {
    const host = await createHost({ providers: false });
    hosts.push(host);
    host.subagents.registerProvider(inProcessProvider(host));
    const parent = await host.createAgent();
    const starting = host.subagents.start('in-process', { prompt: [block as ContentBlock], parent, signal: new AbortController().signal });
    await expect(starting).rejects.toMatchObject({ name: 'SubagentError', code: 'INVALID_REQUEST', message: expect.stringMatching(message) });
    expect(host.sessions.list().map((session) => session.header.id)).toStrictEqual([parent.id]);
  });

  it('accepts plain JSON blocks of every type, with extra fields, shared (not cyclic) objects and undefined properties', async () => {
    const host = await createHost({ providers: false });
    hosts.push(host);
    host.subagents.registerProvider(inProcessProvider(host));
    const parent = await host.createAgent();
    const shared = { deep: [1, 'two', null, true] };
    const prompt = [
      { type: 'text', text: 'a', meta: shared, skipped: undefined },
      { type: 'reasoning', text: 'b' },
      { type: 'image', mimeType: 'image/png', data: 'AAAA' },
      { type: 'tool_call', id: 'c1', name: 'n', input: { shared, again: shared } },
      { type: 'tool_result', callId: 'c1', content: [text('r')], isError: false },
    ] as ContentBlock[];
    const run = await host.subagents.start('in-process', { prompt, parent, signal: new AbortController().signal });
    expect((await run.result).stopReason).toBe('completed');
    await run.dispose();
  });

  it('Agent.followup refuses a message the log cannot hold and leaves the agent idle', async () => {
    const host = await createHost({ providers: false });
    hosts.push(host);
    const agent = await host.createAgent();
    expect(() => agent.followup([{ type: 'text', text: 'x', n: 2n } as unknown as ContentBlock])).toThrow(
      expect.objectContaining({ code: 'INVALID_REQUEST', message: expect.stringContaining('content[0].n is a bigint') }),
    );
    expect(agent.status).toBe('idle');
  });

  it('Agent.followup refuses a source that is not one of the source kinds, and the session goes on being stored', async () => {
    const file = files.file();
    const host = await createHost({ providers: false, persistence: { sqlite: file } });
    hosts.push(host);
    const agent = await host.createAgent({ sessionId: 'a' });
    for (const source of [{ kind: 'user', n: 1n }, 'user', { kind: 'whatever' }, { kind: 'plugin' }, new (class Source { kind = 'user'; })()]) {
      expect(() => agent.followup([text('x')], { source: source as MessageSource })).toThrow(expect.objectContaining({ code: 'INVALID_REQUEST' }));
    }
    const source = { kind: 'plugin', name: 'cron' } as const;
    agent.followup([text('kept')], { source });
    await agent.whenIdle();
    await host.close();
    hosts.pop();
    const again = await createHost({ providers: false, persistence: { sqlite: file } });
    hosts.push(again);
    const { agent: loaded } = await again.agents.resume({ sessionId: 'a' });
    const messages = loaded.session.events.filter((event) => event.type === 'inbox/accepted').map((event) => (event.data as { source: unknown }).source);
    expect(messages).toStrictEqual([source]);
  });

  it('a tool that returns an image a model could not take fails its call CONTRACT_VIOLATION, and the image stays out of the log', async () => {
    const image = { type: 'image', mimeType: 'image/png', data: '%%%%' } as ContentBlock;
    const tool = { name: 'snap', description: '', parameters: { type: 'object' }, execute: async () => ({ content: [text('shot'), image] }) };
    const host = await createHost({ providers: false, tools: [tool], model: { kind: 'scripted', steps: [{ toolCalls: [{ name: 'snap', input: {} }] }, { text: 'done' }] } });
    hosts.push(host);
    const agent = await host.createAgent();
    agent.followup([text('go')]);
    await agent.whenIdle();
    const results = agent.session.events.filter((event) => event.type === 'tool/result').map((event) => event.data);
    expect(results).toMatchObject([{ isError: true, code: 'CONTRACT_VIOLATION', content: [{ type: 'text', text: "Error: tool snap returned content[1].data must be the image's bytes as padded base64" }] }]);
  });

  it('followup and startContinuable refuse such content before anything is accepted', async () => {
    const host = await continuationHost(files.file());
    hosts.push(host);
    const parent = await host.createAgent({ sessionId: 'parent' });
    const bad = [{ type: 'text', text: 'x', when: new Date(0) } as unknown as ContentBlock];
    await expect(host.subagents.startContinuable({ provider: 'in-process', label: 'c', request: { prompt: bad, parent } })).rejects.toMatchObject({ code: 'INVALID_REQUEST' });
    const { childId } = await host.subagents.startContinuable({ provider: 'in-process', label: 'c', request: { prompt: [text('hi')], parent } });
    await host.recorder.until(() => host.recorder.ends.length === 1);
    const accepted = () => host.sessions.get(childId)?.events.filter((event) => event.type === 'inbox/accepted').length;
    const before = accepted();
    await expect(host.subagents.followup(parent, childId, bad)).rejects.toMatchObject({ code: 'INVALID_REQUEST', message: expect.stringContaining('is a class instance') });
    await expect(host.subagents.followup(parent, childId, [text('x')], { source: { kind: 'user', n: 1n } as unknown as MessageSource })).rejects.toMatchObject({
      code: 'INVALID_REQUEST',
      message: expect.stringContaining('source.n is not a field'),
    });
    expect(accepted()).toBe(before);
  });
});
