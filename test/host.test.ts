// createHost: the persistence choices, the pool defaults, ownership of what it opens, idempotent
// close, and where a child's session log is when its result settles and after its run is disposed.
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  controlTools,
  createHost,
  inProcessProvider,
  reportTool,
  subagentTool,
  memoryPersistence,
  sqlitePersistence,
  text,
  type Host,
  type HostOptions,
  type SessionEvent,
  type SessionPersistence,
  type Tool,
} from 'subagent-host';
import { dataOf, deferred, runNodeScript, storeOver } from './helpers.js';

let dir: string;
const hosts: Host[] = [];

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'subagent-host-'));
});

afterEach(async () => {
  await Promise.all(hosts.splice(0).map((host) => host.close()));
  await rm(dir, { recursive: true, force: true });
});

async function open(options: HostOptions = {}): Promise<Host> {
  const host = await createHost({ providers: false, ...options });
  hosts.push(host);
  return host;
}

/** A user persistence (delegating to a memory one) that counts `close` calls. */
function countingPersistence(): { persistence: SessionPersistence; closes: () => number } {
  const inner = memoryPersistence();
  let closes = 0;
  const persistence = new Proxy(inner, {
    get(target, key) {
      if (key === 'close') {
        return () => {
          closes++;
          return target.close();
        };
      }
      const value: unknown = Reflect.get(target, key);
      return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
    },
  });
  return { persistence, closes: () => closes };
}

async function completedTurn(host: Host) {
  const agent = await host.createAgent();
  agent.followup([text('remember me')]);
  await agent.whenIdle();
  return agent;
}

