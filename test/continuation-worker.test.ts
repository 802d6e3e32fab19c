// Continuable spawn and fork children, resident in their worker threads: turns through the
// service on a real SQLite file and real threads, follow-ups, interrupts, drains and leaks.
import { existsSync, readFileSync } from 'node:fs';
import type { Worker } from 'node:worker_threads';
import { describe, expect, it, onTestFinished } from 'vitest';
import { forkProvider, reportTool, spawnProvider, sqlitePersistence, subagentTool, text, type ContentBlock, type Host, type LocalAgent, type HostOptions, type ModelSpec, type ScriptedStep } from 'subagent-host';
import { deferred, recordingTool } from './helpers.js';
import { hostParts } from 'subagent-host/internals';
import { call } from './tool-helpers.js';
import { continuationHost, continuationSuite, HANG, eventually, startChild, textsOf, turnEnds, untilEvent, userTexts } from './continuation-helpers.js';

const suite = continuationSuite('subagent-continuation-worker-');
const TOOLS = new URL('./fixtures/resident-tools.mjs', import.meta.url).href;
const WORKER_TOOLS = new URL('./fixtures/worker-tools.mjs', import.meta.url).href;
const SHOUT_TOOLS = new URL('./fixtures/tool-module.mjs', import.meta.url).href;
const ECHO_MODELS = new URL('./fixtures/echo-model.mjs', import.meta.url).href;
const HEAP_PROBE: ModelSpec = { kind: 'module', specifier: new URL('../dist/bench/fixtures/heap-probe-model.js', import.meta.url).href, export: 'createHeapProbeModel' };
const RESIDENT_MODEL: ModelSpec = { kind: 'module', specifier: new URL('./fixtures/resident-model.mjs', import.meta.url).href, export: 'createResidentModel' };

function setup(options: Parameters<typeof continuationHost>[1] = {}) {
  return suite.setup({ pool: { minThreads: 0, maxThreads: 2 }, ...options }, (host) => {
    host.subagents.registerProvider(spawnProvider(host));
    host.subagents.registerProvider(forkProvider(host));
  });
}

/** A model that calls `tool` once per turn, then answers `done <n>`. */
function toolEachTurn(tool: string, turns: number): ModelSpec {
  return { kind: 'scripted', steps: Array.from({ length: turns }, (_, i) => [{ toolCalls: [{ name: tool, input: {} }] }, { text: `done ${i + 1}` }]).flat() };
}

/** Resolves once a start other than `childId`'s asks the pool's admission for a slot. */
function startWaitingForSlot(host: Host, childId: string): Promise<void> {
  const admission = hostParts(host).pool.admission;
  const acquire = admission.acquire.bind(admission);
  const asked = deferred();
  admission.acquire = (request) => {
    const slot = acquire(request);
    if (request.child !== childId) asked.resolve();
    return slot;
  };
  return asked.promise;
}

/** What the resident child's tool `name` returned, call by call (read from its host-side log). */
function toolResults(host: Host, childId: string, name: string): { text: string; isError?: boolean }[] {
  return host.sessions
    .get(childId)!
    .events.filter((e) => e.type === 'tool/result' && (e.data as { name: string }).name === name)
    .map((e) => {
      const { content, isError } = e.data as { content: { text: string }[]; isError?: boolean };
      return { text: content.map((block) => block.text).join(''), ...(isError ? { isError } : {}) };
    });
}

