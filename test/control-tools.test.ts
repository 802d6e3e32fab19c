// The control tools through a scripted parent: send_message, interrupt_agent, list_agents and
// wait_agent on continuable children; task_output and task_cancel on background tasks; each with
// its wrong-id, wrong-authority and bad-input answers read from the parent's log.
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { controlTools, memoryPersistence, scriptedModel, spawnProvider, subagentTool, text, type Agent, type Host, type ModelSpec, type SessionPersistence } from 'subagent-host';
import { AgentStatusTracker, FAILED_KEPT, STORED_KEPT, waitUntil } from '../dist/src/tools/agent-status.js';
import { fakeProvider } from './fake-provider.js';
import { closeAfterEach, holdTool, storeOver, tempFiles } from './helpers.js';
import { HANG, continuationHost, eventually, startChild, turnEnds, untilEvent, userTexts, type Recorder } from './continuation-helpers.js';
import { call, lazyScript, messages, resultJson, resultText, startedId, toolResults } from './tool-helpers.js';

const files = tempFiles('subagent-control-tools-');
const RESIDENT_MODEL: ModelSpec = { kind: 'module', specifier: new URL('./fixtures/resident-model.mjs', import.meta.url).href, export: 'createResidentModel' };
const RESIDENT_TOOLS = new URL('./fixtures/resident-tools.mjs', import.meta.url).href;
const track = closeAfterEach();

async function setup() {
  const host = await continuationHost(files.file());
  track(host);
  controlTools(host);
  return { host, recorder: host.recorder as Recorder };
}

/** Runs one turn of a fresh agent whose model makes the given calls, then answers 'done'. */
async function callAs(host: Host, calls: { name: string; input: unknown }[]): Promise<Agent> {
  const agent = await host.createAgent({ model: lazyScript([...calls.map((c) => call(c.name, c.input)), { text: 'done' }]) });
  agent.followup([text('go')]);
  await agent.whenIdle();
  return agent;
}

const errorOf = (agent: Agent, n: number) => {
  const result = toolResults(agent)[n]!;
  return { isError: result.isError, code: result.code };
};

describe('send_message', () => {
  it('queues the next turn of a continuable child and answers its messageId', async () => {
    const { host, recorder } = await setup();
    subagentTool(host, { provider: 'in-process', mode: 'continuable' });
    const parent: Agent = await host.createAgent({
      model: lazyScript([
        call('subagent', { description: 'scout', prompt: 'first' }),
        () => call('send_message', { agent_id: startedId(parent, 0), message: 'second' }),
        { text: 'sent' },
      ]),
    });
    parent.followup([text('go')]);
    await recorder.until(() => recorder.ends.length === 2);
    await eventually(() => toolResults(parent).length === 2);
    const childId = startedId(parent, 0);
    const { messageId } = resultJson(parent, 1) as { messageId: string };
    const child = host.sessions.get(childId)!;
    expect(userTexts(child.events)).toStrictEqual(['first', 'second']);
    expect(child.events.find((e) => e.type === 'user/message' && (e.data as { id: string }).id === messageId)).toBeDefined();
    await eventually(() => parent.status === 'idle');
  });

  it('refuses a blank message from the child’s own parent: it would wake the child for a turn on nothing', async () => {
    const { host, recorder } = await setup();
    subagentTool(host, { provider: 'in-process', mode: 'continuable' });
    const parent: Agent = await host.createAgent({
      model: lazyScript([call('subagent', { description: 'scout', prompt: 'first' }), () => call('send_message', { agent_id: startedId(parent, 0), message: ' \n\t' }), { text: 'sent' }]),
    });
    parent.followup([text('go')]);
    await recorder.until(() => recorder.ends.length === 1);
    await eventually(() => toolResults(parent).length === 2 && parent.status === 'idle');
    expect(errorOf(parent, 1)).toStrictEqual({ isError: true, code: 'INVALID_TOOL_INPUT' });
    expect(userTexts(host.sessions.get(startedId(parent, 0))!.events)).toStrictEqual(['first']);
  });

  it('answers a wrong id, another agent\'s child and bad input with error results', async () => {
    const { host } = await setup();
    const owner = await host.createAgent();
    const { childId } = await startChild(host, owner, 'hello');
    const other = await callAs(host, [
      { name: 'send_message', input: { agent_id: 'no-such-child', message: 'hi' } },
      { name: 'send_message', input: { agent_id: childId, message: 'hi' } },
      { name: 'send_message', input: { agent_id: 3 } },
    ]);
    expect(errorOf(other, 0)).toStrictEqual({ isError: true, code: 'NOT_RESUMABLE' });
    expect(errorOf(other, 1)).toStrictEqual({ isError: true, code: 'UNAUTHORIZED' });
    expect(errorOf(other, 2)).toStrictEqual({ isError: true, code: 'INVALID_TOOL_INPUT' });

    expect(turnEnds(other.session.events)).toStrictEqual(['completed']);
  });
});

