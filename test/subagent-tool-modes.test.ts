// The subagent tool's continuable and background modes through a scripted parent: the start
// answers, the settled notices, exactly-once disposal of background runs, and host close.
import { describe, expect, it } from 'vitest';
import { controlTools, subagentTool, text, type Agent, type SubagentProvider, type SubagentResult } from 'subagent-host';
import { closeAfterEach, dataOf, deferred, tempFiles } from './helpers.js';
import { HANG, continuationHost, eventually, type Recorder } from './continuation-helpers.js';
import { call, lazyScript, messages, resultJson, resultText, startedId, toolResults } from './tool-helpers.js';

const files = tempFiles('subagent-tool-modes-');
const track = closeAfterEach();

async function setup() {
  const host = await continuationHost(files.file());
  track(host);
  return { host, recorder: host.recorder as Recorder };
}

describe('subagent tool, continuable mode', () => {
  it('answers started subagent <id>, labels the child with the description, and the settled notice arrives', async () => {
    const { host } = await setup();
    subagentTool(host, { provider: 'in-process', mode: 'continuable' });
    const parent = await host.createAgent({ model: lazyScript([call('subagent', { description: 'scout', prompt: 'look around' }), { text: 'waiting' }]) });
    parent.followup([text('go')]);
    await eventually(() => messages(parent).some((m) => m.source.kind === 'subagent-settled') && parent.status === 'idle');
    const childId = startedId(parent, 0);
    expect(resultText(parent, 0)).toBe(`started subagent ${childId}`);
    expect(host.tools.get('subagent')!.description).toContain('you can send it more work later (send_message)');
    expect(await host.subagents.listChildren(parent.id)).toStrictEqual([
      expect.objectContaining({ id: childId, mode: 'continuable', label: 'scout' }),
    ]);
    const notice = messages(parent).find((m) => m.source.kind === 'subagent-settled')!;
    expect(notice.source).toMatchObject({ kind: 'subagent-settled', senderSessionId: childId });
    expect(notice.text).toBe(
      `Background subagent ${childId} finished and will do no further work unless you send it more.\nIts closing message:\necho: look around`,
    );
  });

  it.each(['spawn', 'fork'])('lets a one-shot %s child start a continuable child, released before that child is disposed', async (provider) => {
    const host = track(await continuationHost(files.file(), { providers: true, pool: { minThreads: 0, maxThreads: 2 } }));
    const recorder = host.recorder as Recorder;
    subagentTool(host, { provider: 'in-process', mode: 'continuable', agentOptions: { model: HANG } });
    const top = await host.createAgent();
    const run = await host.subagents.start(provider, {
      prompt: [text('go')],
      parent: top,
      signal: new AbortController().signal,
      agentOptions: { model: { kind: 'scripted', steps: [call('subagent', { description: 'helper', prompt: 'work' }), { text: 'delegated' }] } },
    });
    expect((await run.result).stopReason).toBe('completed');
    const answer = host.sessions.get(run.id)!.events.find((event) => event.type === 'tool/result')!.data as { content: { text: string }[] };
    const grandchildId = /^started subagent (\S+)$/.exec(answer.content[0]!.text)?.[1];
    expect(grandchildId).toBeDefined();
    expect(host.agents.get(grandchildId!)?.session.header.parentSession).toBe(run.id);
    await run.dispose();
    // Child-first: the continuable grandchild was released (its turn ended) before the child went.
    expect(host.agents.get(grandchildId!)).toBeUndefined();
    expect(recorder.ends.find((end) => end.id === grandchildId)?.stopReason).toBe('aborted');
  });

  it('answers a blank description with an error about that field, the one the model sees', async () => {
    const { host } = await setup();
    subagentTool(host, { provider: 'in-process', mode: 'continuable' });
    // No `pattern` in the schema: servers that turn schemas into grammars (llama.cpp) refuse one.
    expect(JSON.stringify(host.tools.get('subagent')!.parameters)).not.toContain('pattern');
    const parent = await host.createAgent({ model: lazyScript([call('subagent', { description: '  ', prompt: 'look around' }), { text: 'ok' }]) });
    parent.followup([text('go')]);
    await parent.whenIdle();
    expect(toolResults(parent)[0]).toMatchObject({ isError: true, code: 'INVALID_TOOL_INPUT' });
    expect(resultText(parent, 0)).toContain('description must not be blank');
    expect(await host.subagents.listChildren(parent.id)).toStrictEqual([]);
  });

  it.each(['one-shot', 'background', 'continuable'] as const)('answers a blank prompt with an error result and starts no child (%s)', async (mode) => {
    const { host } = await setup();
    subagentTool(host, { provider: 'in-process', ...(mode === 'background' ? { background: true } : mode === 'continuable' ? { mode } : {}) });
    const parent = await host.createAgent({
      model: lazyScript([call('subagent', { description: 'look', prompt: '' }), call('subagent', { description: 'look', prompt: ' \n\t' }), { text: 'ok' }]),
    });
    parent.followup([text('go')]);
    await parent.whenIdle();
    expect(toolResults(parent)).toMatchObject([
      { isError: true, code: 'INVALID_TOOL_INPUT' },
      { isError: true, code: 'INVALID_TOOL_INPUT' },
    ]);
    expect(resultText(parent, 1)).toContain('prompt must not be blank');
    expect(await host.subagents.listChildren(parent.id)).toStrictEqual([]);
  });
});