describe('continuable spawn children', () => {
  it('runs the first turn in a worker thread and answers a follow-up from the same thread', async () => {
    const { host, parent, recorder } = await setup();
    const model = toolEachTurn('thread_id', 2);
    const { childId } = await host.subagents.startContinuable({
      provider: 'spawn',
      label: 'resident',
      request: { prompt: [text('first')], parent, agentOptions: { model, toolModules: [TOOLS] } },
    });
    await recorder.until(() => recorder.ends.length >= 1);
    expect(recorder.ends[0]).toMatchObject({ provider: 'spawn', id: childId, stopReason: 'completed', lastAssistantMessage: [text('done 1')] });
    await host.subagents.followup(parent, childId, [text('second')]);
    await recorder.until(() => recorder.ends.length >= 2);
    const threads = toolResults(host, childId, 'thread_id').map((result) => result.text);
    expect(threads).toHaveLength(2);
    expect(threads[0]).toMatch(/^thread \d+$/);
    expect(threads[1]).toBe(threads[0]);
    expect(threads[0]).not.toBe('thread 0');
    // The host-side log holds the child's turns as they ran in the thread: steps, calls, results, usage.
    const events = host.sessions.get(childId)!.events;
    expect(userTexts(events)).toStrictEqual(['first', 'second']);
    expect(turnEnds(events)).toStrictEqual(['completed', 'completed']);
    const turn = events.slice(events.findIndex((e) => e.type === 'turn/start'), events.findIndex((e) => e.type === 'turn/end') + 1);
    expect(turn.map((e) => e.type).filter((type) => type !== 'assistant/chunk')).toStrictEqual([
      'turn/start', 'step/start', 'user/message', 'assistant/message', 'tool/call', 'tool/result', 'step/end', 'step/start', 'assistant/message', 'step/end', 'turn/end',
    ]);
    expect((await host.subagents.listChildren(parent.id))[0]).toMatchObject({ id: childId, mode: 'continuable', activity: 'running', usage: { turns: 2, requests: 4, toolCalls: 2 } });
    expect(host.pool.threads).toBeGreaterThan(0);
  });

  it('refuses a start INVALID_REQUEST, before any child exists, when its prompt cannot fit a thread’s heap limit', async () => {
    const { host, parent, recorder } = await setup({ pool: { minThreads: 0, maxThreads: 2, resourceLimits: { maxOldGenerationSizeMb: 8 } } });
    const start = startChild(host, parent, 'x'.repeat(3 * 2 ** 20), { provider: 'spawn' });
    await expect(start).rejects.toMatchObject({ code: 'INVALID_REQUEST', message: expect.stringContaining('the message (3.0 MB encoded) is too large for a worker thread') });
    expect(await host.subagents.listChildren(parent.id)).toStrictEqual([]);
    expect(recorder.starts).toStrictEqual([]);
  });

  // The stay holds the child's log and may have filled its heap: a 20 MB follow-up to it (128 MB
  // limit) aborted the whole process, whatever the quarter allowed. Refused at acceptance, it is in
  // no log, so no later stay carries it.
  it.each(['resident', 'brought back'])('refuses a follow-up over 8 MB INVALID_REQUEST whatever the heap limit (%s): a stay may have filled its thread, and the child goes on', async (where) => {
    const { host, parent, recorder } = await setup({ pool: { minThreads: 0, maxThreads: 2, resourceLimits: { maxOldGenerationSizeMb: 64 } } });
    const { childId } = await startChild(host, parent, 'first', { provider: 'spawn', model: { kind: 'scripted', steps: [{ text: 'one' }, { text: 'two' }] } });
    await recorder.until(() => recorder.ends.length >= 1);
    if (where === 'brought back') await host.subagents.drainContinuableChildren(parent, [childId]);
    const follow = host.subagents.followup(parent, childId, [text('y'.repeat(12 * 2 ** 20))]);
    await expect(follow).rejects.toMatchObject({ code: 'INVALID_REQUEST', message: expect.stringContaining('the message (12.0 MB encoded) is too large for a worker thread that may already run a child') });
    expect(recorder.starts).toHaveLength(1);
    await host.subagents.followup(parent, childId, [text('second')]);
    await recorder.until(() => recorder.ends.length >= 2);
    expect(recorder.ends[1]).toMatchObject({ stopReason: 'completed' });
    expect(userTexts(host.sessions.get(childId)!.events)).toStrictEqual(['first', 'second']);
  });

  it('refuses a continuable worker grandchild past pool.maxNestingDepth at its start, leaving no child behind', async () => {
    const { host, parent, recorder } = await setup({ pool: { minThreads: 0, maxThreads: 2, maxNestingDepth: 0 } });
    subagentTool(host, { provider: 'spawn', mode: 'continuable' });
    const model: ModelSpec = { kind: 'scripted', steps: [call('subagent', { description: 'grandchild', prompt: 'x' }), { text: 'child done' }] };
    const { childId } = await startChild(host, parent, 'go', { model, provider: 'spawn' });
    await recorder.until(() => recorder.ends.length >= 1);
    expect(toolResults(host, childId, 'subagent')).toStrictEqual([{ text: expect.stringContaining('above pool.maxNestingDepth 0'), isError: true }]);
    expect(recorder.starts.map((start) => start.id)).toStrictEqual([childId]);
    expect((await host.subagents.listDescendants(parent.id)).map((row) => row.id)).toStrictEqual([childId]);
  });

  it('counts a resident ancestor that left its thread toward pool.maxNestingDepth: a refused grandchild stays refused', async () => {
    const { host, parent, recorder } = await setup({ pool: { minThreads: 0, maxThreads: 1, maxNestingDepth: 1 } });
    // Each child delegates to a continuable spawn child whenever its last user text is 'deeper'.
    const model: ModelSpec = {
      kind: 'module',
      specifier: ECHO_MODELS,
      export: 'createCallThenHistoryEchoModel',
      options: { on: 'deeper', tool: 'csub', input: { description: 'deeper', prompt: 'deeper' } },
    };
    subagentTool(host, { provider: 'spawn', toolName: 'csub', mode: 'continuable', maxDepth: 10, agentOptions: { model } });
    const { childId: first } = await host.subagents.startContinuable({ provider: 'spawn', label: 'first', request: { prompt: [text('deeper')], parent, maxDepth: 10, agentOptions: { model } } });
    // The first child starts a second; the second's own start is one generation too deep.
    await recorder.until(() => recorder.ends.length >= 2);
    const second = recorder.starts.map((start) => start.id).find((id) => id !== first)!;
    expect(toolResults(host, second, 'csub')).toStrictEqual([{ text: expect.stringContaining('above pool.maxNestingDepth 1'), isError: true }]);
    // A one-shot start takes the one thread: both resident children leave it.
    const oneShot = await host.subagents.start('spawn', { prompt: [text('x')], parent, signal: new AbortController().signal, agentOptions: { model: { kind: 'scripted', steps: [{ text: 'x' }] } } });
    await oneShot.result;
    await oneShot.dispose();
    const ended = recorder.ends.length;
    await host.subagents.followup(host.agents.get(first)!, second, [text('deeper')]);
    await recorder.until(() => recorder.ends.filter((end) => end.id === second).length >= 2 && recorder.ends.length > ended);
    expect(toolResults(host, second, 'csub')).toStrictEqual([
      { text: expect.stringContaining('above pool.maxNestingDepth 1'), isError: true },
      { text: expect.stringContaining('above pool.maxNestingDepth 1'), isError: true },
    ]);
    expect(new Set(recorder.starts.map((start) => start.id))).toStrictEqual(new Set([first, second, oneShot.id]));
  });

  it('holds a resident child’s turn to maxStepsPerTurn model calls, also when a steer makes it two turns in the thread', async () => {
    const { host, parent, recorder } = await setup();
    const model: ModelSpec = {
      kind: 'scripted',
      steps: [call('queue_input', { how: 'steer', text: 'more' }), { text: 'first answer' }, call('count', {}), { text: 'one call too many' }],
    };
    const { childId } = await host.subagents.startContinuable({
      provider: 'spawn',
      label: 'steps',
      request: { prompt: [text('go')], parent, agentOptions: { model, toolModules: [TOOLS], maxStepsPerTurn: 3 } },
    });
    await recorder.until(() => recorder.ends.length === 1);
    const events = host.sessions.get(childId)!.events;
    expect(events.filter((e) => e.type === 'turn/end').map((e) => e.data)).toStrictEqual([
      { turn: 1, reason: { kind: 'error', error: { code: 'MAX_STEPS', message: 'the turn needed more than 3 model calls (maxStepsPerTurn)' } } },
    ]);
    expect(recorder.ends[0]!.usage).toMatchObject({ requests: 3 });
  });

  it('answers a follow-up that reaches the idle child just as a start asks it to yield its thread', async () => {
    // The yield and the follow-up meet at a different moment for each gap (in microtasks).
    for (let gap = 0; gap < 6; gap++) {
      const { host, parent, recorder } = await setup({ pool: { minThreads: 0, maxThreads: 1 } });
      const { childId } = await startChild(host, parent, 'hello', { provider: 'spawn' });
      await recorder.until(() => recorder.ends.length === 1);
      // Its stay rests in its thread once the turn is over there.
      await new Promise((resolve) => setTimeout(resolve, 20));
      const followup = host.subagents.followup(parent, childId, [text('again')]);
      for (let i = 0; i < gap; i++) await Promise.resolve();
      const run = await host.subagents.start('spawn', { prompt: [text('one-shot')], parent, signal: new AbortController().signal });
      await followup;
      expect((await run.result).stopReason).toBe('completed');
      await run.dispose();
      await recorder.until(() => recorder.ends.filter((end) => end.id === childId).length === 2);
      expect(turnEnds(host.agents.get(childId)!.session.events)).toStrictEqual(['completed', 'completed']);
      await host.close();
    }
  });

  it('runs three back-to-back follow-ups in FIFO order with the ids it returned', async () => {
    const { host, parent, recorder } = await setup();
    const { childId } = await startChild(host, parent, 'p', { model: { kind: 'scripted', steps: [{ text: 'waiting', finish: 'hang' }] }, provider: 'spawn' });
    const ids = await Promise.all(['one', 'two', 'three'].map((word) => host.subagents.followup(parent, childId, [text(word)])));
    // The child's model is in its hang (its first step) in the thread: the interrupt ends that
    // step. (One landing before the thread's turn began would leave the hang to the next turn.)
    await untilEvent(host.agents.get(childId)!, 'assistant/chunk');
    host.subagents.interrupt(childId, { kind: 'user', parentSessionId: parent.id });
    await host.subagents.followup(parent, childId, [text('four')]);
    // Should it ever hang (it once did, under load), the failure says where the child stood.
    let timer: NodeJS.Timeout | undefined;
    const stuck = new Promise<never>((_resolve, reject) => {
      timer = setTimeout(() => {
        const child = host.agents.get(childId);
        reject(new Error(`no epoch end after 15 s: child ${child?.status}, pending ${child?.pendingTurns}, events ${host.sessions.get(childId)?.events.map((e) => e.type).join(' ')}`));
      }, 15_000);
    });
    await Promise.race([recorder.until(() => recorder.ends.length >= 1), stuck]).finally(() => clearTimeout(timer));
    const events = host.sessions.get(childId)!.events;
    expect(userTexts(events)).toStrictEqual(['p', 'one', 'two', 'three', 'four']);
    expect(events.filter((e) => e.type === 'user/message').slice(1, 4).map((e) => (e.data as { id: string }).id)).toStrictEqual(ids);
    expect(turnEnds(events)).toStrictEqual(['aborted', 'completed', 'completed', 'completed', 'completed']);
    expect(recorder.ends[0]).toMatchObject({ stopReason: 'completed', lastAssistantMessage: [text('echo: four')] });
    expect(recorder.starts).toHaveLength(1);
  });

  it('leaves its thread at settlement with lingerMs 0 and comes back from the database on the next follow-up', async () => {
    const { host, parent, recorder } = await setup({ continuation: { lingerMs: 0 } });
    const model = toolEachTurn('count', 2);
    const { childId } = await host.subagents.startContinuable({
      provider: 'spawn',
      label: 'evicted',
      request: { prompt: [text('first')], parent, agentOptions: { model, toolModules: [TOOLS] } },
    });
    await recorder.until(() => recorder.ends.length >= 1);
    await eventually(() => host.sessions.get(childId) === undefined);
    const descriptor = (await host.persistence!.load(childId))!.events.find((e) => e.type === 'subagent/descriptor')!.data;
    expect(descriptor).toMatchObject({ mode: 'continuable', provider: 'spawn', providerData: { residence: 'worker-thread' } });
    await host.subagents.followup(parent, childId, [text('second')]);
    await recorder.until(() => recorder.ends.length >= 2);
    expect(recorder.ends.map((end) => end.stopReason)).toStrictEqual(['completed', 'completed']);
    await eventually(() => host.sessions.get(childId) === undefined);
    const events = (await host.persistence!.load(childId))!.events;
    expect(userTexts(events)).toStrictEqual(['first', 'second']);
    // Rebuilt from its log: its model is created afresh, so the script starts again.
    expect(recorder.ends.map((end) => end.lastAssistantMessage)).toStrictEqual([[text('done 1')], [text('done 1')]]);
  });

  it('keeps one copy of its log in its thread when it comes back from the database, not its text and a second copy', async () => {
    // One thread, kept: both stays run in it, and the heap-probe model answers each turn with that
    // thread's heap after full collections.
    const { host, parent, recorder } = await setup({ pool: { minThreads: 1, maxThreads: 1 }, continuation: { lingerMs: 0 } });
    const size = 4 * 2 ** 20;
    const { childId } = await host.subagents.startContinuable({
      provider: 'spawn',
      label: 'big log',
      request: { prompt: [text('x'.repeat(size))], parent, agentOptions: { model: HEAP_PROBE } },
    });
    await recorder.until(() => recorder.ends.length >= 1);
    await eventually(() => host.sessions.get(childId) === undefined);
    await host.subagents.followup(parent, childId, [text('again')]);
    await recorder.until(() => recorder.ends.length >= 2);
    const [first, second] = recorder.ends.map((end) => JSON.parse((end.lastAssistantMessage![0] as { text: string }).text) as { threadId: number; heapUsed: number });
    expect(second!.threadId).toBe(first!.threadId);
    // The first stay holds the message once; the one built from the log held it three times more
    // (the log's text, and each event parsed from it, then copied).
    expect(second!.heapUsed - first!.heapUsed).toBeLessThan(size / 2);
  });

  it.each([
    ['followup', ['completed', 'completed']],
    ['steer', ['completed']],
    ['inject', ['completed']],
  ] as const)('logs and runs input the child adds to itself in its thread (%s) as its host-side agent’s, and keeps it in the stored log', async (how, turns) => {
    const { host, parent, recorder } = await setup({ continuation: { lingerMs: 0 } });
    const model: ModelSpec = { kind: 'module', specifier: ECHO_MODELS, export: 'createCallThenHistoryEchoModel', options: { on: 'note', tool: 'queue_input', input: { how, text: 'own note' } } };
    const { childId } = await host.subagents.startContinuable({
      provider: 'spawn',
      label: 'talks to itself',
      request: { prompt: [text('note')], parent, agentOptions: { model, toolModules: [TOOLS] } },
    });
    await recorder.until(() => recorder.ends.length >= 1);
    const stored = (await host.persistence!.load(childId))!.events;
    expect(userTexts(stored)).toStrictEqual(['note', 'own note']);
    expect(turnEnds(stored)).toStrictEqual(turns);
    expect(recorder.ends[0]!.lastAssistantMessage).toStrictEqual([text('user: note | assistant:  | user:  | assistant: user: note | assistant:  | user:  | user: own note')]);
    // Evicted at settlement, the child comes back from its stored log, note included; the parent's
    // next message gets its own answer.
    await host.subagents.followup(parent, childId, [text('next')]);
    await recorder.until(() => recorder.ends.length >= 2);
    expect(recorder.ends[1]!.lastAssistantMessage).toStrictEqual([{ type: 'text', text: expect.stringMatching(/^user: note \| .* \| user: own note \| .* \| user: next$/) }]);
  });

  it('loses nothing its code added to itself while it leaves residence: every id it was given is in the stored log (later input is refused CLOSED)', async () => {
    const db = suite.files.file();
    const ids = `${suite.files.file()}.ids`;
    const { host, parent } = await setup({ persistence: { sqlite: db } });
    const model: ModelSpec = { kind: 'scripted', steps: [{ toolCalls: [{ name: 'followup_every_ms', input: { file: ids } }] }, { text: 'ticking' }] };
    const { childId } = await host.subagents.startContinuable({
      provider: 'spawn',
      label: 'talks to itself',
      request: { prompt: [text('go')], parent, agentOptions: { model, toolModules: [TOOLS] } },
    });
    const given = () => (existsSync(ids) ? readFileSync(ids, 'utf8').split('\n').filter((line) => line !== '' && !line.startsWith('refused')) : []);
    await eventually(() => given().length >= 10);
    await host.close();
    const stored = sqlitePersistence(db);
    try {
      const accepted = new Set((await stored.load(childId))!.events.filter((e) => e.type === 'inbox/accepted').map((e) => (e.data as { id: string }).id));
      expect(given().filter((id) => !accepted.has(id))).toStrictEqual([]);
    } finally {
      await stored.close();
    }
  });

  it('refuses a follow-up from anyone but the live direct parent', async () => {
    const { host, parent, recorder } = await setup();
    const { childId } = await startChild(host, parent, 'hello', { provider: 'spawn' });
    await recorder.until(() => recorder.ends.length >= 1);
    const other = await host.createAgent();
    await expect(host.subagents.followup(other, childId, [text('mine now')])).rejects.toMatchObject({ code: 'UNAUTHORIZED' });
    expect(() => host.subagents.interrupt(childId, { kind: 'user', parentSessionId: other.id })).toThrow(expect.objectContaining({ code: 'UNAUTHORIZED' }));
    expect(userTexts(host.sessions.get(childId)!.events)).toStrictEqual(['hello']);
  });

  it('interrupts a hanging turn in the thread, keeps the child and its queued input, and the next follow-up runs both', async () => {
    const { host, parent, recorder } = await setup();
    const { childId } = await startChild(host, parent, 'work', { model: { kind: 'scripted', steps: [{ text: 'waiting', finish: 'hang' }] }, provider: 'spawn' });
    const child = host.agents.get(childId)!;
    // In its hang in the thread (see the back-to-back test): the interrupt ends that step.
    await untilEvent(child, 'assistant/chunk');
    await host.subagents.followup(parent, childId, [text('queued')]);
    expect(host.subagents.interrupt(childId, { kind: 'user', parentSessionId: parent.id })).toBeUndefined();
    await child.whenIdle();
    expect(turnEnds(child.session.events)).toStrictEqual(['aborted']);
    expect(host.agents.get(childId)).toBe(child);
    expect(child.pendingInput).toBe(1);
    expect(recorder.ends).toHaveLength(0);
    await host.subagents.followup(parent, childId, [text('next')]);
    await recorder.until(() => recorder.ends.length >= 1);
    expect(userTexts(child.session.events)).toStrictEqual(['work', 'queued', 'next']);
    expect(turnEnds(child.session.events)).toStrictEqual(['aborted', 'completed', 'completed']);
    expect(recorder.ends[0]).toMatchObject({ stopReason: 'completed', lastAssistantMessage: [text('echo: next')] });
  });

  // What the host posts to a stay before a thread has taken it is dropped (its route has no port
  // yet): a leave lost there would leave the stay to the grace's termination, which these graces
  // put past the test's timeout.
  it('interrupted before a thread took its stay, it keeps that thread: the next follow-up runs there at once', async () => {
    const { host, parent, recorder } = await setup({ pool: { minThreads: 1, maxThreads: 1, cancelGraceMs: 60_000 } });
    await host.pool.warm();
    const exited: number[] = [];
    const onWorker = (worker: Worker) => {
      const id = worker.threadId;
      worker.once('exit', () => exited.push(id));
    };
    process.on('worker', onWorker);
    onTestFinished(() => void process.off('worker', onWorker));
    const { childId } = await startChild(host, parent, 'first', { provider: 'spawn' });
    host.subagents.interrupt(childId, { kind: 'user', parentSessionId: parent.id });
    await recorder.until(() => recorder.ends.length >= 1);
    await host.subagents.followup(parent, childId, [text('next')]);
    await recorder.until(() => recorder.ends.length >= 2);
    expect(recorder.ends[1]).toMatchObject({ stopReason: 'completed', lastAssistantMessage: [text('echo: next')] });
    expect(exited).toStrictEqual([]);
  });

  it('drains child-first and leaves no thread behind', async () => {
    // Threads end as soon as they are idle: any left would still hold a resident stay.
    const { host, parent, recorder } = await setup({ pool: { minThreads: 0, maxThreads: 2, idleTimeoutMs: 0 } });
    const { childId } = await startChild(host, parent, 'work', { model: HANG, provider: 'spawn' });
    await untilEvent(host.agents.get(childId)!, 'step/start');
    const { childId: idle } = await startChild(host, parent, 'idle', { provider: 'spawn' });
    await recorder.until(() => recorder.ends.some((end) => end.id === idle));
    expect(host.pool.threads).toBeGreaterThan(0);
    await host.subagents.drainContinuableDescendants([parent]);
    expect(host.agents.get(childId)).toBeUndefined();
    expect(host.agents.get(idle)).toBeUndefined();
    await recorder.until(() => recorder.ends.length >= 2);
    expect(recorder.ends.find((end) => end.id === childId)).toMatchObject({ stopReason: 'aborted' });
    await eventually(() => host.pool.threads === 0);
  });

  it('ends the open turn with error when its thread dies, and a follow-up brings the child back in a fresh thread', async () => {
    const { host, parent, recorder } = await setup();
    const { childId } = await host.subagents.startContinuable({
      provider: 'spawn',
      label: 'fragile',
      request: { prompt: [text('die')], parent, agentOptions: { model: RESIDENT_MODEL, toolModules: [TOOLS] } },
    });
    await recorder.until(() => recorder.ends.length >= 1);
    expect(recorder.ends[0]).toMatchObject({ id: childId, stopReason: 'error' });
    const events = host.sessions.get(childId)!.events;
    expect(events.filter((e) => e.type === 'turn/end').map((e) => e.data)).toStrictEqual([
      { turn: 1, reason: { kind: 'error', error: { code: 'THREAD_FAILED', message: expect.stringContaining('exited') } } },
    ]);
    // The call the thread died in is answered in the log, so the history the child comes back with is whole.
    expect(toolResults(host, childId, 'exit_thread')).toStrictEqual([{ text: expect.any(String), isError: true }]);
    await host.subagents.followup(parent, childId, [text('again')]);
    await recorder.until(() => recorder.ends.length >= 2);
    expect(recorder.ends[1]).toMatchObject({ stopReason: 'completed', lastAssistantMessage: [text('echo: again')] });
    await host.sessions.flush(childId);
    const stored = await host.persistence!.load(childId);
    expect(turnEnds(stored!.events)).toStrictEqual(['error', 'completed']);
  });

  it('runs a follow-up that reaches a thread which dies before it begins the turn in a fresh thread', async () => {
    const { host, parent, recorder } = await setup();
    const model: ModelSpec = { kind: 'module', specifier: ECHO_MODELS, export: 'createCallThenHistoryEchoModel', options: { on: 'arm', tool: 'exit_at_next_input' } };
    const { childId } = await host.subagents.startContinuable({
      provider: 'spawn',
      label: 'fragile between turns',
      request: { prompt: [text('arm')], parent, agentOptions: { model, toolModules: [TOOLS] } },
    });
    await recorder.until(() => recorder.ends.length >= 1);
    expect(toolResults(host, childId, 'exit_at_next_input')).toStrictEqual([{ text: 'armed' }]);
    // Its thread ends as the follow-up arrives there: the host learns of it only after it sent the turn.
    await host.subagents.followup(parent, childId, [text('again')]);
    await recorder.until(() => recorder.ends.length >= 2);
    expect(recorder.ends[1]).toMatchObject({
      stopReason: 'completed',
      lastAssistantMessage: [text('user: arm | assistant:  | user:  | assistant: user: arm | assistant:  | user:  | user: again')],
    });
    const events = host.sessions.get(childId)!.events;
    expect(userTexts(events)).toStrictEqual(['arm', 'again']);
    expect(turnEnds(events)).toStrictEqual(['completed', 'completed']);
  });

  it('ends a turn with error when every thread it is sent to dies before it begins there, after a few fresh threads', async () => {
    const { host, parent, recorder } = await setup();
    const calls = suite.files.file();
    const { childId } = await host.subagents.startContinuable({
      provider: 'spawn',
      label: 'doomed',
      request: { prompt: [text(`exit ${calls}`)], parent, agentOptions: { model: RESIDENT_MODEL, toolModules: [TOOLS] } },
    });
    await recorder.until(() => recorder.ends.length >= 1);
    expect(recorder.ends[0]).toMatchObject({ id: childId, stopReason: 'error' });
    // The first thread and three fresh ones.
    expect(readFileSync(calls, 'utf8')).toBe('called\n'.repeat(4));
    expect(host.sessions.get(childId)!.events.filter((e) => e.type === 'turn/end').map((e) => e.data)).toStrictEqual([
      { turn: 1, reason: { kind: 'error', error: { code: 'THREAD_FAILED', message: expect.stringContaining('exited') } } },
    ]);
  });

  it('ends the open turn with error when an error escapes the child’s code in a later turn, and a follow-up brings the child back', async () => {
    const { host, parent, recorder } = await setup();
    const { childId } = await host.subagents.startContinuable({
      provider: 'spawn',
      label: 'careless',
      request: { prompt: [text('hello')], parent, agentOptions: { model: RESIDENT_MODEL, toolModules: [TOOLS] } },
    });
    await recorder.until(() => recorder.ends.length >= 1);
    // The second turn reaches the resident child through its thread's port, not as a new task.
    await host.subagents.followup(parent, childId, [text('throw')]);
    await recorder.until(() => recorder.ends.length >= 2);
    expect(recorder.ends.map((end) => end.stopReason)).toStrictEqual(['completed', 'error']);
    expect(turnEnds(host.sessions.get(childId)!.events)).toStrictEqual(['completed', 'error']);
    expect(host.sessions.get(childId)!.events.filter((e) => e.type === 'turn/end')[1]?.data).toStrictEqual({
      turn: 2,
      reason: { kind: 'error', error: { code: 'THREAD_FAILED', message: 'an error escaped the child’s code in its worker thread: escaped from a resident child' } },
    });
    expect(toolResults(host, childId, 'escape')).toStrictEqual([{ text: expect.any(String), isError: true }]);
    await host.subagents.followup(parent, childId, [text('again')]);
    await recorder.until(() => recorder.ends.length >= 3);
    expect(recorder.ends[2]).toMatchObject({ stopReason: 'completed', lastAssistantMessage: [text('echo: again')] });
  });

  // Told to the host's logger when it has one, else printed as a SubagentWarning.
  it.each(['process', 'logger'])('loses only the stay when work the child left running throws between its turns: a warning (%s), and the next follow-up brings it back', async (to) => {
    const logged: string[] = [];
    const { host, parent, recorder } = await setup(to === 'logger' ? { logger: { warn: (message) => void logged.push(message) } } : {});
    const channel = new BroadcastChannel(`between-turns-${process.pid}-${Date.now()}`);
    const printed: string[] = [];
    const warnings = to === 'logger' ? logged : printed;
    const onWarning = (warning: Error) => void (warning.name === 'SubagentWarning' && printed.push(warning.message));
    process.on('warning', onWarning);
    try {
      const fired = new Promise((resolve) => (channel.onmessage = (message) => resolve((message as MessageEvent).data)));
      const { childId } = await host.subagents.startContinuable({
        provider: 'spawn',
        label: 'leaves work behind',
        request: { prompt: [text(`bomb ${channel.name}`)], parent, agentOptions: { model: RESIDENT_MODEL, toolModules: [TOOLS] } },
      });
      await recorder.until(() => recorder.ends.length >= 1);
      expect(recorder.ends[0]).toMatchObject({ id: childId, stopReason: 'completed' });
      channel.postMessage('fire');
      expect(await fired).toBe('fired');
      await eventually(() => warnings.length > 0);
      expect(warnings).toStrictEqual([
        `continuable child ${childId} lost its stay between turns (an error escaped the child’s code in its worker thread: thrown between turns); its next message brings it back from its log`,
      ]);
      await host.subagents.followup(parent, childId, [text('again')]);
      await recorder.until(() => recorder.ends.length >= 2);
      expect(recorder.ends[1]).toMatchObject({ stopReason: 'completed', lastAssistantMessage: [text('echo: again')] });
      expect(turnEnds(host.sessions.get(childId)!.events)).toStrictEqual(['completed', 'completed']);
      if (to === 'logger') expect(printed).toStrictEqual([]);
    } finally {
      process.off('warning', onWarning);
      channel.close();
    }
  });

  it('terminates the thread of a turn that ignores an interrupt; the child stays and its next follow-up runs in a fresh thread', async () => {
    const { host, parent, recorder } = await setup({ pool: { minThreads: 0, maxThreads: 2, cancelGraceMs: 100 } });
    const { childId } = await host.subagents.startContinuable({
      provider: 'spawn',
      label: 'runaway',
      request: { prompt: [text('spin')], parent, agentOptions: { model: RESIDENT_MODEL, toolModules: [TOOLS] } },
    });
    const child = host.agents.get(childId)!;
    // The call is in the log before its body runs: the thread is spinning from now on.
    await untilEvent(child, 'tool/call');
    host.subagents.interrupt(childId, { kind: 'user', parentSessionId: parent.id });
    await child.whenIdle();
    expect(turnEnds(child.session.events)).toStrictEqual(['aborted']);
    expect(host.agents.get(childId)).toBe(child);
    await host.subagents.followup(parent, childId, [text('calm')]);
    await recorder.until(() => recorder.ends.length >= 2);
    expect(recorder.ends.map((end) => end.stopReason)).toStrictEqual(['aborted', 'completed']);
    expect(recorder.ends[1]!.lastAssistantMessage).toStrictEqual([text('echo: calm')]);
    expect(turnEnds(child.session.events)).toStrictEqual(['aborted', 'completed']);
  });

  it.each(['interrupted', 'drained'] as const)('ends a turn %s while its subagent call is out after that call’s child, and leaves nothing running', async (how) => {
    const { host, parent, recorder } = await setup({ pool: { minThreads: 0, maxThreads: 3, cancelGraceMs: 300 } });
    // The grandchild ignores its cancel: it ends only when its thread is terminated after the grace.
    subagentTool(host, { provider: 'spawn', agentOptions: { toolModules: [WORKER_TOOLS], model: { kind: 'scripted', steps: [call('spin', {})] } } });
    const model: ModelSpec = { kind: 'scripted', steps: [call('subagent', { description: 'nested', prompt: 'go' }), { text: 'done' }] };
    const { childId } = await startChild(host, parent, 'go', { provider: 'spawn', model });
    await recorder.until(() => recorder.starts.length >= 2);
    const grandchild = recorder.starts[1]!.id;
    await expect.poll(() => host.sessions.get(grandchild)?.events.some((event) => event.type === 'tool/call'), { timeout: 10_000 }).toBe(true);
    if (how === 'interrupted') host.subagents.interrupt(childId, { kind: 'user', parentSessionId: parent.id });
    else await host.subagents.drainContinuableChildren(parent, [childId]);
    await recorder.until(() => recorder.ends.some((end) => end.id === childId));
    expect(recorder.ends.map((end) => [end.id, end.stopReason])).toStrictEqual([[grandchild, 'aborted'], [childId, 'aborted']]);
    const rows = await host.subagents.listDescendants(parent.id);
    expect(rows.map((row) => row.kind === 'child' && [row.id, row.activity])).toStrictEqual([[childId, how === 'interrupted' ? 'running' : 'inactive'], [grandchild, 'inactive']]);
  });

  it('never starts a host tool whose call reaches the host after the turn was interrupted (a sibling call interrupted it)', async () => {
    const { host, parent, recorder } = await setup();
    const after = recordingTool('after');
    host.tools.register({ ...after, concurrencySafe: true });
    host.tools.register({
      name: 'stop',
      description: 'interrupts the child',
      parameters: { type: 'object' },
      concurrencySafe: true,
      // Called by the child's turn: its context's agent is the child's host-side agent.
      execute: async (_input, ctx) => (host.subagents.interrupt(ctx.agent.id, { kind: 'user', parentSessionId: parent.id }), 'stopped'),
    });
    const model: ModelSpec = { kind: 'scripted', steps: [{ toolCalls: [{ name: 'stop', input: {} }, { name: 'after', input: { value: 'x' } }] }, { text: 'never' }] };
    await host.subagents.startContinuable({ provider: 'spawn', label: 'stopped', request: { prompt: [text('go')], parent, agentOptions: { model } } });
    await recorder.until(() => recorder.ends.length >= 1);
    expect(recorder.ends[0]!.stopReason).toBe('aborted');
    expect(after.calls).toStrictEqual([]);
  });

  it('stops a turn at the step where the child’s budget runs out, in its thread, as in-process', async () => {
    const { host, parent, recorder } = await setup();
    const usage = { inputTokens: 60, outputTokens: 40 };
    const model: ModelSpec = { kind: 'scripted', steps: [{ ...call('count', {}), usage }, { ...call('count', {}), usage }, { text: 'never', usage }] };
    const { childId } = await host.subagents.startContinuable({
      provider: 'spawn',
      label: 'budgeted',
      request: { prompt: [text('go')], parent, budget: { tokens: 150 }, agentOptions: { model, toolModules: [TOOLS] } },
    });
    await recorder.until(() => recorder.ends.length >= 1);
    expect(recorder.ends[0]).toMatchObject({ stopReason: 'max-tokens', usage: { inputTokens: 120, outputTokens: 80, requests: 2, toolCalls: 2 } });
    const events = host.sessions.get(childId)!.events;
    expect(events.filter((e) => e.type === 'subagent/budget').map((e) => e.data)).toStrictEqual([{ limit: 'tokens', max: 150, used: 200, scope: 'child' }]);
    expect(turnEnds(events)).toStrictEqual(['max-tokens']);
  });

  it('ends the host-side turn aborted, input discarded, when another limit of its budget stops the child’s turn', async () => {
    const { host, parent, recorder } = await setup();
    const model: ModelSpec = { kind: 'scripted', steps: [call('count', {}), call('count', {}), { text: 'never' }] };
    const { childId } = await host.subagents.startContinuable({
      provider: 'spawn',
      label: 'budgeted',
      request: { prompt: [text('go')], parent, budget: { toolCalls: 2 }, agentOptions: { model, toolModules: [TOOLS] } },
    });
    await host.subagents.followup(parent, childId, [text('queued')]);
    await recorder.until(() => recorder.ends.length >= 1);
    expect(recorder.ends[0]).toMatchObject({ stopReason: 'aborted', usage: { requests: 2, toolCalls: 2 } });
    const events = host.sessions.get(childId)!.events;
    expect(events.filter((e) => e.type === 'turn/end').map((e) => e.data)).toStrictEqual([
      { turn: 1, reason: { kind: 'aborted', cause: { kind: 'hook', reason: 'budget: toolCalls limit 2 reached (2 used, child budget)' } } },
    ]);
    expect(userTexts(events)).toStrictEqual(['go']);
    expect(events.some((e) => e.type === 'inbox/discarded')).toBe(true);
  });

  it('installs setup contributions before the first turn and revokes them from a resident child on removal', async () => {
    const { host, parent, recorder } = await setup();
    const probe = recordingTool('probe', { output: 'probed' });
    const remove = host.subagents.registerContinuableSetup((child) => (child as LocalAgent).tools.register(probe));
    const model: ModelSpec = { kind: 'scripted', steps: [call('probe', { value: 'a' }), { text: 'one' }, call('probe', { value: 'b' }), { text: 'two' }] };
    const { childId } = await startChild(host, parent, 'first', { provider: 'spawn', model });
    await recorder.until(() => recorder.ends.length >= 1);
    expect(probe.calls).toStrictEqual([{ value: 'a' }]);
    remove();
    await host.subagents.followup(parent, childId, [text('second')]);
    await recorder.until(() => recorder.ends.length >= 2);
    expect(probe.calls).toHaveLength(1);
    expect(toolResults(host, childId, 'probe')).toStrictEqual([{ text: 'probed' }, { text: expect.stringContaining('no tool named probe'), isError: true }]);
  });
});

