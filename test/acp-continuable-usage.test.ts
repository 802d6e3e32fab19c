// Token usage of continuable ACP children against real `subagent-host acp --db` processes: the
// agent answers each prompt with its session's running totals, and every turn of the child counts
// what that prompt added, on the resident process and after a cold resume alike.
import { afterEach, describe, expect, it } from 'vitest';
import { BUDGET_EVENT, acpProvider, createHost, subagentTool, text, type Agent, type Host, type HostOptions, type ScriptedStep, type SubagentRun } from 'subagent-host';
import { usageOf } from 'subagent-host/internals';
import { CLI, FIXTURE_AGENT, childPids, isAlive, newChildPids } from './acp-helpers.js';
import { continuationHost, eventually, turnEnds, type Recorder } from './continuation-helpers.js';
import { holdTool, tempFiles } from './helpers.js';

const files = tempFiles('acp-continuable-usage-');
const open: Host[] = [];
let before: number[] = [];

afterEach(async () => {
  for (const host of open.splice(0)) await host.close();
  expect(newChildPids(before).filter(isAlive)).toStrictEqual([]);
});

async function setup(remoteDb: string, options: HostOptions = {}, args = [CLI, 'acp', '--db', remoteDb], disposeGraceMs = 200) {
  if (open.length === 0) before = childPids();
  const host = await continuationHost(files.file(), options);
  open.push(host);
  host.subagents.registerProvider(acpProvider(host, { command: process.execPath, args, cwd: files.dir, disposeEofGraceMs: 2000, disposeGraceMs }));
  const parent = await host.createAgent({ sessionId: 'parent' });
  return { host, parent, recorder: host.recorder as Recorder };
}

const start = (host: Host, parent: Agent, prompt: string, steps: ScriptedStep[]) =>
  host.subagents.startContinuable({ provider: 'acp', label: 'remote', request: { prompt: [text(prompt)], parent, agentOptions: { model: { kind: 'scripted', steps } } } });

const step = (inputTokens: number, outputTokens: number): ScriptedStep => ({ text: `spent ${inputTokens}`, usage: { inputTokens, outputTokens } });

/** The tokens of each `assistant/message` of a log. */
const turnTokens = (events: readonly { type: string; data: unknown }[]) =>
  events.filter((e) => e.type === 'assistant/message').map((e) => (e.data as { usage?: { inputTokens: number; outputTokens: number } }).usage);

/** The token totals of the session the remote agent stored in its own database. */
async function remoteTokens(remoteDb: string, sessionId: string) {
  const host = await createHost({ persistence: { sqlite: remoteDb }, providers: false });
  try {
    const { inputTokens, outputTokens } = usageOf((await host.persistence!.load(sessionId))!.events, { everything: true });
    return { inputTokens, outputTokens };
  } finally {
    await host.close();
  }
}

const remoteSessionOf = (events: readonly { type: string; data: unknown }[]) =>
  (events.find((e) => e.type === 'subagent/descriptor')!.data as { providerData: { sessionId: string } }).providerData.sessionId;

