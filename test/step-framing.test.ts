// Step framing of worker children's logs: every step of a turn has exactly one `step/start` and one
// `step/end`, in order and numbered 1, 2, 3…, in `host.sessions` and in SQLite, for one-shot and
// resident (continuable) spawn children, including a host-side step that follows a steer.
import { describe, expect, it } from 'vitest';
import { spawnProvider, sqlitePersistence, text, type ModelSpec, type SessionEvent, type Tool } from 'subagent-host';
import { continuationHost } from './continuation-helpers.js';
import { closeAfterEach, holdTool, tempFiles } from './helpers.js';
import { call } from './tool-helpers.js';

const files = tempFiles('subagent-step-framing-');
const track = closeAfterEach();

/** Each turn's step markers as `start n` / `end n`, one list per turn. */
function stepMarkers(events: readonly SessionEvent[]): string[][] {
  const turns: string[][] = [];
  for (const event of events) {
    if (event.type === 'turn/start') turns.push([]);
    if (event.type !== 'step/start' && event.type !== 'step/end') continue;
    const { turn, step } = event.data as { turn: number; step: number };
    expect(turn).toBe(turns.length);
    turns.at(-1)!.push(`${event.type === 'step/start' ? 'start' : 'end'} ${step}`);
  }
  return turns;
}

/** `start 1, end 1, …, start n, end n`. */
function framed(steps: number): string[] {
  return Array.from({ length: steps }, (_, i) => [`start ${i + 1}`, `end ${i + 1}`]).flat();
}

/** Three steps: two calls of a tool the child does not have, then an answer. */
const THREE_STEPS = [call('missing_tool', {}), call('missing_tool', {}), { text: 'done' }];

async function open(tools: Tool[] = []) {
  const file = files.file();
  const host = track(await continuationHost(file, { pool: { minThreads: 0, maxThreads: 2 }, tools }));
  host.subagents.registerProvider(spawnProvider(host));
  return { host, file, parent: await host.createAgent() };
}

async function stored(file: string, id: string): Promise<readonly SessionEvent[]> {
  const persistence = sqlitePersistence(file);
  try {
    return (await persistence.load(id))!.events;
  } finally {
    await persistence.close();
  }
}

describe('step framing of worker children', () => {
  it('one-shot spawn child: one start and one end per step, live and in SQLite', async () => {
    const { host, file, parent } = await open();
    const run = await host.subagents.start('spawn', { prompt: [text('go')], parent, signal: new AbortController().signal, agentOptions: { model: { kind: 'scripted', steps: THREE_STEPS } } });
    await run.result;
    expect(stepMarkers(host.sessions.get(run.id)!.events)).toStrictEqual([framed(3)]);
    await host.close();
    expect(stepMarkers(await stored(file, run.id))).toStrictEqual([framed(3)]);
  });

  it('resident spawn child: one start and one end per step in every turn, live and in SQLite', async () => {
    const { host, file, parent } = await open();
    const model: ModelSpec = { kind: 'scripted', steps: [...THREE_STEPS, call('missing_tool', {}), { text: 'again' }] };
    const { childId } = await host.subagents.startContinuable({ provider: 'spawn', label: 'resident', request: { prompt: [text('first')], parent, agentOptions: { model } } });
    await host.recorder.until(() => host.recorder.ends.length >= 1);
    await host.subagents.followup(parent, childId, [text('second')]);
    await host.recorder.until(() => host.recorder.ends.length >= 2);
    const expected = [framed(3), framed(2)];
    expect(stepMarkers(host.sessions.get(childId)!.events)).toStrictEqual(expected);
    await host.close();
    expect(stepMarkers(await stored(file, childId))).toStrictEqual(expected);
  });

  it('resident spawn child: a host-side step after a steer numbers on from the child’s steps', async () => {
    const hold = holdTool();
    const { host, file, parent } = await open([hold.tool]);
    const model: ModelSpec = { kind: 'scripted', steps: [call('hold', {}), { text: 'first answer' }, { text: 'steered answer' }] };
    const { childId } = await host.subagents.startContinuable({ provider: 'spawn', label: 'resident', request: { prompt: [text('first')], parent, agentOptions: { model } } });
    await hold.entered;
    // Input for the next step of the running turn: the host-side turn takes a second step for it.
    host.agents.get(childId)!.steer([text('also this')]);
    hold.release();
    await host.recorder.until(() => host.recorder.ends.length >= 1);
    expect(host.recorder.ends[0]).toMatchObject({ stopReason: 'completed', lastAssistantMessage: [text('steered answer')] });
    const expected = [framed(3)];
    expect(stepMarkers(host.sessions.get(childId)!.events)).toStrictEqual(expected);
    await host.close();
    expect(stepMarkers(await stored(file, childId))).toStrictEqual(expected);
  });
});