describe('continuable children’s tools, in-process and resident', () => {
  it.each(['in-process', 'spawn'])('%s: a tool module’s tool takes the name of a host tool the filter hides, fresh and resumed', async (provider) => {
    const hidden = recordingTool('shout');
    const { host, parent, recorder } = await setup({ continuation: { lingerMs: 0 }, tools: [hidden] });
    const model: ModelSpec = { kind: 'scripted', steps: [call('shout', { value: 'hi' }), { text: 'done' }] };
    const { childId } = await host.subagents.startContinuable({
      provider,
      label: 'shadowing',
      request: { prompt: [text('first')], parent, toolFilter: { deny: ['shout'] }, agentOptions: { model, toolModules: [SHOUT_TOOLS] } },
    });
    await recorder.until(() => recorder.ends.length >= 1);
    // Left at settlement (lingerMs 0), it comes back from the database with its filter and modules.
    await host.subagents.followup(parent, childId, [text('second')]);
    await recorder.until(() => recorder.ends.length >= 2);
    expect(recorder.ends.map((end) => end.stopReason)).toStrictEqual(['completed', 'completed']);
    const results = (await host.persistence!.load(childId))!.events.filter((e) => e.type === 'tool/result').map((e) => (e.data as { content: unknown }).content);
    expect(results).toStrictEqual([[text('HI')], [text('HI')]]);
    expect(hidden.calls).toStrictEqual([]);
  });

  it.each(['in-process', 'spawn'])('%s: offers each turn the host tools of that moment, one registered after the start included', async (provider) => {
    const { host, parent, recorder } = await setup();
    const model: ModelSpec = { kind: 'scripted', steps: [call('late', { value: 'a' }), { text: 'one' }, call('late', { value: 'b' }), { text: 'two' }] };
    const { childId } = await startChild(host, parent, 'first', { provider, model });
    await recorder.until(() => recorder.ends.length >= 1);
    const late = recordingTool('late', { output: 'late ok' });
    host.tools.register(late);
    await host.subagents.followup(parent, childId, [text('second')]);
    await recorder.until(() => recorder.ends.length >= 2);
    expect(late.calls).toStrictEqual([{ value: 'b' }]);
    expect(toolResults(host, childId, 'late')).toStrictEqual([{ text: expect.stringContaining('no tool named late'), isError: true }, { text: 'late ok' }]);
  });
});

