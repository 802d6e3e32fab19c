// The tools a child's model is offered, and a tool module clashing with them, the same on every
// local provider: in-process and in worker threads, one-shot and continuable (resident in a thread).
import { describe, expect, it } from 'vitest';
import { SubagentError, forkProvider, reportTool, spawnProvider, text, type Agent, type Host, type ModelSpec, type SessionEvent, type TurnEndReason } from 'subagent-host';
import { recordingTool } from './helpers.js';
import { continuationHost, continuationSuite, turnEnds } from './continuation-helpers.js';
import { resultsOf } from './tool-helpers.js';

const suite = continuationSuite('subagent-child-tools-');
const SHOUT_TOOLS = new URL('./fixtures/tool-module.mjs', import.meta.url).href;
/** Answers `tools: <names of the tools it was offered, in order>`. */
const TOOL_NAMES: ModelSpec = { kind: 'module', specifier: new URL('./fixtures/echo-model.mjs', import.meta.url).href, export: 'createToolNamesEchoModel' };
const PROVIDERS = ['in-process', 'in-process-fork', 'spawn', 'fork'];

/** A tool module exporting one tool named `name`. */
const moduleWithTool = (name: string) => `data:text/javascript,${encodeURIComponent(`export const tools = [{ name: '${name}', description: '', parameters: { type: 'object' }, execute: () => 'module' }];`)}`;

async function setup() {
  const fixture = await suite.setup({ tools: [recordingTool('host_a'), recordingTool('host_b')] }, (host) => {
    host.subagents.registerProvider(spawnProvider(host));
    host.subagents.registerProvider(forkProvider(host));
    reportTool(host);
  });
  // The forking providers' children start from a parent turn.
  fixture.parent.followup([text('hello')]);
  await fixture.parent.whenIdle();
  return fixture;
}

function startOneShot(host: Host, parent: Agent, provider: string, toolModules: string[]) {
  return host.subagents.start(provider, { prompt: [text('go')], parent, signal: new AbortController().signal, agentOptions: { model: TOOL_NAMES, toolModules } });
}

function startContinuable(host: Host, parent: Agent, provider: string, toolModules: string[]) {
  return host.subagents.startContinuable({ provider, label: 'tools', request: { prompt: [text('go')], parent, agentOptions: { model: TOOL_NAMES, toolModules } } });
}

/** The last turn end of a log. */
function lastTurnEnd(events: readonly SessionEvent[]): TurnEndReason {
  return (events.findLast((e) => e.type === 'turn/end')!.data as { reason: TurnEndReason }).reason;
}

describe('the tools a child is offered', () => {
  it('are the host tools, then its tool modules’ tools, then report (continuable), in that order on every provider', async () => {
    const { host, parent, recorder } = await setup();
    const offered: Record<string, unknown[]> = {};
    const children: Record<string, string> = {};
    for (const provider of PROVIDERS) {
      const run = await startOneShot(host, parent, provider, [SHOUT_TOOLS]);
      const { output } = await run.result;
      await run.dispose();
      const { childId } = await startContinuable(host, parent, provider, [SHOUT_TOOLS]);
      children[provider] = childId;
      await recorder.until(() => recorder.ends.some((end) => end.id === childId));
      offered[provider] = [output, recorder.ends.find((end) => end.id === childId)!.lastAssistantMessage];
    }
    // A host tool registered between turns joins the host tools; report stays after the module's tool.
    host.tools.register(recordingTool('late'));
    for (const provider of PROVIDERS) {
      const childId = children[provider]!;
      await host.subagents.followup(parent, childId, [text('again')]);
      await recorder.until(() => recorder.ends.filter((end) => end.id === childId).length >= 2);
      offered[provider]!.push(recorder.ends.filter((end) => end.id === childId)[1]!.lastAssistantMessage);
    }
    const expected = [[text('tools: host_a,host_b,shout')], [text('tools: host_a,host_b,shout,report')], [text('tools: host_a,host_b,late,shout,report')]];
    expect(offered).toStrictEqual(Object.fromEntries(PROVIDERS.map((provider) => [provider, expected])));
  });
});

