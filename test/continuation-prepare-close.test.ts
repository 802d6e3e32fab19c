// A continuable start whose provider is still preparing its child (a remote session being opened,
// a process being spawned) when the host closes: the provider is told to stop, close() settles only
// once what it prepared is released, the start rejects CLOSED, and nothing is stored or left running.
// And a provider whose release fails after a start or resume failed, or after the child's own
// dispose failed: the original failure is reported, the release's is warned.
import { setImmediate as nextTurn } from 'node:timers/promises';
import { afterEach, describe, expect, it } from 'vitest';
import {
  acpProvider,
  createHost,
  inProcessProvider,
  memoryPersistence,
  spawnProvider,
  sqlitePersistence,
  text,
  type Agent,
  type ContinuableCreateRequest,
  type ContinuableCreateSpec,
  type Host,
  type SessionPersistence,
  type SubagentProvider,
} from 'subagent-host';
import { FIXTURE_AGENT, childPids, isAlive, newChildPids } from './acp-helpers.js';
import { continuationHost, continuationSuite, eventually, startChild, userTexts } from './continuation-helpers.js';
import { deferred } from './helpers.js';

const suite = continuationSuite('subagent-continuation-prepare-close-');
const GRACES = { disposeEofGraceMs: 2000, disposeGraceMs: 200 };

/** `inner` under the name `slow`: its prepare is held (ignoring its signal) until the test opens `gate`. */
function heldProvider(inner: SubagentProvider, log: string[], order: 'before' | 'after' = 'before') {
  const gate = deferred();
  const began = deferred<AbortSignal>();
  const answered = deferred();
  const provider: SubagentProvider = {
    ...inner,
    name: 'slow',
    prepareContinuable: async (request: ContinuableCreateRequest): Promise<ContinuableCreateSpec> => {
      began.resolve(request.signal);
      // `before`: the wrapper waits, then asks the real provider; `after`: the real provider's
      // product (a process, a resident model) exists while the wrapper still works.
      if (order === 'before') await gate.promise;
      const prepared = await inner.prepareContinuable!(request);
      answered.resolve();
      if (order === 'after') await gate.promise;
      log.push('prepared');
      return {
        ...prepared,
        release: async () => {
          await prepared.release?.();
          log.push('released');
        },
      };
    },
  };
  return { provider, gate, began: began.promise, answered: answered.promise };
}

/** Resolves once `closing` settled or `signal` aborted (close() may abort it before it returns). */
function closedOrAborted(closing: Promise<void>, signal: AbortSignal): Promise<unknown> {
  if (signal.aborted) return Promise.resolve();
  return Promise.race([closing, new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }))]);
}

/** Closes `host` while the held prepare runs; opens the gate once the prepare was told to stop (or close settled without it). */
async function closeWhilePreparing(host: Host, parent: Agent, held: ReturnType<typeof heldProvider>, log: string[]) {
  const start = startChild(host, parent, 'hello', { provider: 'slow', childId: 'late-child' });
  start.catch(() => undefined);
  const signal = await held.began;
  const closing = host.close().then(() => void log.push('closed'));
  await closedOrAborted(closing, signal);
  held.gate.resolve();
  await closing;
  const failure = await start.then(() => undefined, (error: unknown) => error);
  return { failure, signal };
}

async function storedChild(file: string, id: string) {
  const reader = await createHost({ persistence: { sqlite: file }, providers: false });
  try {
    return await reader.persistence!.load(id);
  } finally {
    await reader.close();
  }
}

