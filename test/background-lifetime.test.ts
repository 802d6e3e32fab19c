// A background task is its parent's work: it goes before its parent (a one-shot parent's disposal,
// a continuable parent's eviction, host close), a continuable parent stays busy until the task
// settled and hears of it, and every settlement (a rejected result, an unknown stop reason) reaches
// the parent as one notice. Real host, in-process children, real SQLite.
import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';
import { createHost, inProcessProvider, subagentTool, text, type Agent, type Host, type SubagentProvider, type SubagentResult, type Tool } from 'subagent-host';
import { deferred, holdTool, tempFiles, untilCancelled } from './helpers.js';
import { call, messages, resultsOf } from './tool-helpers.js';

const files = tempFiles('subagent-background-lifetime-');
const hosts: Host[] = [];
const warnings: string[] = [];
const onWarning = (warning: Error) => void warnings.push(warning.message);
process.on('warning', onWarning);
afterEach(async () => {
  for (const host of hosts.splice(0).reverse()) await host.close();
  warnings.length = 0;
});
afterAll(() => void process.off('warning', onWarning));

async function open(tools: Tool[], lingerMs = 0): Promise<Host & { ends: { id: string; stopReason: string }[] }> {
  const host = await createHost({ persistence: { sqlite: files.file() }, providers: false, pool: { minThreads: 0 }, tools, continuation: { lingerMs } });
  hosts.push(host);
  host.subagents.registerProvider(inProcessProvider(host));
  const ends: { id: string; stopReason: string }[] = [];
  host.subagents.on('subagent/end', (end) => void ends.push({ id: end.id, stopReason: end.stopReason }));
  return Object.assign(host, { ends });
}

/** A provider whose one run settles (or rejects) when the test says so. */
function remote(id: string): { provider: SubagentProvider; settle: (result: SubagentResult) => void; fail: (error: Error) => void } {
  const result = deferred<SubagentResult>();
  const provider: SubagentProvider = {
    name: 'remote',
    capabilities: { outputSchema: false, depthLimit: true, toolFilter: false, persona: false },
    inheritsParentContext: false,
    start: async () => ({ id, localAgent: undefined, result: result.promise, cancel: () => undefined, dispose: async () => undefined }),
  };
  return { provider, settle: result.resolve, fail: result.reject };
}

const taskNotices = (agent: Agent) => messages(agent).filter((message) => message.source.kind === 'subagent-settled').map((message) => message.text);

