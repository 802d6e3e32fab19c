// Options, requests and hosts that cannot be read, at every public entry point: a revoked proxy, a
// proxy whose traps throw, an object whose getter throws. Each is a typed SubagentError naming what
// could not be read, with the throw as cause (a revoked proxy's TypeError included), never a raw
// TypeError from inside the library; and nothing it began is left behind.
import { describe, expect, it } from 'vitest';
import {
  SubagentError,
  acpProvider,
  controlTools,
  createHost,
  createWorkerPool,
  forkProvider,
  inProcessProvider,
  queueProvider,
  reportTool,
  spawnProvider,
  subagentTool,
  text,
  type Agent,
  type Host,
  type SubagentErrorCode,
} from 'subagent-host';
import { closeAfterEach, tempFiles } from './helpers.js';

const boom = new Error('read refused');

function revokedProxy(): object {
  const { proxy, revoke } = Proxy.revocable({}, {});
  revoke();
  return proxy;
}

function trappingProxy(): object {
  const fail = (): never => {
    throw boom;
  };
  return new Proxy({}, { get: fail, has: fail, ownKeys: fail, getOwnPropertyDescriptor: fail, getPrototypeOf: fail });
}

/** An object whose `key` (enumerable, its own) throws when read. */
function throwingGetter(key: string): object {
  return Object.defineProperty({}, key, { enumerable: true, get: fail });
  function fail(): never {
    throw boom;
  }
}

/** The three unreadable values; a getter one throws on reading `key`. */
const unreadable = (key: string): [string, () => object][] => [
  ['a revoked proxy', revokedProxy],
  ['a proxy whose traps throw', trappingProxy],
  [`an object whose ${key} getter throws`, () => throwingGetter(key)],
];

/** The error `fn` throws or rejects with. */
async function failure(fn: () => unknown): Promise<unknown> {
  try {
    await fn();
  } catch (error) {
    return error;
  }
  throw new Error('expected a failure');
}

/** A typed refusal with `code`, naming `what`, its cause what the read threw. */
function expectRefused(error: unknown, code: SubagentErrorCode, what: string): void {
  expect(error).toBeInstanceOf(SubagentError);
  expect(error).toMatchObject({ code, message: expect.stringContaining(what) as string });
  const cause = (error as SubagentError).cause;
  expect(cause === boom || cause instanceof TypeError).toBe(true);
}

const track = closeAfterEach();

async function openHost(): Promise<Host> {
  const host = track(await createHost({ providers: false }));
  host.subagents.registerProvider(inProcessProvider(host));
  return host;
}

describe('createHost options that cannot be read', () => {
  // [field, where the value goes, the key a getter throws on, what the error names, its code]
  const fields: [string, (value: object) => object, string, string, SubagentErrorCode][] = [
    ['the options', (value) => value, 'pool', 'createHost options', 'INVALID_OPTIONS'],
    ['options.pool', (value) => ({ providers: false, pool: value }), 'maxThreads', 'options.pool', 'INVALID_OPTIONS'],
    ['options.continuation', (value) => ({ providers: false, continuation: value }), 'lingerMs', 'options.continuation', 'INVALID_OPTIONS'],
    ['options.persistence', (value) => ({ providers: false, persistence: value }), 'sqlite', 'options.persistence', 'INVALID_OPTIONS'],
    ['options.logger', (value) => ({ providers: false, logger: value }), 'warn', 'options.logger', 'INVALID_OPTIONS'],
    ['options.tools[0]', (value) => ({ providers: false, tools: [value] }), 'name', 'a tool', 'INVALID_OPTIONS'],
    ['options.model', (value) => ({ providers: false, model: value }), 'kind', 'the model spec', 'INVALID_MODEL_SPEC'],
  ];
  const rows = fields.flatMap(([field, place, key, what, code]) => unreadable(key).map(([kind, value]) => [field, kind, () => place(value()), what, code] as const));

  it.each(rows)('(%s: %s) reject with a typed error naming it', async (_field, _kind, options, what, code) => {
    expectRefused(await failure(() => createHost(options() as never)), code, what);
  });

  it('(createWorkerPool) throw INVALID_OPTIONS naming options.pool', () => {
    for (const [, value] of unreadable('maxThreads')) {
      let error: unknown;
      try {
        createWorkerPool(value() as never);
      } catch (thrown) {
        error = thrown;
      }
      expectRefused(error, 'INVALID_OPTIONS', 'options.pool');
    }
  });

  it('are read once: a frozen, a null-prototype and a class-with-getters options object each make a host', async () => {
    class Options {
      get providers(): boolean {
        return false;
      }
      get continuation(): { lingerMs: number } {
        return { lingerMs: 0 };
      }
    }
    const nullProto = Object.assign(Object.create(null) as object, { providers: false });
    for (const options of [Object.freeze({ providers: false }), nullProto, new Options()]) {
      const host = track(await createHost(options as Parameters<typeof createHost>[0]));
      expect(host.subagents.list()).toEqual([]);
    }
  });
  const stores = tempFiles('class-sqlite');
  it('are read once: a { sqlite } store whose path is a class getter opens that file', async () => {
    const file = stores.file();
    class Store {
      get sqlite(): string {
        return file;
      }
    }
    const host = track(await createHost({ providers: false, persistence: new Store() as { sqlite: string } }));
    const agent = await host.createAgent();
    await host.sessions.flush(agent.id);
    const reopened = track(await createHost({ providers: false, persistence: { sqlite: file } }));
    expect((await reopened.agents.resume({ sessionId: agent.id })).agent.id).toBe(agent.id);
  });
});