describe('createHost persistence', () => {
  it("defaults to 'memory' persistence that receives every session", async () => {
    const host = await open();
    const agent = await completedTurn(host);
    await host.sessions.flush();
    const stored = await host.persistence?.load(agent.id);
    expect(stored?.events).toEqual(agent.session.events);
  });

  it('opens { sqlite: path } and leaves the sessions on disk after close', async () => {
    const path = join(dir, 'sessions.db');
    const host = await open({ persistence: { sqlite: path } });
    const agent = await completedTurn(host);
    const events = [...agent.session.events];
    await host.close();
    const reopened = sqlitePersistence(path);
    try {
      expect((await reopened.load(agent.id))?.events).toEqual(events);
    } finally {
      await reopened.close();
    }
  });

  it('reads a session live in the host through host.persistence.load without closing its open turn behind the agent', async () => {
    const host = await open({ persistence: { sqlite: join(dir, 'live.db') }, model: { kind: 'scripted', steps: [{ finish: 'hang' }] } });
    const agent = await host.createAgent();
    const stepping = new Promise<void>((resolve) => agent.subscribe((event) => event.type === 'step/start' && resolve()));
    agent.followup([text('go')]);
    await stepping;
    const read = await host.persistence!.load(agent.id);
    expect(read?.events).toEqual(agent.session.events);
    expect(read?.events.map((event) => event.type)).not.toContain('turn/end');
    agent.cancel();
    await agent.whenIdle();
    // The agent's own end of its turn is what the store holds: nothing else wrote into its log.
    await host.sessions.flush(agent.id);
    const reader = sqlitePersistence(join(dir, 'live.db'));
    const stored = await reader.load(agent.id).finally(() => reader.close());
    expect(stored?.events.filter((event) => event.type === 'turn/end').map((event) => (event.data as { reason: { kind: string } }).reason.kind)).toStrictEqual(['aborted']);
  });

  it('uses a caller SessionPersistence and never closes it', async () => {
    const { persistence, closes } = countingPersistence();
    const host = await open({ persistence });
    const agent = await completedTurn(host);
    // host.persistence is the caller's store behind the host's checks: what it reads comes from it.
    expect((await host.persistence!.load(agent.id))?.events).toEqual(agent.session.events);
    await host.close();
    expect(closes()).toBe(0);
    expect((await persistence.load(agent.id))?.events).toEqual(agent.session.events);
    await persistence.close();
  });

  it('hands a caller SessionPersistence one append at a time, in seq order, and each follow-up durable', async () => {
    const inner = memoryPersistence();
    let inFlight = 0;
    let overlapped = false;
    const seqs: number[] = [];
    // A store that takes its time with every append and declares nothing about queuing them.
    const persistence = storeOver(inner, {
      append: async (id, events) => {
        if (inFlight++ > 0) overlapped = true;
        seqs.push(...events.map((event) => event.seq));
        await new Promise((resolve) => setTimeout(resolve, 2));
        await inner.append(id, events);
        inFlight--;
      },
    });
    const host = await open({ persistence });
    const agent = await host.createAgent();
    for (const word of ['one', 'two', 'three']) {
      agent.followup([text(word)]);
      await host.sessions.flush(agent.id);
      expect((await inner.load(agent.id))?.events.length).toBeGreaterThanOrEqual(agent.session.events.findLastIndex((event) => event.type === 'inbox/accepted') + 1);
    }
    await agent.whenIdle();
    await host.sessions.flush(agent.id);
    expect(overlapped).toBe(false);
    expect(seqs).toEqual(agent.session.events.map((event) => event.seq));
    expect((await inner.load(agent.id))?.events).toEqual(agent.session.events);
  });

  it.each([
    ['an unknown string', 'disk'],
    ['null', null],
    ['an empty object', {}],
    ['a non-string sqlite path', { sqlite: 42 }],
    ['an unknown sqlite synchronous setting', { sqlite: ':memory:', synchronous: 'off' }],
    ['an object with only some persistence methods', { append: () => Promise.resolve() }],
  ])('rejects %s with INVALID_OPTIONS', async (_label, persistence) => {
    await expect(createHost({ providers: false, persistence: persistence as NonNullable<HostOptions['persistence']> })).rejects.toMatchObject({ code: 'INVALID_OPTIONS' });
  });

  it.each<[string, Record<string, unknown>, string, string]>([
    ['a model spec of no known kind', { model: { kind: 'openia' } }, 'INVALID_MODEL_SPEC', 'model spec.kind'],
    ['a misspelt continuation option', { continuation: { lingermS: 5 } }, 'INVALID_OPTIONS', 'options.continuation has unknown field(s) lingermS'],
    ['a continuation that is not an object', { continuation: 'x' }, 'INVALID_OPTIONS', 'options.continuation must be an object'],
    ['providers that is not a boolean', { providers: 'no' }, 'INVALID_OPTIONS', 'options.providers must be true or false'],
    ['tools that are not an array', { tools: 'x' }, 'INVALID_OPTIONS', 'options.tools must be an array'],
    ['a logger without warn', { logger: {} }, 'INVALID_OPTIONS', 'options.logger must be an object with a warn'],
    ['a logger that is a string', { logger: 'x' }, 'INVALID_OPTIONS', 'options.logger must be an object with a warn'],
  ])('refuses %s at once, typed, instead of failing each agent later', async (_label, options, code, message) => {
    await expect(createHost({ providers: false, ...options })).rejects.toMatchObject({ code, message: expect.stringContaining(message) });
  });

  it('closes the database it opened when construction fails on another option', async () => {
    const path = join(dir, 'failed.db');
    const badTool = { name: 'bad' } as unknown as Tool;
    await expect(createHost({ providers: false, persistence: { sqlite: path }, tools: [badTool] })).rejects.toMatchObject({ code: 'INVALID_OPTIONS' });
    // An open WAL connection keeps its -wal file; the last clean close removes it.
    expect(await readdir(dir)).toEqual(['failed.db']);
  });
});