describe('interrupt_agent', () => {
  it('stops the current turn of a child for its parent; refuses other agents and unknown ids', async () => {
    const { host, recorder } = await setup();
    const holder: { childId?: string } = {};
    const parent = await host.createAgent({ model: lazyScript([() => call('interrupt_agent', { agent_id: holder.childId }), { text: 'done' }]) });
    const { childId } = await startChild(host, parent, 'work', { model: HANG });
    holder.childId = childId;
    await untilEvent(host.agents.get(childId)!, 'turn/start');
    const stranger = await callAs(host, [
      { name: 'interrupt_agent', input: { agent_id: childId } },
      { name: 'interrupt_agent', input: { agent_id: 'no-such-agent' } },
    ]);
    expect(errorOf(stranger, 0)).toStrictEqual({ isError: true, code: 'UNAUTHORIZED' });
    expect(errorOf(stranger, 1)).toStrictEqual({ isError: true, code: 'UNKNOWN_SESSION' });
    parent.followup([text('stop it')]);
    await recorder.until(() => recorder.ends.length === 1);
    expect(resultJson(parent, 0)).toStrictEqual({ accepted: true });
    expect(recorder.ends[0]).toMatchObject({ id: childId, stopReason: 'aborted' });
    await eventually(() => parent.status === 'idle' && messages(parent).some((m) => m.source.kind === 'subagent-settled'));
  });
});

describe('interrupt_agent on what is no continuable child below the caller', () => {
  it('refuses an unrelated agent (UNAUTHORIZED) and its own one-shot background task (INVALID_REQUEST, which stays running)', async () => {
    const { host } = await setup();
    subagentTool(host, { provider: 'in-process', background: true, agentOptions: { model: HANG } });
    const bystander = await host.createAgent();
    const parent: Agent = await host.createAgent({
      model: lazyScript([
        call('subagent', { description: 'slow', prompt: 'take forever' }),
        () => call('interrupt_agent', { agent_id: startedId(parent, 0) }),
        call('interrupt_agent', { agent_id: bystander.id }),
        { text: 'done' },
      ]),
    });
    parent.followup([text('go')]);
    await eventually(() => toolResults(parent).length === 3);
    expect(errorOf(parent, 1)).toStrictEqual({ isError: true, code: 'INVALID_REQUEST' });
    expect(resultText(parent, 1)).toContain('is your one-shot background task; stop it with task_cancel');
    expect(errorOf(parent, 2)).toStrictEqual({ isError: true, code: 'UNAUTHORIZED' });
    expect(host.agents.get(startedId(parent, 0))?.status).toBe('running');
  });

  // A worker child's main-thread face is in no agent registry: it was answered "has finished".
  it('refuses its own running spawn background task as running (INVALID_REQUEST, task_cancel), not as finished', async () => {
    const [busy, gate] = [holdTool('busy'), holdTool('gate')];
    const host = track(await continuationHost(files.file(), { tools: [busy.tool, gate.tool], pool: { minThreads: 0, maxThreads: 2 } }));
    host.subagents.registerProvider(spawnProvider(host));
    controlTools(host);
    subagentTool(host, { provider: 'spawn', background: true, agentOptions: { model: { kind: 'scripted', steps: [call('busy', {}), { text: 'done' }] } } });
    const parent: Agent = await host.createAgent({
      model: lazyScript([
        call('subagent', { description: 'slow', prompt: 'take forever' }),
        call('gate', {}),
        () => call('interrupt_agent', { agent_id: startedId(parent, 0) }),
        () => call('task_output', { task_id: startedId(parent, 0) }),
        { text: 'done' },
      ]),
    });
    parent.followup([text('go')]);
    // The task is in its tool call (its log so far is on the host) when the parent asks.
    await Promise.all([busy.entered, gate.entered]);
    gate.release();
    await eventually(() => toolResults(parent).length === 4);
    expect(errorOf(parent, 2)).toStrictEqual({ isError: true, code: 'INVALID_REQUEST' });
    expect(resultText(parent, 2)).toContain('is your one-shot background task; stop it with task_cancel');
    expect(resultJson(parent, 3)).toStrictEqual({ status: 'running' });
    busy.release();
  });

  // A running worker grandchild (whose main-thread face is in no agent registry) was answered "has finished".
  it.each(['in-process', 'spawn'])('refuses a running one-shot %s grandchild pointing at its continuable parent, not at task_cancel, which could not stop it', async (provider) => {
    const host = track(await continuationHost(files.file(), { pool: { minThreads: 0, maxThreads: 2 } }));
    host.subagents.registerProvider(spawnProvider(host));
    controlTools(host);
    subagentTool(host, { provider, toolName: 'fg_hang', agentOptions: { model: HANG } });
    subagentTool(host, {
      provider: 'in-process',
      toolName: 'ct',
      mode: 'continuable',
      agentOptions: { model: { kind: 'scripted', steps: [{ toolCalls: [{ name: 'fg_hang', input: { description: 'g', prompt: 'g' } }] }] } },
    });
    let grandchild: string | undefined;
    host.subagents.on('subagent/start', (info) => {
      if (host.sessions.get(info.id)?.header.delegationDepth === 2) grandchild = info.id;
    });
    const parent: Agent = await host.createAgent({
      model: lazyScript([call('ct', { description: 'c', prompt: 'p' }), { text: 'started' }, () => call('interrupt_agent', { agent_id: grandchild! }), { text: 'done' }]),
    });
    parent.followup([text('go')]);
    await eventually(() => grandchild !== undefined);
    await parent.whenIdle();
    parent.followup([text('stop the grandchild')]);
    await eventually(() => toolResults(parent).length === 2);
    const child = startedId(parent, 0);
    expect(errorOf(parent, 1)).toStrictEqual({ isError: true, code: 'INVALID_REQUEST' });
    expect(resultText(parent, 1)).toContain(`is a one-shot subagent of ${child}; it cannot be interrupted on its own: interrupt its continuable parent instead`);
  });

  // It was pointed at "its continuable parent": the caller itself, which may never interrupt itself.
  it('refuses the caller\'s own running one-shot child without pointing it at itself', async () => {
    const { host } = await setup();
    const parent = await host.createAgent();
    const run = await host.subagents.start('in-process', { prompt: [text('hang')], parent, signal: new AbortController().signal, agentOptions: { model: HANG } });
    const interrupt = host.tools.get('interrupt_agent')!.execute({ agent_id: run.id }, { agent: parent, callId: 'c1', signal: new AbortController().signal });
    await expect(interrupt).rejects.toMatchObject({ code: 'INVALID_REQUEST', message: expect.stringContaining('is your one-shot subagent; it cannot be interrupted on its own') });
    await run.dispose();
  });
});

