// Continuable children through the public service on a real SQLite file: first turn, FIFO
// follow-ups, interrupts that keep the inbox, reports, settlement notices, linger and cold resume.
import { describe, expect, it } from 'vitest';
import { text } from 'subagent-host';
import { recordingTool } from './helpers.js';
import { continuationSuite, HANG, eventually, startChild, turnEnds, untilEvent, userTexts } from './continuation-helpers.js';

const { setup } = continuationSuite('subagent-continuation-');


describe('startContinuable and followup', () => {
  it('runs the first turn, notifies the parent once and lists the lingering child as running', async () => {
    const { host, parent, recorder } = await setup();
    const { childId, messageId } = await startChild(host, parent, 'hello', { label: 'scout' });
    await recorder.until(() => recorder.ends.length === 1);
    await parent.whenIdle();
    const child = host.sessions.get(childId)!;
    expect(child.header).toMatchObject({ parentSession: parent.id, origin: 'subagent', delegationDepth: 1 });
    const descriptorAt = child.events.findIndex((e) => e.type === 'subagent/descriptor');
    expect(child.events[descriptorAt]!.data).toStrictEqual({ version: 2, mode: 'continuable', provider: 'in-process', label: 'scout' });
    expect(descriptorAt).toBeLessThan(child.events.findIndex((e) => e.type === 'turn/start'));
    expect(child.events.find((e) => e.type === 'user/message')!.data).toMatchObject({ id: messageId });
    expect(recorder.starts).toStrictEqual([{ runId: expect.any(String), provider: 'in-process', id: childId, local: true }]);
    expect(recorder.ends).toStrictEqual([
      { runId: recorder.starts[0]!.runId, provider: 'in-process', id: childId, local: true, stopReason: 'completed', lastAssistantMessage: [text('echo: hello')],
        usage: expect.objectContaining({ turns: 1, requests: 1 }) },
    ]);
    const notices = parent.session.events.filter((e) => e.type === 'user/message');
    expect(notices.map((e) => e.data)).toStrictEqual([
      {
        id: expect.any(String),
        content: [
          text(`Background subagent ${childId} finished and will do no further work unless you send it more.`),
          text('Its closing message:'),
          text('echo: hello'),
        ],
        source: { kind: 'subagent-settled', senderSessionId: childId, summary: `Background subagent ${childId} finished and will do no further work unless you send it more.` },
      },
    ]);
    expect(await host.subagents.listChildren(parent.id)).toStrictEqual([
      { kind: 'child', id: childId, mode: 'continuable', label: 'scout', activity: 'running', hasChildren: false, createdAt: expect.any(Number), usage: expect.objectContaining({ turns: 1, requests: 1 }) },
    ]);
    const stored = await host.persistence!.load(childId);
    expect(stored!.events.some((e) => e.type === 'inbox/accepted' && (e.data as { id: string }).id === messageId)).toBe(true);
  });

  it('tells the parent when a child declined its task or ran out of room', async () => {
    const { host, parent, recorder } = await setup();
    const refusing = await startChild(host, parent, 'do it', { model: { kind: 'scripted', steps: [{ finish: 'refusal' }] } });
    const cut = await startChild(host, parent, 'write a lot', { model: { kind: 'scripted', steps: [{ text: 'partial', finish: 'max-tokens' }] } });
    await recorder.until(() => recorder.ends.length === 2);
    await eventually(() => userTexts(parent.session.events).length === 2);
    await parent.whenIdle();
    const notices = userTexts(parent.session.events);
    expect(notices).toContain(`Background subagent ${refusing.childId} declined the task. | It left no closing message.`);
    expect(notices).toContain(`Background subagent ${cut.childId} ran out of room before finishing. | Its closing message: | partial`);
  });

  it('tells the parent why a child failed, and keeps the tool calls of its closing message out of the notice', async () => {
    const { host, parent, recorder } = await setup({ tools: [recordingTool('noop')] });
    const { childId } = await host.subagents.startContinuable({
      provider: 'in-process',
      label: 'looper',
      request: {
        prompt: [text('look')],
        parent,
        agentOptions: { maxStepsPerTurn: 1, model: { kind: 'scripted', steps: [{ text: 'checking', toolCalls: [{ name: 'noop', input: {} }] }] } },
      },
    });
    await recorder.until(() => recorder.ends.length === 1);
    await eventually(() => userTexts(parent.session.events).length === 1);
    await parent.whenIdle();
    const [notice] = parent.session.events.filter((e) => e.type === 'user/message').map((e) => (e.data as { content: { type: string }[] }).content);
    expect(notice).toStrictEqual([
      text(`Background subagent ${childId} failed before finishing.`),
      text('Diagnostic: MAX_STEPS: the turn needed more than 1 model calls (maxStepsPerTurn)'),
      text('Its closing message:'),
      text('checking'),
    ]);
  });

  it('records a given persona and tool filter verbatim, keeps the parent’s folder, and resumes with them', async () => {
    const { host, recorder } = await setup({ tools: [recordingTool('noop')] });
    const parent = await host.createAgent({ header: { cwd: '/srv/project' } });
    const { childId } = await host.subagents.startContinuable({
      provider: 'in-process',
      label: 'styled',
      request: { prompt: [text('hi')], parent, persona: 'You answer tersely.', toolFilter: { deny: ['noop'] } },
    });
    await recorder.until(() => recorder.ends.length === 1);
    const child = host.sessions.get(childId)!;
    expect(child.header.cwd).toBe('/srv/project');
    expect(child.events.find((e) => e.type === 'subagent/descriptor')!.data).toMatchObject({ persona: 'You answer tersely.', toolFilter: { deny: ['noop'] } });
    await host.subagents.drainContinuableChildren(parent, [childId]);
    await host.subagents.followup(parent, childId, [text('again')]);
    await recorder.until(() => recorder.ends.length === 2);
    const resumed = host.agents.get(childId)!;
    expect(resumed.options.persona).toBe('You answer tersely.');
    expect(resumed.tools.names()).not.toContain('noop');
  });

  it('copies its spec and a follow-up’s message when called: changes the caller makes later do not reach the child', async () => {
    const { host, parent, recorder } = await setup({ tools: [recordingTool('noop')] });
    const prompt = [text('original prompt')];
    const steps = [{ text: 'original answer' }, { text: 'second answer' }];
    const spec = {
      provider: 'in-process',
      label: 'original label',
      request: { prompt, parent, persona: 'original persona', toolFilter: { deny: ['noop'] }, agentOptions: { model: { kind: 'scripted' as const, steps } } },
    };
    const starting = host.subagents.startContinuable(spec);
    prompt[0] = text('changed prompt');
    spec.label = 'changed label';
    spec.request.persona = 'changed persona';
    spec.request.toolFilter.deny[0] = 'other';
    steps[0] = { text: 'changed answer' };
    const { childId } = await starting;
    await recorder.until(() => recorder.ends.length === 1);
    const message = [text('original follow-up')];
    const following = host.subagents.followup(parent, childId, message);
    message[0] = text('changed follow-up');
    await following;
    await recorder.until(() => recorder.ends.length === 2);
    const child = host.sessions.get(childId)!;
    expect(child.events.find((e) => e.type === 'subagent/descriptor')!.data).toMatchObject({ label: 'original label', persona: 'original persona', toolFilter: { deny: ['noop'] } });
    expect(userTexts(child.events)).toStrictEqual(['original prompt', 'original follow-up']);
    expect(recorder.ends.map((end) => end.lastAssistantMessage)).toStrictEqual([[text('original answer')], [text('second answer')]]);
  });

  it('runs three back-to-back follow-ups in FIFO order with the ids it returned', async () => {
    const { host, parent, recorder } = await setup();
    const { childId } = await startChild(host, parent, 'p', { model: HANG });
    const ids = await Promise.all(['one', 'two', 'three'].map((word) => host.subagents.followup(parent, childId, [text(word)])));
    host.subagents.interrupt(childId, { kind: 'user', parentSessionId: parent.id });
    await host.subagents.followup(parent, childId, [text('four')]);
    await recorder.until(() => recorder.ends.length === 1);
    const events = host.sessions.get(childId)!.events;
    expect(userTexts(events)).toStrictEqual(['p', 'one', 'two', 'three', 'four']);
    expect(events.filter((e) => e.type === 'user/message').slice(1, 4).map((e) => (e.data as { id: string }).id)).toStrictEqual(ids);
    expect(turnEnds(events)).toStrictEqual(['aborted', 'completed', 'completed', 'completed', 'completed']);
    expect(recorder.starts).toHaveLength(1);
  });

  it('interrupts a hanging turn, keeps the child and its queued input, and the next follow-up runs both', async () => {
    const { host, parent, recorder } = await setup();
    const { childId } = await startChild(host, parent, 'work', { model: HANG });
    const child = host.agents.get(childId)!;
    await untilEvent(child, 'step/start');
    await host.subagents.followup(parent, childId, [text('queued')]);
    expect(() => host.subagents.interrupt(childId, { kind: 'user', parentSessionId: 'someone-else' })).toThrow(expect.objectContaining({ code: 'UNAUTHORIZED' }));
    expect(host.subagents.interrupt(childId, { kind: 'user', parentSessionId: parent.id })).toBeUndefined();
    await child.whenIdle();
    expect(turnEnds(child.session.events)).toStrictEqual(['aborted']);
    expect(host.agents.get(childId)).toBe(child);
    expect(child.pendingInput).toBe(1);
    expect(recorder.ends).toHaveLength(0);
    await host.subagents.followup(parent, childId, [text('next')]);
    await recorder.until(() => recorder.ends.length === 1);
    expect(userTexts(child.session.events)).toStrictEqual(['work', 'queued', 'next']);
    expect(turnEnds(child.session.events)).toStrictEqual(['aborted', 'completed', 'completed']);
    expect(recorder.ends[0]).toMatchObject({ stopReason: 'completed', lastAssistantMessage: [text('echo: next')] });
  });

  it('starts the turn of a follow-up accepted while an interrupt converges (no wake gap)', async () => {
    const { host, parent, recorder } = await setup();
    const { childId } = await startChild(host, parent, 'work', { model: HANG });
    const child = host.agents.get(childId)!;
    await untilEvent(child, 'step/start');
    host.subagents.interrupt(childId, { kind: 'ancestor', agent: parent });
    await host.subagents.followup(parent, childId, [text('after')]);
    await recorder.until(() => recorder.ends.length === 1);
    expect(turnEnds(child.session.events)).toStrictEqual(['aborted', 'completed']);
    expect(userTexts(child.session.events)).toStrictEqual(['work', 'after']);
  });

  it('disposes a settled child at once with lingerMs 0; the next follow-up cold-resumes it', async () => {
    const { host, parent, recorder } = await setup({ continuation: { lingerMs: 0 } });
    const { childId } = await startChild(host, parent, 'first');
    await recorder.until(() => recorder.ends.length === 1);
    await eventually(() => host.sessions.get(childId) === undefined);
    expect((await host.subagents.listChildren(parent.id))[0]).toMatchObject({ activity: 'inactive', mode: 'continuable' });
    const id = await host.subagents.followup(parent, childId, [text('second')]);
    await recorder.until(() => recorder.ends.length === 2);
    await eventually(() => host.sessions.get(childId) === undefined);
    const events = (await host.persistence!.load(childId))!.events;
    expect(userTexts(events)).toStrictEqual(['first', 'second']);
    expect(events.filter((e) => e.type === 'user/message')[1]!.data).toMatchObject({ id });
    expect(events.filter((e) => e.type === 'subagent/descriptor')).toHaveLength(1);
    expect(recorder.starts.map((s) => s.runId)).toStrictEqual(recorder.ends.map((e) => e.runId));
    expect(recorder.ends.map((e) => e.lastAssistantMessage)).toStrictEqual([[text('echo: first')], [text('echo: second')]]);
  });

  it('starts no turn for input that reaches a child while it is evicted; the next follow-up’s turn takes it first', async () => {
    const { host, parent, recorder } = await setup({ continuation: { lingerMs: 0 } });
    let late = true;
    // Its setup is undone during its eviction: input given then stands for input still on its way.
    host.subagents.registerContinuableSetup((child) => () => {
      if (!late) return;
      late = false;
      child.followup([text('late')]);
    });
    const { childId } = await startChild(host, parent, 'first');
    await recorder.until(() => recorder.ends.length === 1);
    await eventually(() => host.sessions.get(childId) === undefined);
    const stored = (await host.persistence!.load(childId))!.events;
    expect(turnEnds(stored)).toStrictEqual(['completed']);
    expect(userTexts(stored)).toStrictEqual(['first']);
    await host.subagents.followup(parent, childId, [text('second')]);
    await recorder.until(() => recorder.ends.length === 2);
    await eventually(() => host.sessions.get(childId) === undefined);
    const events = (await host.persistence!.load(childId))!.events;
    expect(userTexts(events)).toStrictEqual(['first', 'late', 'second']);
    expect(turnEnds(events)).toStrictEqual(['completed', 'completed', 'completed']);
    expect(recorder.starts.map((s) => s.runId)).toStrictEqual(recorder.ends.map((e) => e.runId));
  });

  it('seeds an in-process-fork child with the parent’s completed turns', async () => {
    const { host, parent, recorder } = await setup();
    parent.followup([text('context')]);
    await parent.whenIdle();
    const { childId } = await startChild(host, parent, 'go', { provider: 'in-process-fork' });
    await recorder.until(() => recorder.ends.length === 1);
    const child = host.sessions.get(childId)!;
    expect(child.header.seedLength).toBeGreaterThan(0);
    expect(child.events.filter((e) => e.type === 'turn/start').map((e) => (e.data as { turn: number }).turn)).toStrictEqual([1, 2]);
    expect(recorder.ends[0]).toMatchObject({ stopReason: 'completed', lastAssistantMessage: [text('echo: go')] });
  });
});

