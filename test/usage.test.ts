// Usage accounting: a scripted child with known usage per step, summed the same on every transport
// (in-process, worker thread, fork), on results and `subagent/end`, and in listings of a reopened
// SQLite file (read from the stored projection, not the log).
import Database from 'better-sqlite3';
import { afterEach, describe, expect, it, onTestFinished } from 'vitest';
import {
  createHost,
  inProcessProvider,
  text,
  type Host,
  type ScriptedStep,
  type SubagentRunEndInfo,
  type SubagentStartRequest,
} from 'subagent-host';
import { scriptedUsage, usageOf } from 'subagent-host/internals';
import { recordingTool, tempFiles } from './helpers.js';

const files = tempFiles('subagent-usage-');
const hosts: Host[] = [];
afterEach(async () => {
  for (const host of hosts.splice(0).reverse()) await host.close();
});

async function open(options: Parameters<typeof createHost>[0] = {}): Promise<Host> {
  const host = await createHost({ pool: { minThreads: 0, maxThreads: 2 }, tools: [recordingTool('lookup')], ...options });
  hosts.push(host);
  host.subagents.registerProvider(inProcessProvider(host));
  return host;
}

// Two model requests in one turn: a tool call, then the answer.
const STEPS: ScriptedStep[] = [
  { toolCalls: [{ name: 'lookup', input: { value: 'x' } }], usage: { inputTokens: 100, outputTokens: 7 } },
  { text: 'done', usage: { inputTokens: 130, outputTokens: 5 } },
];
const KNOWN = { inputTokens: 230, outputTokens: 12, totalTokens: 242, requests: 2, turns: 1, toolCalls: 1 };

function request(parent: SubagentStartRequest['parent'], steps: ScriptedStep[] = STEPS): SubagentStartRequest {
  return { prompt: [text('work')], parent, signal: new AbortController().signal, agentOptions: { model: { kind: 'scripted', steps } } };
}

