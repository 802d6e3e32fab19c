// Continuable ACP children against real `subagent-host acp --db` processes: follow-ups on the
// resident process, interrupt as session/cancel, linger-out reaping, cold resume through
// session/load (also after a host restart), and the refusals (no loadSession, a failing load).
import { afterEach, describe, expect, it, vi } from 'vitest';
import { acpProvider, createHost, text, type AcpProviderOptions, type Host, type HostOptions, type ScriptedStep } from 'subagent-host';
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { CLI, FIXTURE_AGENT, STRICT_AGENT, childPids, isAlive, newChildPids, streamedText, whenSession } from './acp-helpers.js';
import { continuationHost, eventually, turnEnds, untilEvent, userTexts, type Recorder } from './continuation-helpers.js';
import { tempFiles } from './helpers.js';

const files = tempFiles('acp-continuable-');
const GRACES = { disposeEofGraceMs: 2000, disposeGraceMs: 200 };
const open: Host[] = [];
let before: number[] = [];

afterEach(async () => {
  for (const host of open.splice(0)) await host.close();
  expect(newChildPids(before).filter(isAlive)).toStrictEqual([]);
});

function agentOptions(remoteDb: string, extra: Partial<AcpProviderOptions> = {}): AcpProviderOptions {
  return { command: process.execPath, args: [CLI, 'acp', '--db', remoteDb], cwd: files.dir, ...GRACES, ...extra };
}

async function setup(acp: AcpProviderOptions, options: HostOptions = {}, file = files.file(), restart = false) {
  if (open.length === 0) before = childPids();
  const host = await continuationHost(file, options);
  open.push(host);
  const provider = acpProvider(host, acp);
  host.subagents.registerProvider(provider);
  const parent = restart ? (await host.agents.resume({ sessionId: 'parent' })).agent : await host.createAgent({ sessionId: 'parent' });
  return { host, provider, parent, recorder: host.recorder as Recorder, file };
}

const start = (host: Host, parent: Parameters<Host['subagents']['startContinuable']>[0]['request']['parent'], prompt: string, steps?: ScriptedStep[]) =>
  host.subagents.startContinuable({
    provider: 'acp',
    label: 'remote',
    request: { prompt: [text(prompt)], parent, ...(steps ? { agentOptions: { model: { kind: 'scripted', steps } } } : {}) },
  });

const assistantTexts = (host: Host, childId: string) =>
  host.sessions
    .get(childId)!
    .events.filter((e) => e.type === 'assistant/message')
    .map((e) => (e.data as { content: { text: string }[] }).content.map((block) => block.text).join(''));

/** A resident child on a fresh remote database, started with `prompt`, its first turn ended. */
async function firstTurn(prompt = 'first', options: HostOptions = {}) {
  const remoteDb = files.file();
  const { host, parent, recorder } = await setup(agentOptions(remoteDb), options);
  const { childId } = await start(host, parent, prompt);
  await recorder.until(() => recorder.ends.length === 1);
  return { remoteDb, host, parent, recorder, childId };
}

/** Kills the one live agent process and waits until it is gone. */
async function killAgentProcess(): Promise<void> {
  const [pid] = newChildPids(before).filter(isAlive);
  process.kill(pid!, 'SIGKILL');
  await eventually(() => !isAlive(pid!));
}

/** The remote session id a child's descriptor holds. */
const remoteSessionId = (events: readonly { type: string; data?: unknown }[]) =>
  (events.find((e) => e.type === 'subagent/descriptor')!.data as { providerData: { sessionId: string } }).providerData.sessionId;

/** The user texts of a session the remote agent stored in its own database. */
async function remoteUserTexts(remoteDb: string, sessionId: string): Promise<string[]> {
  const host = await createHost({ persistence: { sqlite: remoteDb }, providers: false });
  try {
    return userTexts((await host.persistence!.load(sessionId))!.events);
  } finally {
    await host.close();
  }
}

