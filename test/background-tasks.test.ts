// Background tasks of a long-lived host: every settled task is disposed once and its parent told,
// and only the most recent settled tasks stay readable, so the registry does not grow per task.
import { describe, expect, it } from 'vitest';
import type { Agent, SubagentResult, SubagentRun } from 'subagent-host';
import { BackgroundTasks } from '../dist/src/tools/background-tasks.js';

function fakeRun(id: string): SubagentRun & { disposals: number } {
  const result: SubagentResult = { output: [{ type: 'text', text: `done ${id}` }], stopReason: 'completed' };
  const run = {
    id,
    localAgent: undefined,
    result: Promise.resolve(result),
    disposals: 0,
    cancel: () => undefined,
    dispose: async () => {
      run.disposals += 1;
    },
  };
  return run;
}

function fakeParent(notices: string[]): Agent {
  const record = (content: { type: string; text?: string }[]) => {
    notices.push(content.map((block) => block.text ?? '').join(''));
    return `m${notices.length}`;
  };
  return { id: 'parent', status: 'idle', followup: record, steer: record } as unknown as Agent;
}

describe('background tasks', () => {
  it('keeps only the most recent settled tasks readable, each disposed once with one notice', async () => {
    const tasks = new BackgroundTasks(3);
    const notices: string[] = [];
    const parent = fakeParent(notices);
    const runs = Array.from({ length: 5 }, (_, i) => fakeRun(`t${i}`));
    const adopted = runs.map((run) => tasks.adopt(run, parent, () => undefined));
    await Promise.all(adopted.map((task) => task.settled));
    expect(runs.map((run) => run.disposals)).toEqual([1, 1, 1, 1, 1]);
    expect(notices).toHaveLength(5);
    expect(runs.map((run) => tasks.has(run.id))).toEqual([false, false, true, true, true]);
    expect(() => tasks.ownedBy(parent, 't0')).toThrow(expect.objectContaining({ code: 'UNKNOWN_SESSION' }));
    expect(tasks.ownedBy(parent, 't4').result?.stopReason).toBe('completed');
  });
});