describe('a tool module’s tool named like a tool the child already has', () => {
  const clashes: [string, string, (module: string) => string][] = [
    ['a host tool', 'host_a', (module) => `tool module ${module} exports a tool named host_a, as does a tool the agent already has; pick another name`],
    ['report', 'report', (module) => `tool module ${module} exports a tool named report, as does reportTool (installed on this host: it adds report to every continuable child); pick another name`],
  ];

  it.each(clashes)('in-process refuses the start (%s, DUPLICATE_TOOL); a worker child ends its turn with the same error', async (_what, name, message) => {
    const { host, parent, recorder } = await setup();
    const module = moduleWithTool(name);
    const error = { code: 'DUPLICATE_TOOL', message: message(module) };
    for (const provider of ['in-process', 'in-process-fork']) {
      await expect(startContinuable(host, parent, provider, [module])).rejects.toMatchObject(error);
      if (name === 'report') continue; // a one-shot child has no report tool
      await expect(startOneShot(host, parent, provider, [module])).rejects.toMatchObject(error);
    }
    for (const provider of ['spawn', 'fork']) {
      const { childId } = await startContinuable(host, parent, provider, [module]);
      await recorder.until(() => recorder.ends.some((end) => end.id === childId));
      expect(recorder.ends.find((end) => end.id === childId)).toMatchObject({ stopReason: 'error' });
      expect(lastTurnEnd(host.sessions.get(childId)!.events)).toStrictEqual({ kind: 'error', error });
      if (name === 'report') continue;
      const run = await startOneShot(host, parent, provider, [module]);
      await expect(run.result).resolves.toMatchObject({ stopReason: 'error', diagnostic: `${error.code}: ${error.message}` });
      const own = host.sessions.get(run.id)!.events.slice(host.sessions.get(run.id)!.header.seedLength ?? 0);
      expect(turnEnds(own)).toStrictEqual(['error']);
      expect(lastTurnEnd(own)).toStrictEqual({ kind: 'error', error });
      await run.dispose();
    }
  });

  // The capture tool an outputSchema adds is named too: the refusal says which tool took its name.
  it('refuses an outputSchema with a tool module exporting structured_output, naming the module, in-process at the start and in a worker as its turn’s error', async () => {
    const { host, parent } = await setup();
    const schema = { type: 'object', properties: { answer: { type: 'integer' } }, required: ['answer'] };
    const error = { code: 'DUPLICATE_TOOL', message: "the child's outputSchema adds the capture tool structured_output, but one of its tool modules exports a tool named structured_output: rename that tool" };
    const start = (provider: string) =>
      host.subagents.start(provider, { prompt: [text('go')], parent, signal: new AbortController().signal, outputSchema: schema, agentOptions: { model: TOOL_NAMES, toolModules: [moduleWithTool('structured_output')] } });
    for (const provider of ['in-process', 'in-process-fork']) await expect(start(provider)).rejects.toMatchObject(error);
    for (const provider of ['spawn', 'fork']) {
      const run = await start(provider);
      await expect(run.result).resolves.toMatchObject({ stopReason: 'error', diagnostic: `${error.code}: ${error.message}` });
      await run.dispose();
    }
  });
});

/** A tool module of `source`, as a data URL. */
const moduleOf = (source: string) => `data:text/javascript,${encodeURIComponent(source)}`;