describe('options read through a proxy with a get trap alone', () => {
  /** Options whose fields only its get trap knows (its target is empty). */
  const lazy = <T extends object>(values: T): T => new Proxy({}, { get: (_target, key) => values[key as keyof T] }) as T;

  it('(createHost, createAgent and the provider factories) take the fields the trap gives', async () => {
    const host = track(await createHost(lazy({ providers: false })));
    expect(host.subagents.getProvider('spawn')).toBeUndefined();
    const agent = await host.createAgent(lazy({ header: { cwd: '/work' } }));
    expect(agent.session.header.cwd).toBe('/work');
    const inProcess = inProcessProvider(host, lazy({ name: 'lazy', fork: true }));
    expect([inProcess.name, inProcess.inheritsParentContext]).toEqual(['lazy', true]);
    expect(spawnProvider(host, lazy({ name: 'lazy-spawn' })).name).toBe('lazy-spawn');
  });
});

describe('tool installers given a host or options that cannot be read', () => {
  it.each(unreadable('subagents'))('(%s as the host) throw INVALID_OPTIONS naming the installer', async (_kind, value) => {
    expectRefused(await failure(() => subagentTool(value() as never, { provider: 'in-process' })), 'INVALID_OPTIONS', 'subagentTool: host');
    expectRefused(await failure(() => controlTools(value() as never)), 'INVALID_OPTIONS', 'controlTools: host');
    expectRefused(await failure(() => reportTool(value() as never)), 'INVALID_OPTIONS', 'reportTool: host');
  });

  it.each(unreadable('register').slice(0, 2))('(%s as host.tools) throw INVALID_OPTIONS and install nothing', async (_kind, value) => {
    const host = await openHost();
    const listeners = host.subagents.listenerCount;
    const partial = { subagents: host.subagents, agents: host.agents, tools: value() } as never;
    expectRefused(await failure(() => subagentTool(partial, { provider: 'in-process' })), 'INVALID_OPTIONS', 'subagentTool: host');
    expectRefused(await failure(() => controlTools(partial)), 'INVALID_OPTIONS', 'controlTools: host');
    expectRefused(await failure(() => reportTool(partial)), 'INVALID_OPTIONS', 'reportTool: host');
    expect(host.subagents.listenerCount).toBe(listeners);
    expect(host.tools.list()).toEqual([]);
  });

  it('(controlTools: a host whose persistence getter throws) throws INVALID_OPTIONS', async () => {
    const host = await openHost();
    const getter = Object.defineProperty({ subagents: host.subagents, tools: host.tools, agents: host.agents }, 'persistence', {
      get: () => {
        throw boom;
      },
    });
    expectRefused(await failure(() => controlTools(getter as never)), 'INVALID_OPTIONS', 'controlTools: host');
    expect(host.tools.list()).toEqual([]);
  });

  it.each(unreadable('delivery'))('(reportTool: %s as its options) throws INVALID_OPTIONS naming them', async (_kind, value) => {
    const host = await openHost();
    expectRefused(await failure(() => reportTool(host, value() as never)), 'INVALID_OPTIONS', 'reportTool opts');
  });
});

