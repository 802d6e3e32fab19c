// Continuable children whose parent leaves: disposing a one-shot local child releases the continuable
// children it started first (child-first) and resolves; a resident child whose durable parent is no
// longer live cannot report to it (PARENT_UNAVAILABLE); a disposed top-level parent leaves its children
// resident unless its descendants were drained first.
import { describe, expect, it } from 'vitest';
import { text, type ModelSpec } from 'subagent-host';
import { continuationHost, continuationSuite, HANG, startChild, turnEnds, untilEvent } from './continuation-helpers.js';

const { files, track, setup } = continuationSuite('subagent-continuation-parent-gone-');
const QUICK: ModelSpec = { kind: 'scripted', steps: [{ text: 'done' }] };

describe('disposing a one-shot in-process child that started continuable children', () => {
  it.each([
    ['running', HANG],
    ['settled', QUICK],
  ] as const)('releases its %s continuable grandchild before the child, and resolves', async (state, model) => {
    const { host, parent, recorder } = await setup();
    const run = await host.subagents.start('in-process', { prompt: [text('go')], parent, signal: new AbortController().signal, agentOptions: { model: QUICK } });
    await run.result;
    const child = run.localAgent!;
    const { childId: grandchildId } = await startChild(host, child, 'below', { model });
    const grandchild = host.agents.get(grandchildId)!;
    if (state === 'running') await untilEvent(grandchild, 'step/start');
    else await recorder.until(() => recorder.ends.some((end) => end.id === grandchildId));
    // Child-first: a running grandchild's epoch ends (aborted) while the child is still live.
    let childLiveAtEnd: boolean | undefined;
    const off = host.subagents.on('subagent/end', (end) => {
      if (end.id === grandchildId) childLiveAtEnd = host.agents.get(child.id) === child;
    });
    await run.dispose();
    off();
    expect(childLiveAtEnd).toBe(state === 'running' ? true : undefined);
    expect(host.agents.get(grandchildId)).toBeUndefined();
    expect(host.agents.get(child.id)).toBeUndefined();
    expect(turnEnds(host.sessions.get(grandchildId)?.events ?? grandchild.session.events)).toStrictEqual([state === 'running' ? 'aborted' : 'completed']);
    // Released, it is no resident child any more: it cannot report.
    await expect(host.subagents.reportFrom(grandchild, [text('late')], { delivery: 'quiet' })).rejects.toMatchObject({ code: 'UNAUTHORIZED' });
  });

  it('rejects with the grandchild’s teardown failure, after disposing the child anyway', async () => {
    const { host, parent } = await setup();
    const run = await host.subagents.start('in-process', { prompt: [text('go')], parent, signal: new AbortController().signal, agentOptions: { model: QUICK } });
    await run.result;
    const child = run.localAgent!;
    host.subagents.registerContinuableSetup((installed) => () => {
      throw new Error(`disposer of ${installed.id} failed`);
    });
    const { childId: grandchildId } = await startChild(host, child, 'below', { model: HANG });
    await expect(run.dispose()).rejects.toMatchObject({ code: 'ACTIVATION_TEARDOWN_FAILED', message: expect.stringContaining(`disposer of ${grandchildId} failed`) });
    expect(host.agents.get(grandchildId)).toBeUndefined();
    expect(host.agents.get(child.id)).toBeUndefined();
    // Memoized: a second call reports the same failure.
    await expect(run.dispose()).rejects.toMatchObject({ code: 'ACTIVATION_TEARDOWN_FAILED' });
  });
});

