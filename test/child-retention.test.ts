// A disposed child's agent (and the whole session log it holds in memory) is not kept alive by the
// host: not by the record of a settled background task, not by a scoped drain's admission record;
// nor is a disposed parent kept by the records of its settled tasks. Nor does a wait of the control
// tools that timed out stay behind on a background task that goes on running. Nor does the model a
// `{ kind: 'scripted' }` spec builds keep the requests (each the whole history) of finished turns.
// Measured in their own processes with --expose-gc, where full collections can be forced.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { expect, it } from 'vitest';

const script = new URL('./fixtures/child-retention.mjs', import.meta.url).pathname;
const taskWaits = new URL('./fixtures/task-wait-retention.mjs', import.meta.url).pathname;
const scriptedTurns = new URL('./fixtures/scripted-retention.mjs', import.meta.url).pathname;
const packageUrl = new URL('../dist/src/index.js', import.meta.url).href;

it('keeps no disposed child, nor its disposed parent, reachable, background or foreground', { timeout: 120_000 }, async () => {
  const { stdout } = await promisify(execFile)(process.execPath, ['--expose-gc', script, packageUrl], { timeout: 100_000 });
  expect(JSON.parse(stdout)).toStrictEqual({
    background: { children: 30, reachable: 0, parentReachable: false },
    foreground: { children: 30, reachable: 0, parentReachable: false },
  });
});

it('keeps nothing of task_output and wait_agent polls that timed out while their task runs or waits for a thread', { timeout: 120_000 }, async () => {
  const { stdout } = await promisify(execFile)(process.execPath, ['--expose-gc', taskWaits, packageUrl], { timeout: 100_000 });
  // Each poll's AbortSignal is reachable for as long as something holds its wait.
  expect(JSON.parse(stdout)).toStrictEqual({
    task_output: { polls: 200, timedOut: 200, reachable: 0 },
    wait_agent: { polls: 200, timedOut: 200, reachable: 0 },
  });
});

it('keeps no model request of a finished turn on a scripted spec model', { timeout: 60_000 }, async () => {
  const { stdout } = await promisify(execFile)(process.execPath, ['--expose-gc', scriptedTurns, packageUrl], { timeout: 50_000 });
  expect(JSON.parse(stdout)).toStrictEqual({ turns: 20, reachable: 0 });
});