describe('createAgent options', () => {
  it.each<[string, Record<string, unknown>, string]>([
    ['a header field of the wrong type', { header: { cwd: 5 } }, 'createAgent options.header.cwd'],
    ['an unknown header field', { header: { bogus: 1 } }, 'has unknown field(s) bogus'],
    ['a negative delegation depth', { header: { delegationDepth: -1 } }, 'createAgent options.header.delegationDepth'],
    ['a header id (the host sets it)', { header: { id: 'x' } }, 'createAgent options.header.id is set by the host'],
    ['a misspelt agent option', { agentOptions: { maxToken: 5 } }, 'createAgent options.agentOptions has unknown field(s) maxToken'],
    ['a negative subagent depth', { agentOptions: { subagentDepth: -1 } }, 'subagentDepth'],
    ['a fractional subagent depth', { agentOptions: { subagentDepth: 1.5 } }, 'subagentDepth'],
    ['a model spec where a ready adapter goes', { model: { kind: 'scripted' } }, 'options.model must be a ready model adapter'],
    ['tools that are not a ToolRegistry', { tools: [] }, 'options.tools must be a ToolRegistry'],
    ['hooks that are not an object', { hooks: 5 }, 'options.hooks must be an object'],
    ['a signal that is not an AbortSignal', { signal: 'stop' }, 'options.signal must be an AbortSignal'],
    ['a seed that is not an array', { seed: 'x' }, 'createAgent options.seed must be an array'],
    ['a seed event without a type', { seed: [{ seq: 0, time: 1, data: {} }] }, 'createAgent options.seed[0] must have a non-empty string type'],
    ['a seed turn without its number', { seed: [{ seq: 0, time: 1, type: 'turn/start', data: {} }] }, 'createAgent options.seed[0].data.turn'],
    ['seed data that is not plain JSON', { seed: [{ seq: 0, time: 1, type: 'note', data: { f() {} } }] }, 'createAgent options.seed[0].data.f'],
  ])('refuses %s with INVALID_OPTIONS before any agent exists (the store would refuse the session later)', async (_name, options, message) => {
    const host = await open({ persistence: { sqlite: join(dir, 'agents.db') } });
    await expect(host.createAgent(options)).rejects.toMatchObject({ code: 'INVALID_OPTIONS', message: expect.stringContaining(message) });
    expect(host.agents.list()).toStrictEqual([]);
    const agent = await host.createAgent({ header: { cwd: '/srv' }, agentOptions: { maxTokens: 5 } });
    agent.followup([text('kept')]);
    await agent.whenIdle();
    await host.sessions.flush();
    expect((await host.persistence!.load(agent.id))?.header).toMatchObject({ cwd: '/srv' });
  });
});

describe('a ready model adapter given to createAgent', () => {
  it.each<[string, unknown[], string]>([
    ['a tool call without an id', [{ type: 'tool-call', name: 'lookup', input: {} }, { type: 'finish', reason: 'tool-calls' }], 'tool-call.id must be a non-empty string'],
    ['an unknown finish reason', [{ type: 'text-delta', text: 'hi' }, { type: 'finish', reason: 'weird' }], 'finish.reason must be one of'],
    ['text that is not a string', [{ type: 'text-delta', text: 42 }, { type: 'finish', reason: 'stop' }], 'text-delta.text must be a string'],
    ['two tool calls with one id', [{ type: 'tool-call', id: 'same', name: 'lookup', input: {} }, { type: 'tool-call', id: 'same', name: 'lookup', input: {} }, { type: 'finish', reason: 'tool-calls' }], 'two tool calls of one answer the id "same"'],
  ])('is checked chunk by chunk: %s ends the turn MODEL_CONTRACT, and no tool of that answer runs', async (_what, chunks, message) => {
    const calls: unknown[] = [];
    const host = await open({ tools: [{ name: 'lookup', description: 'looks up', parameters: { type: 'object' }, execute: (input) => {
          calls.push(input);
          return Promise.resolve('ok');
        } }] });
    const model = {
      async *stream() {
        for (const chunk of chunks) yield chunk;
      },
    };
    const agent = await host.createAgent({ model: model as never });
    agent.followup([text('go')]);
    await agent.whenIdle();
    expect(dataOf(agent.session.events, 'turn/end')).toEqual([{ turn: 1, reason: { kind: 'error', error: { code: 'MODEL_CONTRACT', message: expect.stringContaining(message) } } }]);
    expect(dataOf(agent.session.events, 'tool/call')).toEqual([]);
    expect(calls).toEqual([]);
  });
});