describe('a continuable child settling after its one-shot parent’s result', () => {
  it('gives the settled parent its notice as context only: no second turn, which no one would read or budget', async () => {
    const { host, parent, recorder } = await setup();
    const run = await host.subagents.start('in-process', { prompt: [text('go')], parent, signal: new AbortController().signal, agentOptions: { model: QUICK } });
    await run.result;
    const child = run.localAgent!;
    const { childId: grandchildId } = await startChild(host, child, 'below', { model: QUICK });
    await recorder.until(() => recorder.ends.some((end) => end.id === grandchildId));
    await child.whenIdle();
    expect(child.session.events.filter((event) => event.type === 'turn/start')).toHaveLength(1);
    expect(child.session.events.filter((event) => event.type === 'inbox/accepted' && JSON.stringify(event.data).includes(grandchildId))).toHaveLength(1);
    await run.dispose();
  });

  it('gives the settled parent a next-step report as context only too', async () => {
    const { host, parent } = await setup();
    const run = await host.subagents.start('in-process', { prompt: [text('go')], parent, signal: new AbortController().signal, agentOptions: { model: QUICK } });
    await run.result;
    const child = run.localAgent!;
    const { childId: grandchildId } = await startChild(host, child, 'below', { model: HANG });
    const grandchild = host.agents.get(grandchildId)!;
    await untilEvent(grandchild, 'step/start');
    await host.subagents.reportFrom(grandchild, [text('news')], { delivery: 'next-step' });
    await child.whenIdle();
    expect(child.session.events.filter((event) => event.type === 'turn/start')).toHaveLength(1);
    expect(child.session.events.filter((event) => event.type === 'inbox/accepted' && JSON.stringify(event.data).includes('news'))).toHaveLength(1);
    await run.dispose();
  });
});

describe('reportFrom', () => {
  it('rejects PARENT_UNAVAILABLE when the child’s durable parent is no longer live, and delivers nothing', async () => {
    const file = files.file();
    const first = await continuationHost(file);
    const stored = await first.createAgent();
    await first.close();
    const host = track(await continuationHost(file));
    // The parent comes back live for a while: its owner holds the handle and disposes it.
    const handle = await host.agents.resume({ sessionId: stored.id });
    const { childId } = await startChild(host, handle.agent, 'work', { model: HANG });
    const child = host.agents.get(childId)!;
    await untilEvent(child, 'step/start');
    await handle.dispose();
    expect(host.agents.get(stored.id)).toBeUndefined();
    expect(child.session.header.parentSession).toBe(stored.id);
    await expect(host.subagents.reportFrom(child, [text('news')], { delivery: 'next-step' })).rejects.toMatchObject({ code: 'PARENT_UNAVAILABLE', message: expect.stringContaining(stored.id) });
    await expect(host.subagents.reportFrom(child, [text('news')], { delivery: 'quiet' })).rejects.toMatchObject({ code: 'PARENT_UNAVAILABLE' });
    expect(host.agents.get(childId)).toBe(child);
  });
});

describe('disposing a resumed top-level parent', () => {
  it('leaves its resident continuable child; draining the parent’s descendants first releases it', async () => {
    const file = files.file();
    const first = await continuationHost(file);
    const [leftId, drainedId] = [(await first.createAgent()).id, (await first.createAgent()).id];
    await first.close();
    const host = track(await continuationHost(file));

    const left = await host.agents.resume({ sessionId: leftId });
    const { childId: leftChild } = await startChild(host, left.agent, 'left', { model: HANG });
    await untilEvent(host.agents.get(leftChild)!, 'step/start');
    await left.dispose();
    expect(host.agents.get(leftChild)?.session.header.parentSession).toBe(leftId);

    const drained = await host.agents.resume({ sessionId: drainedId });
    const { childId: drainedChild } = await startChild(host, drained.agent, 'drained', { model: HANG });
    const child = host.agents.get(drainedChild)!;
    await untilEvent(child, 'step/start');
    await host.subagents.drainContinuableDescendants([drained.agent]);
    await drained.dispose();
    expect(host.agents.get(drainedChild)).toBeUndefined();
    expect(turnEnds(child.session.events)).toStrictEqual(['aborted']);
  });

  it('releases the child it left when the resumed parent drains its descendants later, and stops its turn', async () => {
    const file = files.file();
    const first = await continuationHost(file);
    const parentId = (await first.createAgent()).id;
    await first.close();
    const host = track(await continuationHost(file));
    const before = await host.agents.resume({ sessionId: parentId });
    const { childId } = await startChild(host, before.agent, 'work', { model: HANG });
    const child = host.agents.get(childId)!;
    await untilEvent(child, 'step/start');
    await before.dispose();
    const parent = (await host.agents.resume({ sessionId: parentId })).agent;
    await host.subagents.drainContinuableDescendants([parent]);
    expect(host.agents.get(childId)).toBeUndefined();
    expect(turnEnds(child.session.events)).toStrictEqual(['aborted']);
    expect(await host.subagents.listChildren(parentId)).toMatchObject([{ id: childId, activity: 'inactive' }]);
  });
});
