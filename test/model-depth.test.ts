// How deep a model's tool call may nest: 256 levels (what every boundary holds) from any source, an
// OpenAI-compatible server on loopback or a ready adapter; a deeper call ends the turn
// MODEL_OUTPUT_TOO_DEEP naming the model and the depth, logs no call, and leaves the host working.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createHost, inProcessProvider, text, type Host, type ModelChunk, type ModelSpec, type Tool } from 'subagent-host';
import { dataOf, tempFiles } from './helpers.js';
import { KEY, serve, sse, useServers, type TestServer } from './openai-helpers.js';

useServers();

// A worker thread reads the environment the process had when it started: set before any host.
process.env['MODEL_DEPTH_TEST_KEY'] = KEY;

const files = tempFiles('model-depth-');
const hosts: Host[] = [];
afterEach(async () => {
  await Promise.all(hosts.splice(0).map((host) => host.close()));
});

/** The JSON text of an object `depth` levels deep (1: `{}`), built as text: stringifying it could overflow. */
function nestedText(depth: number): string {
  return '{"c":'.repeat(depth - 1) + '{}' + '}'.repeat(depth - 1);
}

function nested(depth: number): Record<string, unknown> {
  let value: Record<string, unknown> = {};
  for (let level = 1; level < depth; level++) value = { c: value };
  return value;
}

const DONE = 'data: [DONE]\n\n';

/** A server whose first answer calls `nest` with `args` (JSON text, or an object's text sent as an object), then answers `done`. */
async function callingServer(args: string, asObject = false, name = 'nest'): Promise<TestServer> {
  const fn = `{"name":"${name}","arguments":${asObject ? args : JSON.stringify(args)}}`;
  const call = `data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","function":${fn}}]}}]}\n\n`;
  const finish = (reason: string) => `data: ${JSON.stringify({ choices: [{ index: 0, delta: {}, finish_reason: reason }] })}\n\n`;
  const answer = `data: ${JSON.stringify({ choices: [{ index: 0, delta: { content: 'done' } }] })}\n\n`;
  return serve(sse(call + finish('tool_calls') + DONE), sse(answer + finish('stop') + DONE));
}

function openai(server: TestServer): ModelSpec {
  return { kind: 'openai', baseURL: server.baseURL, model: 'gpt-test', apiKeyEnv: 'MODEL_DEPTH_TEST_KEY' };
}

/** A host tool whose schema recurses, recording the depth of each input it ran with. */
function nestTool(): Tool & { depths: number[] } {
  const depths: number[] = [];
  const depthOf = (value: unknown): number => (value !== null && typeof value === 'object' ? 1 + depthOf((value as { c?: unknown }).c) : 0);
  return {
    name: 'nest',
    description: 'takes nested input',
    parameters: { type: 'object', properties: { c: { $ref: '#' } } },
    execute: (input) => {
      depths.push(depthOf(input));
      return Promise.resolve('ran');
    },
    depths,
  };
}

let tool: ReturnType<typeof nestTool>;
let db: string;

beforeEach(() => {
  tool = nestTool();
  db = files.file();
});

async function open(): Promise<Host> {
  const host = await createHost({ persistence: { sqlite: db }, tools: [tool] });
  hosts.push(host);
  host.subagents.registerProvider(inProcessProvider(host));
  return host;
}

const tooDeep = (server: TestServer, depth: number) =>
  `openai model gpt-test at ${server.baseURL}/chat/completions sent a call of tool nest whose input is nested ${depth} levels deep, more than the 256 a session log holds; no tool of that answer ran`;

describe('tool calls of an OpenAI-compatible server', () => {
  it('runs a call nested 256 levels deep, on this thread and in spawn and in-process children, and stores it', async () => {
    const host = await open();
    const agent = await host.createAgent({ agentOptions: { model: openai(await callingServer(nestedText(256))) } });
    agent.followup([text('go')]);
    await agent.whenIdle();
    expect(dataOf(agent.session.events, 'turn/end')).toEqual([{ turn: 1, reason: { kind: 'completed' } }]);
    for (const provider of ['spawn', 'in-process']) {
      const model = openai(await callingServer(nestedText(256)));
      const run = await host.subagents.start(provider, { prompt: [text('go')], parent: agent, signal: new AbortController().signal, agentOptions: { model } });
      expect(await run.result).toMatchObject({ stopReason: 'completed', output: [{ type: 'text', text: 'done' }] });
      await run.dispose();
    }
    expect(tool.depths).toEqual([256, 256, 256]);
    await host.sessions.flush();
    expect((await host.persistence!.load(agent.id))?.events.filter((event) => event.type === 'tool/call')).toHaveLength(1);
  });

  it.each([257, 7000, 50_000])('ends the turn MODEL_OUTPUT_TOO_DEEP for a call nested %i levels deep, naming the model and the depth', async (depth) => {
    const server = await callingServer(nestedText(depth));
    const host = await open();
    const agent = await host.createAgent({ agentOptions: { model: openai(server) } });
    agent.followup([text('go')]);
    await agent.whenIdle();
    expect(dataOf(agent.session.events, 'turn/end')).toEqual([{ turn: 1, reason: { kind: 'error', error: { code: 'MODEL_OUTPUT_TOO_DEEP', message: tooDeep(server, depth) } } }]);
    expect(dataOf(agent.session.events, 'tool/call')).toEqual([]);
    expect(tool.depths).toEqual([]);
    // The session goes on (its history holds no call) and its log is stored.
    agent.followup([text('again')]);
    await agent.whenIdle();
    expect(dataOf(agent.session.events, 'turn/end')[1]).toEqual({ turn: 2, reason: { kind: 'completed' } });
    await host.sessions.flush();
    expect((await host.persistence!.load(agent.id))?.events).toHaveLength(agent.session.events.length);
  });

  it('ends the turn MODEL_OUTPUT_TOO_DEEP for arguments sent as an object nested 7000 levels deep', async () => {
    const server = await callingServer(nestedText(7000), true);
    const host = await open();
    const agent = await host.createAgent({ agentOptions: { model: openai(server) } });
    agent.followup([text('go')]);
    await agent.whenIdle();
    expect(dataOf(agent.session.events, 'turn/end')).toEqual([{ turn: 1, reason: { kind: 'error', error: { code: 'MODEL_OUTPUT_TOO_DEEP', message: tooDeep(server, 7000) } } }]);
  });

  it.each(['spawn', 'in-process'])('ends a %s child MODEL_OUTPUT_TOO_DEEP for a call nested 7000 levels deep', async (provider) => {
    const server = await callingServer(nestedText(7000));
    const host = await open();
    const parent = await host.createAgent();
    const run = await host.subagents.start(provider, { prompt: [text('go')], parent, signal: new AbortController().signal, agentOptions: { model: openai(server) } });
    expect(await run.result).toMatchObject({ stopReason: 'error', diagnostic: `MODEL_OUTPUT_TOO_DEEP: ${tooDeep(server, 7000)}` });
    await run.dispose();
    expect(tool.depths).toEqual([]);
  });
});