describe('a session listener that appends', () => {
  it('has its append delivered after the event it answers reached every listener, so the whole log is stored', async () => {
    const host = await open({ persistence: { sqlite: join(dir, 'listener-appends.db') } });
    let sent = false;
    // A setup listener comes before the store's own: it follows up once on the first turn's end.
    const agent = await host.createAgent({
      setup: ({ agent: self }) => {
        self.subscribe((event) => {
          if (event.type !== 'turn/end' || sent) return;
          sent = true;
          self.followup([text('again')]);
        });
      },
    });
    const seen: number[] = [];
    agent.subscribe((event) => void seen.push(event.seq));
    agent.followup([text('hi')]);
    await expect.poll(() => dataOf(agent.session.events, 'turn/end').length, { timeout: 15_000 }).toBe(2);
    await agent.whenIdle();
    await host.sessions.flush();
    expect(seen).toEqual(agent.session.events.map((event) => event.seq));
    expect((await host.persistence!.load(agent.id))?.events).toEqual(agent.session.events);
  });
});

describe('host lifecycle', () => {
  it('gives the worker pool the documented defaults; warming starts minThreads threads', async () => {
    const host = await open();
    expect(host.pool.options).toEqual({
      minThreads: 1,
      maxThreads: Math.max(4, 2 * availableParallelism()),
      childrenPerThread: 1,
      maxNestingDepth: 3,
      idleTimeoutMs: 30_000,
      cancelGraceMs: 2000,
      resourceLimits: { maxYoungGenerationSizeMb: 48 },
    });
    expect(host.pool.threads).toBe(0);
    await host.pool.warm();
    expect(host.pool.threads).toBe(1);
  });

  it('closes idempotently, also through Symbol.asyncDispose', async () => {
    const host = await open();
    const closing = host.close();
    expect(host.close()).toBe(closing);
    expect(host[Symbol.asyncDispose]()).toBe(closing);
    await closing;
  });

  it('rejects createAgent with CLOSED once closing started', async () => {
    const host = await open();
    await host.close();
    await expect(host.createAgent()).rejects.toMatchObject({ code: 'CLOSED' });
  });

  it('refuses providers, continuable starts, follow-ups and reports with CLOSED once closed', async () => {
    const host = await open({ persistence: { sqlite: join(dir, 'closed.db') } });
    const parent = await host.createAgent();
    const added: string[] = [];
    host.subagents.on('subagent/provider-added', (provider) => void added.push(provider.name));
    await host.close();
    expect(() => host.subagents.registerProvider(inProcessProvider(host))).toThrow(expect.objectContaining({ code: 'CLOSED' }));
    expect(added).toEqual([]);
    await expect(host.subagents.startContinuable({ provider: 'in-process', label: 'late', request: { prompt: [text('x')], parent } })).rejects.toMatchObject({ code: 'CLOSED' });
    await expect(host.subagents.followup(parent, 'some-child', [text('x')])).rejects.toMatchObject({ code: 'CLOSED' });
    await expect(host.subagents.reportFrom(parent, [text('x')], { delivery: 'quiet' })).rejects.toMatchObject({ code: 'CLOSED' });
  });

  it('refuses to add tools, setups or listeners, to interrupt and to resume once closed, CLOSED; disposers and unsubscribers still work', async () => {
    const host = await open({ persistence: memoryPersistence() });
    host.subagents.registerProvider(inProcessProvider(host));
    const parent = await host.createAgent();
    parent.followup([text('stored')]);
    await parent.whenIdle();
    const tool: Tool = { name: 'late', description: 'registered too late', parameters: { type: 'object', properties: {} }, execute: () => Promise.resolve('x') };
    const early = { ...tool, name: 'early' };
    const removeEarly = host.tools.register(early);
    const unsubscribe = host.subagents.on('subagent/start', () => undefined);
    const removeSetup = host.subagents.registerContinuableSetup(() => () => undefined);
    const removeTool = subagentTool(host, { provider: 'in-process' });
    await host.close();
    const closed = expect.objectContaining({ code: 'CLOSED', message: expect.stringContaining('the host is closed') });
    expect(() => host.tools.register(tool)).toThrow(closed);
    expect(() => host.subagents.on('subagent/end', () => undefined)).toThrow(closed);
    expect(() => host.subagents.registerContinuableSetup(() => () => undefined)).toThrow(closed);
    expect(() => host.subagents.interrupt('some-child', { kind: 'user', parentSessionId: parent.id })).toThrow(closed);
    expect(() => host.subagents.interrupt('some-child', { kind: 'ancestor', agent: parent })).toThrow(closed);
    expect(() => subagentTool(host, { provider: 'in-process', toolName: 'late_subagent' })).toThrow(closed);
    expect(() => controlTools(host)).toThrow(closed);
    expect(() => reportTool(host)).toThrow(closed);
    await expect(host.agents.resume({ sessionId: parent.id })).rejects.toMatchObject({ code: 'CLOSED', message: expect.stringContaining('the host is closed') });
    expect(host.tools.names()).toEqual(['early', 'subagent']);
    // What was registered before close is removed by its disposer as before, however often it is called.
    for (const dispose of [removeEarly, unsubscribe, removeSetup, removeTool, removeTool]) dispose();
    expect(host.tools.names()).toEqual([]);
    expect(host.subagents.listenerCount).toBe(0);
  });

  it('resolves a drain of the children of a parent that close() disposed once the host drained them, instead of refusing the parent', async () => {
    const host = await open();
    host.subagents.registerProvider(inProcessProvider(host));
    const parent = await host.createAgent();
    const { childId } = await host.subagents.startContinuable({
      provider: 'in-process',
      label: 'waits',
      request: { prompt: [text('wait')], parent, agentOptions: { model: { kind: 'scripted', steps: [{ finish: 'hang' }] } } },
    });
    await host.close();
    await expect(host.subagents.drainContinuableChildren(parent, [childId])).resolves.toBeUndefined();
    expect(host.subagents.residentChildren).toBe(0);
  });

  it('rejects CLOSED for an agent whose creation raced close(), leaving nothing registered', async () => {
    const host = await open();
    const rejected = expect(host.createAgent()).rejects.toMatchObject({ code: 'CLOSED' });
    await host.close();
    await rejected;
    expect(host.agents.list()).toEqual([]);
    expect(host.sessions.list()).toEqual([]);
  });

  it('ends running top-level agents and unregisters every agent on close', async () => {
    const host = await open({ model: { kind: 'scripted', steps: [{ finish: 'hang' }] } });
    const agent = await host.createAgent();
    agent.followup([text('wait forever')]);
    while (!agent.session.events.some((e) => e.type === 'turn/start')) await new Promise((r) => setImmediate(r));
    await host.close();
    expect(agent.status).toBe('idle');
    expect(agent.session.events.at(-1)).toMatchObject({ type: 'turn/end', data: { reason: { kind: 'aborted' } } });
    expect(host.agents.list()).toEqual([]);
    expect(host.sessions.list()).toEqual([]);
  });

  it("ends every agent before close() settles, also when another agent's session cannot be written", async () => {
    const inner = memoryPersistence();
    let failing = '';
    const persistence = new Proxy(inner, {
      get(target, key) {
        const value: unknown = Reflect.get(target, key);
        if (key === 'append') return (id: string, events: SessionEvent[]) => (id === failing ? Promise.reject(new Error('disk full')) : target.append(id, events));
        return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
      },
    });
    // A tool that ignores its signal for a while: once close() began, its turn ends without it.
    const entered = deferred();
    const slow: Tool = {
      name: 'slow',
      description: 'takes its time',
      parameters: { type: 'object', properties: {} },
      execute: () => {
        entered.resolve();
        return new Promise((resolve) => setTimeout(() => resolve('late'), 300));
      },
    };
    // Not closed again after the test: its close() rejects, by design.
    const host = await createHost({ providers: false, persistence, tools: [slow] });
    const broken = await host.createAgent();
    failing = broken.id;
    broken.followup([text('unsaved')]);
    await broken.whenIdle();
    const busy = await host.createAgent({ agentOptions: { model: { kind: 'scripted', steps: [{ toolCalls: [{ name: 'slow', input: {} }] }, { text: 'done' }] } } });
    busy.followup([text('go')]);
    await entered.promise;
    await expect(host.close()).rejects.toMatchObject({ code: 'PERSISTENCE_UNAVAILABLE' });
    expect(busy.status).toBe('idle');
    // Its call was under way when close() began, so close() abandoned it rather than wait for it.
    expect(dataOf(busy.session.events, 'tool/result')).toMatchObject([{ name: 'slow', code: 'ABANDONED' }]);
    expect(dataOf(busy.session.events, 'turn/end')).toMatchObject([{ reason: { kind: 'aborted' } }]);
    expect(host.agents.list()).toEqual([]);
    expect((await inner.load(busy.id))?.events).toEqual(busy.session.events);
    await inner.close();
  });
});