describe('interrupt_agent on a child of the caller that left residence', () => {
  it('answers accepted for an evicted continuable child, as for an idle resident one; a finished one-shot child has no turn to stop', async () => {
    const host = track(await continuationHost(files.file(), { continuation: { lingerMs: 0 } }));
    controlTools(host);
    const parent = await host.createAgent();
    const { childId } = await startChild(host, parent, 'hello');
    await host.recorder.until(() => host.recorder.ends.length === 1);
    await eventually(() => host.agents.get(childId) === undefined);
    const run = await host.subagents.start('in-process', { prompt: [text('once')], parent, signal: new AbortController().signal });
    await run.result;
    await run.dispose();
    const interrupt = (agent_id: string) => host.tools.get('interrupt_agent')!.execute({ agent_id }, { agent: parent, callId: 'c1', signal: new AbortController().signal });
    expect(JSON.parse(String(await interrupt(childId)))).toStrictEqual({ accepted: true });
    await expect(interrupt(run.id)).rejects.toMatchObject({ code: 'UNKNOWN_SESSION', message: expect.stringContaining('one-shot subagent that has finished') });
    await expect(interrupt('no-such-agent')).rejects.toMatchObject({ code: 'UNKNOWN_SESSION' });
  });
});

describe('list_agents', () => {
  it('lists continuable children with status, and descendants with parent and depth', async () => {
    const { host, recorder } = await setup();
    // The children's settlement notices are turns too: they echo until the listing turn is cued.
    const listing = lazyScript([call('list_agents', {}), call('list_agents', { scope: 'descendants' }), { text: 'done' }]);
    let cued = false;
    const parent = await host.createAgent({ model: { stream: (request) => (cued ? listing : scriptedModel()).stream(request) } });
    const busy = await startChild(host, parent, 'work', { model: HANG, label: 'busy' });
    const quick = await startChild(host, parent, 'hello', { label: 'quick' });
    await recorder.until(() => recorder.ends.some((end) => end.id === quick.childId));
    const failing = await startChild(host, parent, 'fail', { label: 'failing', model: { kind: 'scripted', steps: [{ finish: 'error' }] } });
    await recorder.until(() => recorder.ends.some((end) => end.id === failing.childId));
    // A one-shot child is no agent to talk to: list_agents leaves it out.
    const oneShot = await host.subagents.start('in-process', { prompt: [text('once')], parent, signal: new AbortController().signal });
    await oneShot.result;
    await oneShot.dispose();
    await parent.whenIdle();
    const before = toolResults(parent).length;
    cued = true;
    parent.followup([text('list')]);
    await eventually(() => toolResults(parent).length === before + 2);
    expect(resultJson(parent, before)).toStrictEqual({
      agents: [
        { id: busy.childId, label: 'busy', status: 'running' },
        { id: quick.childId, label: 'quick', status: 'idle' },
        { id: failing.childId, label: 'failing', status: 'failed' },
      ],
      diagnostics: [],
    });
    expect(resultJson(parent, before + 1)).toStrictEqual({
      agents: [
        { id: busy.childId, label: 'busy', status: 'running', parent: parent.id, depth: 1 },
        { id: quick.childId, label: 'quick', status: 'idle', parent: parent.id, depth: 1 },
        { id: failing.childId, label: 'failing', status: 'failed', parent: parent.id, depth: 1 },
      ],
      diagnostics: [],
    });
    const bad = await callAs(host, [{ name: 'list_agents', input: { scope: 'everyone' } }]);
    expect(errorOf(bad, 0)).toStrictEqual({ isError: true, code: 'INVALID_TOOL_INPUT' });
  });
});

/** A user's store over `store`: `close` as given (a host that leaves it open for the next), each `load` told. */
function userStore(store: SessionPersistence, hooks: { close?: () => Promise<void>; onLoad?: () => void }): SessionPersistence {
  return storeOver(store, {
    load: (id) => {
      hooks.onLoad?.();
      return store.load(id);
    },
    ...(hooks.close ? { close: hooks.close } : {}),
  });
}

