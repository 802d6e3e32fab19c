// Admission of worker-child starts: a queued start can be cancelled or closed out, the nesting
// limit is an option, and a waiting worker child lends its slot through thread-less descendants.
import { afterEach, describe, expect, it } from 'vitest';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { createHost, inProcessProvider, subagentTool, text, type Agent, type Host, type ScriptedStep, type SubagentStartRequest } from 'subagent-host';
import { onStartWaits } from 'subagent-host/internals';
import { deferred, tempFiles } from './helpers.js';

let host: Host | undefined;
const files = tempFiles('pool-admission-');
const workerTools = new URL('./fixtures/worker-tools.mjs', import.meta.url).href;

afterEach(async () => {
  await host?.close();
  host = undefined;
});

const delegate = (name: string): ScriptedStep => ({ toolCalls: [{ name, input: { description: 'nested', prompt: 'go' } }] });

function request(parent: Agent, steps: ScriptedStep[], signal = new AbortController().signal): SubagentStartRequest {
  return { prompt: [text('go')], parent, signal, agentOptions: { model: { kind: 'scripted', steps } } };
}

/** The host-tool error codes in a child's stored log. */
async function errorCodes(id: string): Promise<unknown[]> {
  const stored = await host!.persistence!.load(id);
  return (stored?.events ?? []).filter((event) => event.type === 'tool/result').map((event) => (event.data as { code?: unknown }).code);
}

describe('worker pool admission', () => {
  it('rejects starts still waiting for a slot with CLOSED when the pool closes', async () => {
    host = await createHost({ pool: { minThreads: 1, maxThreads: 1, cancelGraceMs: 100 } });
    const parent = await host.createAgent();
    const busy = await host.subagents.start('spawn', request(parent, [{ finish: 'hang' }]));
    const queued = host.subagents.start('spawn', request(parent, [{ text: 'late' }]));
    await host.pool.close();
    await expect(queued).rejects.toMatchObject({ code: 'CLOSED' });
    expect((await busy.result).stopReason).toBe('error');
    await busy.dispose();
  });

  it('rejects with CLOSED a start that had its slot but no thread yet when the pool closes', async () => {
    host = await createHost({ pool: { minThreads: 1, maxThreads: 1, childrenPerThread: 2, cancelGraceMs: 100 } });
    const parent = await host.createAgent();
    // The one thread runs away in synchronous code: a start sent to it is never taken there.
    const marker = join(files.dir, 'spinning');
    const spin: ScriptedStep = { toolCalls: [{ name: 'spin', input: { marker } }] };
    const busy = await host.subagents.start('spawn', { ...request(parent, [spin]), agentOptions: { model: { kind: 'scripted', steps: [spin] }, toolModules: [workerTools] } });
    await expect.poll(() => existsSync(marker), { timeout: 15_000 }).toBe(true);
    // Of two starts, one takes the last slot (its task is sent to the busy thread), the other waits.
    const waits = deferred();
    const signals = [new AbortController().signal, new AbortController().signal];
    for (const signal of signals) onStartWaits(signal, () => waits.resolve());
    const starts = signals.map((signal) => host!.subagents.start('spawn', request(parent, [{ text: 'never' }], signal)));
    await waits.promise;
    await new Promise((resolve) => setImmediate(resolve));
    await host.pool.close();
    const outcomes = await Promise.allSettled(starts);
    expect(outcomes.map((outcome) => outcome.status === 'rejected' && (outcome.reason as { code?: unknown }).code)).toStrictEqual(['CLOSED', 'CLOSED']);
    expect((await busy.result).stopReason).toBe('error');
    await busy.dispose();
  });

  it('takes a start cancelled while it waits out of the queue, so it never holds the slot', async () => {
    host = await createHost({ pool: { minThreads: 1, maxThreads: 1, cancelGraceMs: 100 } });
    const parent = await host.createAgent();
    const busy = await host.subagents.start('spawn', request(parent, [{ finish: 'hang' }]));
    const controller = new AbortController();
    const cancelled = host.subagents.start('spawn', request(parent, [{ text: 'never' }], controller.signal));
    const next = host.subagents.start('spawn', request(parent, [{ text: 'next' }]));
    controller.abort();
    await expect(cancelled).rejects.toMatchObject({ code: 'CANCELLED' });
    busy.cancel();
    await busy.dispose();
    const run = await next;
    expect((await run.result).output).toEqual([text('next')]);
    await run.dispose();
  });

  it('names a bad maxNestingDepth', async () => {
    await expect(createHost({ pool: { maxNestingDepth: -1 } })).rejects.toMatchObject({ code: 'INVALID_OPTIONS', message: expect.stringContaining('options.pool.maxNestingDepth') });
  });

  it('refuses a nested worker child past maxNestingDepth 0 with DEPTH_EXCEEDED, as a tool error the child reads', async () => {
    host = await createHost({ pool: { minThreads: 1, maxThreads: 1, maxNestingDepth: 0 } });
    subagentTool(host, { provider: 'spawn', agentOptions: { model: { kind: 'scripted', steps: [{ text: 'leaf' }] } } });
    const parent = await host.createAgent();
    const run = await host.subagents.start('spawn', request(parent, [delegate('subagent'), { text: 'done' }]));
    expect((await run.result).stopReason).toBe('completed');
    await run.dispose();
    expect(await errorCodes(run.id)).toEqual(['DEPTH_EXCEEDED']);
    expect(host.pool.threads).toBe(1);
  });

  it('lends a waiting worker child’s slot to a worker grandchild started through an in-process child', async () => {
    host = await createHost({ pool: { minThreads: 1, maxThreads: 1 } });
    host.subagents.registerProvider(inProcessProvider(host));
    subagentTool(host, { provider: 'spawn', agentOptions: { model: { kind: 'scripted', steps: [{ text: 'leaf' }] } } });
    subagentTool(host, { provider: 'in-process', toolName: 'local', agentOptions: { model: { kind: 'scripted', steps: [delegate('subagent'), { text: 'relayed' }] } } });
    const started: string[] = [];
    host.subagents.on('subagent/start', (info) => void started.push(info.provider));
    const parent = await host.createAgent();
    const run = await host.subagents.start('spawn', request(parent, [delegate('local'), { text: 'done' }]));
    expect((await run.result).stopReason).toBe('completed');
    await run.dispose();
    expect(started).toEqual(['spawn', 'in-process', 'spawn']);
    expect(await errorCodes(run.id)).toEqual([undefined]);
  });
});
