// Callers' AbortSignals at the public entry points: aborted while the host works, a start rejects as
// the README says on every provider; a signal no caller would build (a getter or addEventListener
// that throws) is bad input or an abort, never an untyped error, a synchronous throw or a crash.
import { describe, expect, it } from 'vitest';
import { createHost, inProcessProvider, text, SubagentError, type Agent, type Host } from 'subagent-host';
import { closeAfterEach, runNodeScript } from './helpers.js';

const packageUrl = new URL('../dist/src/index.js', import.meta.url).href;
const script = new URL('./fixtures/abort-while-working.mjs', import.meta.url).pathname;
const hangingTools = new URL('./fixtures/hanging-import-tools.mjs', import.meta.url).href;

const track = closeAfterEach();
const boom = new Error('read refused');

async function withParent(): Promise<{ host: Host; parent: Agent }> {
  const host = track(await createHost({ persistence: { sqlite: ':memory:' } }));
  host.subagents.registerProvider(inProcessProvider(host));
  return { host, parent: await host.createAgent() };
}

/** A live AbortSignal whose `aborted` getter throws. */
function unreadableSignal(): AbortSignal {
  const { signal } = new AbortController();
  return Object.defineProperty(signal, 'aborted', {
    get(): never {
      throw boom;
    },
  });
}

/** A live AbortSignal whose `addEventListener` throws. */
function unwatchableSignal(): AbortSignal {
  const { signal } = new AbortController();
  signal.addEventListener = (): never => {
    throw boom;
  };
  return signal;
}

/** The error `work` rejects with (fails the test if it resolves). */
async function rejection(work: Promise<unknown>): Promise<unknown> {
  return work.then(
    () => {
      throw new Error('expected a rejection');
    },
    (error: unknown) => error,
  );
}

function expectRefused(error: unknown, code: 'INVALID_REQUEST' | 'INVALID_OPTIONS'): void {
  expect(error).toBeInstanceOf(SubagentError);
  expect(error).toMatchObject({ code, message: expect.stringContaining('signal') as string, cause: boom });
}

describe('a caller signal aborted while the host works for it', () => {
  async function run(which: string, kind: string): Promise<unknown> {
    const { code, out, err } = await runNodeScript(script, [packageUrl, hangingTools, which, kind]);
    expect({ code, err }).toEqual({ code: 0, err: '' });
    const [report, closed] = out.trim().split('\n');
    expect(closed).toBe('closed');
    return JSON.parse(report!);
  }

  it('(startContinuable, its in-process child loading its tool modules) rejects with exactly the abort reason and leaves no child', async () => {
    expect(await run('continuable', 'plain')).toEqual({ rejected: 'the abort reason', listed: 0 });
  });

  it.each(['start-in-process', 'start-spawn'])('(%s, reason getter that throws) settles the run aborted; the host lives on', async (which) => {
    expect(await run(which, 'throwing-reason')).toEqual({ stopReason: 'aborted' });
  });

  it('(createAgent loading tool modules, reason getter that throws) rejects CANCELLED with that throw as cause; the host lives on', async () => {
    expect(await run('create', 'throwing-reason')).toEqual({ rejected: 'CANCELLED', cause: 'reason refused' });
  });

  it('(startContinuable loading tool modules, reason getter that throws) rejects with that throw and leaves no child; the host lives on', async () => {
    expect(await run('continuable', 'throwing-reason')).toEqual({ rejected: 'reason refused', listed: 0 });
  });
});

describe('a caller signal whose aborted getter throws', () => {
  it('is INVALID_REQUEST for listChildren and listDescendants', async () => {
    const { host, parent } = await withParent();
    expectRefused(await rejection(host.subagents.listChildren(parent.id, unreadableSignal())), 'INVALID_REQUEST');
    expectRefused(await rejection(host.subagents.listDescendants(parent.id, unreadableSignal())), 'INVALID_REQUEST');
  });

  it('is INVALID_REQUEST for startContinuable and starts no child', async () => {
    const { host, parent } = await withParent();
    const starting = host.subagents.startContinuable({ provider: 'in-process', label: 'child', request: { prompt: [text('go')], parent }, signal: unreadableSignal() });
    expectRefused(await rejection(starting), 'INVALID_REQUEST');
    expect(await host.subagents.listChildren(parent.id)).toEqual([]);
  });

  it('is INVALID_OPTIONS for createAgent, which creates no agent', async () => {
    const { host } = await withParent();
    expectRefused(await rejection(host.createAgent({ signal: unreadableSignal() })), 'INVALID_OPTIONS');
    expect(host.agents.list()).toHaveLength(1);
  });
});

describe('a caller signal whose addEventListener throws', () => {
  it.each(['in-process', 'spawn'])('(%s start) is a rejection INVALID_REQUEST, not a throw, and starts no child', async (provider) => {
    const { host, parent } = await withParent();
    let starting: Promise<unknown> | undefined;
    expect(() => (starting = host.subagents.start(provider, { prompt: [text('go')], parent, signal: unwatchableSignal() }))).not.toThrow();
    expectRefused(await rejection(starting!), 'INVALID_REQUEST');
    expect(host.subagents.activeRuns).toBe(0);
    expect(await host.subagents.listChildren(parent.id)).toEqual([]);
  });

  it('is INVALID_REQUEST for listChildren and listDescendants', async () => {
    const { host, parent } = await withParent();
    expectRefused(await rejection(host.subagents.listChildren(parent.id, unwatchableSignal())), 'INVALID_REQUEST');
    expectRefused(await rejection(host.subagents.listDescendants(parent.id, unwatchableSignal())), 'INVALID_REQUEST');
  });

  it('is INVALID_REQUEST for startContinuable and starts no child', async () => {
    const { host, parent } = await withParent();
    const starting = host.subagents.startContinuable({ provider: 'in-process', label: 'child', request: { prompt: [text('go')], parent }, signal: unwatchableSignal() });
    expectRefused(await rejection(starting), 'INVALID_REQUEST');
    expect(await host.subagents.listChildren(parent.id)).toEqual([]);
  });

  it('is INVALID_OPTIONS for createAgent, which creates no agent', async () => {
    const { host } = await withParent();
    expectRefused(await rejection(host.createAgent({ signal: unwatchableSignal() })), 'INVALID_OPTIONS');
    expect(host.agents.list()).toHaveLength(1);
  });
});