describe('the control tools after a restart on the same database', () => {
  it('read a child whose last stretch failed (its model failed, or its worker thread died) as failed, as before the restart', async () => {
    const file = files.file();
    const first = await continuationHost(file);
    track(first);
    first.subagents.registerProvider(spawnProvider(first));
    controlTools(first);
    const parent = await first.createAgent();
    const fail: ModelSpec = { kind: 'scripted', steps: [{ finish: 'error' }] };
    const failing = await startChild(first, parent, 'fail', { label: 'failing', model: fail });
    // Its worker thread dies in its turn (process.exit in a tool).
    const worker = await first.subagents.startContinuable({ provider: 'spawn', label: 'worker', request: { prompt: [text('die')], parent, agentOptions: { model: RESIDENT_MODEL, toolModules: [RESIDENT_TOOLS] } } });
    const quick = await startChild(first, parent, 'hello', { label: 'quick' });
    await first.recorder.until(() => first.recorder.ends.length === 3);
    const ids = [failing.childId, worker.childId, quick.childId];
    const read = async (host: Host, agent: Agent) => {
      const ctx = { agent, callId: 'c1', signal: new AbortController().signal };
      const listed = JSON.parse(String(await host.tools.get('list_agents')!.execute({}, ctx))) as { agents: { id: string; status: string }[] };
      const waited = JSON.parse(String(await host.tools.get('wait_agent')!.execute({ agent_ids: ids, timeout_ms: 0 }, ctx))) as unknown;
      return { listed: Object.fromEntries(listed.agents.map((entry) => [entry.id, entry.status])), waited };
    };
    const expected = { [failing.childId]: 'failed', [worker.childId]: 'failed', [quick.childId]: 'idle' };
    expect(await read(first, parent)).toStrictEqual({ listed: expected, waited: { status: expected, timed_out: false } });
    await first.close();

    const second = await continuationHost(file);
    track(second);
    second.subagents.registerProvider(spawnProvider(second));
    controlTools(second);
    const resumed = (await second.agents.resume({ sessionId: parent.id })).agent;
    expect(await read(second, resumed)).toStrictEqual({ listed: expected, waited: { status: expected, timed_out: false } });
    // Reading the logs changed none of them; the next stretch decides: one that completes reads idle.
    await second.subagents.followup(resumed, worker.childId, [text('again')]);
    await second.recorder.until(() => second.recorder.ends.length === 1);
    expect(second.recorder.ends).toMatchObject([{ id: worker.childId, stopReason: 'completed' }]);
    expect(turnEnds(second.sessions.get(worker.childId)!.events)).toStrictEqual(['error', 'completed']);
    expect(await read(second, resumed)).toStrictEqual({ listed: { ...expected, [worker.childId]: 'idle' }, waited: { status: { ...expected, [worker.childId]: 'idle' }, timed_out: false } });
  });

  it('read every stored child as its log says past the statuses they keep, and each log once', { timeout: 120_000 }, async () => {
    // One store for both hosts: the first leaves it open, the second counts the logs it loads.
    const store = memoryPersistence();
    let loads = 0;
    const first = track(await continuationHost(files.file(), { persistence: userStore(store, { close: async () => undefined }) }));
    const parent = await first.createAgent();
    const fail: ModelSpec = { kind: 'scripted', steps: [{ finish: 'error' }] };
    // More children than the statuses kept, the failed ones first: the first read of their logs.
    const count = STORED_KEPT + 6;
    const started = await Promise.all(Array.from({ length: count }, (_, i) => startChild(first, parent, 'hello', { label: `c${i}`, ...(i < 3 ? { model: fail } : {}) })));
    await first.recorder.until(() => first.recorder.ends.length === count);
    await first.close();

    const second = track(await continuationHost(files.file(), { persistence: userStore(store, { onLoad: () => loads++ }) }));
    controlTools(second);
    const resumed = (await second.agents.resume({ sessionId: parent.id })).agent;
    const ctx = { agent: resumed, callId: 'c1', signal: new AbortController().signal };
    const failed = async () => {
      const listed = JSON.parse(String(await second.tools.get('list_agents')!.execute({}, ctx))) as { agents: { id: string; status: string }[] };
      expect(listed.agents).toHaveLength(count);
      return listed.agents.filter((entry) => entry.status === 'failed').map((entry) => entry.id);
    };
    const expected = started.slice(0, 3).map((child) => child.childId);
    expect(await failed()).toStrictEqual(expected);
    expect(loads).toBe(count + 1);
    expect(await failed()).toStrictEqual(expected);
    expect(loads).toBe(count + 1);
  });

  /** Two failed children of one parent, `damage` applied to the second's stored log: list_agents on a new host reads it idle, the first failed. */
  async function listedAfterDamage(damage: (db: Database.Database, childId: string) => void) {
    const file = files.file();
    const first = track(await continuationHost(file));
    controlTools(first);
    const parent = await first.createAgent();
    const failing = await startChild(first, parent, 'fail', { label: 'failing', model: { kind: 'scripted', steps: [{ finish: 'error' }] } });
    const damaged = await startChild(first, parent, 'fail too', { label: 'damaged', model: { kind: 'scripted', steps: [{ finish: 'error' }] } });
    await first.recorder.until(() => first.recorder.ends.length === 2);
    await first.close();
    const db = new Database(file);
    damage(db, damaged.childId);
    db.close();

    const second = track(await continuationHost(file));
    controlTools(second);
    const resumed = (await second.agents.resume({ sessionId: parent.id })).agent;
    const listed = JSON.parse(String(await second.tools.get('list_agents')!.execute({}, { agent: resumed, callId: 'c1', signal: new AbortController().signal }))) as {
      agents: { id: string; status: string }[];
    };
    expect(Object.fromEntries(listed.agents.map((entry) => [entry.id, entry.status]))).toStrictEqual({ [failing.childId]: 'failed', [damaged.childId]: 'idle' });
  }

  it('read a child whose log cannot be read as idle, and still the failure of another', async () => {
    // Its listed row stays readable (stored projections); its log does not.
    await listedAfterDamage((db, childId) => db.prepare("UPDATE events SET data = '{broken' WHERE session_id = ? AND seq = 1").run(childId));
  });

  it.each(['null', '{}', '{"turn":1,"reason":null}'])('read a child whose last turn/end holds %s as idle, and still the failure of another', async (data) => {
    // Valid JSON of another shape: the log loads, and its last turn says nothing of how it ended.
    await listedAfterDamage((db, childId) => expect(db.prepare("UPDATE events SET data = ? WHERE session_id = ? AND type = 'turn/end'").run(data, childId).changes).toBe(1));
  });
});

