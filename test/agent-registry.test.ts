// Agent registry: creation, setup rollback, handles, resume with replayed input, fork prefixes.
import { describe, expect, it } from 'vitest';
import { memoryPersistence, scriptedModel, text, type SessionEvent } from 'subagent-host';
import { AgentRegistry, completedTurnPrefix } from 'subagent-host/internals';
import { dataOf, makeRuntime, types } from './helpers.js';

const fixture = (name: string) => new URL(`./fixtures/${name}`, import.meta.url).href;

describe('AgentRegistry', () => {
  it('publishes the agent and its session under one id', async () => {
    const runtime = makeRuntime();
    const handle = await runtime.agents.create({ sessionId: 'a1', header: { cwd: '/tmp' } });
    expect(runtime.agents.get('a1')).toBe(handle.agent);
    expect(runtime.agents.list()).toEqual([handle.agent]);
    expect(runtime.sessions.get('a1')).toBe(handle.agent.session);
    expect(handle.agent.session.header).toMatchObject({ id: 'a1', cwd: '/tmp' });
    await handle.dispose();
  });

  it('refuses an abandonGraceMs past a timer\'s reach (a cancelled turn gave up on its calls at once)', () => {
    const runtime = makeRuntime();
    for (const abandonGraceMs of [2 ** 31, 1e10, Number.POSITIVE_INFINITY, Number.NaN, -1, '5000']) {
      expect(() => new AgentRegistry({ sessions: runtime.sessions, abandonGraceMs: abandonGraceMs as number })).toThrow(
        expect.objectContaining({ code: 'INVALID_OPTIONS', message: expect.stringContaining('options.abandonGraceMs') }),
      );
    }
    expect(new AgentRegistry({ sessions: runtime.sessions, abandonGraceMs: 2 ** 31 - 1 })).toBeInstanceOf(AgentRegistry);
  });

  it('rejects a live id with DUPLICATE_SESSION', async () => {
    const runtime = makeRuntime();
    const handle = await runtime.agents.create({ sessionId: 'same' });
    await expect(runtime.agents.create({ sessionId: 'same' })).rejects.toMatchObject({ code: 'DUPLICATE_SESSION' });
    await handle.dispose();
  });

  it('leaves nothing behind when setup throws', async () => {
    const runtime = makeRuntime();
    await expect(
      runtime.agents.create({
        sessionId: 'x',
        setup: () => {
          throw new Error('setup failed');
        },
      }),
    ).rejects.toThrow('setup failed');
    expect(runtime.agents.get('x')).toBeUndefined();
    expect(runtime.sessions.get('x')).toBeUndefined();
  });

  it('rejects with CANCELLED when the signal is already aborted', async () => {
    const runtime = makeRuntime();
    const controller = new AbortController();
    controller.abort(new Error('stop'));
    await expect(runtime.agents.create({ signal: controller.signal })).rejects.toMatchObject({ code: 'CANCELLED' });
    expect(runtime.sessions.list()).toEqual([]);
  });

  it('disposes idempotently: one promise, waits for idle, unregisters agent and session', async () => {
    const runtime = makeRuntime();
    const handle = await runtime.agents.create({ model: scriptedModel([{ finish: 'hang' }]) });
    handle.agent.followup([text('go')]);
    await expect.poll(() => types(handle.agent.session.events), { timeout: 15_000 }).toContain('step/start');
    const first = handle.dispose();
    expect(handle.dispose()).toBe(first);
    await first;
    expect(handle.agent.status).toBe('idle');
    expect(dataOf<{ reason: unknown }>(handle.agent.session.events, 'turn/end')[0]?.reason).toEqual({ kind: 'aborted', cause: { kind: 'disposed' } });
    expect(runtime.agents.list()).toEqual([]);
    expect(runtime.sessions.list()).toEqual([]);
  });

  it('loads tools from toolModules into the agent’s scope', async () => {
    const runtime = makeRuntime();
    const model = scriptedModel([{ toolCalls: [{ name: 'shout', input: { value: 'hey' } }] }, { text: 'ok' }]);
    const handle = await runtime.agents.create({ model, agentOptions: { toolModules: [fixture('tool-module.mjs')] } });
    handle.agent.followup([text('go')]);
    await handle.agent.whenIdle();
    expect(dataOf<{ content: unknown }>(handle.agent.session.events, 'tool/result')[0]?.content).toEqual([text('HEY')]);
    expect(runtime.tools.get('shout')).toBeUndefined();
    await handle.dispose();
  });

  it('rejects a tool module without a tools export with INVALID_OPTIONS', async () => {
    const runtime = makeRuntime();
    await expect(runtime.agents.create({ agentOptions: { toolModules: [fixture('echo-model.mjs')] } })).rejects.toMatchObject({ code: 'INVALID_OPTIONS' });
  });

  const toolModule = (source: string) => `data:text/javascript,${encodeURIComponent(source)}`;
  const toolSource = (name: string, parameters = "{ type: 'object' }") => `{ name: '${name}', description: '', parameters: ${parameters}, execute: () => 'x' }`;

  it.each([
    ['a tool with a bad name', [toolModule(`export const tools = [${toolSource('ok')}, ${toolSource('bad name')}];`)], 'INVALID_OPTIONS', /^tool module data:.*, tools\[1\]: tool\.name: /],
    ['a tool whose parameters are no usable JSON Schema', [toolModule(`export const tools = [${toolSource('bad', "{ type: 'object', properties: { a: { type: 'frobnicate' } } }")}];`)], 'INVALID_OPTIONS', /^tool module data:.*, tools\[0\]: tool bad: parameters is not a usable JSON Schema \(Error: Unsupported type: frobnicate\)/],
    ['two tools of one name in a module', [toolModule(`export const tools = [${toolSource('dup')}, ${toolSource('dup')}];`)], 'DUPLICATE_TOOL', /^tool module data:.* exports a tool named dup, as does another of its tools/],
    ['one name in two modules', [toolModule(`export const tools = [${toolSource('dup')}];`), toolModule(`export const tools = [${toolSource('dup')}]; // 2`)], 'DUPLICATE_TOOL', /^tool module data:.*2.* exports a tool named dup, as does a tool of tool module data:/],
    ['the name of a host tool', [toolModule(`export const tools = [${toolSource('host_tool')}];`)], 'DUPLICATE_TOOL', /^tool module data:.* exports a tool named host_tool, as does a tool the agent already has/],
  ])('refuses a tool module with %s, naming the module', async (_name, toolModules, code, message) => {
    const runtime = makeRuntime();
    runtime.tools.register({ name: 'host_tool', description: '', parameters: { type: 'object' }, execute: async () => 'host' });
    await expect(runtime.agents.create({ agentOptions: { toolModules } })).rejects.toMatchObject({ code, message: expect.stringMatching(message) });
    expect(runtime.agents.list()).toEqual([]);
  });

  it('says so when a tool module’s default export holds its tools (not exported by name)', async () => {
    const runtime = makeRuntime();
    const toolModules = [toolModule(`export default { tools: [${toolSource('inside')}] };`)];
    await expect(runtime.agents.create({ agentOptions: { toolModules } })).rejects.toMatchObject({
      code: 'INVALID_OPTIONS',
      message: expect.stringMatching(/must export `tools`, an array of Tool \(its default export holds them: export them by name/),
    });
  });

  it('needs persistence to resume', async () => {
    const runtime = makeRuntime();
    await expect(runtime.agents.resume({ sessionId: 'x' })).rejects.toMatchObject({ code: 'PERSISTENCE_UNAVAILABLE' });
  });

  it('resumes a disposed session, keeps turn numbering and answers with its history', async () => {
    const persistence = memoryPersistence();
    const runtime = makeRuntime({ persistence });
    const first = await runtime.agents.create({ sessionId: 's', model: scriptedModel([{ text: 'one' }]) });
    first.agent.followup([text('hello')]);
    await first.agent.whenIdle();
    await first.dispose();
    const model = scriptedModel([{ text: 'two' }]);
    const again = await runtime.agents.resume({ sessionId: 's', model });
    again.agent.followup([text('more')]);
    await again.agent.whenIdle();
    expect(dataOf<{ turn: number }>(again.agent.session.events, 'turn/start').map((d) => d.turn)).toEqual([1, 2]);
    expect(model.requests[0]?.messages.map((m) => m.content)).toEqual([[text('hello')], [text('one')], [text('more')]]);
    await again.dispose();
    expect((await persistence.load('s'))?.events).toEqual(again.agent.session.events);
    await persistence.close();
  });

  it('replays accepted input that no turn had claimed when a session is resumed', async () => {
    const persistence = memoryPersistence();
    const runtime = makeRuntime({ persistence });
    const first = await runtime.agents.create({ sessionId: 'r', model: scriptedModel([{ finish: 'hang' }]) });
    first.agent.followup([text('one')]);
    first.agent.cancel({ kind: 'user' }, { keepInbox: true });
    first.agent.inject([text('queued')]);
    await runtime.sessions.flush('r');
    // A second host over the same storage, as after a crash of the first.
    const other = makeRuntime({ persistence });
    const model = scriptedModel([{ text: 'done' }]);
    const resumed = await other.agents.resume({ sessionId: 'r', model });
    await resumed.agent.whenIdle();
    const users = model.requests[0]?.messages.filter((m) => m.role === 'user').map((m) => m.content);
    expect(users).toContainEqual([text('queued')]);
    await resumed.dispose();
    // The first owner is stale now: its late writes are refused, not interleaved.
    await expect(first.dispose()).rejects.toMatchObject({ code: 'SEQ_MISMATCH' });
    expect(first.agent.status).toBe('idle');
    await persistence.close();
  });

  it('starts no turn on resume for input that was only context (inject): the next message’s turn takes it', async () => {
    const persistence = memoryPersistence();
    const runtime = makeRuntime({ persistence });
    const first = await runtime.agents.create({ sessionId: 'q' });
    first.agent.inject([text('quiet context')]);
    await runtime.sessions.flush('q');
    // A second host over the same storage, as after a crash of the first.
    const other = makeRuntime({ persistence });
    const model = scriptedModel([{ text: 'done' }]);
    const resumed = await other.agents.resume({ sessionId: 'q', model });
    expect(resumed.agent.status).toBe('idle');
    expect(resumed.agent.pendingInput).toBe(1);
    resumed.agent.followup([text('next')]);
    await resumed.agent.whenIdle();
    expect(model.requests).toHaveLength(1);
    expect(model.requests[0]?.messages.map((m) => m.content)).toEqual([[text('next')], [text('quiet context')]]);
    await resumed.dispose();
    await expect(first.dispose()).rejects.toMatchObject({ code: 'SEQ_MISMATCH' });
    await persistence.close();
  });
});

describe('completedTurnPrefix', () => {
  const event = (seq: number, type: string): SessionEvent => ({ seq, time: 0, type, data: {} });

  it('ends at the last turn/end and excludes an open turn', () => {
    const events = ['turn/start', 'turn/end', 'turn/start', 'turn/end', 'turn/start', 'step/start'].map((t, i) => event(i, t));
    expect(types(completedTurnPrefix(events))).toEqual(['turn/start', 'turn/end', 'turn/start', 'turn/end']);
  });

  it('is empty when no turn has completed', () => {
    expect(completedTurnPrefix([event(0, 'turn/start')])).toEqual([]);
  });

  it('leaves out input the parent accepted in it but takes in a later turn, renumbering what follows', () => {
    const at = (seq: number, type: string, data: object): SessionEvent => ({ seq, time: 0, type, data });
    const message = (id: string) => ({ id, target: 'turn', content: [text(id)], source: { kind: 'user' } });
    const events = [
      at(0, 'inbox/accepted', message('first')),
      at(1, 'turn/start', { turn: 1 }),
      at(2, 'user/message', { id: 'first', content: [text('first')], source: { kind: 'user' } }),
      // Accepted while turn 1 ran, for the next turn: the parent's input, not the fork's.
      at(3, 'inbox/accepted', message('second')),
      at(4, 'turn/end', { turn: 1, reason: { kind: 'completed' } }),
      at(5, 'turn/start', { turn: 2 }),
      at(6, 'user/message', { id: 'second', content: [text('second')], source: { kind: 'user' } }),
    ];
    const seed = completedTurnPrefix(events);
    expect(seed.map((e) => [e.seq, e.type])).toEqual([
      [0, 'inbox/accepted'],
      [1, 'turn/start'],
      [2, 'user/message'],
      [3, 'turn/end'],
    ]);
    // With nothing pending, the prefix is the log's own events.
    expect(completedTurnPrefix(events.slice(0, 3).concat(at(3, 'turn/end', { turn: 1, reason: { kind: 'completed' } })))[0]).toBe(events[0]);
  });

  it('seeds a fork: the seed, then session/end-seed, with seedLength recorded', async () => {
    const runtime = makeRuntime();
    const parent = await runtime.agents.create();
    parent.agent.followup([text('hello')]);
    await parent.agent.whenIdle();
    const seed = completedTurnPrefix(parent.agent.session.events);
    const child = await runtime.agents.create({ seed, header: { parentSession: parent.agent.id, origin: 'subagent', delegationDepth: 1 } });
    expect(child.agent.session.header.seedLength).toBe(seed.length);
    expect(child.agent.session.events.slice(0, seed.length)).toEqual(seed);
    expect(child.agent.session.events[seed.length]?.type).toBe('session/end-seed');
    await Promise.all([parent.dispose(), child.dispose()]);
  });
});
