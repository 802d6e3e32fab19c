// A worker child whose thread dies or is terminated leaves a closed log: the turn the thread left
// open ends with the run's stop reason in the stored log, so readers of the database (ls, inspect)
// never see it running forever.
import { afterEach, describe, expect, it } from 'vitest';
import { createHost, text, type Host, type ScriptedStep, type SessionEvent } from 'subagent-host';
import { dataOf, tempFiles, types } from './helpers.js';

const toolModule = new URL('./fixtures/worker-tools.mjs', import.meta.url).href;
const files = tempFiles('thread-death-');
let host: Host | undefined;

afterEach(async () => {
  await host?.close();
  host = undefined;
});

/** Runs one spawn child calling `tool`; returns its result and its log as stored once disposed. */
async function childCalling(tool: string, cancel: boolean): Promise<{ stopReason: string; events: SessionEvent[] }> {
  const db = files.file();
  host = await createHost({ persistence: { sqlite: db }, pool: { minThreads: 1, maxThreads: 2, cancelGraceMs: 300 } });
  const parent = await host.createAgent();
  const steps: ScriptedStep[] = [{ toolCalls: [{ name: tool, input: {} }] }];
  const run = await host.subagents.start('spawn', {
    prompt: [text('work')],
    parent,
    signal: new AbortController().signal,
    agentOptions: { model: { kind: 'scripted', steps }, toolModules: [toolModule] },
  });
  if (cancel) {
    await expect.poll(() => dataOf(host!.sessions.get(run.id)!.events, 'tool/call').length).toBe(1);
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
    expect(types(events).slice(-3)).toEqual(['tool/result', 'step/end', 'turn/end']);
    expect(dataOf<{ reason: { kind: string; error: { code: string } } }>(events, 'turn/end')[0]!.reason).toMatchObject({ kind: 'error', error: { code: 'THREAD_FAILED' } });
  });

  it('ends aborted when a child ignoring cancellation loses its thread', async () => {
    const { stopReason, events } = await childCalling('spin', true);
    expect(stopReason).toBe('aborted');
    expect(dataOf<{ reason: unknown }>(events, 'turn/end').map((end) => end.reason)).toEqual([{ kind: 'aborted', cause: { kind: 'parent' } }]);
  });
});
