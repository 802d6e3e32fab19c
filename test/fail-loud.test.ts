// Operations that cannot be honoured reject or throw a typed SubagentError instead of doing nothing,
// and schema failures name the full path of the bad field whichever boundary they come through.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import {
  SubagentService,
  assertSubagentMaxDepth,
  controlTools,
  createHost,
  createWorkerPool,
  delegationDepthOf,
  foldSubagentDescriptor,
  forkProvider,
  inProcessProvider,
  memoryPersistence,
  reportTool,
  scriptedModel,
  serveAcp,
  spawnProvider,
  sqlitePersistence,
  subagentTool,
  text,
  textOf,
  type AcpServeHost,
  type AcpServeIo,
  type AcpServeOptions,
  type Agent,
  type CreateAgentOptions,
  type Host,
  type HostOptions,
  type InProcessProviderOptions,
  type ReportToolOptions,
  type ResumeAgentOptions,
  type ScriptedStep,
  type SessionEvent,
  type SubagentStartRequest,
  type WorkerProviderOptions,
} from 'subagent-host';

const hosts: Host[] = [];
afterEach(async () => {
  await Promise.all(hosts.splice(0).map((host) => host.close()));
});

async function openHost(): Promise<Host> {
  const host = await createHost({ providers: false });
  hosts.push(host);
  return host;
}

const code = (expected: string) => expect.objectContaining({ name: 'SubagentError', code: expected });

describe('a service without continuation', () => {
  // A bare service has no continuation manager: every continuation operation says so.
  const service = new SubagentService();
  const agent = { id: 'p' } as Agent;

  it('throws CONTINUATION_UNAVAILABLE from interrupt and registerContinuableSetup', () => {
    expect(() => service.interrupt('c', { kind: 'user', parentSessionId: 'p' })).toThrow(code('CONTINUATION_UNAVAILABLE'));
    expect(() => service.registerContinuableSetup(() => () => undefined)).toThrow(code('CONTINUATION_UNAVAILABLE'));
  });

  it('rejects the drains, followup, reportFrom and startContinuable with CONTINUATION_UNAVAILABLE', async () => {
    await expect(service.drainContinuableDescendants([agent])).rejects.toThrow(code('CONTINUATION_UNAVAILABLE'));
    await expect(service.drainContinuableChildren(agent, ['c'])).rejects.toThrow(code('CONTINUATION_UNAVAILABLE'));
    await expect(service.followup(agent, 'c', [text('hi')])).rejects.toThrow(code('CONTINUATION_UNAVAILABLE'));
    await expect(service.reportFrom(agent, [text('hi')], { delivery: 'quiet' })).rejects.toThrow(code('CONTINUATION_UNAVAILABLE'));
    await expect(service.startContinuable({ provider: 'x', label: 'l', request: { prompt: [text('hi')], parent: agent } })).rejects.toThrow(
      code('CONTINUATION_UNAVAILABLE'),
    );
  });
});

describe('a disposed agent', () => {
  it('refuses followup, steer and inject with CLOSED instead of running turns no store keeps', async () => {
    const host = await openHost();
    host.subagents.registerProvider(inProcessProvider(host));
    const parent = await host.createAgent();
    const run = await host.subagents.start('in-process', { prompt: [text('hi')], parent, signal: new AbortController().signal });
    await run.result;
    await run.dispose();
    const child = run.localAgent!;
    const logged = child.session.events.length;
    expect(() => child.followup([text('again')])).toThrow(code('CLOSED'));
    expect(() => child.steer([text('again')])).toThrow(code('CLOSED'));
    expect(() => child.inject([text('again')])).toThrow(code('CLOSED'));
    expect(child.status).toBe('idle');
    expect(child.session.events).toHaveLength(logged);
  });

  it('refuses input to a top-level agent once its host is closed', async () => {
    const host = await openHost();
    const agent = await host.createAgent();
    await host.close();
    expect(() => agent.followup([text('late')])).toThrow(code('CLOSED'));
    await expect(host.createAgent()).rejects.toThrow(code('CLOSED'));
  });
});