describe('wait_agent', () => {
  it('times out on a hanging child, named or by default', async () => {
    const { host } = await setup();
    const holder: { childId?: string } = {};
    const parent = await host.createAgent({
      model: lazyScript([() => call('wait_agent', { agent_ids: [holder.childId], timeout_ms: 50 }), call('wait_agent', { timeout_ms: 50 }), { text: 'done' }]),
    });
    const { childId } = await startChild(host, parent, 'work', { model: HANG });
    holder.childId = childId;
    await untilEvent(host.agents.get(childId)!, 'turn/start');
    parent.followup([text('wait')]);
    await eventually(() => toolResults(parent).length === 2);
    expect(resultJson(parent, 0)).toStrictEqual({ status: { [childId]: 'running' }, timed_out: true });
    expect(resultJson(parent, 1)).toStrictEqual({ status: { [childId]: 'running' }, timed_out: true });
  });

  it('ends a wait in progress when the control tools are removed', async () => {
    const host = track(await continuationHost(files.file()));
    const remove = controlTools(host);
    const parent = await host.createAgent();
    const { childId } = await startChild(host, parent, 'work', { model: HANG });
    await untilEvent(host.agents.get(childId)!, 'turn/start');
    // Called as a turn would: removing the tools must not leave this call waiting out its 600 s.
    const waiting = host.tools.get('wait_agent')!.execute({ agent_ids: [childId], timeout_ms: 600_000 }, { agent: parent, callId: 'c1', signal: new AbortController().signal });
    remove();
    expect(JSON.parse(String(await waiting))).toStrictEqual({ status: { [childId]: 'running' }, timed_out: true });
  });

  it('stops waiting when the waiting agent is cancelled', async () => {
    const { host } = await setup();
    const holder: { childId?: string } = {};
    const parent = await host.createAgent({ model: lazyScript([() => call('wait_agent', { agent_ids: [holder.childId], timeout_ms: 600_000 }), { text: 'done' }]) });
    const { childId } = await startChild(host, parent, 'work', { model: HANG });
    holder.childId = childId;
    await untilEvent(host.agents.get(childId)!, 'turn/start');
    parent.followup([text('wait')]);
    await untilEvent(parent, 'tool/call');
    parent.cancel();
    await parent.whenIdle();
    expect(turnEnds(parent.session.events)).toStrictEqual(['aborted']);
    expect(host.agents.get(childId)!.status).toBe('running');
  });

  it('ends when an interrupt parks a child’s queued messages: it reads idle until its next message runs them', async () => {
    const { host, recorder } = await setup();
    // The built tracker's service type is the built one; the host is the same object.
    const tracker = new AgentStatusTracker(host.subagents as unknown as ConstructorParameters<typeof AgentStatusTracker>[0], host.agents);
    const parent = await host.createAgent();
    const { childId } = await startChild(host, parent, 'A', { model: HANG });
    const child = host.agents.get(childId)!;
    await untilEvent(child, 'turn/start');
    await host.subagents.followup(parent, childId, [text('B')]);
    await host.subagents.followup(parent, childId, [text('C')]);
    // A wait in progress hears the interrupt's end of work, though no subagent/end comes.
    const waiting = waitUntil(tracker, () => tracker.statusOf(childId) !== 'running', 600_000, new AbortController().signal);
    host.subagents.interrupt(childId, { kind: 'user', parentSessionId: parent.id });
    expect(await waiting).toBe(true);
    tracker.dispose();
    const ctx = { agent: parent, callId: 'c1', signal: new AbortController().signal };
    const wait = await host.tools.get('wait_agent')!.execute({ agent_ids: [childId], timeout_ms: 600_000 }, ctx);
    expect(JSON.parse(String(wait))).toStrictEqual({ status: { [childId]: 'idle' }, timed_out: false });
    const listed = await host.tools.get('list_agents')!.execute({}, ctx);
    expect(JSON.parse(String(listed))).toStrictEqual({ agents: [{ id: childId, label: 'helper', status: 'idle' }], diagnostics: [] });
    expect(recorder.ends).toStrictEqual([]);
    await host.subagents.followup(parent, childId, [text('D')]);
    await recorder.until(() => recorder.ends.length === 1);
    expect(userTexts(child.session.events)).toStrictEqual(['A', 'B', 'C', 'D']);
  });

  it('returns once a target settles, and refuses ids that are not the caller\'s children', async () => {
    const { host } = await setup();
    subagentTool(host, { provider: 'in-process', mode: 'continuable' });
    const parent: Agent = await host.createAgent({
      model: lazyScript([
        call('subagent', { description: 'quick', prompt: 'hello' }),
        () => call('wait_agent', { agent_ids: [startedId(parent, 0)], timeout_ms: 600_000 }),
        call('wait_agent', { agent_ids: ['someone-else'] }),
        call('wait_agent', { timeout_ms: 600_001 }),
        call('wait_agent', { timeout_ms: 600_000 }),
        { text: 'done' },
      ]),
    });
    parent.followup([text('go')]);
    await eventually(() => toolResults(parent).length === 5);
    const childId = startedId(parent, 0);
    expect(resultJson(parent, 1)).toStrictEqual({ status: { [childId]: 'idle' }, timed_out: false });
    expect(errorOf(parent, 2)).toStrictEqual({ isError: true, code: 'UNAUTHORIZED' });
    expect(errorOf(parent, 3)).toStrictEqual({ isError: true, code: 'INVALID_TOOL_INPUT' });
    // Nothing of the caller's is running: the default wait answers at once instead of waiting out its timeout.
    expect(resultJson(parent, 4)).toStrictEqual({ status: {}, timed_out: false });
    await eventually(() => parent.status === 'idle');
  });

  /** A host whose one pool slot a hanging spawn child (`holder`) takes, with background `subagent` on spawn. */
  async function fullPool() {
    const pooled = await continuationHost(files.file(), { pool: { minThreads: 0, maxThreads: 1 } });
    track(pooled);
    pooled.subagents.registerProvider(spawnProvider(pooled));
    controlTools(pooled);
    subagentTool(pooled, { provider: 'spawn', background: true });
    const holder = await pooled.subagents.start('spawn', { prompt: [text('hold')], parent: await pooled.createAgent(), signal: new AbortController().signal, agentOptions: { model: HANG } });
    return { pooled, holder };
  }

  // No pool slot is free: the task's start waits, with no child and no subagent/start yet. Its
  // holder hangs until the third step cancels it, so the first wait can only time out.
  it.each([
    ['every running subagent', false],
    ['its id', true],
  ])('waits for a background task whose start waits for room (%s)', async (_, named) => {
    const { pooled, holder } = await fullPool();
    const parent: Agent = await pooled.createAgent({
      model: lazyScript([
        call('subagent', { description: 'queued', prompt: 'wait your turn' }),
        () => call('wait_agent', { ...(named ? { agent_ids: [startedId(parent, 0)] } : {}), timeout_ms: 200 }),
        () => {
          holder.cancel();
          return call('wait_agent', { agent_ids: [startedId(parent, 0)], timeout_ms: 600_000 });
        },
        () => call('task_output', { task_id: startedId(parent, 0) }),
        { text: 'done' },
      ]),
    });
    parent.followup([text('go')]);
    await eventually(() => toolResults(parent).length === 4);
    const taskId = startedId(parent, 0);
    expect(resultJson(parent, 1)).toStrictEqual({ status: { [taskId]: 'running' }, timed_out: true });
    expect(resultJson(parent, 2)).toStrictEqual({ status: { [taskId]: 'idle' }, timed_out: false });
    expect(resultJson(parent, 3)).toMatchObject({ status: 'settled', stopReason: 'completed' });
    await holder.dispose();
    await eventually(() => parent.status === 'idle');
  });

  // Given up while it still waits for room (task_cancel, here from the host's side while the
  // model waits): no subagent/start or subagent/end of it comes, and the wait ends all the same.
  it('ends a wait on a background task whose start was given up while it waited for room', async () => {
    const { pooled, holder } = await fullPool();
    const parent: Agent = await pooled.createAgent({
      model: lazyScript([
        call('subagent', { description: 'given up', prompt: 'wait your turn' }),
        () => call('wait_agent', { agent_ids: [startedId(parent, 0)], timeout_ms: 600_000 }),
        { text: 'done' },
      ]),
    });
    parent.followup([text('go')]);
    await eventually(() => parent.session.events.some((event) => event.type === 'tool/call' && (event.data as { name: string }).name === 'wait_agent'));
    const taskId = startedId(parent, 0);
    await new Promise((resolve) => setTimeout(resolve, 50));
    const cancelled = await pooled.tools.get('task_cancel')!.execute({ task_id: taskId }, { agent: parent, callId: 'host-side', signal: new AbortController().signal });
    expect(JSON.parse(String(cancelled))).toStrictEqual({ cancelled: true });
    await eventually(() => toolResults(parent).length === 2);
    expect(resultJson(parent, 1)).toStrictEqual({ status: { [taskId]: 'idle' }, timed_out: false });
    expect(pooled.sessions.get(taskId)).toBeUndefined();
    await holder.dispose();
    await eventually(() => parent.status === 'idle');
  });

  // Such a task never had a child, so no catalog lists it: a later wait on its id is still the caller's.
  it('points interrupt_agent on a task still waiting for a slot to task_cancel, and on a settled one to task_output', async () => {
    const { pooled, holder } = await fullPool();
    const parent: Agent = await pooled.createAgent({
      model: lazyScript([
        call('subagent', { description: 'waiting', prompt: 'wait your turn' }),
        () => call('interrupt_agent', { agent_id: startedId(parent, 0) }),
        () => call('task_cancel', { task_id: startedId(parent, 0) }),
        () => call('task_output', { task_id: startedId(parent, 0), wait: true }),
        () => call('interrupt_agent', { agent_id: startedId(parent, 0) }),
        { text: 'done' },
      ]),
    });
    parent.followup([text('go')]);
    await eventually(() => toolResults(parent).length === 5);
    expect(toolResults(parent)[1]).toMatchObject({ isError: true, code: 'INVALID_REQUEST', content: [{ text: expect.stringContaining('stop it with task_cancel') }] });
    expect(toolResults(parent)[4]).toMatchObject({ isError: true, code: 'INVALID_REQUEST', content: [{ text: expect.stringContaining('read its output with task_output') }] });
    await holder.dispose();
    await eventually(() => parent.status === 'idle');
  });

  it('answers a wait on a task whose start was given up before it had a slot, not UNAUTHORIZED', async () => {
    const { pooled, holder } = await fullPool();
    const parent: Agent = await pooled.createAgent({
      model: lazyScript([
        call('subagent', { description: 'given up', prompt: 'wait your turn' }),
        () => call('task_cancel', { task_id: startedId(parent, 0) }),
        () => call('task_output', { task_id: startedId(parent, 0), wait: true }),
        () => call('wait_agent', { agent_ids: [startedId(parent, 0)], timeout_ms: 600_000 }),
        { text: 'done' },
      ]),
    });
    parent.followup([text('go')]);
    await eventually(() => toolResults(parent).length === 4);
    const taskId = startedId(parent, 0);
    expect(resultJson(parent, 2)).toMatchObject({ status: 'settled', stopReason: 'aborted' });
    expect(toolResults(parent)[3]!.isError).toBeUndefined();
    expect(resultJson(parent, 3)).toStrictEqual({ status: { [taskId]: 'idle' }, timed_out: false });
    await holder.dispose();
    await eventually(() => parent.status === 'idle');
  });
});