describe('host.agents.dispose', () => {
  it('frees a top-level agent: its turn ends aborted, it leaves the host, its stored session stays and resumes', async () => {
    const host = await open({ persistence: { sqlite: join(dir, 'dispose.db') }, model: { kind: 'scripted', steps: [{ finish: 'hang' }] } });
    const agent = await host.createAgent();
    agent.followup([text('wait forever')]);
    const [first, second] = await Promise.all([host.agents.dispose(agent.id), host.agents.dispose(agent.id)]);
    expect([first, second]).toStrictEqual([true, true]);
    expect(agent.status).toBe('idle');
    expect(host.agents.get(agent.id)).toBeUndefined();
    expect(host.sessions.get(agent.id)).toBeUndefined();
    await expect(host.agents.dispose(agent.id)).resolves.toBe(false);
    const stored = await host.persistence!.load(agent.id);
    expect(stored?.events.at(-1)).toMatchObject({ type: 'turn/end', data: { reason: { kind: 'aborted' } } });
    const { agent: back } = await host.agents.resume({ sessionId: agent.id });
    expect(back.session.events.length).toBe(stored!.events.length);
    await expect(host.agents.dispose(back.id)).resolves.toBe(true);
  });

  it.each(['from a listener of the aborted turn’s end', 'a few microtasks after dispose began'])(
    'starts no turn for input that arrives while the agent is disposed (%s): dispose resolves, the input stays pending in the stored log',
    async (when) => {
      const host = await open({ persistence: { sqlite: join(dir, 'late.db') }, model: { kind: 'scripted', steps: [{ finish: 'hang' }, { finish: 'hang' }] } });
      const agent = await host.createAgent();
      agent.followup([text('wait forever')]);
      while (!agent.session.events.some((e) => e.type === 'turn/start')) await new Promise((r) => setImmediate(r));
      let late: string | undefined;
      if (when.startsWith('from')) {
        agent.subscribe((event) => {
          if (event.type === 'turn/end' && late === undefined) late = agent.followup([text('late message')]);
        });
      }
      const disposed = host.agents.dispose(agent.id);
      if (!when.startsWith('from')) {
        for (let i = 0; i < 3; i++) await Promise.resolve();
        late = agent.followup([text('late message')]);
      }
      await expect(disposed).resolves.toBe(true);
      expect(agent.status).toBe('idle');
      const stored = await host.persistence!.load(agent.id);
      expect(stored!.events.filter((e) => e.type === 'turn/start')).toHaveLength(1);
      expect(stored!.events.filter((e) => e.type === 'inbox/accepted').map((e) => (e.data as { id: string }).id)).toContain(late);
      expect(() => agent.followup([text('after')])).toThrow(expect.objectContaining({ code: 'CLOSED' }));
    },
  );

  it('answers false for an id no agent has, and refuses a subagent child and a non-string id, typed', async () => {
    const host = await open();
    host.subagents.registerProvider(inProcessProvider(host));
    await expect(host.agents.dispose('nobody')).resolves.toBe(false);
    await expect(host.agents.dispose(5 as unknown as string)).rejects.toMatchObject({ code: 'INVALID_OPTIONS' });
    const parent = await host.createAgent();
    const run = await host.subagents.start('in-process', {
      prompt: [text('work')],
      parent,
      signal: new AbortController().signal,
      agentOptions: { model: { kind: 'scripted', steps: [{ finish: 'hang' }] } },
    });
    await expect(host.agents.dispose(run.id)).rejects.toMatchObject({ code: 'INVALID_REQUEST', message: expect.stringContaining('subagent child') });
    expect(host.agents.get(run.id)?.status).toBe('running');
    await run.dispose();
  });
});