describe('a tool module the child cannot take its tools from', () => {
  // A one-shot start: in-process it rejects with the error, in a worker the child ends `error` with it.
  async function refusals(host: Host, parent: Agent, toolModules: string[]) {
    const seen: Record<string, unknown> = {};
    for (const provider of PROVIDERS) {
      const started = startOneShot(host, parent, provider, toolModules);
      const outcome = await started.then(
        async (run) => {
          const { stopReason, diagnostic } = await run.result;
          await run.dispose();
          return { stopReason, diagnostic };
        },
        (error: unknown) => ({ rejected: error instanceof SubagentError ? `${error.code}: ${error.message}` : String(error) }),
      );
      seen[provider] = outcome;
    }
    return seen;
  }
  const expected = (diagnostic: string) => ({
    'in-process': { rejected: diagnostic },
    'in-process-fork': { rejected: diagnostic },
    spawn: { stopReason: 'error', diagnostic },
    fork: { stopReason: 'error', diagnostic },
  });

  it.each([
    ['a tool whose getter throws', 'export const tools = [{ get name() { throw new Error("no name"); }, description: "", parameters: { type: "object" }, execute: () => "x" }];', (module: string) => `INVALID_OPTIONS: tool module ${module}, tools[0]: a tool could not be read: a getter or proxy trap of it threw (Error: no name)`],
    ['a tools proxy that throws', 'export const tools = new Proxy([], { get(target, key) { if (key === "length") throw new Error("no length"); return Reflect.get(target, key); } });', (module: string) => `INVALID_OPTIONS: tool module ${module}'s tools could not be read: a getter or proxy trap of it threw (Error: no length)`],
  ])('is INVALID_OPTIONS naming the module on every provider (%s)', async (_what, source, diagnostic) => {
    const { host, parent } = await setup();
    const module = moduleOf(source);
    expect(await refusals(host, parent, [module])).toStrictEqual(expected(diagnostic(module)));
  });

  it('is INVALID_OPTIONS naming the module on every provider when toolModules lists it twice, not a clash among its tools', async () => {
    const { host, parent } = await setup();
    expect(await refusals(host, parent, [SHOUT_TOOLS, SHOUT_TOOLS])).toStrictEqual(expected(`INVALID_OPTIONS: toolModules lists tool module ${SHOUT_TOOLS} more than once; list each module once`));
  });
});

describe('a host tool registered under the name of a live continuable child’s tool module tool', () => {
  /** Calls the tool `late` when told `call`, else echoes its history. */
  const CALL_LATE: ModelSpec = { kind: 'module', specifier: new URL('./fixtures/echo-model.mjs', import.meta.url).href, export: 'createCallThenHistoryEchoModel', options: { tool: 'late', on: 'call' } };

  // The child keeps the tools it started with: its module's tool wins, the same while it is
  // resident, in a stay rebuilt in another thread, and brought back by a cold resume.
  it.each(['in-process', 'spawn'])('is hidden from the child on %s: its module’s tool answers resident, rebuilt and after a cold resume', async (provider) => {
    const db = suite.files.file();
    const open = async (tools: ReturnType<typeof recordingTool>[]) => {
      const host = suite.track(await continuationHost(db, { tools, pool: { minThreads: 0, maxThreads: 1 } }));
      host.subagents.registerProvider(spawnProvider(host));
      return host;
    };
    const late = recordingTool('late', { output: 'host' });
    const first = await open([recordingTool('host_a')]);
    const parent = await first.createAgent();
    const { childId } = await first.subagents.startContinuable({ provider, label: 'late', request: { prompt: [text('go')], parent, agentOptions: { model: CALL_LATE, toolModules: [moduleWithTool('late')] } } });
    const ask = async (host: typeof first, from: Agent, turns: number) => {
      await host.subagents.followup(from, childId, [text('call')]);
      await host.recorder.until(() => host.recorder.ends.filter((end) => end.id === childId).length >= turns);
    };
    await first.recorder.until(() => first.recorder.ends.some((end) => end.id === childId));
    first.tools.register(late);
    await ask(first, parent, 2);
    let turns = 2;
    if (provider === 'spawn') {
      // A one-shot start takes the only slot: the idle resident child leaves its thread, and its next turn rebuilds it.
      const run = await first.subagents.start('spawn', { prompt: [text('hi')], parent, signal: new AbortController().signal, agentOptions: { model: { kind: 'scripted' } } });
      await run.result;
      await run.dispose();
      await ask(first, parent, ++turns);
    }
    await first.close();
    const second = await open([recordingTool('host_a'), late]);
    await ask(second, (await second.agents.resume({ sessionId: parent.id })).agent, 1);
    const events = second.sessions.get(childId)!.events;
    expect(turnEnds(events)).toStrictEqual(Array<string>(turns + 1).fill('completed'));
    expect(resultsOf(events).map((result) => [result.name, result.content])).toStrictEqual(Array(turns).fill(['late', [text('module')]]));
    expect(late.calls).toStrictEqual([]);
  });
});