describe('task_output and task_cancel', () => {
  it('waits for a background task\'s output', async () => {
    const { host } = await setup();
    subagentTool(host, { provider: 'in-process', background: true });
    const parent: Agent = await host.createAgent({
      model: lazyScript([
        call('subagent', { description: 'count', prompt: 'count files' }),
        () => call('task_output', { task_id: startedId(parent, 0), wait: true }),
        () => call('task_cancel', { task_id: startedId(parent, 0) }),
        { text: 'done' },
      ]),
    });
    parent.followup([text('go')]);
    await eventually(() => toolResults(parent).length === 3);
    expect(resultJson(parent, 1)).toStrictEqual({ status: 'settled', stopReason: 'completed', output: 'echo: count files' });
    expect(resultJson(parent, 2)).toStrictEqual({ cancelled: false });
    await eventually(() => parent.status === 'idle');
  });

  it('tells why a background task failed: task_output carries its diagnostic, as its notice does', async () => {
    const { host } = await setup();
    subagentTool(host, { provider: 'in-process', background: true, agentOptions: { model: { kind: 'scripted', steps: [{ finish: 'error', text: 'half' }] } } });
    const parent: Agent = await host.createAgent({
      model: lazyScript([call('subagent', { description: 'doomed', prompt: 'try' }), () => call('task_output', { task_id: startedId(parent, 0), wait: true }), { text: 'done' }]),
    });
    parent.followup([text('go')]);
    await eventually(() => toolResults(parent).length === 2 && parent.status === 'idle');
    const view = resultJson(parent, 1) as { status: string; stopReason: string; diagnostic?: unknown };
    expect(view).toMatchObject({ status: 'settled', stopReason: 'error' });
    expect(view.diagnostic).toEqual(expect.any(String));
    const notice = messages(parent).find((m) => m.source.kind === 'subagent-settled')!.text;
    expect(notice).toContain(`Diagnostic: ${String(view.diagnostic)}`);
  });

  it('reads a background task that failed as failed in wait_agent, not idle', async () => {
    const { host } = await setup();
    subagentTool(host, { provider: 'in-process', background: true, agentOptions: { model: { kind: 'scripted', steps: [{ finish: 'error', text: 'half' }] } } });
    const parent: Agent = await host.createAgent({
      model: lazyScript([
        call('subagent', { description: 'doomed', prompt: 'try' }),
        () => call('task_output', { task_id: startedId(parent, 0), wait: true }),
        () => call('wait_agent', { agent_ids: [startedId(parent, 0)], timeout_ms: 600_000 }),
        { text: 'done' },
      ]),
    });
    parent.followup([text('go')]);
    await eventually(() => toolResults(parent).length === 3 && parent.status === 'idle');
    expect(resultJson(parent, 1)).toMatchObject({ status: 'settled', stopReason: 'error' });
    expect(resultJson(parent, 2)).toStrictEqual({ status: { [startedId(parent, 0)]: 'failed' }, timed_out: false });
  });

  it('answers a task_output wait at once for a call whose signal is already aborted', async () => {
    const { host } = await setup();
    subagentTool(host, { provider: 'in-process', background: true, agentOptions: { model: HANG } });
    const parent: Agent = await host.createAgent({ model: lazyScript([call('subagent', { description: 'slow', prompt: 'take forever' }), { text: 'started' }]) });
    parent.followup([text('go')]);
    await eventually(() => parent.status === 'idle');
    // As a worker child's host call that arrives after its run was cancelled: waiting out 600 s would hold the host.
    const answer = await host.tools.get('task_output')!.execute({ task_id: startedId(parent, 0), wait: true, timeout_ms: 600_000 }, { agent: parent, callId: 'c1', signal: AbortSignal.abort() });
    expect(JSON.parse(String(answer))).toStrictEqual({ status: 'running' });
  });

  it('cancels a hanging task, whose notice then says aborted; refuses wrong ids and other agents', async () => {
    const { host } = await setup();
    subagentTool(host, { provider: 'in-process', background: true, agentOptions: { model: HANG } });
    const parent: Agent = await host.createAgent({
      model: lazyScript([
        call('subagent', { description: 'slow', prompt: 'take forever' }),
        () => call('task_output', { task_id: startedId(parent, 0), wait: true, timeout_ms: 50 }),
        () => call('task_cancel', { task_id: startedId(parent, 0) }),
        call('task_cancel', { task_id: 'no-such-task' }),
        { text: 'done' },
      ]),
    });
    parent.followup([text('go')]);
    await eventually(() => toolResults(parent).length === 4);
    const taskId = startedId(parent, 0);
    expect(resultJson(parent, 1)).toStrictEqual({ status: 'running' });
    expect(resultJson(parent, 2)).toStrictEqual({ cancelled: true });
    expect(errorOf(parent, 3)).toStrictEqual({ isError: true, code: 'UNKNOWN_SESSION' });
    await eventually(() => messages(parent).some((m) => m.source.kind === 'subagent-settled') && parent.status === 'idle');
    expect(messages(parent).find((m) => m.source.kind === 'subagent-settled')!.text).toMatch(
      new RegExp(`^Background task ${taskId} was cancelled before finishing \\(stop reason: aborted\\)\\.`),
    );
    const stranger = await callAs(host, [
      { name: 'task_output', input: { task_id: taskId } },
      { name: 'task_cancel', input: { task_id: taskId } },
    ]);
    expect(errorOf(stranger, 0)).toStrictEqual({ isError: true, code: 'UNAUTHORIZED' });
    expect(errorOf(stranger, 1)).toStrictEqual({ isError: true, code: 'UNAUTHORIZED' });
    const again = await callAs(host, []);
    expect(again.status).toBe('idle');
  });
});