describe('usage of a child', () => {
  it.each(['in-process', 'spawn'])('sums the usage of each step over a %s child, on the result and on subagent/end', async (provider) => {
    const host = await open();
    const parent = await host.createAgent();
    const ends: SubagentRunEndInfo[] = [];
    host.subagents.on('subagent/end', (info) => void ends.push(info));
    const run = await host.subagents.start(provider, request(parent));
    const result = await run.result;
    expect(result.usage).toEqual({ ...KNOWN, wallMs: expect.any(Number) });
    expect(Object.isFrozen(result.usage)).toBe(true);
    // The mirror (worker) or the log itself (in-process) folds to the same figures.
    expect(usageOf(host.sessions.get(run.id)!.events)).toEqual(result.usage);
    await run.dispose();
    expect(ends).toHaveLength(1);
    expect(ends[0]!.usage).toEqual(result.usage);
  });

  it('counts only a fork child’s own steps, not the parent turns it inherits', async () => {
    const host = await open();
    const parent = await host.createAgent({ agentOptions: { model: { kind: 'scripted', steps: [{ text: 'parent answer', usage: { inputTokens: 999, outputTokens: 999 } }] } } });
    parent.followup([text('first')]);
    await parent.whenIdle();
    expect(usageOf(parent.session.events, { everything: true }).totalTokens).toBe(1998);
    for (const provider of ['fork', 'in-process-fork']) {
      if (provider === 'in-process-fork') host.subagents.registerProvider(inProcessProvider(host, { fork: true }));
      const run = await host.subagents.start(provider, request(parent));
      expect((await run.result).usage).toEqual({ ...KNOWN, wallMs: expect.any(Number) });
      await run.dispose();
    }
  });

  it('counts the turn of a fork of a child, whose seed holds that child’s descriptor, the same live and listed', async () => {
    const host = await open();
    host.subagents.registerProvider(inProcessProvider(host, { fork: true }));
    const top = await host.createAgent();
    const child = await host.subagents.start('in-process', request(top));
    await child.result;
    const fork = await host.subagents.start('in-process-fork', request(child.localAgent!));
    const result = await fork.result;
    expect(result.usage).toEqual({ ...KNOWN, wallMs: expect.any(Number) });
    expect(usageOf(host.sessions.get(fork.id)!.events)).toEqual(result.usage);
    const listed = (await host.subagents.listChildren(child.id)).find((row) => row.id === fork.id);
    expect(listed?.kind === 'child' && listed.usage).toEqual(result.usage);
    await fork.dispose();
    await child.dispose();
  });

  it('times a child from its turn’s start through its end: not beyond, for a notice it is given after its result', () => {
    const at = (seq: number, time: number, type: string, data: unknown = {}) => ({ seq, time, type, data });
    const log = [
      at(0, 100, 'turn/start', { turn: 1 }),
      at(1, 101, 'subagent/descriptor', { version: 1, mode: 'one-shot', provider: 'p' }),
      at(2, 105, 'step/start'),
      at(3, 110, 'assistant/message', { content: [], usage: { inputTokens: 2, outputTokens: 1 } }),
      at(4, 120, 'step/end'),
      at(5, 130, 'turn/end', { turn: 1, reason: { kind: 'completed' } }),
      at(6, 900, 'inbox/accepted', { id: 'm1', mode: 'inject' }),
    ];
    // In the turn the descriptor arrived in, every event extends it; its end closes it.
    expect(usageOf(log.slice(0, 5))).toMatchObject({ turns: 1, requests: 1, wallMs: 20 });
    expect(usageOf(log.slice(0, 6))).toMatchObject({ turns: 1, wallMs: 30 });
    expect(usageOf(log)).toStrictEqual(usageOf(log.slice(0, 6)));
  });

  it('counts the usage a model reported before a cancel, also for an answer that streamed no text', async () => {
    const host = await open();
    const parent = await host.createAgent();
    const model = { kind: 'module', specifier: new URL('./fixtures/echo-model.mjs', import.meta.url).href, export: 'createUsageThenHangModel' } as const;
    const hook = globalThis as { usageThenHangWaiting?: () => void };
    const waiting = new Promise<void>((resolve) => (hook.usageThenHangWaiting = resolve));
    onTestFinished(() => void delete hook.usageThenHangWaiting);
    const run = await host.subagents.start('in-process', { prompt: [text('work')], parent, signal: new AbortController().signal, agentOptions: { model } });
    const session = host.sessions.get(run.id)!;
    // Cancelled once the turn has taken the model's usage (the step is still streaming).
    await waiting;
    run.cancel();
    const result = await run.result;
    expect(result.stopReason).toBe('aborted');
    expect(result.usage).toMatchObject({ inputTokens: 1000, outputTokens: 500, totalTokens: 1500, requests: 1, toolCalls: 0 });
    // The interrupted answer is logged with its usage but no content; its tool call was never run.
    expect(session.events.filter((event) => event.type === 'assistant/message').map((event) => event.data)).toEqual([
      expect.objectContaining({ content: [], interrupted: true, usage: { inputTokens: 1000, outputTokens: 500 } }),
    ]);
    expect(await host.subagents.listChildren(parent.id)).toEqual([expect.objectContaining({ kind: 'child', usage: result.usage })]);
    await run.dispose();
  });

  it('reports the scripted model’s default usage: one token per started 4 characters', async () => {
    const host = await open();
    const parent = await host.createAgent();
    const run = await host.subagents.start('spawn', request(parent, [{ text: 'four five six' }]));
    const result = await run.result;
    // The request shows the prompt 'work' (4 characters → 1 token); the answer has 13 → 4 tokens.
    expect(scriptedUsage({ text: 'four five six' }, { messages: [{ role: 'user', content: [text('work')] }] })).toEqual({ inputTokens: 1, outputTokens: 4 });
    expect(result.usage).toMatchObject({ inputTokens: 1, outputTokens: 4, totalTokens: 5, requests: 1, turns: 1, toolCalls: 0 });
    await run.dispose();
  });

  it('lists each child’s usage, live and from the stored projection of a reopened SQLite file', async () => {
    const file = files.file();
    const first = await open({ persistence: { sqlite: file } });
    const parent = await first.createAgent();
    const spawned = await first.subagents.start('spawn', request(parent));
    const local = await first.subagents.start('in-process', request(parent, [{ text: 'quick', usage: { inputTokens: 3, outputTokens: 1 } }]));
    const usages = new Map([
      [spawned.id, (await spawned.result).usage],
      [local.id, (await local.result).usage],
    ]);
    const liveRows = await first.subagents.listChildren(parent.id);
    expect(liveRows.map((row) => row.kind === 'child' && row.usage)).toEqual([usages.get(spawned.id), usages.get(local.id)]);
    await spawned.dispose();
    await local.dispose();
    await first.close();
    hosts.splice(hosts.indexOf(first), 1);

    const reopened = await open({ persistence: { sqlite: file } });
    const rows = await reopened.subagents.listChildren(parent.id);
    expect(rows).toEqual([
      expect.objectContaining({ id: spawned.id, activity: 'inactive', usage: usages.get(spawned.id) }),
      expect.objectContaining({ id: local.id, activity: 'inactive', usage: usages.get(local.id) }),
    ]);
    expect(usages.get(spawned.id)).toMatchObject(KNOWN);
    expect(usages.get(local.id)).toMatchObject({ inputTokens: 3, outputTokens: 1, totalTokens: 4, requests: 1 });
    const tree = await reopened.subagents.listDescendants(parent.id);
    expect(tree.map((row) => row.kind === 'child' && row.usage.totalTokens)).toEqual([242, 4]);
  });

  it('rebuilds usage once from the log for a stored row whose usage columns are missing', async () => {
    const file = files.file();
    const first = await open({ persistence: { sqlite: file } });
    const parent = await first.createAgent();
    const run = await first.subagents.start('spawn', request(parent));
    const usage = (await run.result).usage;
    await run.dispose();
    await first.close();
    hosts.splice(hosts.indexOf(first), 1);
    // As a version-2 file whose stored row had no usage is carried into version 3: usage NULL.
    const db = new Database(file);
    const columns = ['usage_input', 'usage_output', 'usage_requests', 'usage_turns', 'usage_tools', 'usage_seen', 'usage_since', 'usage_through'];
    db.prepare(`UPDATE sessions SET ${columns.map((column) => `${column} = NULL`).join(', ')} WHERE id = ?`).run(run.id);
    db.close();

    const reopened = await open({ persistence: { sqlite: file } });
    expect(await reopened.subagents.listChildren(parent.id)).toEqual([expect.objectContaining({ id: run.id, usage })]);
    await reopened.close();
    hosts.splice(hosts.indexOf(reopened), 1);
    const check = new Database(file, { readonly: true });
    const stored = check
      .prepare('SELECT usage_input, usage_output, usage_requests, usage_turns, usage_tools, usage_seen, usage_since, usage_through, usage_pending FROM sessions WHERE id = ?')
      .raw()
      .get(run.id);
    check.close();
    expect(stored).toEqual([230, 12, 2, 1, 1, 1, expect.any(Number), expect.any(Number), null]);
  });
});
