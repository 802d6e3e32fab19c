// Background tasks of a long-lived host: every settled task is disposed once and its parent told,
// and only the most recent settled tasks stay readable, so the registry does not grow per task.
import { describe, expect, it } from 'vitest';
import { SubagentError, type Agent, type SubagentResult, type SubagentRun } from 'subagent-host';
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
  return { id: 'parent', status: 'idle', session: { header: {}, events: [] }, followup: record, steer: record } as unknown as Agent;
}

describe('background tasks', () => {
  it('keeps only the most recent settled tasks readable, each disposed once with one notice', async () => {
    const tasks = new BackgroundTasks(3);
    const notices: string[] = [];
    const parent = fakeParent(notices);
    const runs = Array.from({ length: 5 }, (_, i) => fakeRun(`t${i}`));
    const adopted = runs.map((run) => tasks.adopt({ run }, parent, () => undefined));
    await Promise.all(adopted.map((task) => task.settled));
    expect(runs.map((run) => run.disposals)).toEqual([1, 1, 1, 1, 1]);
    expect(notices).toHaveLength(5);
    expect(runs.map((run) => tasks.has(run.id))).toEqual([false, false, true, true, true]);
    expect(() => tasks.ownedBy(parent, 't0')).toThrow(expect.objectContaining({ code: 'UNKNOWN_SESSION' }));
    expect(tasks.ownedBy(parent, 't4').result?.stopReason).toBe('completed');
  });

  it('settles a task whose notice cannot reach its parent, or whose run rejects, disposing it once and warning', async () => {
    const tasks = new BackgroundTasks();
    const warnings: string[] = [];
    const warn = (message: string) => void warnings.push(message);
    const unreachable = { id: 'parent', status: 'idle', session: { header: {}, events: [] }, followup: () => { throw new Error('parent closed'); } } as unknown as Agent;
    const delivered = fakeRun('t-notice');
    const broken = { ...fakeRun('t-broken'), result: Promise.reject(new Error('provider broke the contract')) };
    const noticeTask = tasks.adopt({ run: delivered }, unreachable, warn);
    const brokenTask = tasks.adopt({ run: broken }, fakeParent([]), warn);
    await Promise.all([noticeTask.settled, brokenTask.settled]);
    expect(noticeTask.result?.stopReason).toBe('completed');
    expect(brokenTask.result).toStrictEqual({ stopReason: 'error', output: [], diagnostic: 'Error: provider broke the contract' });
    expect(delivered.disposals).toBe(1);
    // Two tasks of their own: their warnings come in no set order.
    expect([...warnings].sort()).toStrictEqual(['background task t-broken failed', 'the settlement notice of background task t-notice could not reach its parent']);
  });

  it('drops without warning the notice to a worker child that has just finished (its face still reads running)', async () => {
    const tasks = new BackgroundTasks();
    const warnings: string[] = [];
    const closed = () => {
      throw new SubagentError('CLOSED', 'child parent has finished; its worker no longer takes input');
    };
    const finished = { id: 'parent', status: 'running', session: { header: {}, events: [] }, followup: closed, steer: closed, inject: closed } as unknown as Agent;
    const run = fakeRun('t-late');
    const task = tasks.adopt({ run }, finished, (message) => void warnings.push(message));
    await task.settled;
    expect(task.result?.stopReason).toBe('completed');
    expect(run.disposals).toBe(1);
    expect(warnings).toStrictEqual([]);
  });
});
