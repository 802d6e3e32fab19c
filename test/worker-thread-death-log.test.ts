// A worker child whose thread dies or is terminated leaves a closed log: the turn the thread left
// open ends with the run's stop reason in the stored log, so readers of the database (ls, inspect)
// never see it running forever.
import { afterEach, describe, expect, it } from 'vitest';
import { createHost, subagentTool, text, type Host, type ScriptedStep, type SessionEvent } from 'subagent-host';
import { dataOf, deferred, recordingTool, tempFiles, types, untilCancelled } from './helpers.js';

const toolModule = new URL('./fixtures/worker-tools.mjs', import.meta.url).href;
const files = tempFiles('thread-death-');
let host: Host | undefined;

afterEach(async () => {
  await host?.close();
  host = undefined;
});

/**
 * Runs one spawn child that first calls a host tool (held until its call is mirrored on the main
 * thread, so the open turn is visible there) and then `tool`; returns its result and stored log.
 */
async function childCalling(tool: string, cancel: boolean, hold = true): Promise<{ stopReason: string; events: SessionEvent[] }> {
  const gate = deferred();
  const held = recordingTool('hold', { gate: gate.promise });
  host = await createHost({ persistence: { sqlite: files.file() }, tools: [held], pool: { minThreads: 1, maxThreads: 2, cancelGraceMs: 300 } });
  const parent = await host.createAgent();
  const steps: ScriptedStep[] = [{ toolCalls: [{ name: tool, input: {} }] }];
  if (hold) steps.unshift({ toolCalls: [{ name: 'hold', input: { value: 'x' } }] });
  const run = await host.subagents.start('spawn', {
    prompt: [text('work')],
    parent,
    signal: new AbortController().signal,
    agentOptions: { model: { kind: 'scripted', steps }, toolModules: [toolModule] },
  });
  if (hold) await expect.poll(() => dataOf(host!.sessions.get(run.id)!.events, 'tool/call').length, { timeout: 15_000 }).toBe(1);
  gate.resolve();
  if (cancel) {
    await expect.poll(() => dataOf(host!.sessions.get(run.id)!.events, 'tool/call').length, { timeout: 15_000 }).toBe(2);
    run.cancel();
  }
  const { stopReason } = await run.result;
  await run.dispose();
  const stored = await host.persistence!.load(run.id);
  return { stopReason, events: stored!.events };
}

describe('the log of a worker child whose thread ends', () => {
  it('ends error when the thread exits', async () => {
    const { stopReason, events } = await childCalling('exit_thread', false);
    expect(stopReason).toBe('error');
    expect(types(events).at(-1)).toBe('turn/end');
    // Every tool call the log shows has a result: the closers answered the one the thread died in.
    expect(dataOf(events, 'tool/result').length).toBe(dataOf(events, 'tool/call').length);
    expect(dataOf<{ reason: { kind: string; error: { code: string } } }>(events, 'turn/end')[0]!.reason).toMatchObject({ kind: 'error', error: { code: 'THREAD_FAILED' } });
  });

  it('ends error however few of its events reached the main thread before it exited', async () => {
    const { stopReason, events } = await childCalling('exit_thread', false, false);
    expect(stopReason).toBe('error');
    expect(events.at(-1)).toMatchObject({ type: 'turn/end', data: { reason: { kind: 'error', error: { code: 'THREAD_FAILED' } } } });
    expect(types(events).filter((type) => type === 'turn/start')).toHaveLength(1);
  });

  it('ends aborted when a child ignoring cancellation loses its thread', async () => {
    const { stopReason, events } = await childCalling('spin', true);
    expect(stopReason).toBe('aborted');
    expect(dataOf<{ reason: unknown }>(events, 'turn/end').map((end) => end.reason)).toEqual([{ kind: 'aborted', cause: { kind: 'parent' } }]);
  });
});

describe('a worker child whose thread dies while a child of its own runs', () => {
  it('ends after that child, and its tree usage counts what that child spent', async () => {
    // A host tool the grandchild waits in until its call is cancelled.
    const { tool: held, entered } = untilCancelled('hold');
    host = await createHost({ tools: [held], pool: { minThreads: 1, maxThreads: 2, cancelGraceMs: 300 } });
    subagentTool(host, { provider: 'spawn', agentOptions: { model: { kind: 'scripted', steps: [{ toolCalls: [{ name: 'hold', input: {} }], usage: { inputTokens: 50, outputTokens: 5 } }, { finish: 'hang' }] } } });
    const ends: string[] = [];
    host.subagents.on('subagent/end', (end) => void ends.push(end.id));
    const parent = await host.createAgent();
    const channel = `exit-${process.pid}-${Date.now()}`;
    const run = await host.subagents.start('spawn', {
      prompt: [text('work')],
      parent,
      signal: new AbortController().signal,
      agentOptions: {
        model: { kind: 'scripted', steps: [{ toolCalls: [{ name: 'subagent', input: { description: 'below', prompt: 'x' } }, { name: 'exit_on_channel', input: { channel } }], usage: { inputTokens: 7, outputTokens: 1 } }] },
        toolModules: [toolModule],
      },
    });
    // Its child is in its first tool call: it has spent one request.
    await entered;
    const exit = new BroadcastChannel(channel);
    exit.postMessage('exit');
    exit.close();
    const result = await run.result;
    expect(result.stopReason).toBe('error');
    expect(ends).toHaveLength(2);
    expect(ends.at(-1)).toBe(run.id);
    expect(result.treeUsage).toMatchObject({ requests: 2, inputTokens: 57, outputTokens: 6 });
    await run.dispose();
  });
});