describe('closed and foreign resources', () => {
  it('rejects warm() on a closed pool with CLOSED', async () => {
    const pool = createWorkerPool({ minThreads: 0 });
    await pool.close();
    await expect(pool.warm()).rejects.toThrow(code('CLOSED'));
  });

  it('refuses to build a provider on an object that is not a host', () => {
    const fake = { agents: {}, sessions: {}, tools: {} } as unknown as Host;
    expect(() => inProcessProvider(fake)).toThrow(code('INVALID_OPTIONS'));
    expect(() => spawnProvider(fake)).toThrow(code('INVALID_OPTIONS'));
    expect(() => inProcessProvider(null as unknown as Host)).toThrow(code('INVALID_OPTIONS'));
  });

  it('refuses a pool whose minThreads exceeds its maxThreads, naming both', () => {
    expect(() => createWorkerPool({ minThreads: 3, maxThreads: 2 })).toThrow(
      expect.objectContaining({ code: 'INVALID_OPTIONS', message: expect.stringContaining('minThreads (3) must not exceed maxThreads (2)') as string }),
    );
  });
});

describe('schema failures', () => {
  it('name the full path of the bad field, with the stable code', async () => {
    expect(() => createWorkerPool({ resourceLimits: { stackSizeMb: 0 } })).toThrow(
      expect.objectContaining({ code: 'INVALID_OPTIONS', message: expect.stringContaining('options.pool.resourceLimits.stackSizeMb') as string }),
    );
    const host = await openHost();
    expect(() => subagentTool(host, { provider: 'p', toolFilter: {} })).toThrow(
      expect.objectContaining({ code: 'INVALID_OPTIONS', message: expect.stringContaining('subagentTool config.toolFilter') as string }),
    );
  });

  it.each<[string, Parameters<typeof createWorkerPool>[0]]>([
    ['cancelGraceMs', { cancelGraceMs: 2 ** 31 }],
    ['idleTimeoutMs', { idleTimeoutMs: 1e12 }],
    ['maxThreads', { maxThreads: 1e9 }],
    ['maxNestingDepth', { maxNestingDepth: 1e9 }],
    ['resourceLimits.stackSizeMb', { resourceLimits: { stackSizeMb: 100_000 } }],
  ])('refuse a pool %s too large to mean what it says (a timer that fires at once, a gate buffer or stack that cannot be made)', (field, options) => {
    expect(() => createWorkerPool(options)).toThrow(expect.objectContaining({ code: 'INVALID_OPTIONS', message: expect.stringContaining(`options.pool.${field}`) as string }));
  });

  it.each<[string, () => unknown, string]>([
    ['pool.maxNestingDepth 2^53', () => createWorkerPool({ maxNestingDepth: 2 ** 53 }), 'options.pool.maxNestingDepth: Too big: expected number to be <=32'],
    ['pool.maxNestingDepth 1e300', () => createWorkerPool({ maxNestingDepth: 1e300 }), 'options.pool.maxNestingDepth: Too big: expected number to be <=32'],
    ['pool.maxThreads 2^53', () => createWorkerPool({ maxThreads: 2 ** 53 }), 'options.pool.maxThreads: Too big: expected number to be <=1024'],
    ['pool.cancelGraceMs 2^53', () => createWorkerPool({ cancelGraceMs: 2 ** 53 }), 'options.pool.cancelGraceMs: must be at most 2147483647 ms (a longer timer fires at once)'],
    ['sqlitePersistence busyTimeoutMs 2^53', () => sqlitePersistence(':memory:', { busyTimeoutMs: 2 ** 53 }), 'sqlitePersistence options.busyTimeoutMs: Too big: expected number to be <=2147483647'],
  ])('refuse a %s naming the bound it passes, not the largest safe integer', (_name, create, message) => {
    expect(create).toThrow(expect.objectContaining({ code: 'INVALID_OPTIONS', message }));
  });

  // Node refuses such a path itself, which read as a file this process may not write.
  it('refuse a SQLite path with a NUL character as INVALID_OPTIONS, from createHost and sqlitePersistence alike', async () => {
    const file = '/tmp/store\0.db';
    await expect(createHost({ providers: false, persistence: { sqlite: file } })).rejects.toMatchObject({ code: 'INVALID_OPTIONS', message: expect.stringContaining('NUL character') as string });
    expect(() => sqlitePersistence(file)).toThrow(expect.objectContaining({ code: 'INVALID_OPTIONS', message: expect.stringContaining('NUL characters') as string }));
  });

  it.each(['maxNestingDepth', 'minThreads'])('refuse a pool %s of -0, as a maxDepth of -0 is refused', (field) => {
    expect(() => createWorkerPool({ [field]: -0 })).toThrow(
      expect.objectContaining({ code: 'INVALID_OPTIONS', message: `options.pool.${field}: must be a whole number ≥ 0, not -0` }),
    );
  });

  it('refuse a worker heap so small that starting a thread would abort the process', async () => {
    const tooSmall = { pool: { resourceLimits: { maxOldGenerationSizeMb: 2 } } };
    expect(() => createWorkerPool(tooSmall.pool)).toThrow(
      expect.objectContaining({ code: 'INVALID_OPTIONS', message: expect.stringContaining('options.pool.resourceLimits.maxOldGenerationSizeMb') as string }),
    );
    await expect(createHost(tooSmall)).rejects.toThrow(code('INVALID_OPTIONS'));
    const smallest = createWorkerPool({ resourceLimits: { maxOldGenerationSizeMb: 3 } });
    expect(smallest.options.resourceLimits).toEqual({ maxOldGenerationSizeMb: 3, maxYoungGenerationSizeMb: 48 });
    await smallest.close();
  });

  it('refuse a young generation large enough that a thread out of memory would abort the process', async () => {
    expect(() => createWorkerPool({ resourceLimits: { maxOldGenerationSizeMb: 64, maxYoungGenerationSizeMb: 49 } })).toThrow(
      expect.objectContaining({ code: 'INVALID_OPTIONS', message: expect.stringContaining('options.pool.resourceLimits.maxYoungGenerationSizeMb') as string }),
    );
    // Unset, it is 48 MB (Node 24's own default is 192); set, it is the user's.
    const unset = createWorkerPool();
    const set = createWorkerPool({ resourceLimits: { maxYoungGenerationSizeMb: 16 } });
    expect([unset.options.resourceLimits, set.options.resourceLimits]).toEqual([{ maxYoungGenerationSizeMb: 48 }, { maxYoungGenerationSizeMb: 16 }]);
    await Promise.all([unset.close(), set.close()]);
  });

  it('check a tool filter the same way at every boundary that takes one', async () => {
    const host = await openHost();
    host.subagents.registerProvider(inProcessProvider(host));
    const parent = await host.createAgent();
    const bad = { allow: ['a', 1] } as unknown as { allow: string[] };
    await expect(host.subagents.start('in-process', { prompt: [text('hi')], parent, signal: new AbortController().signal, toolFilter: bad })).rejects.toThrow(
      expect.objectContaining({ code: 'INVALID_REQUEST', message: expect.stringContaining('request.toolFilter.allow[1]') as string }),
    );
    expect(() => subagentTool(host, { provider: 'in-process', toolFilter: bad })).toThrow(
      expect.objectContaining({ code: 'INVALID_OPTIONS', message: expect.stringContaining('subagentTool config.toolFilter.allow[1]') as string }),
    );
  });
});

