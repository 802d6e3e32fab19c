// Content that holds one object at many places is plain JSON, but it is written out (stored, sent to
// a model, copied to a thread) in full at every place that holds it. Such content is checked in one
// walk of each object, and refused where it enters when written out it would hold more than a
// million objects beyond sixteen times its own: a value holding the level below twice, 40 levels
// deep (2^41 written out), used to hang the thread that checked it. The refusals run in a process
// of their own (test/fixtures/shared-content.mjs): a thread that hangs cannot fail its own test, so
// the test fails at its timeout and the process is killed.
import { afterEach, describe, expect, it } from 'vitest';
import { createHost, inProcessProvider, text, type Host, type Tool } from 'subagent-host';
import { dataOf, runNodeScript, tempFiles } from './helpers.js';

const packageUrl = new URL('../dist/src/index.js', import.meta.url).href;
const script = new URL('./fixtures/shared-content.mjs', import.meta.url).pathname;
const files = tempFiles('shared-content-');
const hosts: Host[] = [];
afterEach(async () => {
  await Promise.all(hosts.splice(0).map((host) => host.close()));
});

/** What the fixture printed for `scenario`, once its process ended by itself (well within the test's timeout). */
async function scenario<T>(name: string): Promise<T> {
  const { code, out, err } = await runNodeScript(script, [packageUrl, name, files.file()]);
  expect({ code, err }).toStrictEqual({ code: 0, err: '' });
  return JSON.parse(out) as T;
}

const REFUSED = /its [45]\d objects and arrays are held at so many places that written out in full it would take (\d+|more than 2\^43) \(a shared object is written at every place that holds it\); hold each shared object at fewer places \(refer to it by a key or an index\)/;

describe('content holding one object at 2^41 places, written out', () => {
  it.each([
    ['a host tool of an in-process child', 'in-process'],
    ['a host tool of a worker child', 'spawn'],
    ["a worker child's own tool (its thread's check)", 'worker-tool'],
  ])('returned by %s fails that call CONTRACT_VIOLATION, which the model sees; the run completes', async (_name, name) => {
    const { stopReason, output, results } = await scenario<{ stopReason: string; output: unknown; results: unknown[] }>(name);
    expect(stopReason).toBe('completed');
    expect(output).toStrictEqual([text('done')]);
    expect(results).toStrictEqual([
      expect.objectContaining({ isError: true, code: 'CONTRACT_VIOLATION', content: [{ type: 'text', text: expect.stringMatching(new RegExp(`^Error: tool doubled returned content: ${REFUSED.source}$`)) }] }),
    ]);
  }, 30_000);

  it('is refused where it enters: a prompt, a follow-up, a steer, a continuable start and follow-up (INVALID_REQUEST), a model spec, a tool’s parameters', async () => {
    const refusals = await scenario<Record<string, { code: string; message: string }>>('entry');
    const refused = (code: string, where: string) => ({ code, message: expect.stringMatching(new RegExp(`${where}.*${REFUSED.source}`)) as unknown });
    expect(refusals).toStrictEqual({
      start: refused('INVALID_REQUEST', '^request\\.prompt: '),
      // 50 levels: written out, 2^51 objects, told as more than 2^43.
      'start tool_call input': refused('INVALID_REQUEST', '^request\\.prompt: (?=its 52 objects .* more than 2\\^43 )'),
      'agent followup': refused('INVALID_REQUEST', '^message content: '),
      'agent steer': refused('INVALID_REQUEST', '^message content: '),
      startContinuable: refused('INVALID_REQUEST', '^message content: '),
      'continuation followup': refused('INVALID_REQUEST', '^message content: '),
      'model spec': refused('INVALID_MODEL_SPEC', 'toolCalls\\[0\\]\\.input: must be plain JSON \\(input: '),
      scriptedModel: refused('INVALID_MODEL_SPEC', 'toolCalls\\[0\\]\\.input: must be plain JSON \\(input: '),
      'tool parameters': refused('INVALID_OPTIONS', '^tool p parameters: '),
    });
  }, 30_000);
});

/** `count` objects, each held at two places. */
function twice(count: number) {
  const leaves = Array.from({ length: count }, (_, index) => ({ index }));
  return { leaves, again: leaves.map((leaf) => [leaf]) };
}

const twiceTool: Tool = { name: 'twice', description: 'twice', parameters: { type: 'object' }, execute: async () => ({ content: [{ type: 'text', text: 'x', extra: twice(1_000) }] as never }) };
const steps = [{ toolCalls: [{ name: 'twice', input: {} }] }, { text: 'done' }];

describe('content holding many objects at a few places each', () => {
  it('is taken from a prompt and a tool, and stored as JSON that holds each object at each of its places', async () => {
    const file = files.file();
    const host = await createHost({ providers: false, persistence: { sqlite: file }, tools: [twiceTool], model: { kind: 'scripted', steps } });
    hosts.push(host);
    const agent = await host.createAgent({ sessionId: 'a' });
    agent.followup([{ type: 'text', text: 'go', extra: twice(1_000) } as never]);
    await agent.whenIdle();
    await host.close();
    hosts.pop();
    const again = await createHost({ providers: false, persistence: { sqlite: file } });
    hosts.push(again);
    const { agent: loaded } = await again.agents.resume({ sessionId: 'a' });
    const [message] = dataOf<{ content: { extra: ReturnType<typeof twice> }[] }>(loaded.session.events, 'inbox/accepted');
    const [result] = dataOf<{ isError?: boolean; content: { extra: ReturnType<typeof twice> }[] }>(loaded.session.events, 'tool/result');
    for (const { extra } of [message!.content[0]!, result!.content[0]!]) {
      expect(extra).toStrictEqual(twice(1_000));
      // Written out at each place: read back, the two places hold two equal objects.
      expect(extra.again[999]![0]).not.toBe(extra.leaves[999]);
    }
    expect(result!.isError).toBeUndefined();
  });

  it.each(['in-process', 'spawn'])('is returned by a host tool of a child (%s) and reaches its log', async (provider) => {
    const host = await createHost({ providers: provider !== 'in-process', tools: [twiceTool], pool: { minThreads: 0, maxThreads: 1 } });
    hosts.push(host);
    if (provider === 'in-process') host.subagents.registerProvider(inProcessProvider(host));
    const parent = await host.createAgent();
    const run = await host.subagents.start(provider, { prompt: [text('go')], parent, signal: new AbortController().signal, agentOptions: { model: { kind: 'scripted', steps } } });
    expect(await run.result).toMatchObject({ stopReason: 'completed', output: [text('done')] });
    const [result] = dataOf<{ isError?: boolean; content: { extra: unknown }[] }>(host.sessions.get(run.id)!.events, 'tool/result');
    expect(result).toMatchObject({ content: [{ type: 'text', text: 'x', extra: twice(1_000) }] });
    expect(result!.isError).toBeUndefined();
    await run.dispose();
  });
});