describe('tool calls of an OpenAI-compatible server with a number no double holds', () => {
  const HUGE = '{"c":{"c":{}},"n":[1, -1e309]}';
  const outOfRange = (name: string) => `Error: ${name} input holds a number beyond the range of a double (such as 1e309), which JSON cannot carry back: send one JSON object that matches its input schema`;

  it('refuses the call INVALID_TOOL_INPUT and logs and stores its arguments as sent', async () => {
    const host = await open();
    const agent = await host.createAgent({ agentOptions: { model: openai(await callingServer(HUGE)) } });
    agent.followup([text('go')]);
    await agent.whenIdle();
    expect(tool.depths).toEqual([]);
    expect(dataOf(agent.session.events, 'tool/call')).toEqual([{ turn: 1, step: 1, callId: 'call_1', name: 'nest', input: HUGE }]);
    expect(dataOf(agent.session.events, 'tool/result')).toMatchObject([{ isError: true, code: 'INVALID_TOOL_INPUT', content: [{ type: 'text', text: outOfRange('nest') }] }]);
    expect(dataOf(agent.session.events, 'turn/end')).toEqual([{ turn: 1, reason: { kind: 'completed' } }]);
    await host.sessions.flush();
    expect((await host.persistence!.load(agent.id))?.events).toEqual(agent.session.events);
  });

  it.each(['spawn', 'in-process'])('settles a %s child with an output schema error, not a rejected result, when its structured output holds one', async (provider) => {
    const host = await open();
    const parent = await host.createAgent();
    const model = openai(await callingServer(HUGE, false, 'structured_output'));
    const run = await host.subagents.start(provider, { prompt: [text('go')], parent, signal: new AbortController().signal, outputSchema: { type: 'object' }, agentOptions: { model } });
    const result = await run.result;
    expect(result).toMatchObject({ stopReason: 'error', diagnostic: 'the child finished without calling structured_output' });
    expect(result.structured).toBeUndefined();
    expect(dataOf(host.sessions.get(run.id)!.events, 'tool/result')).toMatchObject([{ code: 'INVALID_TOOL_INPUT', content: [{ type: 'text', text: outOfRange('structured_output') }] }]);
    await run.dispose();
  });
});

describe('tool calls of a ready adapter given to createAgent', () => {
  async function turnEnd(input: unknown): Promise<unknown> {
    const host = await open();
    const model = {
      async *stream(): AsyncGenerator<ModelChunk> {
        yield { type: 'tool-call', id: 'call_1', name: 'nest', input };
        yield { type: 'finish', reason: 'tool-calls' };
      },
    };
    const agent = await host.createAgent({ model });
    agent.followup([text('go')]);
    await agent.whenIdle();
    expect(dataOf(agent.session.events, 'tool/call')).toEqual([]);
    return dataOf(agent.session.events, 'turn/end')[0];
  }

  it('ends the turn MODEL_OUTPUT_TOO_DEEP for a call nested 7000 levels deep, naming the adapter and the depth', async () => {
    expect(await turnEnd(nested(7000))).toEqual({ turn: 1, reason: { kind: 'error', error: {
      code: 'MODEL_OUTPUT_TOO_DEEP',
      message: 'the model adapter given to createAgent sent a call of tool nest whose input is nested 7000 levels deep, more than the 256 a session log holds; no tool of that answer ran',
    } } });
  });

  it('still ends the turn MODEL_CONTRACT for input whose getter throws while its depth is measured', async () => {
    const input = { get c(): unknown { throw new Error('boom'); } };
    expect(await turnEnd(input)).toMatchObject({ reason: { kind: 'error', error: { code: 'MODEL_CONTRACT', message: expect.stringContaining('tool-call.input could not be read') } } });
  });
});