describe('provider factories given options that cannot be read', () => {
  const factories: [string, (host: Host, options: object) => unknown, string][] = [
    ['inProcessProvider', (host, options) => inProcessProvider(host, options as never), 'name'],
    ['spawnProvider', (host, options) => spawnProvider(host, options as never), 'name'],
    ['forkProvider', (host, options) => forkProvider(host, options as never), 'name'],
    ['acpProvider', (host, options) => acpProvider(host, options as never), 'command'],
    ['queueProvider', (host, options) => queueProvider(host, options as never), 'connection'],
  ];
  it.each(factories)('(%s) throw INVALID_OPTIONS naming the factory', async (name, factory, key) => {
    const host = await openHost();
    for (const [, value] of unreadable(key)) expectRefused(await failure(() => factory(host, value())), 'INVALID_OPTIONS', `${name} options`);
  });
  it('(inProcessProvider, spawnProvider, forkProvider) take a class instance\'s getters as its options', async () => {
    const host = await openHost();
    class Named {
      get name(): string {
        return 'named';
      }
    }
    class Forking extends Named {
      get fork(): boolean {
        return true;
      }
    }
    const inProcess = inProcessProvider(host, new Forking());
    expect([inProcess.name, inProcess.inheritsParentContext]).toEqual(['named', true]);
    expect(spawnProvider(host, new Named()).name).toBe('named');
    expect(forkProvider(host, new Named()).name).toBe('named');
  });

  it('(inProcessProvider) refuses a class getter that is not a valid option', async () => {
    const host = await openHost();
    const options = new (class {
      get fork(): string {
        return 'yes';
      }
    })();
    expect(() => inProcessProvider(host, options as never)).toThrow(expect.objectContaining({ code: 'INVALID_OPTIONS', message: 'inProcessProvider options.fork must be a boolean' }));
  });
});