describe('usage of continuable ACP children', () => {
  it('counts each turn what its prompt added to the session’s running totals: the child’s usage is the sum, counted once', async () => {
    const remoteDb = files.file();
    const { host, parent, recorder } = await setup(remoteDb);
    const { childId } = await start(host, parent, 'hello', [step(1, 2), step(10, 20), step(100, 200), step(1000, 2000)]);
    await recorder.until(() => recorder.ends.length === 1);
    for (const word of ['one', 'two', 'three']) await host.subagents.followup(parent, childId, [text(word)]);
    await recorder.until(() => turnEnds(host.sessions.get(childId)!.events).length === 4 && recorder.ends.length === recorder.starts.length);
    const events = host.sessions.get(childId)!.events;
    expect(turnEnds(events)).toStrictEqual(['completed', 'completed', 'completed', 'completed']);
    expect(turnTokens(events)).toStrictEqual([
      { inputTokens: 1, outputTokens: 2 },
      { inputTokens: 10, outputTokens: 20 },
      { inputTokens: 100, outputTokens: 200 },
      { inputTokens: 1000, outputTokens: 2000 },
    ]);
    const spent = { inputTokens: 1111, outputTokens: 2222, totalTokens: 3333, turns: 4 };
    expect(recorder.ends.at(-1)!.usage).toMatchObject(spent);
    expect(await host.subagents.listChildren(parent.id)).toMatchObject([{ id: childId, usage: spent }]);
    expect(await host.subagents.listDescendants(parent.id)).toMatchObject([{ id: childId, usage: spent, treeUsage: spent }]);
    await host.close();
    expect(await remoteTokens(remoteDb, remoteSessionOf(events))).toStrictEqual({ inputTokens: 1111, outputTokens: 2222 });
  });

  it('continues from the child’s stored count after a linger-out and cold resume: nothing is counted twice', async () => {
    const remoteDb = files.file();
    const { host, parent, recorder } = await setup(remoteDb, { continuation: { lingerMs: 0 } });
    // The loaded session's scripted model replays its steps: the resumed turn spends 1/2 again.
    const { childId } = await start(host, parent, 'first', [step(1, 2), step(10, 20)]);
    await recorder.until(() => recorder.ends.length === 1);
    await eventually(() => host.sessions.get(childId) === undefined && newChildPids(before).filter(isAlive).length === 0);
    await host.subagents.followup(parent, childId, [text('second')]);
    await recorder.until(() => recorder.ends.length === 2);
    expect(recorder.ends.map((end) => [end.usage?.inputTokens, end.usage?.outputTokens])).toStrictEqual([[1, 2], [2, 4]]);
    await eventually(() => host.sessions.get(childId) === undefined && newChildPids(before).filter(isAlive).length === 0);
    await host.subagents.followup(parent, childId, [text('third')]);
    await recorder.until(() => recorder.ends.length === 3);
    await eventually(() => host.sessions.get(childId) === undefined);
    const events = (await host.persistence!.load(childId))!.events;
    expect(turnTokens(events)).toStrictEqual([
      { inputTokens: 1, outputTokens: 2 },
      { inputTokens: 1, outputTokens: 2 },
      { inputTokens: 1, outputTokens: 2 },
    ]);
    const spent = { inputTokens: 3, outputTokens: 6, totalTokens: 9, turns: 3 };
    expect(recorder.ends.at(-1)!.usage).toMatchObject(spent);
    expect(await host.subagents.listDescendants(parent.id)).toMatchObject([{ id: childId, usage: spent, treeUsage: spent }]);
    expect(await remoteTokens(remoteDb, remoteSessionOf(events))).toStrictEqual({ inputTokens: 3, outputTokens: 6 });
  });

  it('keeps what an interrupted turn spent: the answer to its cancelled prompt carries it, and the next turn counts only its own', async () => {
    // A grace no loaded machine outlasts: the agent's answer to the cancelled prompt is always waited for.
    const remoteDb = files.file();
    const { host, parent, recorder } = await setup(remoteDb, {}, undefined, 600_000);
    const gate = { name: 'gate', input: { path: files.file() } };
    const toolModules = [new URL('./fixtures/gate-tools.mjs', import.meta.url).href];
    const steps: ScriptedStep[] = [{ toolCalls: [gate], usage: { inputTokens: 500, outputTokens: 5 } }, step(10, 20)];
    const { childId } = await host.subagents.startContinuable({ provider: 'acp', label: 'remote', request: { prompt: [text('work')], parent, agentOptions: { model: { kind: 'scripted', steps }, toolModules } } });
    const child = host.agents.get(childId)!;
    // The remote turn spent its step and waits in the gate until the cancel reaches it.
    await eventually(() => child.session.events.some((e) => e.type === 'assistant/chunk' && (e.data as { chunk: { text: string } }).chunk.text.includes('[remote tool call: gate]')));
    host.subagents.interrupt(childId, { kind: 'user', parentSessionId: parent.id });
    await recorder.until(() => recorder.ends.length === 1);
    expect(recorder.ends[0]).toMatchObject({ stopReason: 'aborted', usage: { inputTokens: 500, outputTokens: 5, totalTokens: 505 } });
    expect(await host.subagents.listDescendants(parent.id)).toMatchObject([{ id: childId, usage: { totalTokens: 505 }, treeUsage: { totalTokens: 505 } }]);
    await host.subagents.followup(parent, childId, [text('next')]);
    await recorder.until(() => recorder.ends.length === 2);
    expect(turnTokens(child.session.events)).toStrictEqual([{ inputTokens: 500, outputTokens: 5 }, { inputTokens: 10, outputTokens: 20 }]);
    expect(recorder.ends[1]!.usage).toMatchObject({ inputTokens: 510, outputTokens: 25, totalTokens: 535, turns: 2 });
  });

  it('counts totals that went down whole: an agent whose new process counts its loaded session from zero', async () => {
    const { host, parent, recorder } = await setup('', {}, [FIXTURE_AGENT, '--usage']);
    const { childId } = await host.subagents.startContinuable({ provider: 'acp', label: 'remote', request: { prompt: [text('one')], parent } });
    await recorder.until(() => recorder.ends.length === 1);
    await host.subagents.followup(parent, childId, [text('two')]);
    await recorder.until(() => turnEnds(host.sessions.get(childId)!.events).length === 2);
    const [pid] = newChildPids(before).filter(isAlive);
    process.kill(pid!, 'SIGKILL');
    await eventually(() => !isAlive(pid!));
    // The fresh process loads the session and reports 5/7: below the 10/14 counted so far.
    await host.subagents.followup(parent, childId, [text('three')]);
    await recorder.until(() => turnEnds(host.sessions.get(childId)!.events).length === 3 && recorder.ends.length === recorder.starts.length);
    const events = host.sessions.get(childId)!.events;
    expect(turnEnds(events)).toStrictEqual(['completed', 'completed', 'completed']);
    expect(turnTokens(events)).toStrictEqual([
      { inputTokens: 5, outputTokens: 7 },
      { inputTokens: 5, outputTokens: 7 },
      { inputTokens: 5, outputTokens: 7 },
    ]);
    expect(recorder.ends.at(-1)!.usage).toMatchObject({ inputTokens: 15, outputTokens: 21, totalTokens: 36 });
  });
});