describe('arguments of the public functions', () => {
  const refused = (expected: string, words: string) => expect.objectContaining({ name: 'SubagentError', code: expected, message: expect.stringContaining(words) as string });

  it('refuse a tool installer a host that is not one, naming the installer', async () => {
    const host = await openHost();
    for (const bad of [null, {}, { subagents: host.subagents }]) {
      expect(() => subagentTool(bad as unknown as Host, { provider: 'spawn' })).toThrow(refused('INVALID_OPTIONS', 'subagentTool: host'));
      expect(() => controlTools(bad as unknown as Host)).toThrow(refused('INVALID_OPTIONS', 'controlTools: host'));
    }
    expect(() => reportTool(null as unknown as Host)).toThrow(refused('INVALID_OPTIONS', 'reportTool: host is not an object'));
    expect(() => reportTool(host, null as unknown as ReportToolOptions)).toThrow(refused('INVALID_OPTIONS', 'reportTool opts must be an object'));
    expect(() => reportTool(host, { delivery: 'quiet', loud: true } as unknown as ReportToolOptions)).toThrow(refused('INVALID_OPTIONS', 'unknown field(s) loud'));
    // Nothing was installed by the refused calls.
    expect(host.tools.list()).toEqual([]);
  });

  it('refuse provider options that are not an object or name an unknown or mistyped field', async () => {
    const host = await openHost();
    expect(() => inProcessProvider(host, null as unknown as InProcessProviderOptions)).toThrow(refused('INVALID_OPTIONS', 'inProcessProvider options must be an object'));
    expect(() => inProcessProvider(host, { fork: 'yes' } as unknown as InProcessProviderOptions)).toThrow(refused('INVALID_OPTIONS', 'inProcessProvider options.fork must be a boolean'));
    expect(() => spawnProvider(host, { name: '' })).toThrow(refused('INVALID_OPTIONS', 'spawnProvider options.name must be a non-empty string'));
    expect(() => forkProvider(host, 3 as unknown as WorkerProviderOptions)).toThrow(refused('INVALID_OPTIONS', 'forkProvider options must be an object'));
    expect(() => spawnProvider(host, { fork: true } as unknown as WorkerProviderOptions)).toThrow(refused('INVALID_OPTIONS', 'spawnProvider options has unknown field fork'));
    expect(spawnProvider(host, { name: 'mine' }).name).toBe('mine');
  });

  it('refuse misspelt host and agent options instead of dropping them', async () => {
    await expect(createHost({ provider: false } as unknown as HostOptions)).rejects.toThrow(refused('INVALID_OPTIONS', 'createHost options has unknown field(s) provider'));
    await expect(createHost(5 as unknown as HostOptions)).rejects.toThrow(refused('INVALID_OPTIONS', 'createHost options must be an object'));
    const host = await openHost();
    await expect(host.createAgent({ agentOption: {} } as unknown as CreateAgentOptions)).rejects.toThrow(refused('INVALID_OPTIONS', 'unknown field(s) agentOption'));
    await expect(host.agents.resume(null as unknown as ResumeAgentOptions)).rejects.toThrow(refused('INVALID_OPTIONS', 'resume(): options must be an object'));
    await expect(host.createAgent({ sessionId: '' })).rejects.toThrow(refused('INVALID_OPTIONS', 'options.sessionId must be a non-empty string'));
    await expect(host.createAgent({ sessionId: 'half \uD800' })).rejects.toThrow(refused('INVALID_OPTIONS', 'lone UTF-16 surrogate'));
    // A step limit below 1 would end every turn before it took its input and start the next at once.
    for (const [agentOptions, words] of [
      [{ maxStepsPerTurn: 0 }, 'agentOptions.maxStepsPerTurn must be a whole number ≥ 1'],
      [{ maxStepsPerTurn: Number.NaN }, 'agentOptions.maxStepsPerTurn'],
      [{ maxTokens: -5 }, 'agentOptions.maxTokens must be a whole number ≥ 1'],
      [{ persona: 3 }, 'agentOptions.persona must be a string'],
      [{ toolModules: [''] }, 'agentOptions.toolModules'],
    ] as const) {
      await expect(host.createAgent({ agentOptions } as unknown as CreateAgentOptions)).rejects.toThrow(refused('INVALID_OPTIONS', words));
    }
    expect(host.agents.list()).toEqual([]);
  });

  it('say how to name a tool or model module given by a relative path, which resolves from the package, not the caller', async () => {
    const host = await createHost();
    hosts.push(host);
    const advice = 'pass a file URL, e.g. new URL("./my-tools.js", import.meta.url).href, or an installed package name';
    await expect(host.createAgent({ agentOptions: { toolModules: ['./my-tools.js'] } })).rejects.toThrow(refused('INVALID_OPTIONS', advice));
    await expect(host.createAgent({ agentOptions: { model: { kind: 'module', specifier: '../my-model.js' } } })).rejects.toThrow(
      refused('INVALID_MODEL_SPEC', 'pass a file URL, e.g. new URL("../my-model.js", import.meta.url).href'),
    );
    // In a worker thread the same path would be read from the worker entry's folder.
    const parent = await host.createAgent();
    const run = await host.subagents.start('spawn', { prompt: [text('go')], parent, signal: new AbortController().signal, agentOptions: { toolModules: ['./my-tools.js'] } }).catch((error: unknown) => error);
    const failure = run instanceof Error ? run.message : (await (run as { result: Promise<{ diagnostic?: string }> }).result).diagnostic;
    expect(failure).toContain(advice);
    if (!(run instanceof Error)) await (run as { dispose(): Promise<void> }).dispose();
    // A package name that is not installed keeps the short advice.
    await expect(host.createAgent({ agentOptions: { toolModules: ['no-such-package-of-tools'] } })).rejects.toThrow(refused('INVALID_OPTIONS', 'use a file URL or an installed package name'));
    // A module that was found but failed to run gets no advice about how to name it.
    const dir = mkdtempSync(join(tmpdir(), 'fail-loud-'));
    try {
      const broken = join(dir, 'broken-tools.mjs');
      writeFileSync(broken, 'export const tools = [;\n');
      const failure = await host.createAgent({ agentOptions: { toolModules: [pathToFileURL(broken).href] } }).catch((error: unknown) => error as Error);
      expect(failure).toMatchObject({ code: 'INVALID_OPTIONS', message: expect.stringContaining('SyntaxError') as string });
      expect((failure as Error).message).not.toContain('file URL');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('say that a tool or model module given by a file URL was found when what is missing is a module it imports, in-process and in a worker', async () => {
    const host = await createHost();
    hosts.push(host);
    const dir = mkdtempSync(join(tmpdir(), 'fail-loud-'));
    try {
      const tools = join(dir, 'tools.mjs');
      writeFileSync(tools, "import 'no-such-package-of-tools';\nexport const tools = [];\n");
      const model = join(dir, 'model.mjs');
      writeFileSync(model, "import './no-such-helper.mjs';\nexport default () => ({});\n");
      const found = '; that file was found: what is missing is a module it imports';
      for (const specifier of [pathToFileURL(tools).href, tools]) {
        const failure = await host.createAgent({ agentOptions: { toolModules: [specifier] } }).catch((error: unknown) => error as Error);
        expect(failure).toMatchObject({ code: 'INVALID_OPTIONS', message: expect.stringMatching(/^cannot load tool module .*'no-such-package-of-tools'.*; that file was found: what is missing is a module it imports$/) as string });
        expect((failure as Error).message).not.toContain('use a file URL');
      }
      await expect(host.createAgent({ agentOptions: { model: { kind: 'module', specifier: pathToFileURL(model).href } } })).rejects.toThrow(refused('INVALID_MODEL_SPEC', found));
      const parent = await host.createAgent();
      const run = await host.subagents.start('spawn', { prompt: [text('go')], parent, signal: new AbortController().signal, agentOptions: { toolModules: [pathToFileURL(tools).href] } });
      const { stopReason, diagnostic } = await run.result;
      await run.dispose();
      expect({ stopReason, advice: diagnostic?.endsWith(found) }).toEqual({ stopReason: 'error', advice: true });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('refuse a listener that is not a function, an unknown event and a listing without a session id', async () => {
    const host = await openHost();
    expect(() => host.subagents.on('subagent/start', null as unknown as () => void)).toThrow(refused('INVALID_REQUEST', 'the listener must be a function'));
    expect(() => host.subagents.on('subagent/begin' as 'subagent/start', () => undefined)).toThrow(refused('INVALID_REQUEST', 'unknown event subagent/begin'));
    expect(() => host.subagents.on('subagent/end', () => undefined, { parent: 5 as unknown as string })).toThrow(refused('INVALID_REQUEST', 'opts must be { parent?'));
    // A misspelt `parent` would make a listener meant for one parent hear every parent's runs.
    expect(() => host.subagents.on('subagent/end', () => undefined, { parnet: 'p' } as unknown as { parent: string })).toThrow(refused('INVALID_REQUEST', 'opts must be { parent?'));
    expect(host.subagents.listenerCount).toBe(0);
    await expect(host.subagents.listChildren(undefined as unknown as string)).rejects.toThrow(refused('INVALID_REQUEST', 'listChildren(): the session id'));
    await expect(host.subagents.listDescendants('root', {} as AbortSignal)).rejects.toThrow(refused('INVALID_REQUEST', 'signal must be an AbortSignal'));
    await expect(host.subagents.listChildren('nobody')).resolves.toEqual([]);
  });

  it('refuse serveAcp a host or streams it cannot serve, before serving', async () => {
    await expect(serveAcp(null as unknown as AcpServeHost)).rejects.toThrow(refused('INVALID_OPTIONS', 'serveAcp: host'));
    const host = await openHost();
    await expect(serveAcp(host, { input: null, output: null } as unknown as AcpServeIo)).rejects.toThrow(refused('INVALID_OPTIONS', 'serveAcp: io must be'));
  });

  it('refuse content helpers and scriptedModel what they cannot turn into content or steps', () => {
    expect(() => text(5 as unknown as string)).toThrow(refused('INVALID_REQUEST', 'text() takes a string, not a value of type number'));
    expect(() => textOf(null as unknown as [])).toThrow(refused('INVALID_REQUEST', 'textOf() takes an array of content blocks, not null'));
    expect(() => scriptedModel(null as unknown as [])).toThrow(refused('INVALID_MODEL_SPEC', 'model spec.steps'));
    expect(() => scriptedModel([{ txt: 'hi' } as unknown as ScriptedStep])).toThrow(refused('INVALID_MODEL_SPEC', 'model spec.steps[0]'));
    expect(textOf([text('a'), text('b')])).toBe('ab');
  });
});

describe('arguments of the wrong type or shape (fuzzed)', () => {
  const refused = (expected: string, words: string) => expect.objectContaining({ name: 'SubagentError', code: expected, message: expect.stringContaining(words) as string });

  it('are described in the error even when they have no string form (a null-prototype object, a Symbol)', async () => {
    // String() of a null-prototype object, and a template of a Symbol, throw a TypeError.
    const bare = Object.create(null) as unknown;
    expect(() => assertSubagentMaxDepth(bare)).toThrow(refused('INVALID_REQUEST', 'maxDepth must be a non-negative safe integer (got <an object>)'));
    await expect(createHost({ providers: false, abandonGraceMs: bare as number })).rejects.toThrow(refused('INVALID_OPTIONS', 'options.abandonGraceMs'));
    const host = await openHost();
    expect(() => host.subagents.on(bare as 'subagent/start', () => undefined)).toThrow(refused('INVALID_REQUEST', 'unknown event <an object>'));
    const seed = [{ seq: Symbol('s'), time: 1, type: 'user/message', data: {} }] as unknown as SessionEvent[];
    await expect(host.createAgent({ seed })).rejects.toThrow(refused('SEQ_MISMATCH', 'has seq Symbol(s)'));
    await expect(memoryPersistence().append(bare as string, [])).rejects.toThrow(refused('UNKNOWN_SESSION', 'No session "<an object>"'));
  });

  it('to the content, descriptor and depth helpers are refused, not met with a TypeError', () => {
    expect(() => textOf([text('a'), null] as unknown as [])).toThrow(refused('INVALID_REQUEST', 'textOf() takes content blocks, and one is null'));
    expect(() => delegationDepthOf(null as unknown as Agent)).toThrow(refused('INVALID_REQUEST', 'delegationDepthOf() takes an Agent'));
    expect(() => delegationDepthOf({ options: {} } as unknown as Agent)).toThrow(refused('INVALID_REQUEST', 'delegationDepthOf() takes an Agent'));
    expect(() => foldSubagentDescriptor(undefined as unknown as [])).toThrow(refused('INVALID_REQUEST', 'foldSubagentDescriptor() takes an array of session events'));
    expect(() => foldSubagentDescriptor([null] as unknown as [])).toThrow(refused('INVALID_REQUEST', 'foldSubagentDescriptor() takes session events'));
    expect(foldSubagentDescriptor([])).toBeUndefined();
  });

  it('name the refused value as it was given: -0 is not 0, a string is not a number, a missing request is no field', async () => {
    // Printed with String(), -0 read "got 0" and "2" read "got 2": the message refused a valid-looking value.
    expect(() => assertSubagentMaxDepth(-0)).toThrow(refused('INVALID_REQUEST', 'maxDepth must be a non-negative safe integer (got -0)'));
    expect(() => assertSubagentMaxDepth('2')).toThrow(refused('INVALID_REQUEST', 'maxDepth must be a non-negative safe integer (got "2")'));
    const agent = { id: 'a', session: { header: { id: 'a', createdAt: 0 }, events: [] }, options: { subagentDepth: -0 } } as unknown as Agent;
    expect(() => delegationDepthOf(agent)).toThrow(refused('INVALID_OPTIONS', 'options.subagentDepth must be a non-negative safe integer (got -0)'));
    const host = await openHost();
    host.subagents.registerProvider(inProcessProvider(host));
    await expect(host.subagents.start('in-process', undefined as unknown as SubagentStartRequest)).rejects.toThrow(refused('INVALID_REQUEST', 'request must be an object'));
  });

  it('refuse a seed event type no store keeps at createAgent, so that the host still closes', async () => {
    const host = await createHost({ providers: false, persistence: { sqlite: ':memory:' } });
    const seed = [{ seq: 0, time: 1, type: 'user/\uD800', data: {} }];
    await expect(host.createAgent({ seed })).rejects.toThrow(refused('INVALID_OPTIONS', 'options.seed[0].type must be well-formed text'));
    expect(host.agents.list()).toEqual([]);
    // An agent made from it would have failed the first flush, and close() with it.
    await expect(host.close()).resolves.toBeUndefined();
  });

  it('refuse input options that are no object or name an unknown field, a non-agent to drain and a listener that is no function', async () => {
    const host = await createHost({ providers: false });
    hosts.push(host);
    host.subagents.registerProvider(inProcessProvider(host));
    const parent = await host.createAgent();
    // A misspelt `source` would be dropped and the message logged as the user's.
    for (const method of ['followup', 'steer', 'inject'] as const) {
      expect(() => parent[method]([text('x')], { sorce: { kind: 'user' } } as unknown as { source: { kind: 'user' } })).toThrow(refused('INVALID_REQUEST', 'message opts has unknown field(s) sorce'));
      expect(() => parent[method]([text('x')], 5 as unknown as { source: { kind: 'user' } })).toThrow(refused('INVALID_REQUEST', 'message opts must be an object'));
    }
    expect(parent.session.events.filter((event) => event.type === 'inbox/accepted')).toEqual([]);
    expect(() => parent.subscribe(null as unknown as () => void)).toThrow(refused('INVALID_REQUEST', 'subscribe(): the listener must be a function'));
    const { childId } = await host.subagents.startContinuable({ provider: 'in-process', label: 'c', request: { prompt: [text('go')], parent } });
    // A misspelt `signal` would leave the follow-up uncancellable.
    await expect(host.subagents.followup(parent, childId, [text('more')], { signl: AbortSignal.abort() } as unknown as { signal: AbortSignal })).rejects.toThrow(
      refused('INVALID_REQUEST', 'followup opts has unknown field(s) signl'),
    );
    await expect(host.subagents.followup(parent, childId, [text('more')], 'quiet' as unknown as { signal: AbortSignal })).rejects.toThrow(refused('INVALID_REQUEST', 'followup opts must be an object'));
    await expect(host.subagents.reportFrom(parent, [text('r')], { delivery: 'quiet', signl: AbortSignal.abort() } as unknown as { delivery: 'quiet' })).rejects.toThrow(
      refused('INVALID_REQUEST', 'reportFrom opts has unknown field(s) signl'),
    );
    await expect(host.subagents.drainContinuableDescendants([null, 5] as unknown as Agent[])).rejects.toThrow(refused('INVALID_REQUEST', 'parents must be an array of agents'));
    expect(host.subagents.residentChildren).toBe(1);
    await expect(serveAcp(host, { input: process.stdin, output: process.stdout }, { image: false } as unknown as AcpServeOptions)).rejects.toThrow(refused('INVALID_OPTIONS', 'serveAcp: options must be { images?: boolean }'));
  });

  it('refuse persistence appends and projection reads of the wrong shape in both stores', async () => {
    for (const store of [memoryPersistence(), sqlitePersistence(':memory:')]) {
      await store.create({ id: 's', createdAt: 1 });
      await expect(store.append('s', null as unknown as [])).rejects.toThrow(refused('INVALID_OPTIONS', 'append(): events must be an array of session events, not null'));
      await expect(store.append('s', 5 as unknown as [])).rejects.toThrow(refused('INVALID_OPTIONS', 'append(): events must be an array'));
      await expect(store.append('s', [null] as unknown as [])).rejects.toThrow(refused('CORRUPT_DATA', 'session "s" events[0]'));
      await expect(store.projections(null as unknown as [])).rejects.toThrow(refused('INVALID_OPTIONS', 'projections(): ids must be an array of session ids'));
      expect((await store.load('s'))?.events).toEqual([]);
      await store.close();
    }
  });
});