/** A provider whose runs settle when told (or `aborted` on cancel) and count their disposals. */
function countingProvider() {
  const stats = { disposals: 0, settle: deferred<SubagentResult>() };
  const provider: SubagentProvider = {
    name: 'counting',
    capabilities: { outputSchema: false, depthLimit: true, toolFilter: false, persona: false },
    inheritsParentContext: false,
    async start(request) {
      request.signal.addEventListener('abort', () => stats.settle.resolve({ output: [], stopReason: 'aborted' }), { once: true });
      return {
        id: 'task-1',
        localAgent: undefined,
        result: stats.settle.promise,
        cancel: () => stats.settle.resolve({ output: [], stopReason: 'aborted' }),
        dispose: async () => {
          stats.disposals++;
        },
      };
    },
  };
  return { provider, stats };
}

describe('subagent tool, background one-shot runs', () => {
  it('answers at once when its start has to wait for a pool slot; the start goes on and runs once a slot frees', async () => {
    const host = track(await continuationHost(files.file(), { providers: true, pool: { minThreads: 0, maxThreads: 1 } }));
    const starts: string[] = [];
    host.subagents.on('subagent/start', (start) => void starts.push(start.id));
    subagentTool(host, { provider: 'spawn', background: true, agentOptions: { model: { kind: 'scripted', steps: [{ text: 'late answer' }] } } });
    // Another child holds the only thread.
    const blocker = await host.subagents.start('spawn', { prompt: [text('hold')], parent: await host.createAgent(), signal: new AbortController().signal, agentOptions: { model: HANG } });
    const parent = await host.createAgent({ model: lazyScript([call('subagent', { description: 'queued', prompt: 'x' }), () => call('task_output', { task_id: startedId(parent, 0) }), { text: 'went on' }]) });
    controlTools(host);
    parent.followup([text('go')]);
    // The whole turn ran while the start waited: the call did not hold it.
    await parent.whenIdle();
    const taskId = startedId(parent, 0);
    expect(resultText(parent, 0)).toBe(`started task ${taskId}`);
    expect(resultJson(parent, 1)).toStrictEqual({ status: 'running' });
    expect(starts).toStrictEqual([blocker.id]);
    blocker.cancel();
    await blocker.dispose();
    await eventually(() => messages(parent).some((m) => m.source.kind === 'subagent-settled') && parent.status === 'idle');
    // The child got the id the call answered with.
    expect(starts).toStrictEqual([blocker.id, taskId]);
    expect(messages(parent).find((m) => m.source.kind === 'subagent-settled')).toStrictEqual({
      source: { kind: 'subagent-settled', senderSessionId: taskId },
      text: `Background task ${taskId} finished (stop reason: completed).\nIts output:\nlate answer`,
    });
  });

  it('gives up a start still waiting for a pool slot on task_cancel, and on its parent\'s end: neither task ever starts', async () => {
    const host = track(await continuationHost(files.file(), { providers: true, pool: { minThreads: 0, maxThreads: 1 } }));
    const starts: string[] = [];
    host.subagents.on('subagent/start', (start) => void starts.push(start.id));
    subagentTool(host, { provider: 'spawn', background: true, agentOptions: { model: HANG } });
    controlTools(host);
    const blocker = await host.subagents.start('spawn', { prompt: [text('hold')], parent: await host.createAgent(), signal: new AbortController().signal, agentOptions: { model: HANG } });
    const parent = await host.createAgent({
      model: lazyScript([
        call('subagent', { description: 'cancelled', prompt: 'x' }),
        () => call('task_cancel', { task_id: startedId(parent, 0) }),
        call('subagent', { description: 'orphaned', prompt: 'x' }),
        { text: 'done' },
        { text: 'read the notice' },
      ]),
    });
    parent.followup([text('go')]);
    await eventually(() => toolResults(parent).length === 3 && messages(parent).some((m) => m.source.kind === 'subagent-settled') && parent.status === 'idle');
    const [cancelled, orphaned] = [startedId(parent, 0), startedId(parent, 2)];
    expect(resultJson(parent, 1)).toStrictEqual({ cancelled: true });
    expect(messages(parent).find((m) => m.source.kind === 'subagent-settled')!.text).toMatch(
      new RegExp(`^Background task ${cancelled} was cancelled before finishing \\(stop reason: aborted\\)\\.\nDiagnostic: CANCELLED: `),
    );
    // Its parent's end gives the other start up before the parent goes.
    await host.agents.dispose(parent.id);
    blocker.cancel();
    await blocker.dispose();
    // Slots go in arrival order: a start still waiting would take this thread before the run below.
    const run = await host.subagents.start('spawn', { prompt: [text('after')], parent: await host.createAgent(), signal: new AbortController().signal });
    await run.result;
    await run.dispose();
    expect(starts).toStrictEqual([blocker.id, run.id]);
    expect(starts).not.toContain(orphaned);
  });

  it('keeps a waiting start whose call answered though a sibling call of the same step cancels the turn', async () => {
    const host = track(await continuationHost(files.file(), { providers: true, pool: { minThreads: 0, maxThreads: 1 } }));
    subagentTool(host, { provider: 'spawn', background: true, agentOptions: { model: { kind: 'scripted', steps: [{ text: 'kept' }] } } });
    const calling: { agent?: Agent } = {};
    host.tools.register({ name: 'stop_turn', description: 'cancels the turn', parameters: { type: 'object' }, concurrencySafe: true, execute: async () => (calling.agent!.cancel(), 'stopped') });
    const blocker = await host.subagents.start('spawn', { prompt: [text('hold')], parent: await host.createAgent(), signal: new AbortController().signal, agentOptions: { model: HANG } });
    const parent = (calling.agent = await host.createAgent({ model: lazyScript([{ toolCalls: [{ name: 'subagent', input: { description: 'q', prompt: 'x' } }, { name: 'stop_turn', input: {} }] }, { text: 'read it' }]) }));
    parent.followup([text('go')]);
    await parent.whenIdle();
    const taskId = startedId(parent, 0);
    blocker.cancel();
    await blocker.dispose();
    await eventually(() => messages(parent).some((m) => m.source.kind === 'subagent-settled') && parent.status === 'idle');
    expect(messages(parent).find((m) => m.source.kind === 'subagent-settled')!.text).toBe(`Background task ${taskId} finished (stop reason: completed).\nIts output:\nkept`);
  });

  it('settles a start still waiting when the host closes as given up: aborted', async () => {
    const host = await continuationHost(files.file(), { providers: true, pool: { minThreads: 0, maxThreads: 1 } });
    subagentTool(host, { provider: 'spawn', background: true, agentOptions: { model: HANG } });
    await host.subagents.start('spawn', { prompt: [text('hold')], parent: await host.createAgent(), signal: new AbortController().signal, agentOptions: { model: HANG } });
    const parent = await host.createAgent({ model: lazyScript([call('subagent', { description: 'q', prompt: 'x' }), { text: 'started' }]) });
    parent.followup([text('go')]);
    await parent.whenIdle();
    const taskId = startedId(parent, 0);
    await host.close();
    // The parent was going away: the notice is only added to its log, and starts no turn.
    const notices = dataOf<{ source: { kind: string }; content: { text?: string }[] }>(parent.session.events, 'inbox/accepted').filter((m) => m.source.kind === 'subagent-settled');
    expect(notices.map((m) => m.content.map((block) => block.text ?? '').join('\n'))).toEqual([
      expect.stringMatching(new RegExp(`^Background task ${taskId} was cancelled before finishing \\(stop reason: aborted\\)\\.`)),
    ]);
    expect(parent.session.events.filter((e) => e.type === 'turn/start')).toHaveLength(1);
  });

  it('still answers an error the model can read for a start refused before it waits', async () => {
    const host = track(await continuationHost(files.file(), { providers: true, pool: { minThreads: 0, maxThreads: 1 } }));
    subagentTool(host, { provider: 'spawn', background: true, maxDepth: 0 });
    // Every slot is taken, but the refusal comes before any wait.
    const blocker = await host.subagents.start('spawn', { prompt: [text('hold')], parent: await host.createAgent(), signal: new AbortController().signal, agentOptions: { model: HANG } });
    const parent = await host.createAgent({ model: lazyScript([call('subagent', { description: 'too deep', prompt: 'x' }), { text: 'done' }]) });
    parent.followup([text('go')]);
    await parent.whenIdle();
    expect(toolResults(parent)[0]).toMatchObject({ isError: true, code: 'DEPTH_EXCEEDED' });
    blocker.cancel();
    await blocker.dispose();
  });

  it('answers started task <id> at once and notifies the parent with stop reason and output', async () => {
    const { host, recorder } = await setup();
    subagentTool(host, { provider: 'in-process', background: true });
    const parent = await host.createAgent({ model: lazyScript([call('subagent', { description: 'count', prompt: 'count files' }), { text: 'started' }]) });
    parent.followup([text('go')]);
    await eventually(() => messages(parent).some((m) => m.source.kind === 'subagent-settled') && parent.status === 'idle');
    const taskId = startedId(parent, 0);
    expect(resultText(parent, 0)).toBe(`started task ${taskId}`);
    expect(host.tools.get('subagent')!.description).toContain('a message with its output when it ends');
    const notice = messages(parent).find((m) => m.source.kind === 'subagent-settled')!;
    expect(notice).toStrictEqual({
      source: { kind: 'subagent-settled', senderSessionId: taskId },
      text: `Background task ${taskId} finished (stop reason: completed).\nIts output:\necho: count files`,
    });
    await recorder.until(() => recorder.ends.length === 1);
    expect(recorder.ends[0]).toMatchObject({ id: taskId, stopReason: 'completed' });
  });

  it('disposes an uncollected run exactly once, also across host close', async () => {
    const { host } = await setup();
    const { provider, stats } = countingProvider();
    host.subagents.registerProvider(provider);
    subagentTool(host, { provider: 'counting', background: true });
    const parent = await host.createAgent({ model: lazyScript([call('subagent', { description: 'd', prompt: 'p' }), { text: 'started' }]) });
    parent.followup([text('go')]);
    await parent.whenIdle();
    expect(resultText(parent, 0)).toBe('started task task-1');
    expect(stats.disposals).toBe(0);
    stats.settle.resolve({ output: [text('all done')], stopReason: 'completed' });
    await eventually(() => stats.disposals === 1);
    await host.close();
    expect(stats.disposals).toBe(1);
    expect(messages(parent).at(-1)).toStrictEqual({
      source: { kind: 'subagent-settled', senderSessionId: 'task-1' },
      text: 'Background task task-1 finished (stop reason: completed).\nIts output:\nall done',
    });
  });

  it('is cancelled by host close, and disposed once', async () => {
    const { host } = await setup();
    const { provider, stats } = countingProvider();
    host.subagents.registerProvider(provider);
    subagentTool(host, { provider: 'counting', background: true });
    const parent = await host.createAgent({ model: lazyScript([call('subagent', { description: 'd', prompt: 'p' }), { text: 'started' }]) });
    parent.followup([text('go')]);
    await parent.whenIdle();
    await host.close();
    expect(await stats.settle.promise).toStrictEqual({ output: [], stopReason: 'aborted' });
    await eventually(() => stats.disposals === 1);
    expect(stats.disposals).toBe(1);
  });

  it('keeps a hanging in-process run going after the turn, until host close stops it', async () => {
    const { host, recorder } = await setup();
    subagentTool(host, { provider: 'in-process', background: true, agentOptions: { model: HANG } });
    const parent = await host.createAgent({ model: lazyScript([call('subagent', { description: 'd', prompt: 'p' }), { text: 'started' }]) });
    parent.followup([text('go')]);
    await parent.whenIdle();
    await recorder.until(() => recorder.starts.length === 1);
    expect(recorder.ends).toStrictEqual([]);
    await host.close();
    expect(recorder.ends).toStrictEqual([expect.objectContaining({ id: startedId(parent, 0), stopReason: 'aborted' })]);
  });
});