describe('residency under pressure', () => {
  it('lets 6 lingering continuable children on a 2-thread pool yield to 4 one-shot starts', async () => {
    const { host, parent, recorder } = await setup();
    const ids = await Promise.all(Array.from({ length: 6 }, (_, i) => startChild(host, parent, `child ${i}`, { provider: 'spawn' })));
    await recorder.until(() => recorder.ends.length >= 6);
    const runs = await Promise.all(Array.from({ length: 4 }, (_, i) => host.subagents.start('spawn', { prompt: [text(`task ${i}`)], parent, signal: new AbortController().signal })));
    const results = await Promise.all(runs.map((run) => run.result));
    expect(results.map((result) => result.output)).toStrictEqual([0, 1, 2, 3].map((i) => [text(`echo: task ${i}`)]));
    await Promise.all(runs.map((run) => run.dispose()));
    // Every child is still addressable: the ones that left their threads come back from their logs.
    await Promise.all(ids.map(({ childId }, i) => host.subagents.followup(parent, childId, [text(`again ${i}`)])));
    const childEnds = () => recorder.ends.filter((end) => ids.some(({ childId }) => childId === end.id));
    await recorder.until(() => childEnds().length >= 12);
    expect(childEnds().map((end) => end.stopReason)).toStrictEqual(Array(12).fill('completed'));
    expect(host.pool.threads).toBeLessThanOrEqual(2);
  });

  /**
   * A resident spawn child on a 1-thread pool, in a `hold` call of its first turn: it is steered (its
   * open turn gets a next step) and a one-shot start waits for the only slot; then `hold` returns.
   * Resolves once the one-shot child completed and the resident child's epoch ended.
   */
  async function steeredWhileAStartWaits(model: ModelSpec) {
    const gate = deferred();
    const { host, parent, recorder } = await setup({ pool: { minThreads: 0, maxThreads: 1 }, tools: [recordingTool('hold', { gate: gate.promise })] });
    const { childId } = await startChild(host, parent, 'go', { provider: 'spawn', model });
    const child = host.agents.get(childId)!;
    await untilEvent(child, 'tool/call');
    child.steer([text('steered')]);
    const queued = startWaitingForSlot(host, childId);
    const run = host.subagents.start('spawn', { prompt: [text('one-shot')], parent, signal: new AbortController().signal });
    await queued;
    gate.resolve();
    expect((await (await run).result).stopReason).toBe('completed');
    await recorder.until(() => recorder.ends.some((end) => end.id === childId));
    return { host, recorder, child, childId };
  }

  it('gives a stay built between two steps of one turn the steps the child took in that turn', async () => {
    const model: ModelSpec = { kind: 'module', specifier: ECHO_MODELS, export: 'createCallThenHistoryEchoModel', options: { on: 'go', tool: 'hold', input: { value: 'x' } } };
    const { recorder, child, childId } = await steeredWhileAStartWaits(model);
    expect(turnEnds(child.session.events)).toStrictEqual(['completed']);
    expect(recorder.ends.find((end) => end.id === childId)!.lastAssistantMessage).toStrictEqual([
      text('user: go | assistant:  | user:  | assistant: user: go | assistant:  | user:  | user: steered'),
    ]);
  });

  it('yields its thread to a waiting start only once its host-side turn is over, not between two of its steps', async () => {
    // A stay built anew would start this script again (its model is created afresh).
    const model: ModelSpec = { kind: 'scripted', steps: [call('hold', { value: 'x' }), { text: 'one' }, { text: 'two' }] };
    const { host, recorder, childId } = await steeredWhileAStartWaits(model);
    expect(recorder.ends.find((end) => end.id === childId)!.lastAssistantMessage).toStrictEqual([text('two')]);
    expect(toolResults(host, childId, 'hold')).toStrictEqual([{ text: 'hold ok' }]);
  });

  it('completes a tree of continuable children 4 deep on a 2-thread pool', async () => {
    const { host, parent, recorder } = await setup();
    subagentTool(host, { provider: 'spawn', mode: 'continuable', maxDepth: 5, agentOptions: { model: RESIDENT_MODEL, toolModules: [TOOLS] } });
    const { childId } = await host.subagents.startContinuable({
      provider: 'spawn',
      label: 'root',
      request: { prompt: [text('level 1')], parent, maxDepth: 5, agentOptions: { model: RESIDENT_MODEL, toolModules: [TOOLS] } },
    });
    await recorder.until(() => recorder.ends.length >= 4);
    expect(recorder.ends.map((end) => end.stopReason)).toStrictEqual(Array(4).fill('completed'));
    expect(recorder.ends.at(-1)!.id).toBe(childId);
    const depths = recorder.ends.map((end) => host.sessions.get(end.id)!.header.delegationDepth);
    expect(depths).toStrictEqual([4, 3, 2, 1]);
  });
});