describe('a tree budget above a continuable ACP child', () => {
  it('cancels its prompt when the tree is spent by a sibling, the reached limit in its log, as a one-shot ACP member is cancelled', async () => {
    const hold = holdTool();
    const { host, parent, recorder } = await setup(files.file(), { tools: [hold.tool] });
    // The remote child's prompt runs until it is cancelled; the local sibling spends the tree.
    subagentTool(host, { provider: 'acp', toolName: 'remote', mode: 'continuable', agentOptions: { model: { kind: 'scripted', steps: [{ finish: 'hang' }] } } });
    subagentTool(host, { provider: 'in-process', agentOptions: { model: { kind: 'scripted', steps: [step(500, 0)] } } });
    let remoteId: string | undefined;
    host.tools.register({
      name: 'prompted',
      description: 'waits until the remote child is in its prompt',
      parameters: { type: 'object' },
      execute: () => eventually(() => remoteId !== undefined && host.sessions.get(remoteId)?.events.some((event) => event.type === 'step/start') === true).then(() => 'in its prompt'),
    });
    host.subagents.on('subagent/start', (info) => void (info.provider === 'acp' && (remoteId = info.id)));
    const call = (name: string, input: Record<string, unknown> = {}) => ({ name, input });
    const free = { inputTokens: 0, outputTokens: 0 };
    const steps: ScriptedStep[] = [
      { toolCalls: [call('remote', { description: 'remote', prompt: 'work until cancelled' })], usage: free },
      { toolCalls: [call('prompted')], usage: free },
      { toolCalls: [call('subagent', { description: 'spend', prompt: 'spend' }), call('hold')], usage: free },
      { text: 'owner never' },
    ];
    const owner: SubagentRun = await host.subagents.start('in-process', {
      prompt: [text('work')],
      parent,
      signal: new AbortController().signal,
      agentOptions: { model: { kind: 'scripted', steps } },
      budget: { tokens: 100, scope: 'tree' },
    });
    // While its owner still waits in `hold`, the remote child's epoch ends: its prompt was cancelled.
    await recorder.until(() => recorder.ends.some((end) => end.id === remoteId));
    expect(recorder.ends.find((end) => end.id === remoteId)).toMatchObject({ provider: 'acp', stopReason: 'aborted' });
    const events = host.sessions.get(remoteId!)!.events;
    expect(events.filter((event) => event.type === BUDGET_EVENT).map((event) => event.data)).toStrictEqual([{ limit: 'tokens', max: 100, used: 500, scope: 'tree' }]);
    expect(turnEnds(events)).toStrictEqual(['aborted']);
    hold.release();
    expect(await owner.result).toMatchObject({ stopReason: 'max-tokens', diagnostic: 'budget: tokens limit 100 reached (500 used, tree budget)' });
    await owner.dispose();
  });
});