describe('reportFrom', () => {
  it('wakes the parent with next-step and only informs it with quiet', async () => {
    const { host, parent, recorder } = await setup();
    const { childId } = await startChild(host, parent, 'hi');
    await recorder.until(() => recorder.ends.length === 1);
    await parent.whenIdle();
    const child = host.agents.get(childId)!;
    const turns = () => parent.session.events.filter((e) => e.type === 'turn/start').length;
    const before = turns();
    const quiet = await host.subagents.reportFrom(child, [text('fyi')], { delivery: 'quiet' });
    expect(parent.status).toBe('idle');
    expect(turns()).toBe(before);
    const accepted = parent.session.events.filter((e) => e.type === 'inbox/accepted').at(-1)!.data;
    expect(accepted).toMatchObject({ id: quiet, target: 'next-step', source: { kind: 'subagent-report', senderSessionId: childId } });
    const woke = await host.subagents.reportFrom(child, [text('look')], { delivery: 'next-step' });
    await parent.whenIdle();
    expect(turns()).toBe(before + 1);
    const logged = parent.session.events.filter((e) => e.type === 'user/message').map((e) => e.data as { id: string; content: unknown });
    expect(logged.map((m) => m.id)).toContain(woke);
    expect(logged.find((m) => m.id === woke)!.content).toStrictEqual([text(`Subagent ${childId} reported:`), text('look')]);
    await expect(host.subagents.reportFrom(parent, [text('x')], { delivery: 'quiet' })).rejects.toMatchObject({ code: 'UNAUTHORIZED' });
  });

  it('keeps a quiet report to a lingering parent through its eviction: its next turn reads it', async () => {
    const { host, parent, recorder } = await setup({ continuation: { lingerMs: 300 } });
    const { childId: middleId } = await startChild(host, parent, 'lead');
    await recorder.until(() => recorder.ends.length === 1);
    const middle = host.agents.get(middleId)!;
    const { childId: leafId } = await startChild(host, middle, 'dig');
    // The leaf's end, then the middle's notice turn about it.
    await recorder.until(() => recorder.ends.length === 3);
    const leaf = host.agents.get(leafId)!;
    await host.subagents.reportFrom(leaf, [text('found it')], { delivery: 'quiet' });
    await eventually(() => host.sessions.get(middleId) === undefined);
    await host.subagents.followup(parent, middleId, [text('what now')]);
    await recorder.until(() => recorder.ends.length === 4);
    const events = host.agents.get(middleId)?.session.events ?? (await host.persistence!.load(middleId))!.events;
    const last = events.findLastIndex((e) => e.type === 'turn/start');
    // One turn takes both, as it would have had the child stayed: the follow-up, then what was queued for the next step.
    expect(userTexts(events.slice(last))).toStrictEqual(['what now', `Subagent ${leafId} reported: | found it`]);
    expect(events.some((e) => e.type === 'inbox/discarded')).toBe(false);
  });

  it('keeps that quiet report pending through a cold resume that fails while adopting the child: the next follow-up reads it', async () => {
    const { host, parent, recorder } = await setup({ continuation: { lingerMs: 300 } });
    const { childId: middleId } = await startChild(host, parent, 'lead');
    await recorder.until(() => recorder.ends.length === 1);
    const middle = host.agents.get(middleId)!;
    const { childId: leafId } = await startChild(host, middle, 'dig');
    await recorder.until(() => recorder.ends.length === 3);
    await host.subagents.reportFrom(host.agents.get(leafId)!, [text('found it')], { delivery: 'quiet' });
    await eventually(() => host.sessions.get(middleId) === undefined);
    // The caller gives up as the resumed child is installed (its epoch opens), before the message enters it.
    const controller = new AbortController();
    const off = host.subagents.on('subagent/start', (start) => {
      if (start.id === middleId) controller.abort(new Error('gave up'));
    });
    await expect(host.subagents.followup(parent, middleId, [text('lost')], { signal: controller.signal })).rejects.toThrow('gave up');
    off();
    const ended = recorder.ends.length;
    await host.subagents.followup(parent, middleId, [text('what now')]);
    await recorder.until(() => recorder.ends.slice(ended).some((end) => end.id === middleId));
    const events = host.agents.get(middleId)?.session.events ?? (await host.persistence!.load(middleId))!.events;
    const last = events.findLastIndex((e) => e.type === 'turn/start');
    expect(userTexts(events.slice(last))).toStrictEqual(['what now', `Subagent ${leafId} reported: | found it`]);
    expect(events.some((e) => e.type === 'inbox/discarded')).toBe(false);
  });
});