describe('a host that closes while a provider prepares a continuable child', () => {
  let before: number[] = [];
  afterEach(() => {
    expect(newChildPids(before).filter(isAlive)).toStrictEqual([]);
  });

  for (const kind of ['in-process', 'spawn'] as const) {
    it(`tells a ${kind} start's provider to stop, releases what it prepared before close() settles, and rejects the start CLOSED`, async () => {
      const file = suite.files.file();
      const host = suite.track(await continuationHost(file, kind === 'spawn' ? { pool: { minThreads: 1, maxThreads: 1 } } : {}));
      const parent = await host.createAgent();
      const log: string[] = [];
      const held = heldProvider(kind === 'spawn' ? spawnProvider(host) : inProcessProvider(host), log);
      host.subagents.registerProvider(held.provider);
      const { failure, signal } = await closeWhilePreparing(host, parent, held, log);
      expect(signal.aborted).toBe(true);
      expect(log).toStrictEqual(['prepared', 'released', 'closed']);
      expect(failure).toMatchObject({ code: 'CLOSED' });
      expect(await storedChild(file, 'late-child')).toBeUndefined();
    });
  }

  it('reaps the process an acp provider spawned for a start whose wrapper still works when the host closes, before close() settles', async () => {
    before = childPids();
    const file = suite.files.file();
    const host = suite.track(await continuationHost(file));
    const parent = await host.createAgent();
    const log: string[] = [];
    const acp = acpProvider(host, { command: process.execPath, args: [FIXTURE_AGENT, '--load-session'], cwd: suite.files.dir, ...GRACES });
    const held = heldProvider(acp, log, 'after');
    host.subagents.registerProvider(held.provider);
    const start = startChild(host, parent, 'hello', { provider: 'slow', childId: 'late-child' });
    start.catch(() => undefined);
    const signal = await held.began;
    // The agent process is up and answered session/new: the wrapper holds a live process.
    await held.answered;
    expect(newChildPids(before).filter(isAlive)).toHaveLength(1);
    const closing = host.close().then(() => void log.push('closed'));
    await closedOrAborted(closing, signal);
    held.gate.resolve();
    await closing;
    expect(log).toStrictEqual(['prepared', 'released', 'closed']);
    expect(newChildPids(before).filter(isAlive)).toStrictEqual([]);
    await expect(start).rejects.toMatchObject({ code: 'CLOSED' });
    expect(await storedChild(file, 'late-child')).toBeUndefined();
  });

  it('ends the acp process a start is still spawning (its agent never answers initialize) when the host closes: CLOSED, no process stays', async () => {
    before = childPids();
    const host = suite.track(await continuationHost(suite.files.file()));
    const parent = await host.createAgent();
    host.subagents.registerProvider(acpProvider(host, { command: process.execPath, args: [FIXTURE_AGENT, '--load-session', '--hang-init'], cwd: suite.files.dir, ...GRACES }));
    const start = startChild(host, parent, 'hello', { provider: 'acp' });
    start.catch(() => undefined);
    await eventually(() => newChildPids(before).some(isAlive));
    await host.close();
    expect(newChildPids(before).filter(isAlive)).toStrictEqual([]);
    await expect(start).rejects.toMatchObject({ code: 'CLOSED' });
  });
});

describe('a provider whose release fails after the start or resume failed', () => {
  it('reports the start’s own failure (the caller gave up), not the release’s', async () => {
    const { host, parent } = await suite.setup();
    const local = inProcessProvider(host);
    const controller = new AbortController();
    let releases = 0;
    host.subagents.registerProvider({
      ...local,
      name: 'leaky',
      prepareContinuable: async (request) => {
        controller.abort(new Error('gave up'));
        return { ...(await local.prepareContinuable!(request)), release: () => Promise.reject(new Error(`release ${++releases} broke`)) };
      },
    });
    const start = host.subagents.startContinuable({ provider: 'leaky', label: 'c', signal: controller.signal, request: { prompt: [text('p')], parent } });
    await expect(start).rejects.toThrow('gave up');
    expect(releases).toBe(1);
    expect(host.agents.list()).toStrictEqual([parent]);
  });

  it('reports the resume’s own failure (a setup contribution failed), not the release’s', async () => {
    const { host, parent, recorder } = await suite.setup({ continuation: { lingerMs: 0 } });
    const local = inProcessProvider(host);
    let releases = 0;
    host.subagents.registerProvider({
      ...local,
      name: 'remote',
      prepareContinuable: async (request) => ({ ...(await local.prepareContinuable!(request)), providerData: { remote: true } }),
      resumeContinuable: () => Promise.resolve({ release: () => Promise.reject(new Error(`release ${++releases} broke`)) }),
    });
    const { childId } = await startChild(host, parent, 'first', { provider: 'remote' });
    await recorder.until(() => recorder.ends.length === 1);
    await eventually(() => host.sessions.get(childId) === undefined);
    const broken = host.subagents.registerContinuableSetup(() => {
      throw new Error('setup broke');
    });
    await expect(host.subagents.followup(parent, childId, [text('again')])).rejects.toThrow('setup broke');
    broken();
    expect(releases).toBe(1);
    expect(host.agents.get(childId)).toBeUndefined();
  });
});

/** A caller's store over `inner`, `overrides` in place of its own methods. */
function callerStore(inner: SessionPersistence, overrides: Partial<SessionPersistence>): SessionPersistence {
  const methods = ['create', 'append', 'load', 'list', 'childRecords', 'descendantRecords', 'projections', 'flush', 'close'] as const;
  const store = Object.fromEntries(methods.map((method) => [method, (...args: unknown[]) => (inner[method] as (...values: unknown[]) => unknown)(...args)]));
  return Object.assign(store as unknown as SessionPersistence, overrides);
}