describe('continuable fork children', () => {
  it('seeds the resident child with the parent’s completed turns', async () => {
    const { host, parent, recorder } = await setup();
    parent.followup([text('context')]);
    await parent.whenIdle();
    const model: ModelSpec = { kind: 'module', specifier: new URL('./fixtures/echo-model.mjs', import.meta.url).href, export: 'createHistoryEchoModel' };
    const { childId } = await startChild(host, parent, 'go', { provider: 'fork', model });
    await recorder.until(() => recorder.ends.length >= 1);
    expect(recorder.ends[0]!.lastAssistantMessage).toStrictEqual([text('user: context | assistant: echo: context | user: go')]);
    await host.subagents.followup(parent, childId, [text('again')]);
    await recorder.until(() => recorder.ends.length >= 2);
    expect(recorder.ends[1]!.lastAssistantMessage).toStrictEqual([
      text('user: context | assistant: echo: context | user: go | assistant: user: context | assistant: echo: context | user: go | user: again'),
    ]);
  });

  // As a one-shot fork is: a stay built from a seed past a quarter of the heap limit ran out of
  // memory, and one of about half of it aborted the whole process.
  it('refuses a fork whose seed cannot fit a thread’s heap limit before the child exists', async () => {
    const { host } = await setup({ pool: { minThreads: 0, resourceLimits: { maxOldGenerationSizeMb: 8 } } });
    const long = 'x'.repeat(1_000_000);
    const parent = await host.createAgent({ agentOptions: { model: { kind: 'scripted', steps: [{ text: long }, { text: long }] } } });
    for (const question of ['a', 'b']) {
      parent.followup([text(question)]);
      await parent.whenIdle();
    }
    const start = startChild(host, parent, 'go on', { provider: 'fork' });
    await expect(start).rejects.toMatchObject({ code: 'INVALID_REQUEST', message: expect.stringContaining('too large to fork into a worker thread with pool.resourceLimits.maxOldGenerationSizeMb 8') });
    expect(await host.subagents.listChildren(parent.id)).toStrictEqual([]);
  });

  /**
   * Runs a spawn child's first turn (`steps` of a scripted model, or `model`) in a host with no heap limit, then follows
   * it up from a host reopened on the same file with `pool`; resolves with how that turn ended.
   */
  async function nextTurnReopened(steps: ScriptedStep[] | ModelSpec, pool: NonNullable<HostOptions['pool']>): Promise<unknown> {
    const db = suite.files.file();
    const register = (host: Host) => host.subagents.registerProvider(spawnProvider(host));
    const first = suite.track(await continuationHost(db, { pool: { minThreads: 0 } }));
    register(first);
    const parent = await first.createAgent();
    const model: ModelSpec = Array.isArray(steps) ? { kind: 'scripted', steps } : steps;
    const { childId } = await startChild(first, parent, 'go', { provider: 'spawn', model });
    await first.recorder.until(() => first.recorder.ends.length >= 1);
    await first.close();
    const second = suite.track(await continuationHost(db, { pool }));
    register(second);
    await second.subagents.followup((await second.agents.resume({ sessionId: parent.id })).agent, childId, [text('again')]);
    await second.recorder.until(() => second.recorder.ends.length >= 1);
    const ends = second.sessions.get(childId)!.events.filter((e) => e.type === 'turn/end').map((e) => (e.data as { reason: unknown }).reason);
    return ends.at(-1);
  }

  it('brings back no stay whose log cannot fit a thread’s heap limit (a host reopened with a lower one): the turn ends with why', async () => {
    const ended = await nextTurnReopened([{ text: 'x'.repeat(1_500_000) }], { minThreads: 0, resourceLimits: { maxOldGenerationSizeMb: 8 } });
    expect(ended).toMatchObject({ kind: 'error', error: { code: 'START_FAILED', message: expect.stringContaining('MB encoded) is too large for a worker thread with pool.resourceLimits.maxOldGenerationSizeMb 8') } });
  });

  // Its model spec crosses with each stay twice (in its options and in its log's descriptor): a
  // 7.5 MB one under a 32 MB limit ran the child out of memory in 2 of 3 runs.
  it('refuses a start whose model spec no stay could take (it crosses twice) before the child exists', async () => {
    const { host, parent, recorder } = await setup({ pool: { minThreads: 0, resourceLimits: { maxOldGenerationSizeMb: 32 } } });
    const model: ModelSpec = { kind: 'scripted', steps: [{ text: 'a' }, { text: 'x'.repeat(4.5 * 2 ** 20) }] };
    await expect(startChild(host, parent, 'go', { provider: 'spawn', model })).rejects.toMatchObject({
      code: 'INVALID_REQUEST', message: expect.stringContaining('the model spec and options of a continuable child (9.0 MB encoded) is too large for a worker thread'),
    });
    expect(await host.subagents.listChildren(parent.id)).toStrictEqual([]);
    expect(recorder.starts).toStrictEqual([]);
  });

  it('brings back no stay whose log with its model spec cannot fit a thread’s heap limit, though the log alone would', async () => {
    const ended = await nextTurnReopened([{ text: 'a' }, { text: 'x'.repeat(5 * 2 ** 20) }], { minThreads: 0, resourceLimits: { maxOldGenerationSizeMb: 32 } });
    expect(ended).toMatchObject({ kind: 'error', error: { code: 'START_FAILED', message: expect.stringContaining('with its model spec and tool schemas (10.0 MB encoded) is too large for a worker thread with pool.resourceLimits.maxOldGenerationSizeMb 32') } });
  });

  // A stay refused for an event of its log could never come back: a log with an answer over the 8 MB
  // bound of a thread that may already run a child is held to the quarter only (see resident-model.ts).
  it('brings back a stay whose log holds an answer over 8 MB when threads are shared', async () => {
    const model: ModelSpec = { kind: 'module', specifier: new URL('./fixtures/echo-model.mjs', import.meta.url).href, export: 'createLongFirstAnswerModel', options: { text: 'a', times: 9 * 2 ** 20 } };
    const ended = await nextTurnReopened(model, { minThreads: 0, childrenPerThread: 2, resourceLimits: { maxOldGenerationSizeMb: 128 } });
    expect(ended).toStrictEqual({ kind: 'completed' });
  });
});