describe('continuable ACP children', () => {
  it('runs the first turn and three follow-ups in order on one resident process, mirrored turn by turn', async () => {
    const { remoteDb, host, parent, recorder, childId } = await firstTurn('hello');
    const pids = newChildPids(before).filter(isAlive);
    expect(pids).toHaveLength(1);
    for (const word of ['one', 'two', 'three']) await host.subagents.followup(parent, childId, [text(word)]);
    // Each follow-up may open its own epoch or join a running one: wait for the fourth turn's end.
    await recorder.until(() => turnEnds(host.sessions.get(childId)!.events).length === 4 && recorder.ends.length === recorder.starts.length);
    expect(newChildPids(before).filter(isAlive)).toStrictEqual(pids);
    const events = host.sessions.get(childId)!.events;
    expect(userTexts(events)).toStrictEqual(['hello', 'one', 'two', 'three']);
    expect(turnEnds(events)).toStrictEqual(['completed', 'completed', 'completed', 'completed']);
    expect(assistantTexts(host, childId)).toStrictEqual(['echo: hello', 'echo: one', 'echo: two', 'echo: three']);
    const descriptor = events.find((e) => e.type === 'subagent/descriptor')!.data as { providerData: Record<string, unknown> };
    expect(descriptor.providerData).toStrictEqual({ sessionId: expect.any(String), command: process.execPath, args: [CLI, 'acp', '--db', remoteDb], cwd: files.dir });
    expect(recorder.ends.at(-1)).toMatchObject({ provider: 'acp', id: childId, stopReason: 'completed', lastAssistantMessage: [text('echo: three')] });
    await host.close();
    expect(await remoteUserTexts(remoteDb, descriptor.providerData['sessionId'] as string)).toStrictEqual(['hello', 'one', 'two', 'three']);
  });

  it('interrupts a running remote turn with session/cancel; the next follow-up runs on the same process', async () => {
    const remoteDb = files.file();
    const { host, parent, recorder } = await setup(agentOptions(remoteDb));
    const { childId } = await start(host, parent, 'work', [{ finish: 'hang', text: 'working' }]);
    const child = host.agents.get(childId)!;
    await untilEvent(child, 'assistant/chunk');
    host.subagents.interrupt(childId, { kind: 'user', parentSessionId: parent.id });
    await child.whenIdle();
    expect(turnEnds(child.session.events)).toStrictEqual(['aborted']);
    await host.subagents.followup(parent, childId, [text('next')]);
    await recorder.until(() => recorder.ends.length === 2);
    expect(turnEnds(child.session.events)).toStrictEqual(['aborted', 'completed']);
    expect(recorder.ends.map((end) => end.stopReason)).toStrictEqual(['aborted', 'completed']);
    expect(recorder.ends[1]).toMatchObject({ stopReason: 'completed', lastAssistantMessage: [text('echo: next')] });
    expect(newChildPids(before).filter(isAlive)).toHaveLength(1);
    // The interrupted prompt is not sent again with the next one.
    const sessionId = remoteSessionId(child.session.events);
    await host.close();
    expect(await remoteUserTexts(remoteDb, sessionId)).toStrictEqual(['work', 'next']);
  });

  it('refuses a follow-up over the 32 MiB bound on one ACP message INVALID_REQUEST before it is accepted; the process serves the next one', async () => {
    const { remoteDb, host, parent, recorder, childId } = await firstTurn();
    const pids = newChildPids(before).filter(isAlive);
    await expect(host.subagents.followup(parent, childId, [text('x'.repeat(33 * 2 ** 20))])).rejects.toMatchObject({ code: 'INVALID_REQUEST', message: expect.stringContaining('at most 33554432 bytes') });
    const child = host.agents.get(childId)!;
    expect(userTexts(child.session.events)).toStrictEqual(['first']);
    await host.subagents.followup(parent, childId, [text('third')]);
    await recorder.until(() => turnEnds(child.session.events).length === 2);
    expect(turnEnds(child.session.events)).toStrictEqual(['completed', 'completed']);
    expect(assistantTexts(host, childId).at(-1)).toBe('echo: third');
    expect(newChildPids(before).filter(isAlive)).toStrictEqual(pids);
    const sessionId = remoteSessionId(child.session.events);
    await host.close();
    expect(await remoteUserTexts(remoteDb, sessionId)).toStrictEqual(['first', 'third']);
  });

  it('refuses a start or follow-up without text INVALID_REQUEST before it is accepted: an ACP child receives text only', async () => {
    const { host, parent, childId } = await firstTurn();
    const image = { type: 'image' as const, mimeType: 'image/png', data: 'iVBORw0KGgo=' };
    const noText = { code: 'INVALID_REQUEST', message: 'the message has no text block; an ACP child receives text only' };
    await expect(host.subagents.followup(parent, childId, [image, text('')])).rejects.toMatchObject(noText);
    expect(userTexts(host.agents.get(childId)!.session.events)).toStrictEqual(['first']);
    await expect(host.subagents.startContinuable({ provider: 'acp', label: 'image', request: { prompt: [image], parent } })).rejects.toMatchObject(noText);
    expect((await host.subagents.listChildren(parent.id)).map((row) => row.id)).toStrictEqual([childId]);
  });

  it('refuses a continuable start whose model spec no session/new could carry INVALID_REQUEST before taking a process', async () => {
    const { host, parent } = await setup(agentOptions(files.file()));
    const pids = newChildPids(before).filter(isAlive);
    await expect(start(host, parent, 'go', [{ text: 'x'.repeat(33 * 2 ** 20) }])).rejects.toMatchObject({
      code: 'INVALID_REQUEST', message: expect.stringMatching(/^the agent options \(33\.0 MB as one ACP session\/new message with the model spec\) are too large for an ACP agent/),
    });
    expect(newChildPids(before).filter(isAlive)).toStrictEqual(pids);
    expect(await host.subagents.listChildren(parent.id)).toStrictEqual([]);
  });

  it('reaps the process when the child lingers out, and a follow-up cold-resumes it through session/load', async () => {
    const { remoteDb, host, parent, recorder, childId } = await firstTurn('first', { continuation: { lingerMs: 0 } });
    await eventually(() => host.sessions.get(childId) === undefined && newChildPids(before).filter(isAlive).length === 0);
    await host.subagents.followup(parent, childId, [text('second')]);
    await recorder.until(() => recorder.ends.length === 2);
    await eventually(() => host.sessions.get(childId) === undefined && newChildPids(before).filter(isAlive).length === 0);
    const events = (await host.persistence!.load(childId))!.events;
    expect(userTexts(events)).toStrictEqual(['first', 'second']);
    expect(recorder.ends.map((end) => end.lastAssistantMessage)).toStrictEqual([[text('echo: first')], [text('echo: second')]]);
    const sessionId = remoteSessionId(events);
    expect(await remoteUserTexts(remoteDb, sessionId)).toStrictEqual(['first', 'second']);
  });

  it('brings a resident child whose process died between turns back on a fresh process: the next follow-up loads the session there', async () => {
    const { remoteDb, host, parent, recorder, childId } = await firstTurn();
    await killAgentProcess();
    await host.subagents.followup(parent, childId, [text('second')]);
    await recorder.until(() => recorder.ends.length === 2);
    expect(recorder.ends.map((end) => [end.stopReason, end.lastAssistantMessage])).toStrictEqual([
      ['completed', [text('echo: first')]],
      ['completed', [text('echo: second')]],
    ]);
    expect(turnEnds(host.sessions.get(childId)!.events)).toStrictEqual(['completed', 'completed']);
    expect(newChildPids(before).filter(isAlive)).toHaveLength(1);
    const sessionId = remoteSessionId(host.sessions.get(childId)!.events);
    await host.close();
    expect(await remoteUserTexts(remoteDb, sessionId)).toStrictEqual(['first', 'second']);
  });

  it('reaps a process whose connection closed while it kept running, ignoring stdin EOF and SIGTERM, once a fresh one loaded the session', async () => {
    const once = files.file();
    const stubborn = ['--usage', `--close-stdout-on-prompt=${once}`, '--ignore-eof', '--trap-sigterm'];
    const { host, parent, recorder } = await setup({ command: process.execPath, args: [FIXTURE_AGENT, ...stubborn], cwd: files.dir, disposeEofGraceMs: 200, disposeGraceMs: 200 });
    const { childId } = await start(host, parent, 'first');
    await recorder.until(() => recorder.ends.length === 1);
    const first = newChildPids(before).filter(isAlive);
    expect(first).toHaveLength(1);
    await host.subagents.followup(parent, childId, [text('second')]);
    await recorder.until(() => recorder.ends.length === 2);
    expect(turnEnds(host.sessions.get(childId)!.events)).toStrictEqual(['error', 'completed']);
    expect(recorder.ends[1]).toMatchObject({ lastAssistantMessage: [text('hello world')] });
    // Not left to host.close(): the child stays resident on the fresh process.
    await eventually(() => !isAlive(first[0]!));
    expect(newChildPids(before).filter(isAlive)).toHaveLength(1);
  });

  it('an interrupt ends a turn whose fresh process is still loading the session at once, without waiting for that process to be reaped', async () => {
    const stubborn = ['--usage', '--hang-load', '--ignore-eof', '--trap-sigterm'];
    const { host, parent, recorder } = await setup({ command: process.execPath, args: [FIXTURE_AGENT, ...stubborn], cwd: files.dir, disposeEofGraceMs: 600_000, disposeGraceMs: 600_000 });
    const { childId } = await start(host, parent, 'first');
    await recorder.until(() => recorder.ends.length === 1);
    await killAgentProcess();
    await host.subagents.followup(parent, childId, [text('second')]);
    const child = host.agents.get(childId)!;
    let fresh = 0;
    await eventually(() => (fresh = newChildPids(before).filter(isAlive)[0] ?? 0) !== 0);
    host.subagents.interrupt(childId, { kind: 'user', parentSessionId: parent.id });
    await recorder.until(() => recorder.ends.length === 2);
    expect(turnEnds(child.session.events)).toStrictEqual(['completed', 'aborted']);
    // Still in its EOF grace; ended here so that host.close() need not wait out the graces.
    expect(isAlive(fresh)).toBe(true);
    process.kill(fresh, 'SIGKILL');
    await eventually(() => !isAlive(fresh));
  });

  it('ends the follow-up error when the fresh process cannot load the session of a child whose process died, leaving no process', async () => {
    const { remoteDb, host, parent, recorder, childId } = await firstTurn();
    await killAgentProcess();
    // The remote agent's database is gone: the session it served cannot be loaded any more.
    for (const suffix of ['', '-wal', '-shm']) rmSync(remoteDb + suffix, { force: true });
    await host.subagents.followup(parent, childId, [text('second')]);
    await recorder.until(() => recorder.ends.length === 2);
    expect(recorder.ends[1]).toMatchObject({ stopReason: 'error' });
    expect(host.sessions.get(childId)!.events.findLast((e) => e.type === 'turn/end')!.data).toMatchObject({
      reason: { kind: 'error', error: { code: 'ACP_TURN_FAILED', message: expect.stringContaining('a new one could not load the session') } },
    });
    expect(newChildPids(before).filter(isAlive)).toStrictEqual([]);
  });

  it('cold-resumes a child on the model it was started with: the served session keeps its route', async () => {
    const { host, parent, recorder } = await setup(agentOptions(files.file()), { continuation: { lingerMs: 0 } });
    const { childId } = await start(host, parent, 'first', [{ text: 'from the chosen model' }]);
    await recorder.until(() => recorder.ends.length === 1);
    await eventually(() => host.sessions.get(childId) === undefined && newChildPids(before).filter(isAlive).length === 0);
    await host.subagents.followup(parent, childId, [text('second')]);
    await recorder.until(() => recorder.ends.length === 2);
    // A new process serves the loaded session: the scripted model again (its steps replay), not the echo default.
    expect(recorder.ends.map((end) => end.lastAssistantMessage)).toStrictEqual([[text('from the chosen model')], [text('from the chosen model')]]);
  });

  it('starts and cold-resumes on prewarmed processes of the same agent', async () => {
    const remoteDb = files.file();
    const { host, provider, parent, recorder } = await setup(agentOptions(remoteDb, { prewarm: 1 }), { continuation: { lingerMs: 0 } });
    await provider.whenWarm();
    const [warm] = newChildPids(before);
    const { childId } = await start(host, parent, 'first');
    await recorder.until(() => recorder.ends.length === 1);
    // The warm process served the child and was reaped with it; the pool refilled.
    await eventually(() => host.sessions.get(childId) === undefined && !isAlive(warm!));
    await provider.whenWarm();
    await host.subagents.followup(parent, childId, [text('second')]);
    await recorder.until(() => recorder.ends.length === 2);
    expect(recorder.ends.map((end) => end.lastAssistantMessage)).toStrictEqual([[text('echo: first')], [text('echo: second')]]);
  });

  it('cold-resumes a child after a host restart on the same database', async () => {
    const remoteDb = files.file();
    const first = await setup(agentOptions(remoteDb));
    const { childId } = await start(first.host, first.parent, 'before');
    await first.recorder.until(() => first.recorder.ends.length === 1);
    await first.host.close();
    expect(newChildPids(before).filter(isAlive)).toStrictEqual([]);
    const second = await setup(agentOptions(remoteDb), {}, first.file, true);
    await second.host.subagents.followup(second.parent, childId, [text('after')]);
    await second.recorder.until(() => second.recorder.ends.length === 1);
    expect(second.recorder.ends[0]).toMatchObject({ id: childId, provider: 'acp', lastAssistantMessage: [text('echo: after')] });
    expect(userTexts(second.host.sessions.get(childId)!.events)).toStrictEqual(['before', 'after']);
    const sessionId = remoteSessionId(second.host.sessions.get(childId)!.events);
    await second.host.close();
    expect(await remoteUserTexts(remoteDb, sessionId)).toStrictEqual(['before', 'after']);
    // A host without the ACP provider cannot bring the child back, and says which provider it needs.
    const bare = await continuationHost(first.file);
    open.push(bare);
    const parent = (await bare.agents.resume({ sessionId: 'parent' })).agent;
    await expect(bare.subagents.followup(parent, childId, [text('again')])).rejects.toMatchObject({ code: 'NOT_RESUMABLE', message: expect.stringContaining('provider acp') });
  });

  it('cold-resumes on the agent the child was stored with, not on a prewarmed process of a since reconfigured agent', async () => {
    const remoteDb = files.file();
    const first = await setup(agentOptions(remoteDb));
    const { childId } = await start(first.host, first.parent, 'before');
    await first.recorder.until(() => first.recorder.ends.length === 1);
    await first.host.close();
    // The provider now runs an agent on another database: its warm process does not hold the session.
    const second = await setup(agentOptions(files.file(), { prewarm: 1 }), {}, first.file, true);
    await second.provider.whenWarm();
    const [warm] = newChildPids(before).filter(isAlive);
    await second.host.subagents.followup(second.parent, childId, [text('after')]);
    await second.recorder.until(() => second.recorder.ends.length === 1);
    expect(second.recorder.ends[0]).toMatchObject({ id: childId, lastAssistantMessage: [text('echo: after')] });
    expect(userTexts(second.host.sessions.get(childId)!.events)).toStrictEqual(['before', 'after']);
    expect(isAlive(warm!)).toBe(true);
  });

  it('refuses UNSUPPORTED_CAPABILITY for an agent without loadSession and leaves no process', async () => {
    const { host, parent } = await setup({ command: process.execPath, args: [FIXTURE_AGENT], cwd: files.dir, ...GRACES });
    await expect(start(host, parent, 'hello')).rejects.toMatchObject({ code: 'UNSUPPORTED_CAPABILITY' });
    expect(newChildPids(before).filter(isAlive)).toStrictEqual([]);
    expect(host.sessions.list().map((session) => session.header.id)).toStrictEqual(['parent']);
  });

  it('rejects START_FAILED when the agent cannot be spawned, and leaves no child session', async () => {
    const { host, parent } = await setup({ command: `${files.dir}/no-such-agent`, cwd: files.dir, ...GRACES });
    await expect(start(host, parent, 'hello')).rejects.toMatchObject({ code: 'START_FAILED' });
    expect(host.sessions.list().map((session) => session.header.id)).toStrictEqual(['parent']);
  });

  it('ends the process a start spawned when that start then fails (its reserved id was taken meanwhile), before the host closes', async () => {
    const { host, parent, recorder } = await setup(agentOptions(files.file()));
    const spec = { provider: 'acp', label: 'remote', childId: 'c', request: { prompt: [text('hello')], parent } };
    // Both pass the id check at once; the second's process is spawned once the first child exists.
    const outcomes = await Promise.allSettled([host.subagents.startContinuable(spec), host.subagents.startContinuable(spec)]);
    expect(outcomes.map((outcome) => (outcome.status === 'fulfilled' ? 'started' : (outcome.reason as { code: string }).code))).toStrictEqual(['started', 'DUPLICATE_CHILD']);
    // The failed start reaped its process before it rejected: only the started child's stays.
    expect(newChildPids(before).filter(isAlive)).toHaveLength(1);
    await recorder.until(() => recorder.ends.length === 1);
    expect(host.sessions.get('c')!.header.parentSession).toBe(parent.id);
  });

  it('refuses from what a prewarmed process answered: nothing is spawned and the warm process stays', async () => {
    const { host, provider, parent } = await setup({ command: process.execPath, args: [FIXTURE_AGENT], cwd: files.dir, prewarm: 1, ...GRACES });
    await provider.whenWarm();
    const warm = newChildPids(before).filter(isAlive);
    await expect(start(host, parent, 'hello')).rejects.toMatchObject({ code: 'UNSUPPORTED_CAPABILITY' });
    expect(warm).toHaveLength(1);
    expect(newChildPids(before).filter(isAlive)).toStrictEqual(warm);
  });

  it('notes the remote agent’s thoughts and tool calls as reasoning, and nothing else it reports', async () => {
    const { host, parent, recorder } = await setup({ command: process.execPath, args: [FIXTURE_AGENT, '--load-session', '--rich'], cwd: files.dir, ...GRACES });
    const { childId } = await start(host, parent, 'hello');
    await recorder.until(() => recorder.ends.length === 1);
    const chunks = host.sessions
      .get(childId)!
      .events.filter((e) => e.type === 'assistant/chunk')
      .map((e) => (e.data as { chunk: unknown }).chunk);
    expect(chunks).toStrictEqual([
      { type: 'reasoning-delta', text: 'pondering' },
      { type: 'reasoning-delta', text: '[remote tool call: edit]\n' },
      { type: 'reasoning-delta', text: '[remote tool call: rm]\n' },
      { type: 'text-delta', text: 'hello ' },
      { type: 'text-delta', text: 'world' },
    ]);
    const reasoning = { type: 'reasoning', text: 'pondering[remote tool call: edit]\n[remote tool call: rm]\n' };
    expect(recorder.ends[0]).toMatchObject({ stopReason: 'completed', lastAssistantMessage: [reasoning, text('hello world')] });
  });

  it.each(['max_turn_requests', 'paused_for_review'])('ends a turn the agent ended with stop reason %s error, naming that reason', async (reason) => {
    const { host, parent, recorder } = await setup({ command: process.execPath, args: [FIXTURE_AGENT, '--load-session', `--stop=${reason}`], cwd: files.dir, ...GRACES });
    const { childId } = await start(host, parent, 'hello');
    await recorder.until(() => recorder.ends.length === 1);
    expect(recorder.ends[0]).toMatchObject({ stopReason: 'error', lastAssistantMessage: [text('hello world')] });
    expect(host.sessions.get(childId)!.events.findLast((e) => e.type === 'turn/end')!.data).toStrictEqual({
      turn: 1,
      reason: { kind: 'error', error: { code: 'ACP_TURN_FAILED', message: `the ACP agent ended the turn with stop reason ${reason}` } },
    });
  });

  it('never takes a cancelled prompt’s late text for the next turn’s: that turn fails until the agent ended it', async () => {
    const log = files.file();
    const logged = () => (existsSync(log) ? readFileSync(log, 'utf8') : '');
    // The agent answers its cancelled prompt, with text first, once the test releases it; the grace is 200 ms.
    const release = files.file();
    const { host, parent, recorder } = await setup({ command: process.execPath, args: [FIXTURE_AGENT, '--load-session', '--wait', `--late=${release}`, `--log=${log}`], cwd: files.dir, ...GRACES });
    const { childId } = await start(host, parent, 'first');
    const child = host.agents.get(childId)!;
    await whenSession(child.session, (events) => streamedText(events) === 'hello ');
    host.subagents.interrupt(childId, { kind: 'user', parentSessionId: parent.id });
    await host.subagents.followup(parent, childId, [text('second')]);
    await recorder.until(() => turnEnds(child.session.events).length === 2);
    const second = child.session.events.findLast((e) => e.type === 'turn/end')!.data;
    expect(second).toMatchObject({ reason: { kind: 'error', error: { code: 'ACP_TURN_FAILED', message: expect.stringContaining('cancelled prompt') } } });
    writeFileSync(release, '');
    await eventually(() => logged().includes('answered'));
    // Once it ended its cancelled prompt, the next turn runs; no late text anywhere.
    await host.subagents.followup(parent, childId, [text('third')]);
    await whenSession(child.session, (events) => turnEnds(events).length === 2 && events.at(-1)?.type === 'assistant/chunk');
    expect(streamedText(child.session.events)).toBe('hello hello ');
    expect(logged().match(/^prompt .*(?= \d+$)/gm)).toStrictEqual(['prompt first', 'prompt second|third']);
    host.subagents.interrupt(childId, { kind: 'user', parentSessionId: parent.id });
    await recorder.until(() => turnEnds(child.session.events).length === 3);
  });

  it('an interrupt ends a follow-up waiting for the cancelled prompt at once; its text goes with the next prompt', async () => {
    const log = files.file();
    const logged = () => (existsSync(log) ? readFileSync(log, 'utf8') : '');
    // The first prompt's answer comes once the test releases it: the interrupted first turn waits
    // for it the grace long, and the second turn waits for it too. The test interrupts that wait in
    // the same turn of the event loop as the second turn starts, before its grace's timer could fire.
    const release = files.file();
    const { host, parent, recorder } = await setup({ command: process.execPath, args: [FIXTURE_AGENT, '--load-session', '--wait', `--late=${release}`, `--log=${log}`], cwd: files.dir, ...GRACES });
    const { childId } = await start(host, parent, 'first');
    const child = host.agents.get(childId)!;
    await whenSession(child.session, (events) => streamedText(events) === 'hello ');
    host.subagents.interrupt(childId, { kind: 'user', parentSessionId: parent.id });
    await host.subagents.followup(parent, childId, [text('second')]);
    await whenSession(child.session, (events) => events.filter((e) => e.type === 'turn/start').length === 2);
    host.subagents.interrupt(childId, { kind: 'user', parentSessionId: parent.id });
    await recorder.until(() => turnEnds(child.session.events).length === 2);
    // It ended before the first prompt's answer, without prompting.
    expect(turnEnds(child.session.events)).toStrictEqual(['aborted', 'aborted']);
    expect(logged()).not.toContain('answered');
    writeFileSync(release, '');
    await eventually(() => logged().includes('answered'));
    await host.subagents.followup(parent, childId, [text('third')]);
    await eventually(() => (logged().match(/^prompt /gm) ?? []).length === 2);
    expect(logged().match(/^prompt .*(?= \d+$)/gm)).toStrictEqual(['prompt first', 'prompt second|third']);
    host.subagents.interrupt(childId, { kind: 'user', parentSessionId: parent.id });
    await recorder.until(() => turnEnds(child.session.events).length === 3);
  });

  it('answers lines that are not JSON-RPC and silently ignores an error for id null the agent writes while no request waits: the next follow-up runs on the same process', async () => {
    const noise = files.file();
    const log = files.file();
    const logged = () => (existsSync(log) ? readFileSync(log, 'utf8') : '');
    const { host, parent, recorder } = await setup({ command: process.execPath, args: [STRICT_AGENT, `--junk-on=${noise}`, `--log=${log}`], cwd: files.dir, ...GRACES });
    const { childId } = await start(host, parent, 'first');
    await recorder.until(() => recorder.ends.length === 1);
    const pids = newChildPids(before).filter(isAlive);
    // The host stays silent: nothing of it reaches stderr (its logger is the only voice it has).
    const printed: unknown[][] = [];
    const spy = vi.spyOn(console, 'error').mockImplementation((...args: unknown[]) => void printed.push(args));
    try {
      writeFileSync(noise, '');
      // Three of its four lines are answered -32700: once the third answer is back, all four were read while idle.
      await eventually(() => logged() === 'answered -32700\n'.repeat(3));
    } finally {
      spy.mockRestore();
    }
    expect(printed).toStrictEqual([]);
    await host.subagents.followup(parent, childId, [text('second')]);
    await recorder.until(() => recorder.ends.length === 2);
    expect(turnEnds(host.sessions.get(childId)!.events)).toStrictEqual(['completed', 'completed']);
    expect(assistantTexts(host, childId)).toStrictEqual(['first', 'second']);
    expect(newChildPids(before).filter(isAlive)).toStrictEqual(pids);
  });

  it('answers a permission request that comes after session/cancel `cancelled`, whatever the policy', async () => {
    const log = files.file();
    const logged = () => (existsSync(log) ? readFileSync(log, 'utf8') : '');
    const { host, parent, recorder } = await setup({ command: process.execPath, args: [FIXTURE_AGENT, '--load-session', '--wait', '--ask-after-cancel', `--log=${log}`], cwd: files.dir, permission: 'allow', ...GRACES });
    const { childId } = await start(host, parent, 'first');
    const child = host.agents.get(childId)!;
    await whenSession(child.session, (events) => streamedText(events) === 'hello ');
    host.subagents.interrupt(childId, { kind: 'user', parentSessionId: parent.id });
    await recorder.until(() => turnEnds(child.session.events).length === 1);
    await eventually(() => logged().includes('permission'));
    expect(logged()).toContain('permission cancelled');
  });

  it('rejects the follow-up NOT_RESUMABLE, with the agent’s error as cause, when session/load fails', async () => {
    const warnings: string[] = [];
    const { host, parent, recorder } = await setup(
      { command: process.execPath, args: [FIXTURE_AGENT, '--load-session'], cwd: files.dir, ...GRACES },
      { continuation: { lingerMs: 0 }, logger: { warn: (message) => warnings.push(message) } },
    );
    const { childId } = await start(host, parent, 'hello');
    await recorder.until(() => recorder.ends.length === 1);
    expect(recorder.ends[0]).toMatchObject({ stopReason: 'completed', lastAssistantMessage: [text('hello world')] });
    await eventually(() => host.sessions.get(childId) === undefined && newChildPids(before).filter(isAlive).length === 0);
    const failure = await host.subagents.followup(parent, childId, [text('again')]).catch((error: unknown) => error);
    expect(failure).toMatchObject({ code: 'NOT_RESUMABLE', message: expect.stringContaining('session/load'), cause: { code: -32002 } });
    expect(warnings).toStrictEqual([expect.stringContaining(`continuable child ${childId} could not be resumed`)]);
    expect(newChildPids(before).filter(isAlive)).toStrictEqual([]);
  });

  it('host.close() ends a cold resume whose session/load never answers: the follow-up rejects CLOSED, no process stays', async () => {
    const { host, parent, recorder } = await setup(
      { command: process.execPath, args: [FIXTURE_AGENT, '--load-session', '--hang-load'], cwd: files.dir, ...GRACES },
      { continuation: { lingerMs: 0 } },
    );
    const { childId } = await start(host, parent, 'hello');
    await recorder.until(() => recorder.ends.length === 1);
    await eventually(() => host.sessions.get(childId) === undefined && newChildPids(before).filter(isAlive).length === 0);
    const resuming = newChildPids(before);
    const followup = host.subagents.followup(parent, childId, [text('again')]);
    // The resume's agent process is up (it waits on session/load) before the host closes.
    await eventually(() => newChildPids(before).filter((pid) => !resuming.includes(pid) && isAlive(pid)).length > 0);
    await host.close();
    await expect(followup).rejects.toMatchObject({ code: 'CLOSED' });
    expect(newChildPids(before).filter(isAlive)).toStrictEqual([]);
  });
});
