// acpProvider end to end: the provider contract and the prompt/cancel/dispose/prewarm paths against
// a real `subagent-host acp` child, then configuration (cwd, permission, options) against the
// SDK-written fixture agent. Every process is checked dead by pid after its owner let go of it.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  acpProvider,
  createHost,
  text,
  type AcpProviderOptions,
  type Agent,
  type Host,
  type ScriptedStep,
  type SubagentStartRequest,
} from 'subagent-host';
import { NO_START_CAPABILITIES } from 'subagent-host/internals';
import { CLI, FIXTURE_AGENT, childPids, isAlive, newChildPids, streamedText, whenSession } from './acp-helpers.js';
import { types } from './helpers.js';
import { providerContract } from './provider-contract.js';

const dir = mkdtempSync(join(tmpdir(), 'acp-provider-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const GRACES = { disposeEofGraceMs: 2000, disposeGraceMs: 200 };
const cliOptions = (extra: Partial<AcpProviderOptions> = {}): AcpProviderOptions => ({ command: process.execPath, args: [CLI, 'acp'], cwd: dir, ...GRACES, ...extra });
const scripted = (...steps: ScriptedStep[]) => ({ agentOptions: { model: { kind: 'scripted' as const, steps } } });

let contractPids: number[] = [];
providerContract('acp (subagent-host acp child)', {
  capabilities: NO_START_CAPABILITIES,
  local: false,
  mirror: true,
  leftovers: () => newChildPids(contractPids).filter(isAlive),
  async setup(persistence) {
    contractPids = childPids();
    const host = await createHost({ providers: false, persistence });
    host.subagents.registerProvider(acpProvider(host, cliOptions()));
    return { host, provider: 'acp' };
  },
});

describe('acpProvider', () => {
  let host: Host;
  let parent: Agent;

  beforeEach(async () => {
    host = await createHost({ providers: false });
    parent = await host.createAgent({ header: { cwd: dir } });
  });

  afterEach(async () => {
    await host.close();
  });

  function start(provider: string, request: Partial<SubagentStartRequest> = {}) {
    return host.subagents.start(provider, { label: 'acp test', prompt: [text('hello')], parent, signal: new AbortController().signal, ...request });
  }

  describe('driving a real subagent-host acp child', () => {
    beforeEach(() => {
      host.subagents.registerProvider(acpProvider(host, cliOptions()));
    });

    it("returns the child's answer, mirrors it as a local session, and reaps the process on dispose", async () => {
      const before = childPids();
      const run = await start('acp');
      const [pid] = newChildPids(before);
      await expect(run.result).resolves.toEqual({ output: [text('echo: hello')], stopReason: 'completed', usage: expect.objectContaining({ turns: 1 }) });
      const session = host.sessions.get(run.id)!;
      expect(session.header).toMatchObject({ cwd: dir, parentSession: parent.id, origin: 'subagent', delegationDepth: 1 });
      expect(types(session.events).filter((type) => type !== 'assistant/chunk')).toEqual([
        'turn/start',
        'subagent/descriptor',
        'step/start',
        'user/message',
        'assistant/message',
        'step/end',
        'turn/end',
      ]);
      expect(streamedText(session.events)).toBe('echo: hello');
      await run.dispose();
      expect(isAlive(pid!)).toBe(false);
      expect(host.sessions.get(run.id)).toBeUndefined();
      await expect(host.persistence!.load(run.id)).resolves.toMatchObject({ header: { id: run.id, origin: 'subagent' } });
    });

    it('passes the route overrides to the child agent, which ends a turn at its maxStepsPerTurn', async () => {
      const steps: ScriptedStep[] = [{ toolCalls: [{ name: 'missing', input: {} }] }, { text: 'second step' }];
      const limited = await start('acp', { agentOptions: { model: { kind: 'scripted', steps }, maxStepsPerTurn: 1, maxTokens: 64 } });
      await expect(limited.result).resolves.toMatchObject({ stopReason: 'error' });
      await limited.dispose();
      const free = await start('acp', scripted(...steps));
      await expect(free.result).resolves.toMatchObject({ output: [text('second step')], stopReason: 'completed' });
      await free.dispose();
    });

    it("loads agentOptions.toolModules in the child agent, and refuses a start whose module does not load", async () => {
      const steps: ScriptedStep[] = [{ toolCalls: [{ name: 'shout', input: { value: 'hi' } }] }, { text: 'done' }];
      const toolModules = [new URL('./fixtures/tool-module.mjs', import.meta.url).href];
      const run = await start('acp', { agentOptions: { model: { kind: 'scripted', steps }, toolModules } });
      await expect(run.result).resolves.toMatchObject({ output: [text('done')], stopReason: 'completed' });
      const results = host.sessions.get(run.id)!.events.filter((event) => event.type === 'tool/result');
      expect(results).toMatchObject([{ data: { name: 'shout', content: [text('HI')] } }]);
      expect(results[0]!.data).not.toHaveProperty('isError');
      await run.dispose();
      // Not a child that lacks its tools: the agent refuses the session (-32602) before any prompt.
      const before = childPids();
      await expect(start('acp', { agentOptions: { toolModules: ['file:///nonexistent/tools.mjs'] } })).rejects.toMatchObject({ code: 'START_FAILED', message: expect.stringContaining('-32602') });
      expect(newChildPids(before).filter(isAlive)).toEqual([]);
    });

    it('lists the ACP child among the children of its parent', async () => {
      const run = await start('acp');
      await run.result;
      await run.dispose();
      await expect(host.subagents.listChildren(parent.id)).resolves.toMatchObject([{ kind: 'child', id: run.id, mode: 'one-shot', label: 'acp test' }]);
    });

    // A grace no loaded machine outlasts: the agent's answer to the cancelled prompt is always waited for.
    const patient = () => host.subagents.registerProvider(acpProvider(host, cliOptions({ name: 'patient', disposeGraceMs: 600_000 })));

    it('cancel sends session/cancel and settles aborted with the text streamed so far', async () => {
      patient();
      const run = await start('patient', scripted({ finish: 'hang', text: 'partial answer' }));
      await whenSession(host.sessions.get(run.id)!, (events) => streamedText(events) === 'partial answer');
      run.cancel();
      await expect(run.result).resolves.toEqual({ output: [text('partial answer')], stopReason: 'aborted', usage: expect.objectContaining({ totalTokens: 0, turns: 1 }) });
      expect(host.sessions.get(run.id)!.events.at(-1)).toMatchObject({ type: 'turn/end', data: { reason: { kind: 'aborted' } } });
      await run.dispose();
    });

    it('keeps what a cancelled child spent: the answer to its cancelled prompt carries the usage, on the result and its listing row', async () => {
      patient();
      const never = join(dir, 'never-created');
      const steps: ScriptedStep[] = [{ toolCalls: [{ name: 'gate', input: { path: never } }], usage: { inputTokens: 500, outputTokens: 5 } }, { text: 'never' }];
      const toolModules = [new URL('./fixtures/gate-tools.mjs', import.meta.url).href];
      const run = await start('patient', { agentOptions: { model: { kind: 'scripted', steps }, toolModules } });
      // The remote turn spent its step and waits in the gate until the cancel reaches it.
      await whenSession(host.sessions.get(run.id)!, (events) => events.some((event) => event.type === 'tool/call'));
      run.cancel();
      const spent = { inputTokens: 500, outputTokens: 5, totalTokens: 505, requests: 1, turns: 1, toolCalls: 1 };
      await expect(run.result).resolves.toEqual({ output: [], stopReason: 'aborted', usage: expect.objectContaining(spent) });
      await expect(host.subagents.listChildren(parent.id)).resolves.toMatchObject([{ id: run.id, usage: spent }]);
      await run.dispose();
    });

    it('mirrors the child tool calls and their results', async () => {
      const run = await start('acp', scripted({ toolCalls: [{ name: 'no_such_tool', input: { q: 1 } }] }, { text: 'done' }));
      await expect(run.result).resolves.toEqual({ output: [text('done')], stopReason: 'completed', usage: expect.objectContaining({ turns: 1 }) });
      const events = host.sessions.get(run.id)!.events;
      const call = events.find((event) => event.type === 'tool/call')?.data as { callId: string };
      expect(call).toMatchObject({ name: 'no_such_tool', input: { q: 1 } });
      expect(events.find((event) => event.type === 'tool/result')?.data).toMatchObject({ callId: call.callId, isError: true });
      await run.dispose();
    });

    it('dispose during a turn settles aborted and reaps the process', async () => {
      const before = childPids();
      const run = await start('acp', scripted({ finish: 'hang' }));
      const [pid] = newChildPids(before);
      await run.dispose();
      await expect(run.result).resolves.toMatchObject({ stopReason: 'aborted' });
      expect(isAlive(pid!)).toBe(false);
    });

    it('host.close() reaps the process of a run nobody disposed', async () => {
      const before = childPids();
      const run = await start('acp', scripted({ finish: 'hang' }));
      const pids = newChildPids(before);
      await host.close();
      await expect(run.result).resolves.toMatchObject({ stopReason: 'aborted' });
      expect(pids.filter(isAlive)).toEqual([]);
    });
  });

  describe('prewarm', () => {
    it('starts children on warm processes, retires each after its run, and host.close() reaps the pool', async () => {
      const before = childPids();
      const provider = acpProvider(host, cliOptions({ name: 'warm', prewarm: 2 }));
      host.subagents.registerProvider(provider);
      await provider.whenWarm();
      const warm = newChildPids(before);
      expect(warm).toHaveLength(2);
      const run = await start('warm');
      await expect(run.result).resolves.toEqual({ output: [text('echo: hello')], stopReason: 'completed', usage: expect.objectContaining({ turns: 1 }) });
      await run.dispose();
      expect(warm.filter(isAlive)).toHaveLength(1);
      await provider.whenWarm();
      const pool = newChildPids(before);
      expect(pool).toHaveLength(2);
      await host.close();
      expect([...warm, ...pool].filter(isAlive)).toEqual([]);
    });

    it('does not hand out a warm process whose connection closed while it idled: it is reaped, and the start runs on another', async () => {
      const before = childPids();
      const once = join(dir, 'warm-stdout-closed');
      const provider = acpProvider(host, { name: 'closing', command: process.execPath, args: [FIXTURE_AGENT, `--close-stdout-once=${once}`], cwd: dir, prewarm: 1, ...GRACES });
      host.subagents.registerProvider(provider);
      await provider.whenWarm();
      const [warm] = newChildPids(before);
      expect(warm).toBeDefined();
      // Its stdout ends, its process stays: the pool reaps it.
      while (isAlive(warm!)) await new Promise((resolve) => setTimeout(resolve, 10));
      const run = await start('closing');
      await expect(run.result).resolves.toMatchObject({ stopReason: 'completed' });
      await run.dispose();
    });

    it('refuses INVALID_REQUEST a prompt over the 32 MiB bound on one ACP message before taking a process: the warm one stays', async () => {
      const before = childPids();
      const provider = acpProvider(host, cliOptions({ name: 'bounded', prewarm: 1 }));
      host.subagents.registerProvider(provider);
      await provider.whenWarm();
      const warm = newChildPids(before);
      expect(warm).toHaveLength(1);
      const refused = start('bounded', { prompt: [text('x'.repeat(33 * 2 ** 20))] });
      await expect(refused).rejects.toMatchObject({ code: 'INVALID_REQUEST', message: expect.stringMatching(/^the prompt \(33\.0 MB .*at most 33554432 bytes in one message.*; send less$/) });
      await provider.whenWarm();
      expect(newChildPids(before)).toEqual(warm);
      expect(warm.filter(isAlive)).toEqual(warm);
      expect(host.sessions.list().filter((session) => session.header.parentSession === parent.id)).toEqual([]);
    });

    it('refuses INVALID_REQUEST a model spec over the bound on one session/new message before taking a process: the warm one stays', async () => {
      const before = childPids();
      const provider = acpProvider(host, cliOptions({ name: 'bounded-spec', prewarm: 1 }));
      host.subagents.registerProvider(provider);
      await provider.whenWarm();
      const warm = newChildPids(before);
      const model = { kind: 'scripted' as const, steps: [{ text: 'x'.repeat(33 * 2 ** 20) }] };
      await expect(start('bounded-spec', { agentOptions: { model } })).rejects.toMatchObject({
        code: 'INVALID_REQUEST', message: expect.stringMatching(/^the agent options \(33\.0 MB .*at most 33554432 bytes in one message.*; give a shorter model spec$/),
      });
      await provider.whenWarm();
      expect(newChildPids(before)).toEqual(warm);
      expect(warm.filter(isAlive)).toEqual(warm);
    });

    it('counts the session id the agent picked: a prompt it pushes over the bound is refused, and the warm process taken for it is reaped', async () => {
      const before = childPids();
      const provider = acpProvider(host, cliOptions({ name: 'exact', prewarm: 1 }));
      host.subagents.registerProvider(provider);
      await provider.whenWarm();
      const [warm] = newChildPids(before);
      // Exactly the bound with an empty session id: the real one makes it larger.
      const envelope = JSON.stringify({ jsonrpc: '2.0', id: Number.MAX_SAFE_INTEGER, method: 'session/prompt', params: { sessionId: '', prompt: [text('')] } }).length;
      await expect(start('exact', { prompt: [text('x'.repeat(32 * 2 ** 20 - envelope))] })).rejects.toMatchObject({ code: 'INVALID_REQUEST', message: expect.stringContaining('33554432 bytes') });
      expect(isAlive(warm!)).toBe(false);
      await provider.whenWarm();
      expect(newChildPids(before).filter(isAlive)).toHaveLength(1);
    });

    it('rejects prewarm without a configured cwd', () => {
      expect(() => acpProvider(host, { command: process.execPath, prewarm: 1 })).toThrow(expect.objectContaining({ code: 'INVALID_OPTIONS' }));
    });
  });

  describe('configuration (fixture agent)', () => {
    const fixture = (flags: string[], extra: Partial<AcpProviderOptions> = {}): AcpProviderOptions => ({
      command: process.execPath,
      args: [FIXTURE_AGENT, ...flags],
      ...GRACES,
      ...extra,
    });
    const report = async (provider: string, prompt = 'none') => {
      const run = await start(provider, { prompt: [text(prompt)] });
      const result = await run.result;
      await run.dispose();
      return JSON.parse((result.output[0] as { text: string }).text) as { pid: number; cwd: string; sessionCwd: string; env: Record<string, string | null> };
    };

    it("runs the child in the parent's cwd when none is configured, as process cwd and session cwd", async () => {
      host.subagents.registerProvider(acpProvider(host, fixture(['--report'])));
      const facts = await report('acp');
      expect([facts.cwd, facts.sessionCwd]).toEqual([dir, dir]);
      expect(isAlive(facts.pid)).toBe(false);
    });

    it('prefers the configured cwd', async () => {
      const configured = mkdtempSync(join(dir, 'configured-'));
      host.subagents.registerProvider(acpProvider(host, fixture(['--report'], { cwd: configured })));
      const facts = await report('acp');
      expect([facts.cwd, facts.sessionCwd]).toEqual([configured, configured]);
    });

    it.each([
      ['no cwd at all', undefined],
      ['a relative parent cwd', 'relative/dir'],
      ['a parent cwd that is a file', 'FILE'],
    ])('rejects START_FAILED and spawns nothing for %s', async (_name, cwd) => {
      const file = join(dir, 'a-file');
      writeFileSync(file, '');
      host.subagents.registerProvider(acpProvider(host, fixture(['--report'])));
      const orphan = await host.createAgent(cwd === undefined ? {} : { header: { cwd: cwd === 'FILE' ? file : cwd } });
      const before = childPids();
      await expect(start('acp', { parent: orphan })).rejects.toMatchObject({ code: 'START_FAILED' });
      expect(newChildPids(before)).toEqual([]);
    });

    // `cancelled` means the turn was cancelled (ACP): agents such as codex-acp and claude-code-acp
    // abort the whole turn on it, so a rejection picks a reject option whenever one is offered.
    it.each([
      ['reject', 'selected no', '--permission'],
      ['allow', 'selected yes', '--permission'],
      ['allow', 'selected always', '--permission=always'],
      ['reject', 'selected no', '--permission=always'],
      ['reject', 'selected no', '--permission=never'],
      ['reject', 'cancelled', '--permission=allow-only'],
      ['allow', 'selected never', '--permission=reject-only'],
    ] as const)('answers permission requests by policy %s (%s) with %s', async (permission, answer, flag) => {
      host.subagents.registerProvider(acpProvider(host, fixture([flag], { permission })));
      const run = await start('acp');
      await expect(run.result).resolves.toEqual({ output: [text(answer)], stopReason: 'completed' });
      await run.dispose();
    });

    it('mirrors tool_call and tool_call_update from any agent', async () => {
      host.subagents.registerProvider(acpProvider(host, fixture(['--tool'])));
      const run = await start('acp');
      await expect(run.result).resolves.toEqual({ output: [text('hello world')], stopReason: 'completed' });
      const events = host.sessions.get(run.id)!.events;
      expect(events.filter((e) => e.type === 'tool/call' || e.type === 'tool/result').map((e) => e.data)).toEqual([
        { turn: 1, step: 1, callId: 'c1', name: 'grep', input: { q: 'x' } },
        { turn: 1, step: 1, callId: 'c1', name: 'grep', content: [text('found')] },
      ]);
      await run.dispose();
    });

    // ACP updates a tool call field by field: content that came before the final status is its result.
    it('keeps the content a tool call reported before its final status on its tool/result', async () => {
      host.subagents.registerProvider(acpProvider(host, fixture(['--tool-stages'])));
      const run = await start('acp');
      await expect(run.result).resolves.toEqual({ output: [text('hello world')], stopReason: 'completed' });
      const events = host.sessions.get(run.id)!.events;
      expect(events.filter((e) => e.type === 'tool/result').map((e) => e.data)).toEqual([
        { turn: 1, step: 1, callId: 'c4', name: 'cat', content: [text('full')] },
        { turn: 1, step: 1, callId: 'c5', name: 'rm', content: [text('queued')], isError: true },
      ]);
      await run.dispose();
    });

    it('mirrors thoughts, diffs and failed tool calls; leaves out images, plans and updates of unknown calls', async () => {
      host.subagents.registerProvider(acpProvider(host, fixture(['--rich'])));
      const run = await start('acp');
      await expect(run.result).resolves.toEqual({ output: [text('hello world')], stopReason: 'completed' });
      const events = host.sessions.get(run.id)!.events;
      const kept = events.filter((e) => ['assistant/chunk', 'tool/call', 'tool/result'].includes(e.type)).map((e) => e.data);
      expect(kept).toEqual([
        { turn: 1, step: 1, chunk: { type: 'reasoning-delta', text: 'pondering' } },
        { turn: 1, step: 1, callId: 'c2', name: 'edit', input: null },
        { turn: 1, step: 1, callId: 'c2', name: 'edit', content: [text('[diff of /tmp/a.txt]')] },
        { turn: 1, step: 1, callId: 'c3', name: 'rm', input: null },
        { turn: 1, step: 1, callId: 'c3', name: 'rm', content: [], isError: true },
        { turn: 1, step: 1, chunk: { type: 'text-delta', text: 'hello ' } },
        { turn: 1, step: 1, chunk: { type: 'text-delta', text: 'world' } },
      ]);
      await run.dispose();
    });

    // Plain text chunks skip the SDK's route while it has nothing to handle; once a message takes that
    // route (the chunk with a message id, the tool call), the plain ones read after it must follow it.
    it('keeps the order of updates read together, whichever route each takes', async () => {
      host.subagents.registerProvider(acpProvider(host, fixture(['--burst'])));
      const run = await start('acp');
      await expect(run.result).resolves.toEqual({ output: [text('zero one two three hello world')], stopReason: 'completed' });
      const kept = host.sessions
        .get(run.id)!
        .events.filter((e) => ['assistant/chunk', 'tool/call', 'tool/result'].includes(e.type))
        .map((e) => (e.type === 'assistant/chunk' ? (e.data as { chunk: { text: string } }).chunk.text : `${e.type} ${(e.data as { callId: string }).callId}`));
      expect(kept).toEqual(['zero ', 'one ', 'tool/call b1', 'tool/result b1', 'two ', 'three ', 'hello ', 'world']);
      await run.dispose();
    });

    // One agent process may serve several sessions: the updates of another never reach this child,
    // neither the plain text chunks that skip the SDK's route nor what takes it.
    it('drops the updates the agent sends for another session id, on either route', async () => {
      host.subagents.registerProvider(acpProvider(host, fixture(['--foreign'])));
      const run = await start('acp');
      await expect(run.result).resolves.toEqual({ output: [text('hello world')], stopReason: 'completed' });
      const events = host.sessions.get(run.id)!.events;
      expect(streamedText(events)).toBe('hello world');
      expect(JSON.stringify(events)).not.toContain('leak');
      expect(events.filter((e) => e.type === 'tool/call' || e.type === 'tool/result')).toEqual([]);
      await run.dispose();
    });

    it('rejects UNSUPPORTED_CAPABILITY before spawning anything', async () => {
      host.subagents.registerProvider(acpProvider(host, fixture([])));
      const before = childPids();
      await expect(start('acp', { persona: 'terse' })).rejects.toMatchObject({ code: 'UNSUPPORTED_CAPABILITY' });
      expect(newChildPids(before)).toEqual([]);
    });

    it.each([
      ['an empty command', { command: '' }],
      ['a zero grace', { command: 'x', disposeGraceMs: 0 }],
      ['an infinite grace', { command: 'x', disposeEofGraceMs: Infinity }],
      ['a missing cwd', { command: 'x', cwd: join(dir, 'missing') }],
      ['a negative prewarm', { command: 'x', prewarm: -1 }],
      ['an unknown option', { command: 'x', colour: 'red' }],
    ])('rejects INVALID_OPTIONS for %s', (_name, options) => {
      expect(() => acpProvider(host, options as AcpProviderOptions)).toThrow(expect.objectContaining({ code: 'INVALID_OPTIONS' }));
    });
  });
});