describe('a background task and its parent', () => {
  it('is cancelled and settled before its one-shot parent’s disposal resolves', async () => {
    const waiting = untilCancelled();
    const host = await open([waiting.tool]);
    subagentTool(host, { provider: 'in-process', background: true, toolName: 'bg', agentOptions: { model: { kind: 'scripted', steps: [call('until_cancelled', {}), { text: 'never' }] } } });
    const top = await host.createAgent();
    const run = await host.subagents.start('in-process', {
      prompt: [text('go')],
      parent: top,
      signal: new AbortController().signal,
      agentOptions: { model: { kind: 'scripted', steps: [call('bg', { description: 'd', prompt: 'p' }), { text: 'parent done' }] } },
    });
    expect((await run.result).stopReason).toBe('completed');
    await waiting.entered;
    await run.dispose();
    // Child-first: the task ended (cancelled) before its parent's disposal resolved; nothing runs on.
    expect(host.ends.map((end) => [end.id === run.id ? 'parent' : 'task', end.stopReason])).toEqual([
      ['parent', 'completed'],
      ['task', 'aborted'],
    ]);
    expect(host.subagents.activeRuns).toBe(0);
    expect(warnings).toEqual([]);
  });

  it('is cancelled before its one-shot parent’s disposal resolves, also when its start was in flight then', async () => {
    const host = await open([]);
    const startEntered = deferred();
    const startGate = deferred();
    const result = deferred<SubagentResult>();
    let cancelled = 0;
    host.subagents.registerProvider({
      name: 'remote',
      capabilities: { outputSchema: false, depthLimit: true, toolFilter: false, persona: false },
      inheritsParentContext: false,
      start: async () => {
        startEntered.resolve();
        await startGate.promise;
        const cancel = () => {
          cancelled += 1;
          result.resolve({ output: [], stopReason: 'aborted' });
        };
        return { id: 'task-late', localAgent: undefined, result: result.promise, cancel, dispose: async () => undefined };
      },
    });
    subagentTool(host, { provider: 'remote', background: true, toolName: 'bg' });
    const top = await host.createAgent();
    const run = await host.subagents.start('in-process', {
      prompt: [text('go')],
      parent: top,
      signal: new AbortController().signal,
      agentOptions: { model: { kind: 'scripted', steps: [call('bg', { description: 'd', prompt: 'p' }), { text: 'parent done' }] } },
    });
    await startEntered.promise;
    const disposing = run.dispose();
    startGate.resolve();
    await disposing;
    expect(cancelled).toBe(1);
    expect(host.ends.find((end) => end.id === 'task-late')?.stopReason).toBe('aborted');
    expect(host.subagents.activeRuns).toBe(0);
    expect(warnings).toEqual([]);
  });

  it.each(['host.agents.dispose', 'the handle of host.agents.resume'])('is cancelled and settled before a top-level parent disposed through %s goes, its notice in the parent’s log', async (how) => {
    const waiting = untilCancelled();
    const host = await open([waiting.tool]);
    subagentTool(host, { provider: 'in-process', background: true, toolName: 'bg', agentOptions: { model: { kind: 'scripted', steps: [call('until_cancelled', {}), { text: 'never' }] } } });
    const model = { kind: 'scripted' as const, steps: [call('bg', { description: 'd', prompt: 'p' }), { text: 'started it' }] };
    const created = await host.createAgent({ agentOptions: { model } });
    let dispose = async (): Promise<void> => void (await host.agents.dispose(created.id));
    let top: Agent = created;
    if (how !== 'host.agents.dispose') {
      await host.agents.dispose(created.id);
      const handle = await host.agents.resume({ sessionId: created.id, agentOptions: { model } });
      top = handle.agent;
      dispose = handle.dispose;
    }
    top.followup([text('go')]);
    await waiting.entered;
    await top.whenIdle();
    await dispose();
    expect(host.ends.map((end) => end.stopReason)).toEqual(['aborted']);
    expect(host.subagents.activeRuns).toBe(0);
    expect((await host.persistence!.load(top.id))!.events.some((event) => event.type === 'inbox/accepted' && JSON.stringify(event.data).includes('was cancelled'))).toBe(true);
    expect(warnings).toEqual([]);
  });

  it('settling after its one-shot parent’s result, wakes no second turn there: the notice is context only, within no budget escape', async () => {
    const hold = holdTool();
    const host = await open([hold.tool]);
    subagentTool(host, { provider: 'in-process', background: true, toolName: 'bg', agentOptions: { model: { kind: 'scripted', steps: [call('hold', {}), { text: 'task done' }] } } });
    const top = await host.createAgent();
    const spend = { text: 'a second turn', usage: { inputTokens: 1000, outputTokens: 0 } };
    const run = await host.subagents.start('in-process', {
      prompt: [text('go')],
      parent: top,
      signal: new AbortController().signal,
      budget: { tokens: 100, scope: 'tree' },
      agentOptions: { model: { kind: 'scripted', steps: [call('bg', { description: 'd', prompt: 'p' }), { text: 'parent done' }, spend, spend] } },
    });
    const result = await run.result;
    await hold.entered;
    // The notice comes in a later millisecond than the child's last event.
    await new Promise((resolve) => setTimeout(resolve, 5));
    hold.release();
    const child = run.localAgent!;
    // Accepted as context (inject): no turn takes it.
    const accepted = () => child.session.events.filter((event) => event.type === 'inbox/accepted' && JSON.stringify(event.data).includes('Background task'));
    await vi.waitFor(() => expect(accepted()).toHaveLength(1), { timeout: 15_000 });
    expect(taskNotices(child)).toStrictEqual([]);
    await child.whenIdle();
    expect(child.session.events.filter((event) => event.type === 'turn/start')).toHaveLength(1);
    expect(result.usage?.turns).toBe(1);
    const listed = (await host.subagents.listChildren(top.id)).find((entry) => entry.id === run.id);
    expect(listed?.kind === 'child' ? listed.usage : undefined).toStrictEqual(result.usage);
    await run.dispose();
  });

  it('of a worker child, queued for a pool slot: the call answers at once, and the child\'s dispose gives that start up first', async () => {
    const host = await createHost({ providers: true, pool: { minThreads: 1, maxThreads: 1, cancelGraceMs: 200 } });
    hosts.push(host);
    const starts: string[] = [];
    const ends: string[] = [];
    host.subagents.on('subagent/start', (start) => void starts.push(start.id));
    host.subagents.on('subagent/end', (end) => void ends.push(end.id));
    subagentTool(host, { provider: 'spawn', background: true, agentOptions: { model: { kind: 'scripted', steps: [{ finish: 'hang' }] } } });
    const top = await host.createAgent();
    const bg = (description: string) => call('subagent', { description, prompt: 'x' });
    const run = await host.subagents.start('spawn', {
      prompt: [text('go')],
      parent: top,
      signal: new AbortController().signal,
      agentOptions: { model: { kind: 'scripted', steps: [bg('g1'), bg('g2'), { finish: 'hang' }] } },
    });
    // The first task runs on the slot its waiting parent lends; the second start waits for a slot,
    // and its call answers at once: the child goes on to its last step.
    const answers = () => resultsOf(host.sessions.get(run.id)!.events).map((result) => result.content.map((block) => (block.type === 'text' ? block.text : '')).join(''));
    await vi.waitFor(() => expect(answers()).toHaveLength(2), { timeout: 15_000 });
    const [first, second] = answers().map((answer) => /^started task (\S+)$/.exec(answer)![1]!);
    expect(starts).toStrictEqual([run.id, first]);
    // Its tasks go before it: the waiting start is given up before the child frees its thread.
    await run.dispose();
    expect(await run.result).toMatchObject({ stopReason: 'aborted' });
    // Slots go in arrival order: a second start still waiting would take the thread before this run.
    const probe = await host.subagents.start('spawn', { prompt: [text('after')], parent: top, signal: new AbortController().signal, agentOptions: { model: { kind: 'scripted', steps: [{ text: 'ok' }] } } });
    await probe.result;
    await probe.dispose();
    await vi.waitFor(() => expect(host.subagents.activeRuns).toBe(0), { timeout: 15_000 });
    expect(starts).not.toContain(second);
    expect([...ends].sort()).toStrictEqual([...starts].sort());
    // Their notices had nowhere to go (the child's thread takes no input any more): no warning either.
    expect(warnings).toEqual([]);
  });

  it('keeps a continuable parent busy until it settled, and its notice reaches the parent', async () => {
    const hold = holdTool();
    const host = await open([hold.tool]);
    subagentTool(host, { provider: 'in-process', background: true, toolName: 'bg', agentOptions: { model: { kind: 'scripted', steps: [call('hold', {}), { text: 'task answer' }] } } });
    const top = await host.createAgent();
    const { childId } = await host.subagents.startContinuable({
      provider: 'in-process',
      label: 'c',
      request: { prompt: [text('go')], parent: top, agentOptions: { model: { kind: 'scripted', steps: [call('bg', { description: 'd', prompt: 'p' }), { text: 'started it' }, { text: 'read it' }] } } },
    });
    await hold.entered;
    const child = host.agents.get(childId)!;
    await child.whenIdle();
    hold.release();
    await vi.waitFor(() => expect(host.ends.filter((end) => end.id === childId)).toHaveLength(1), { timeout: 15_000 });
    // The task ended first; the child's one epoch closed only after its notice turn.
    expect(host.ends.map((end) => (end.id === childId ? 'child' : 'task'))).toEqual(['task', 'child']);
    const stored = (await host.persistence!.load(childId))!;
    const notices = stored.events.filter((event) => event.type === 'user/message').map((event) => (event.data as { source: { kind: string } }).source.kind);
    expect(notices).toEqual(['user', 'subagent-settled']);
    expect(warnings).toEqual([]);
  });

  /** A parent that started one background task on the `remote` provider and is idle again. */
  async function parentOfRemoteTask(taskId: string) {
    const host = await open([]);
    const task = remote(taskId);
    host.subagents.registerProvider(task.provider);
    subagentTool(host, { provider: 'remote', background: true });
    const parent = await host.createAgent({ agentOptions: { model: { kind: 'scripted', steps: [call('subagent', { description: 'd', prompt: 'p' }), { text: 'waiting' }, { text: 'noted' }] } } });
    parent.followup([text('go')]);
    await parent.whenIdle();
    return { parent, task };
  }

  it('tells its parent when its result rejects, and words an unknown stop reason', async () => {
    const flaky = await parentOfRemoteTask('task-x');
    flaky.task.fail(new Error('worker lost'));
    await vi.waitFor(() => expect(taskNotices(flaky.parent)).toHaveLength(1), { timeout: 15_000 });
    expect(taskNotices(flaky.parent)[0]).toBe('Background task task-x failed before finishing (stop reason: error).\nDiagnostic: Error: worker lost\nIt left no output.');

    const odd = await parentOfRemoteTask('odd-1');
    odd.task.settle({ output: [], stopReason: 'timeout' as SubagentResult['stopReason'] });
    await vi.waitFor(() => expect(taskNotices(odd.parent)).toHaveLength(1), { timeout: 15_000 });
    expect(taskNotices(odd.parent)[0]).toBe('Background task odd-1 ended abnormally (stop reason: timeout).\nIt left no output.');
  });

  it('at host close is cancelled first, and its notice wakes no turn of the parent', async () => {
    const waiting = untilCancelled();
    const host = await open([waiting.tool]);
    subagentTool(host, { provider: 'in-process', background: true, toolName: 'bg', agentOptions: { model: { kind: 'scripted', steps: [call('until_cancelled', {}), { text: 'never' }] } } });
    const parent = await host.createAgent({ agentOptions: { model: { kind: 'scripted', steps: [call('bg', { description: 'd', prompt: 'p' }), { text: 'started' }, { text: 'a turn at close' }] } } });
    parent.followup([text('go')]);
    await waiting.entered;
    await parent.whenIdle();
    hosts.splice(hosts.indexOf(host), 1);
    await host.close();
    const types = parent.session.events.map((event) => event.type);
    expect(types.filter((type) => type === 'turn/start')).toHaveLength(1);
    const accepted = JSON.stringify(parent.session.events.filter((event) => event.type === 'inbox/accepted').at(-1)?.data);
    expect(accepted).toContain('was cancelled before finishing');
    expect(host.ends.map((end) => end.stopReason)).toEqual(['aborted']);
    expect(warnings).toEqual([]);
  });
});