describe('report from a resident worker child', () => {
  // A report reaches its parent's thread as a follow-up does: one it could not take is refused.
  it('refuses a report over 8 MB to a continuable worker parent INVALID_REQUEST before it is in the parent’s log', async () => {
    const { host, parent, recorder } = await setup({ pool: { minThreads: 0, maxThreads: 2, resourceLimits: { maxOldGenerationSizeMb: 64 } } });
    const { childId } = await startChild(host, parent, 'first', { provider: 'spawn' });
    await recorder.until(() => recorder.ends.length >= 1);
    const worker = host.agents.get(childId)!;
    const { childId: grandchildId } = await startChild(host, worker, 'below', { provider: 'in-process' });
    await recorder.until(() => recorder.ends.length >= 2);
    const grandchild = host.agents.get(grandchildId)!;
    const report = (said: string) => host.subagents.reportFrom(grandchild, [text(said)], { delivery: 'quiet' });
    await expect(report('y'.repeat(12 * 2 ** 20))).rejects.toMatchObject({ code: 'INVALID_REQUEST', message: expect.stringContaining('too large for a worker thread that may already run a child') });
    await report('small');
    const accepted = worker.session.events.filter((e) => e.type === 'inbox/accepted').map((e) => e.data as { source: { kind: string } });
    expect(accepted.filter((data) => data.source.kind === 'subagent-report')).toHaveLength(1);
    expect(Math.max(...accepted.map((data) => JSON.stringify(data).length))).toBeLessThan(2 ** 20);
  });

  // Quiet reports wait in the parent's inbox and join the first step of its next turn: each within
  // the bound of a thread that may already run a child, together over it, they reach the thread in pieces.
  it('gives a continuable worker parent quiet reports that are together over 8 MB with its next follow-up, in one turn', async () => {
    const { host, parent, recorder } = await setup({ pool: { minThreads: 0, maxThreads: 2, resourceLimits: { maxOldGenerationSizeMb: 64 } } });
    const model: ModelSpec = { kind: 'module', specifier: ECHO_MODELS, export: 'createEchoModel', options: { prefix: 'took ' } };
    const { childId } = await host.subagents.startContinuable({ provider: 'spawn', label: 'worker', request: { prompt: [text('first')], parent, agentOptions: { model } } });
    const turnsOf = (id: string) => recorder.ends.filter((end) => end.id === id).length;
    await recorder.until(() => turnsOf(childId) === 1);
    const worker = host.agents.get(childId)!;
    const { childId: grandchildId } = await startChild(host, worker, 'below', { provider: 'in-process', model: { kind: 'scripted', steps: [{ text: 'up' }] } });
    // Its settlement notice wakes the worker child for a turn; the reports come once that is over.
    await recorder.until(() => turnsOf(grandchildId) === 1 && turnsOf(childId) === 2);
    const grandchild = host.agents.get(grandchildId)!;
    for (const said of ['a', 'b', 'c']) await host.subagents.reportFrom(grandchild, [text(said.repeat(3 * 2 ** 20))], { delivery: 'quiet' });
    await host.subagents.followup(parent, childId, [text('go')]);
    await recorder.until(() => turnsOf(childId) === 3);
    expect(turnEnds(worker.session.events)).toStrictEqual(['completed', 'completed', 'completed']);
    // Its first step took the follow-up and the three reports.
    const events = worker.session.events;
    const step = events.slice(events.findLastIndex((e) => e.type === 'turn/start'));
    const taken = step.filter((e) => e.type === 'user/message').map((e) => textsOf((e.data as { content: ContentBlock[] }).content).slice(-3));
    expect(taken.sort()).toStrictEqual(['aaa', 'bbb', 'ccc', 'go']);
    await host.subagents.drainContinuableChildren(worker, [grandchildId]);
  });

  // A one-shot worker parent takes a report on its running turn as it takes a steer: one its thread
  // could not take is the report's fault, not the parent's.
  it('refuses a report over 8 MB to a running one-shot worker parent INVALID_REQUEST, and the parent takes the next', async () => {
    const { host, parent, recorder } = await setup({ pool: { minThreads: 0, maxThreads: 2, resourceLimits: { maxOldGenerationSizeMb: 64 } } });
    const run = await host.subagents.start('spawn', { prompt: [text('go')], parent, signal: new AbortController().signal, agentOptions: { model: HANG } });
    const child = run.localAgent!;
    await untilEvent(child, 'step/start');
    const { childId: grandchildId } = await startChild(host, child, 'below', { provider: 'in-process', model: { kind: 'scripted', steps: [{ text: 'up' }] } });
    await recorder.until(() => recorder.ends.some((end) => end.id === grandchildId));
    const grandchild = host.agents.get(grandchildId)!;
    const report = (said: string) => host.subagents.reportFrom(grandchild, [text(said)], { delivery: 'next-step' });
    await expect(report('y'.repeat(12 * 2 ** 20))).rejects.toMatchObject({ code: 'INVALID_REQUEST', message: expect.stringContaining('too large for a worker thread that may already run a child') });
    // The next reaches the parent's running turn (its thread logs it); the refused one never crossed.
    await report('small');
    const reports = () => child.session.events.filter((e) => e.type === 'inbox/accepted' && (e.data as { source: { kind: string } }).source.kind === 'subagent-report');
    await eventually(() => reports().length > 0);
    expect(reports().map((e) => JSON.stringify(e.data).length)).toStrictEqual([expect.any(Number)]);
    expect(JSON.stringify(reports()[0]!.data)).toContain('small');
    run.cancel();
    await run.result;
    await host.subagents.drainContinuableChildren(child, [grandchildId]);
  });

  // A settlement notice reaches its parent's thread as a follow-up does: a closing message that
  // thread could not take is left out of it, said so, and the parent's turn runs.
  it('leaves a closing message over 8 MB out of the settlement notice to a continuable worker parent, saying why', async () => {
    const { host, parent, recorder } = await setup({ pool: { minThreads: 0, maxThreads: 2, resourceLimits: { maxOldGenerationSizeMb: 64 } } });
    const { childId } = await startChild(host, parent, 'first', { provider: 'spawn' });
    await recorder.until(() => recorder.ends.length >= 1);
    const worker = host.agents.get(childId)!;
    const long: ModelSpec = { kind: 'module', specifier: ECHO_MODELS, export: 'createLongFirstAnswerModel', options: { text: 'z', times: 12 * 2 ** 20 } };
    const { childId: grandchildId } = await startChild(host, worker, 'below', { provider: 'in-process', model: long });
    await recorder.until(() => recorder.ends.length >= 3);
    expect(recorder.ends.map((end) => [end.id, end.stopReason])).toStrictEqual([[childId, 'completed'], [grandchildId, 'completed'], [childId, 'completed']]);
    const notice = userTexts(worker.session.events).at(-1)!;
    expect(notice).toContain(`Background subagent ${grandchildId} finished`);
    expect(notice).toContain('Its closing message is left out: this agent could not take it (the message (12.0 MB encoded) is too large for a worker thread');
    const accepted = worker.session.events.filter((e) => e.type === 'inbox/accepted');
    expect(Math.max(...accepted.map((e) => JSON.stringify(e.data).length))).toBeLessThan(2 ** 20);
  });

  it('leaves an output over 8 MB out of a background task’s notice to a continuable worker parent, saying why', async () => {
    const { host, parent, recorder } = await setup({ pool: { minThreads: 0, maxThreads: 2, resourceLimits: { maxOldGenerationSizeMb: 64 } } });
    const long: ModelSpec = { kind: 'module', specifier: ECHO_MODELS, export: 'createLongFirstAnswerModel', options: { text: 'z', times: 12 * 2 ** 20 } };
    subagentTool(host, { provider: 'in-process', background: true, toolName: 'bg', agentOptions: { model: long } });
    const model: ModelSpec = { kind: 'scripted', steps: [call('bg', { description: 'long', prompt: 'go' }), { text: 'started' }, { text: 'noticed' }] };
    const { childId } = await startChild(host, parent, 'first', { provider: 'spawn', model });
    await recorder.until(() => recorder.ends.some((end) => end.id === childId));
    const events = host.sessions.get(childId)!.events;
    expect(new Set(turnEnds(events))).toStrictEqual(new Set(['completed']));
    expect(userTexts(events).at(-1)).toContain('Its output is left out: this agent could not take it (the message (12.0 MB encoded) is too large for a worker thread');
    expect(Math.max(...events.filter((e) => e.type === 'inbox/accepted').map((e) => JSON.stringify(e.data).length))).toBeLessThan(2 ** 20);
  });

  it('gives a running one-shot worker parent the settlement notice without a closing message its thread could not take', async () => {
    const warned: string[] = [];
    const logger = { warn: (message: string) => void warned.push(message) };
    const { host, parent } = await setup({ logger, pool: { minThreads: 0, maxThreads: 2, resourceLimits: { maxOldGenerationSizeMb: 64 } } });
    const run = await host.subagents.start('spawn', { prompt: [text('go')], parent, signal: new AbortController().signal, agentOptions: { model: HANG } });
    const child = run.localAgent!;
    await untilEvent(child, 'step/start');
    const long: ModelSpec = { kind: 'module', specifier: ECHO_MODELS, export: 'createLongFirstAnswerModel', options: { text: 'z', times: 12 * 2 ** 20 } };
    const warning = new Promise<void>((resolve) => (logger.warn = (message) => void (warned.push(message), resolve())));
    const { childId: grandchildId } = await startChild(host, child, 'below', { provider: 'in-process', model: long });
    const isNotice = (e: { type: string; data: unknown }) => e.type === 'inbox/accepted' && (e.data as { source: { kind: string } }).source.kind === 'subagent-settled';
    const noticed = new Promise<void>((resolve) => child.subscribe((event) => void (isNotice(event) && resolve())));
    await Promise.race([noticed, warning]);
    expect(warned).toStrictEqual([]);
    const notice = child.session.events.find(isNotice)!.data as { content: { text: string }[] };
    expect(notice.content.map((block) => block.text).join('\n')).toContain(`Its closing message is left out: this agent could not take it (the message (12.0 MB encoded) is too large for a worker thread`);
    run.cancel();
    await run.result;
    await host.subagents.drainContinuableChildren(child, [grandchildId]);
  });


  it.each([
    ['quiet', false],
    ['next-step', true],
  ] as const)('runs on the main thread without ending the child’s turn; with delivery %s, wakes an idle parent: %s', async (delivery, wakes) => {
    const gate = deferred();
    const { host, parent, recorder } = await setup({ tools: [recordingTool('hold', { gate: gate.promise })] });
    reportTool(host, { delivery });
    const steps = [call('report', { output: 'partial: 3 files' }), call('hold', { value: 'x' }), { text: 'final: 5 files' }];
    const { childId } = await startChild(host, parent, 'count files', { provider: 'spawn', model: { kind: 'scripted', steps } });
    await untilEvent(parent, 'inbox/accepted');
    const accepted = parent.session.events.find((e) => e.type === 'inbox/accepted');
    expect(accepted?.data).toMatchObject({
      target: 'next-step',
      content: [text(`Subagent ${childId} reported:`), text('partial: 3 files')],
      source: { kind: 'subagent-report', senderSessionId: childId },
    });
    // A wake is synchronous with the acceptance: an idle parent that was woken has a turn to wait for.
    await parent.whenIdle();
    expect(parent.session.events.some((e) => e.type === 'turn/start')).toBe(wakes);
    expect(host.agents.get(childId)!.status).toBe('running');
    gate.resolve();
    await recorder.until(() => recorder.ends.length >= 1);
    expect(recorder.ends[0]!.lastAssistantMessage).toStrictEqual([text('final: 5 files')]);
    const [reported] = toolResults(host, childId, 'report');
    expect(JSON.parse(reported!.text)).toStrictEqual({ messageId: (accepted!.data as { id: string }).id });
  });
});