describe('host.agents.resume of a damaged log', () => {
  it.each([
    ['an accepted input without its id', { type: 'inbox/accepted', data: { content: [] } }],
    ['an accepted input of null', { type: 'inbox/accepted', data: null }],
    ['a user message of null', { type: 'user/message', data: null }],
    ['a discard without its ids', { type: 'inbox/discarded', data: {} }],
  ])('refuses %s CORRUPT_DATA naming the event, and leaves nothing live', async (_name, bad) => {
    const persistence = memoryPersistence();
    await persistence.create({ id: 'damaged', createdAt: 1 });
    await persistence.append('damaged', [
      { seq: 0, time: 1, type: 'turn/start', data: { turn: 1 } },
      { seq: 1, time: 1, type: 'turn/end', data: { turn: 1, reason: { kind: 'completed' } } },
      { seq: 2, time: 2, ...bad },
    ]);
    const host = await createHost({ providers: false, persistence });
    await expect(host.agents.resume({ sessionId: 'damaged' })).rejects.toMatchObject({
      code: 'CORRUPT_DATA',
      message: expect.stringContaining(`session event 2 (${bad.type}) is malformed`),
    });
    expect(host.agents.get('damaged')).toBeUndefined();
    expect(host.sessions.get('damaged')).toBeUndefined();
    await host.close();
    await persistence.close();
  });
});