describe('a tree budget above a one-shot ACP child', () => {
  it('counts what the child spent before the spent tree cancelled it: its answer to the cancel carries it', async () => {
    // A grace no loaded machine outlasts: the agent's answer to the cancelled prompt is always waited for.
    const { host, parent } = await setup(files.file(), {}, undefined, 600_000);
    const toolModules = [new URL('./fixtures/gate-tools.mjs', import.meta.url).href];
    const gate: ScriptedStep = { toolCalls: [{ name: 'gate', input: { path: files.file() } }], usage: { inputTokens: 500, outputTokens: 5 } };
    subagentTool(host, { provider: 'acp', toolName: 'remote', agentOptions: { model: { kind: 'scripted', steps: [gate, { text: 'never' }] }, toolModules } });
    let remoteId: string | undefined;
    host.subagents.on('subagent/start', (info) => void (info.provider === 'acp' && (remoteId = info.id)));
    // The local sibling spends the tree once the remote child has spent its step and waits in the gate.
    host.tools.register({
      name: 'prompted',
      description: 'waits until the remote child waits in its gate',
      parameters: { type: 'object' },
      execute: () => eventually(() => remoteId !== undefined && host.sessions.get(remoteId)?.events.some((event) => event.type === 'tool/call') === true).then(() => 'in its gate'),
    });
    const free = { inputTokens: 0, outputTokens: 0 };
    subagentTool(host, { provider: 'in-process', agentOptions: { model: { kind: 'scripted', steps: [{ toolCalls: [{ name: 'prompted', input: {} }], usage: free }, step(600, 0)] } } });
    const owner: SubagentRun = await host.subagents.start('in-process', {
      prompt: [text('work')],
      parent,
      signal: new AbortController().signal,
      agentOptions: { model: { kind: 'scripted', steps: [{ toolCalls: [{ name: 'remote', input: { description: 'remote', prompt: 'wait' } }, { name: 'subagent', input: { description: 'spend', prompt: 'spend' } }], usage: free }, { text: 'owner never' }] } },
      budget: { tokens: 100, scope: 'tree' },
    });
    const result = await owner.result;
    // The diagnostic names the figures when the sibling spent the tree; the tree's cost counts both children.
    expect(result).toMatchObject({ stopReason: 'max-tokens', diagnostic: 'budget: tokens limit 100 reached (600 used, tree budget)', treeUsage: { inputTokens: 1100, outputTokens: 5, totalTokens: 1105 } });
    const rows = await host.subagents.listDescendants(owner.id);
    expect(rows.find((row) => row.id === remoteId)).toMatchObject({ usage: { inputTokens: 500, outputTokens: 5, totalTokens: 505 } });
    await owner.dispose();
  });
});