describe("a provider whose release fails after the child's own dispose failed", () => {
  it("reports the dispose's failure (the child's log could not be written), and warns of the release's", async () => {
    const inner = memoryPersistence();
    let broken = false;
    const persistence = callerStore(inner, { append: (id, events) => (broken && id === 'child' ? Promise.reject(new Error('disk full')) : inner.append(id, events)) });
    const warnings: string[] = [];
    const host = suite.track(await createHost({ persistence, providers: false, pool: { minThreads: 0 }, logger: { warn: (message, data) => void warnings.push(`${message}: ${String(data)}`) } }));
    const local = inProcessProvider(host);
    let releases = 0;
    host.subagents.registerProvider({
      ...local,
      name: 'leaky',
      prepareContinuable: async (request) => ({ ...(await local.prepareContinuable!(request)), release: () => Promise.reject(new Error(`release ${++releases} broke`)) }),
    });
    const parent = await host.createAgent();
    const { childId } = await startChild(host, parent, 'hello', { provider: 'leaky', childId: 'child' });
    const child = host.agents.get(childId)!;
    await child.whenIdle();
    broken = true;
    child.inject([text('never written')]);
    const failure = await host.subagents.drainContinuableChildren(parent, [childId]).then(() => undefined, (error: unknown) => error as Error);
    expect(failure).toMatchObject({ code: 'ACTIVATION_TEARDOWN_FAILED', message: expect.stringContaining('disk full'), cause: { code: 'PERSISTENCE_UNAVAILABLE' } });
    expect(failure!.message).not.toContain('release 1 broke');
    expect(releases).toBe(1);
    expect(warnings).toContain(`releasing what the provider prepared for continuable child ${childId} failed: Error: release 1 broke`);
    expect(host.agents.get(childId)).toBeUndefined();
  });
});

describe('a host that closes while a continuable start is being acknowledged', () => {
  it('settles close() only after the start, whose prompt is durable and whose child is stored, listed and resumable', async () => {
    const file = suite.files.file();
    const inner = sqlitePersistence(file);
    // The first flush asked for once the start began (its acknowledgement) is held until the test lets it go.
    const held = { armed: false, called: deferred(), gate: deferred() };
    const persistence = callerStore(inner, {
      flush: async () => {
        if (held.armed) {
          held.armed = false;
          held.called.resolve();
          await held.gate.promise;
        }
        await inner.flush();
      },
    });
    const host = suite.track(await createHost({ persistence, providers: false, pool: { minThreads: 0 } }));
    host.subagents.registerProvider(inProcessProvider(host));
    const parent = await host.createAgent();
    const log: string[] = [];
    held.armed = true;
    const start = startChild(host, parent, 'hello', { childId: 'acknowledged' }).then((started) => void log.push(`started ${started.childId}`));
    await held.called.promise;
    const closing = host.close().then(() => void log.push('closed'));
    // Time enough for close() to run to its end, were it not waiting for the start.
    for (let turn = 0; turn < 500 && !log.includes('closed'); turn++) await nextTurn();
    const closedMeanwhile = log.includes('closed');
    held.gate.resolve();
    await Promise.all([start, closing]);
    await inner.close();
    expect(closedMeanwhile).toBe(false);
    expect(log).toStrictEqual(['started acknowledged', 'closed']);
    const again = suite.track(await continuationHost(file));
    expect((await again.subagents.listChildren(parent.id)).map((row) => row.kind)).toStrictEqual(['child']);
    const back = (await again.agents.resume({ sessionId: parent.id })).agent;
    await again.subagents.followup(back, 'acknowledged', [text('again')]);
    await again.recorder.until(() => again.recorder.ends.some((end) => end.id === 'acknowledged'));
    expect(userTexts((await again.persistence!.load('acknowledged'))!.events)).toStrictEqual(['hello', 'again']);
  });
});

describe('a continuable start a drain or the caller stops before its provider answers', () => {
  let before: number[] = [];
  afterEach(() => {
    expect(newChildPids(before).filter(isAlive)).toStrictEqual([]);
  });

  it('is stopped by a drain issued right after it began: the drain settles only after anything prepared was released, the start rejects DRAINING', async () => {
    const { host, parent } = await suite.setup();
    const local = inProcessProvider(host);
    const log: string[] = [];
    host.subagents.registerProvider({
      ...local,
      name: 'logged',
      prepareContinuable: async (request) => {
        log.push('prepared');
        const prepared = await local.prepareContinuable!(request);
        return { ...prepared, release: async () => void (await prepared.release?.(), log.push('released')) };
      },
    });
    const start = startChild(host, parent, 'hello', { provider: 'logged' });
    start.catch(() => undefined);
    await host.subagents.drainContinuableDescendants([parent]);
    log.push('drained');
    await expect(start).rejects.toMatchObject({ code: 'DRAINING' });
    // Either the provider was never asked, or what it prepared went before the drain settled.
    expect(log).toStrictEqual(log.includes('prepared') ? ['prepared', 'released', 'drained'] : ['drained']);
    expect(host.agents.list()).toStrictEqual([parent]);
  });

  it("rejects with exactly the caller's abort reason when the caller gives up while an acp provider is still spawning the child", async () => {
    before = childPids();
    const host = suite.track(await continuationHost(suite.files.file()));
    const parent = await host.createAgent();
    host.subagents.registerProvider(acpProvider(host, { command: process.execPath, args: [FIXTURE_AGENT, '--load-session', '--hang-init'], cwd: suite.files.dir, ...GRACES }));
    const controller = new AbortController();
    const start = host.subagents.startContinuable({ provider: 'acp', label: 'c', signal: controller.signal, request: { prompt: [text('hello')], parent } });
    start.catch(() => undefined);
    await eventually(() => newChildPids(before).some(isAlive));
    const reason = new Error('gave up');
    controller.abort(reason);
    await expect(start).rejects.toBe(reason);
    await eventually(() => !newChildPids(before).some(isAlive));
  });
});