describe('host lifecycle with children', () => {
  // The host closing is the cause, so the start rejects CLOSED, whichever step it was in.
  it.each(['in-process', 'spawn'])('rejects a %s start that close() interrupts CLOSED and leaves no child behind', async (provider) => {
    const host = await open({ providers: provider === 'spawn' });
    if (provider === 'in-process') host.subagents.registerProvider(inProcessProvider(host));
    const parent = await host.createAgent();
    const starting = host.subagents.start(provider, {
      prompt: [text('work')],
      parent,
      signal: new AbortController().signal,
      agentOptions: { model: { kind: 'scripted', steps: [{ finish: 'hang' }] } },
    });
    const rejected = expect(starting).rejects.toMatchObject({ code: 'CLOSED', cause: { code: 'CANCELLED' } });
    await host.close();
    await rejected;
    expect(host.agents.list()).toEqual([]);
    expect(host.sessions.list()).toEqual([]);
    expect(host.subagents.activeRuns).toBe(0);
  });

  it('stops a top-level agent mid-turn as close() begins: no model step after that while a continuable child drains', async () => {
    let openGate!: () => void;
    const gate = new Promise<void>((resolve) => (openGate = resolve));
    // The child's tool ignores its signal: the drain, and so close(), waits for the gate.
    const held: Tool = { name: 'held', description: 'returns when the gate opens', parameters: { type: 'object', properties: {} }, execute: () => gate.then(() => 'done') };
    // One model step per turn of the event loop, so the loop below sees the parent's turn under way.
    const tick: Tool = { name: 'tick', description: 'returns soon', parameters: { type: 'object', properties: {} }, execute: () => new Promise((r) => setImmediate(() => r('tick'))) };
    const host = await open({ tools: [held, tick] });
    host.subagents.registerProvider(inProcessProvider(host));
    const loop = Array.from({ length: 500 }, () => ({ toolCalls: [{ name: 'tick', input: {} }] }));
    const parent = await host.createAgent({ agentOptions: { maxStepsPerTurn: 500, model: { kind: 'scripted', steps: loop } } });
    const { childId } = await host.subagents.startContinuable({
      provider: 'in-process',
      label: 'holds',
      request: { prompt: [text('hold')], parent, agentOptions: { model: { kind: 'scripted', steps: [{ toolCalls: [{ name: 'held', input: {} }] }] } } },
    });
    while (!host.sessions.get(childId)?.events.some((e) => e.type === 'tool/call')) await new Promise((r) => setImmediate(r));
    const steps = () => parent.session.events.filter((e) => e.type === 'step/start').length;
    parent.followup([text('keep calling tools')]);
    while (steps() < 2) await new Promise((r) => setImmediate(r));
    const atClose = steps();
    // The gate opens when the parent's turn ends, or after it took three more model steps (none may come).
    parent.subscribe((event) => {
      if (event.type === 'turn/end' || steps() >= atClose + 3) openGate();
    });
    await host.close();
    expect(steps()).toBe(atClose);
    expect(parent.session.events.findLast((e) => e.type === 'turn/end')).toMatchObject({ data: { turn: 1, reason: { kind: 'aborted' } } });
    expect(host.subagents.residentChildren).toBe(0);
    expect(host.agents.list()).toEqual([]);
    expect(host.sessions.list()).toEqual([]);
  });
});