describe('requests that cannot be read', () => {
  async function withParent(): Promise<{ host: Host; parent: Agent }> {
    const host = await openHost();
    return { host, parent: await host.createAgent() };
  }

  it.each(unreadable('prompt'))('(start: %s as the request) rejects INVALID_REQUEST and starts no child', async (_kind, value) => {
    const { host } = await withParent();
    expectRefused(await failure(() => host.subagents.start('in-process', value() as never)), 'INVALID_REQUEST', 'request');
    expect(host.subagents.activeRuns).toBe(0);
  });

  it.each(unreadable('provider'))('(startContinuable: %s as the spec) rejects INVALID_REQUEST', async (_kind, value) => {
    const { host, parent } = await withParent();
    expectRefused(await failure(() => host.subagents.startContinuable(value() as never)), 'INVALID_REQUEST', 'startContinuable spec');
    expect(await host.subagents.listChildren(parent.id)).toEqual([]);
  });

  it.each(unreadable('tokens'))('(startContinuable: %s as the budget) rejects INVALID_REQUEST and starts no child', async (_kind, value) => {
    const { host, parent } = await withParent();
    const spec = { provider: 'in-process', label: 'child', request: { parent, prompt: [text('go')], budget: value() as never } };
    expectRefused(await failure(() => host.subagents.startContinuable(spec)), 'INVALID_REQUEST', 'startContinuable spec');
    expect(await host.subagents.listChildren(parent.id)).toEqual([]);
  });

  it.each(unreadable('signal'))('(followup and reportFrom: %s as their options) reject INVALID_REQUEST naming them', async (_kind, value) => {
    const { host, parent } = await withParent();
    expectRefused(await failure(() => host.subagents.followup(parent, 'child', [text('more')], value() as never)), 'INVALID_REQUEST', 'followup opts');
    expectRefused(await failure(() => host.subagents.reportFrom(parent, [text('found')], value() as never)), 'INVALID_REQUEST', 'reportFrom opts');
  });

  it('(followup and reportFrom: a proxy whose traps throw as the signal) reject INVALID_REQUEST naming it', async () => {
    const { host, parent } = await withParent();
    const signal = trappingProxy() as AbortSignal;
    expectRefused(await failure(() => host.subagents.followup(parent, 'child', [text('more')], { signal })), 'INVALID_REQUEST', 'followup opts');
    expectRefused(await failure(() => host.subagents.reportFrom(parent, [text('found')], { delivery: 'quiet', signal })), 'INVALID_REQUEST', 'reportFrom opts');
  });

  it.each(unreadable('id'))('(followup, reportFrom and interrupt: %s as the agent) are refused UNAUTHORIZED: it is no live agent', async (_kind, value) => {
    const { host } = await withParent();
    await expect(host.subagents.followup(value() as never, 'child', [text('more')])).rejects.toMatchObject({ code: 'UNAUTHORIZED' });
    await expect(host.subagents.reportFrom(value() as never, [text('found')], { delivery: 'quiet' })).rejects.toMatchObject({ code: 'UNAUTHORIZED' });
    expect(() => host.subagents.interrupt('child', { kind: 'ancestor', agent: value() as never })).toThrow(expect.objectContaining({ code: 'UNAUTHORIZED' }));
  });

  it.each(unreadable('kind'))('(interrupt: %s as the authority) throws INVALID_REQUEST naming it', async (_kind, value) => {
    const { host } = await withParent();
    expectRefused(await failure(() => host.subagents.interrupt('child', value() as never)), 'INVALID_REQUEST', 'the interrupt authority');
  });

  it('(listChildren: a proxy whose traps throw as its signal) rejects INVALID_REQUEST', async () => {
    const { host, parent } = await withParent();
    await expect(host.subagents.listChildren(parent.id, trappingProxy() as never)).rejects.toMatchObject({ code: 'INVALID_REQUEST', message: expect.stringContaining('signal') as string });
  });

  /** A revoked proxy, and a proxy of an array whose traps throw (an array to Array.isArray, so it is read). */
  const unreadableArrays = (items: unknown[]): [string, () => object][] => [
    ['a revoked proxy', revokedProxy],
    ['a proxy of an array whose traps throw', () => new Proxy(items, { get: () => { throw boom; }, has: () => { throw boom; }, ownKeys: () => { throw boom; } })],
  ];

  it.each(unreadableArrays([text('more')]))('(followup: %s as the message) rejects INVALID_REQUEST naming it', async (_kind, value) => {
    const { host, parent } = await withParent();
    expectRefused(await failure(() => host.subagents.followup(parent, 'child', value() as never)), 'INVALID_REQUEST', 'message content');
  });

  it.each(unreadableArrays(['child']))('(drainContinuableChildren: %s as the ids) rejects INVALID_REQUEST naming them', async (_kind, value) => {
    const { host, parent } = await withParent();
    expectRefused(await failure(() => host.subagents.drainContinuableChildren(parent, value() as never)), 'INVALID_REQUEST', 'childIds');
  });

  it.each([...unreadableArrays([]), ['an array holding a proxy whose traps throw', () => [trappingProxy()]], ['an array holding a revoked proxy', () => [revokedProxy()]]] as [string, () => object][])(
    '(drainContinuableDescendants: %s as the parents) rejects INVALID_REQUEST naming them',
    async (_kind, value) => {
      const { host } = await withParent();
      expectRefused(await failure(() => host.subagents.drainContinuableDescendants(value() as never)), 'INVALID_REQUEST', 'parents');
    },
  );

  it.each(unreadable('parent'))('(on: %s as its options) throws INVALID_REQUEST naming them', async (_kind, value) => {
    const { host } = await withParent();
    expectRefused(await failure(() => host.subagents.on('subagent/end', () => undefined, value() as never)), 'INVALID_REQUEST', "on('subagent/end') opts");
  });

  it.each(unreadable('sessionId'))('(createAgent and agents.resume: %s as the options) throw INVALID_OPTIONS', async (_kind, value) => {
    const host = await openHost();
    expectRefused(await failure(() => host.createAgent(value() as never)), 'INVALID_OPTIONS', 'createAgent options');
    expectRefused(await failure(() => host.agents.resume(value() as never)), 'INVALID_OPTIONS', 'resume() options');
    expect(host.agents.list()).toEqual([]);
  });
});
