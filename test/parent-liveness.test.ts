// A start needs a live parent: one disposed, being disposed, or disposed while its start waits for a
// worker slot is refused `UNAUTHORIZED` on every provider, one-shot as continuable, before any child exists.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { acpProvider, createHost, inProcessProvider, text, type Agent, type Host, type ScriptedStep, type SubagentStartRequest } from 'subagent-host';
import { onStartWaits } from 'subagent-host/internals';
import { CLI, childPids, isAlive, newChildPids } from './acp-helpers.js';
import { fakeProvider } from './fake-provider.js';
import { deferred, holdTool } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'parent-liveness-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

let host: Host | undefined;
afterEach(async () => {
  await host?.close();
  host = undefined;
});

function request(parent: Agent, steps: ScriptedStep[] = [{ text: 'child' }], signal = new AbortController().signal): SubagentStartRequest {
  return { prompt: [text('go')], parent, signal, agentOptions: { model: { kind: 'scripted', steps } } };
}

/** The live sessions whose header names `parent` as their parent. */
const childrenOf = (parent: Agent) => host!.sessions.list().filter((session) => session.header.parentSession === parent.id);

const unauthorized = { code: 'UNAUTHORIZED' };

describe('a start under a parent that is gone', () => {
  it.each(['in-process', 'in-process-fork', 'spawn', 'fork', 'acp'])('refuses a one-shot start under a disposed parent with UNAUTHORIZED, as startContinuable does (%s)', async (provider) => {
    host = await createHost();
    host.subagents.registerProvider(inProcessProvider(host));
    host.subagents.registerProvider(inProcessProvider(host, { fork: true }));
    host.subagents.registerProvider(acpProvider(host, { command: process.execPath, args: [CLI, 'acp'], cwd: dir, disposeGraceMs: 200 }));
    const parent = await host.createAgent();
    expect(await host.agents.dispose(parent.id)).toBe(true);
    const before = childPids();
    await expect(host.subagents.start(provider, request(parent))).rejects.toMatchObject(unauthorized);
    await expect(host.subagents.startContinuable({ provider, label: 'c', request: { prompt: [text('go')], parent } })).rejects.toMatchObject(unauthorized);
    expect(childrenOf(parent)).toEqual([]);
    expect(newChildPids(before).filter(isAlive)).toEqual([]);
  });

  it('never calls the provider for a disposed parent', async () => {
    host = await createHost({ providers: false });
    const provider = fakeProvider('fake');
    host.subagents.registerProvider(provider);
    const parent = await host.createAgent();
    await host.agents.dispose(parent.id);
    await expect(host.subagents.start('fake', request(parent))).rejects.toMatchObject(unauthorized);
    expect(provider.requests).toEqual([]);
  });

  it.each(['in-process', 'spawn'])('refuses a start under the agent of a disposed one-shot run (%s)', async (provider) => {
    host = await createHost();
    host.subagents.registerProvider(inProcessProvider(host));
    const parent = await host.createAgent();
    const run = await host.subagents.start(provider, request(parent));
    expect((await run.result).stopReason).toBe('completed');
    const child = run.localAgent!;
    await run.dispose();
    await expect(host.subagents.start(provider, request(child))).rejects.toMatchObject(unauthorized);
    expect(childrenOf(child)).toEqual([]);
  });

  it('refuses one-shot and continuable starts under a parent whose disposal has begun', async () => {
    const hold = holdTool();
    // The held call ignores its signal: the parent stays registered, disposing, until it is released.
    host = await createHost({ providers: false, tools: [hold.tool], abandonGraceMs: 600_000 });
    host.subagents.registerProvider(inProcessProvider(host));
    const parent = await host.createAgent({ agentOptions: { model: { kind: 'scripted', steps: [{ toolCalls: [{ name: 'hold', input: {} }] }, { text: 'done' }] } } });
    parent.followup([text('work')]);
    await hold.entered;
    const disposing = host.agents.dispose(parent.id);
    // Its disposal begins on a later microtask; it then waits for the held call, still registered.
    await new Promise((resolve) => setImmediate(resolve));
    expect(host.agents.get(parent.id)).toBe(parent);
    await expect(host.subagents.start('in-process', request(parent))).rejects.toMatchObject(unauthorized);
    await expect(host.subagents.startContinuable({ provider: 'in-process', label: 'c', request: { prompt: [text('go')], parent } })).rejects.toMatchObject(unauthorized);
    expect(childrenOf(parent)).toEqual([]);
    hold.release();
    await disposing;
  });

  it('refuses a start whose parent is disposed while it waits for a worker slot, before it takes the slot', async () => {
    host = await createHost({ pool: { minThreads: 1, maxThreads: 1, cancelGraceMs: 100 } });
    const owner = await host.createAgent();
    const busy = await host.subagents.start('spawn', request(owner, [{ finish: 'hang' }]));
    const parent = await host.createAgent();
    const waits = deferred();
    const signal = new AbortController().signal;
    onStartWaits(signal, () => waits.resolve());
    const queued = host.subagents.start('spawn', request(parent, [{ text: 'never' }], signal));
    await waits.promise;
    await host.agents.dispose(parent.id);
    // The slot frees: the start of the gone parent does not take it.
    busy.cancel();
    await busy.dispose();
    await expect(queued).rejects.toMatchObject(unauthorized);
    expect(childrenOf(parent)).toEqual([]);
    expect(await host.subagents.listChildren(parent.id)).toEqual([]);
  });
});