describe('close() and a host call that ignores its signal', () => {
  const script = fileURLToPath(new URL('./fixtures/close-held-call.mjs', import.meta.url));
  const packageUrl = new URL('../dist/src/index.js', import.meta.url).href;

  // The grace for what ignores its signal (abandonGraceMs, the pool's cancelGraceMs) outlasts the
  // test: close() ends only because, once it began, nothing waits for a call whose turn is cancelled.
  // The tool waits on a gate opened after close() (`gate`; `cancelled`: its caller was cancelled
  // before the close and waits out the grace) or on close() itself (`self`).
  it.each([
    ['top', 'gate'],
    ['in-process', 'gate'],
    ['spawn', 'gate'],
    ['continuable spawn', 'gate'],
    ['continuable in-process', 'gate'],
    ['top', 'cancelled'],
    ['spawn', 'cancelled'],
    ['top', 'self'],
    ['spawn', 'self'],
    ['continuable spawn', 'self'],
  ])('ends for a %s agent whose tool holds (%s) and leaves nothing running', async (caller, mode) => {
    const { code, out, err } = await runNodeScript(script, [packageUrl, join(dir, 'held.db'), caller, mode]);
    expect({ code, err }).toEqual({ code: 0, err: '' });
    const outcome = JSON.parse(out) as { order: string[]; left: Record<string, number>; result: { code: string; text: string }; last: unknown };
    const settled = caller === 'spawn' || caller === 'in-process' ? ['result aborted'] : [];
    // The call's turn ended without it; its late answer came after close() and was dropped.
    expect(outcome.order).toEqual(
      mode === 'self' ? [...settled, 'tool returned, its signal aborted', 'closed'] : [...settled, 'closed', 'gate opened', 'tool returned, its signal aborted'],
    );
    expect(outcome.left).toEqual({ agents: 0, sessions: 0, runs: 0, threads: 0 });
    expect(outcome.last).toEqual({ type: 'turn/end', reason: 'aborted' });
    // On the host's thread the turn stopped waiting for the call (a worker child's turn never waits for its host calls).
    if (caller.endsWith('spawn')) expect(outcome.result.code).toBe('CANCELLED');
    else expect(outcome.result).toEqual({ code: 'ABANDONED', text: 'Error: the tool did not stop before the host closed; the turn ended without its result' });
  });
});

describe("a child's session log", () => {
  it.each([
    ['memory', undefined],
    ['sqlite', 'sqlite'],
  ])('is complete in host.sessions when result settles and in %s persistence after dispose', async (_label, kind) => {
    const host = await open(kind === 'sqlite' ? { persistence: { sqlite: join(dir, 'children.db') } } : {});
    host.subagents.registerProvider(inProcessProvider(host));
    const parent = await host.createAgent();
    const run = await host.subagents.start('in-process', {
      prompt: [text('work')],
      parent,
      signal: new AbortController().signal,
      agentOptions: { model: { kind: 'scripted', steps: [{ toolCalls: [{ name: 'missing_tool', input: {} }] }, { text: 'done' }] } },
    });
    await run.result;
    const live = host.sessions.get(run.id);
    const events = [...(live?.events ?? [])];
    expect(events.at(-1)?.type).toBe('turn/end');
    expect(events.map((e) => e.type)).toContain('subagent/descriptor');
    await run.dispose();
    const stored = await host.persistence?.load(run.id);
    expect(stored?.header).toEqual(live?.header);
    expect(stored?.events).toEqual(events);
  });
});