describe('controlTools registration', () => {
  const NAMES = ['send_message', 'interrupt_agent', 'list_agents', 'wait_agent', 'task_output', 'task_cancel'];

  it('refuses a second set on one host, removes its tools once on dispose, and reads children started before it', async () => {
    const host = await continuationHost(files.file());
    track(host);
    const recorder = host.recorder as Recorder;
    let cued = false;
    const listing = lazyScript([call('list_agents', {}), { text: 'done' }]);
    const parent = await host.createAgent({ model: { stream: (request) => (cued ? listing : scriptedModel()).stream(request) } });
    const busy = await startChild(host, parent, 'work', { model: HANG, label: 'busy' });
    const quick = await startChild(host, parent, 'hello', { label: 'quick' });
    await untilEvent(host.agents.get(busy.childId)!, 'turn/start');
    await recorder.until(() => recorder.ends.some((end) => end.id === quick.childId));
    await parent.whenIdle();
    const off = controlTools(host);
    expect(() => controlTools(host)).toThrow(expect.objectContaining({ code: 'DUPLICATE_TOOL' }));
    cued = true;
    parent.followup([text('list')]);
    await parent.whenIdle();
    expect(resultJson(parent, 0)).toStrictEqual({
      agents: [
        { id: busy.childId, label: 'busy', status: 'running' },
        { id: quick.childId, label: 'quick', status: 'idle' },
      ],
      diagnostics: [],
    });
    off();
    off();
    expect(host.tools.names().filter((name) => NAMES.includes(name))).toStrictEqual([]);
    controlTools(host);
    expect(host.tools.names().filter((name) => NAMES.includes(name)).sort()).toStrictEqual([...NAMES].sort());
  });
});

describe('the children’s status the control tools keep', () => {
  it('forgets each child that settled well, and all but the latest failures', async () => {
    const { host } = await setup();
    // The built tracker's service type is the built one; the host is the same object.
    const tracker = new AgentStatusTracker(host.subagents as unknown as ConstructorParameters<typeof AgentStatusTracker>[0], host.agents);
    let stopReason: 'completed' | 'error' = 'completed';
    host.subagents.registerProvider(
      fakeProvider('quick', { start: async () => ({ id: crypto.randomUUID(), localAgent: undefined, result: Promise.resolve({ output: [], stopReason }), cancel: () => undefined, dispose: async () => undefined }) }),
    );
    const parent = await host.createAgent();
    const ids: string[] = [];
    const run = async () => {
      const started = await host.subagents.start('quick', { prompt: [text('x')], parent, signal: new AbortController().signal });
      await started.result;
      await started.dispose();
      ids.push(started.id);
    };
    for (let i = 0; i < 100; i++) await run();
    expect(tracker.size).toBe(0);
    stopReason = 'error';
    for (let i = 0; i < FAILED_KEPT + 5; i++) await run();
    expect(tracker.size).toBe(FAILED_KEPT);
    expect(tracker.statusOf(ids.at(-1)!)).toBe('failed');
    expect(tracker.statusOf(ids[100]!)).toBe('idle');
    tracker.dispose();
  });

  it('keeps the latest statuses read from logs (a larger read whole), and nothing of a read the store refuses', async () => {
    const { host } = await setup();
    const service = host.subagents as unknown as ConstructorParameters<typeof AgentStatusTracker>[0];
    // A store whose children each have a turn a crash left open: read idle without loading a log.
    let refuse = false;
    const projections = async (wanted: readonly string[]) => {
      if (refuse) throw new Error('the store is gone');
      return new Map(wanted.map((id) => [id, { ok: true, views: { subagent: {}, subagentTiming: { active: 1 } } }]));
    };
    const nowhere = { get: () => undefined };
    const store = { persistence: { projections, load: () => Promise.reject(new Error('never loaded')) }, sessions: nowhere, agents: nowhere };
    const tracker = new AgentStatusTracker(service, host.agents, store as unknown as ConstructorParameters<typeof AgentStatusTracker>[2]);
    const ids = Array.from({ length: STORED_KEPT + 5 }, (_, i) => `child-${i}`);
    // One read larger than the bound is kept whole (its caller reads it next); a later read trims it.
    await tracker.refresh(ids);
    expect(tracker.size).toBe(STORED_KEPT + 5);
    await tracker.refresh(['late-0', 'late-1']);
    expect(tracker.size).toBe(STORED_KEPT);
    refuse = true;
    await tracker.refresh(['child-0', 'other']);
    expect(tracker.size).toBe(STORED_KEPT);
    expect(tracker.statusOf('other')).toBe('idle');
    tracker.dispose();
    // Without a store nothing is read.
    const bare = new AgentStatusTracker(service, host.agents);
    await bare.refresh(['child-0']);
    expect(bare.size).toBe(0);
    bare.dispose();
  });
});
