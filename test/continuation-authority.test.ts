// Continuable children: who may talk to them (error codes of bad input and wrong authority),
// drains that release child-first, and setup contributions installed before publication.
import { describe, expect, it } from 'vitest';
import { createHost, inProcessProvider, memoryPersistence, text, type Agent, type SubagentError } from 'subagent-host';
import { fakeProvider } from './fake-provider.js';
import { continuationHost, continuationSuite, eventually, HANG, startChild, untilEvent, userTexts } from './continuation-helpers.js';

const { files, track, setup } = continuationSuite('subagent-continuation-auth-');

describe('authority and validation', () => {
  it('refuses follow-ups from anyone but the exact live direct parent, and bad ids and content', async () => {
    const { host, parent, recorder } = await setup();
    const { childId } = await startChild(host, parent, 'hi');
    await recorder.until(() => recorder.ends.length === 1);
    const stranger = await host.createAgent();
    const copy = { ...parent, id: parent.id, session: parent.session } as Agent;
    await expect(host.subagents.followup(stranger, childId, [text('x')])).rejects.toMatchObject({ code: 'UNAUTHORIZED' });
    await expect(host.subagents.followup(copy, childId, [text('x')])).rejects.toMatchObject({ code: 'UNAUTHORIZED' });
    await expect(host.subagents.followup(parent, 'no-such-child', [text('x')])).rejects.toMatchObject({ code: 'NOT_RESUMABLE' });
    await expect(host.subagents.followup(parent, childId, [])).rejects.toMatchObject({ code: 'INVALID_REQUEST' });
    const oneShot = await host.subagents.start('in-process', { prompt: [text('once')], parent, signal: new AbortController().signal });
    await oneShot.result;
    await oneShot.dispose();
    await expect(host.subagents.followup(parent, oneShot.id, [text('again')])).rejects.toMatchObject({ code: 'NOT_RESUMABLE' });
    const child = host.sessions.get(childId)!;
    expect(child.events.filter((e) => e.type === 'user/message')).toHaveLength(1);
  });

  it("refuses another host's caller before touching the stored log of a child that host still runs", async () => {
    const file = files.file();
    const a = track(await continuationHost(file));
    const parent = await a.createAgent();
    const { childId } = await startChild(a, parent, 'first', { model: HANG });
    await untilEvent(a.agents.get(childId)!, 'step/start');
    await a.sessions.flush(childId);
    const b = track(await continuationHost(file));
    const stranger = await b.createAgent();
    await expect(b.subagents.followup(stranger, childId, [text('not yours')])).rejects.toMatchObject({ code: 'UNAUTHORIZED' });
    await expect(b.subagents.followup(stranger, parent.id, [text('no child')])).rejects.toMatchObject({ code: 'UNAUTHORIZED' });
    // The running host's writes still land: nothing closed the child's open turn behind its back.
    await a.subagents.followup(parent, childId, [text('from its parent')]);
    await a.sessions.flush(childId);
    expect(userTexts(a.sessions.get(childId)!.events)).toEqual(['first']);
    await a.close();
    const events = (await b.persistence!.load(childId))!.events;
    expect(events.filter((e) => e.type === 'turn/end').map((e) => (e.data as { reason: { kind: string } }).reason.kind)).toEqual(['aborted']);
    expect(events.some((e) => e.type === 'inbox/accepted' && JSON.stringify(e.data).includes('from its parent'))).toBe(true);
  });

  it('rejects bad starts before any child exists', async () => {
    const { host, parent } = await setup();
    const spec = (extra: Record<string, unknown>, request: Record<string, unknown> = {}) =>
      host.subagents.startContinuable({ provider: 'in-process', label: 'c', request: { prompt: [text('p')], parent, ...request }, ...extra });
    await expect(spec({}, { maxDepth: 0 })).rejects.toMatchObject({ code: 'DEPTH_EXCEEDED' });
    for (const maxDepth of [-1, 1.5, Number.NaN]) await expect(spec({}, { maxDepth })).rejects.toMatchObject({ code: 'INVALID_REQUEST' });
    await expect(spec({ label: '' })).rejects.toMatchObject({ code: 'INVALID_REQUEST' });
    await expect(spec({}, { prompt: [] })).rejects.toMatchObject({ code: 'INVALID_REQUEST' });
    await expect(spec({ childId: parent.id })).rejects.toMatchObject({ code: 'DUPLICATE_CHILD' });
    await expect(spec({ provider: 'nope' })).rejects.toMatchObject({ code: 'NO_PROVIDER' });
    const { childId } = await spec({ childId: 'reserved' });
    expect(childId).toBe('reserved');
    await expect(spec({ childId: 'reserved' })).rejects.toMatchObject({ code: 'DUPLICATE_CHILD' });
    expect(host.agents.list().map((agent) => agent.id).sort()).toStrictEqual([parent.id, 'reserved'].sort());
  });

  it('rejects continuable starts on providers without prepareContinuable', async () => {
    const host = await createHost({ pool: { minThreads: 0 } });
    track(host);
    host.subagents.registerProvider(fakeProvider('one-shot-only'));
    const parent = await host.createAgent();
    await expect(
      host.subagents.startContinuable({ provider: 'one-shot-only', label: 'w', request: { prompt: [text('p')], parent } }),
    ).rejects.toMatchObject({
      code: 'UNSUPPORTED_CAPABILITY',
      message: 'provider one-shot-only cannot run continuable children (use in-process, spawn, fork, or acp with an agent that loads sessions)',
    });
    expect(host.agents.list()).toStrictEqual([parent]);
  });

  it('refuses a bad continuation.lingerMs when the host is created, also one too long for a timer (it would fire at once)', async () => {
    for (const lingerMs of [-1, Number.NaN, Number.POSITIVE_INFINITY, 2 ** 31]) {
      await expect(createHost({ continuation: { lingerMs }, providers: false })).rejects.toMatchObject({ code: 'INVALID_OPTIONS' });
    }
  });

  it('refuses continuation.lingerMs: null when the host is created (it was read as the 30 s default)', async () => {
    await expect(createHost({ continuation: { lingerMs: null as unknown as number }, providers: false })).rejects.toMatchObject({
      code: 'INVALID_OPTIONS',
      message: expect.stringContaining('options.continuation.lingerMs'),
    });
  });

  it('checks interrupt authority synchronously and ignores absent ids', async () => {
    const { host, parent } = await setup();
    const { childId } = await startChild(host, parent, 'work', { model: HANG });
    const child = host.agents.get(childId)!;
    await untilEvent(child, 'step/start');
    const stranger = await host.createAgent();
    expect(() => host.subagents.interrupt(childId, { kind: 'ancestor', agent: stranger })).toThrow(expect.objectContaining({ code: 'UNAUTHORIZED' }));
    expect(() => host.subagents.interrupt(childId, { kind: 'ancestor', agent: child })).toThrow(expect.objectContaining({ code: 'UNAUTHORIZED' }));
    expect(host.subagents.interrupt('absent', { kind: 'user', parentSessionId: 'anyone' })).toBeUndefined();
    // A malformed authority is refused whether or not its target is resident.
    for (const target of ['absent', childId]) {
      expect(() => host.subagents.interrupt(target, { kind: 'user', parentSessionId: 5 as unknown as string })).toThrow(expect.objectContaining({ code: 'INVALID_REQUEST' }));
      expect(() => host.subagents.interrupt(target, { kind: 'user' } as unknown as { kind: 'user'; parentSessionId: string })).toThrow(expect.objectContaining({ code: 'INVALID_REQUEST' }));
    }
    expect(child.status).toBe('running');
    host.subagents.interrupt(childId, { kind: 'ancestor', agent: parent });
    await child.whenIdle();
    expect(child.session.events.filter((e) => e.type === 'turn/end').map((e) => e.data)).toMatchObject([{ reason: { kind: 'aborted', cause: { kind: 'parent' } } }]);
  });
});

describe('a continuable child brought back as a top-level agent', () => {
  /** A child that settled and was drained (absent), then resumed by `host.agents.resume` as a top-level agent. */
  async function resumedAsTopLevel() {
    const { host, parent, recorder } = await setup();
    const { childId } = await startChild(host, parent, 'hi');
    await recorder.until(() => recorder.ends.length === 1);
    await host.subagents.drainContinuableChildren(parent, [childId]);
    await host.agents.resume({ sessionId: childId });
    return { host, parent, childId };
  }

  it('is freed by host.agents.dispose(id), as any agent resume brought back', async () => {
    const { host, childId } = await resumedAsTopLevel();
    await expect(host.agents.dispose(childId)).resolves.toBe(true);
    expect(host.agents.get(childId)).toBeUndefined();
    expect(host.sessions.get(childId)).toBeUndefined();
  });

  it('refuses its parent’s follow-ups NOT_RESUMABLE, also when the follow-up races the resume, until it is disposed', async () => {
    const { host, parent, childId } = await resumedAsTopLevel();
    await expect(host.subagents.followup(parent, childId, [text('while live')])).rejects.toMatchObject({ code: 'NOT_RESUMABLE' });
    await host.agents.dispose(childId);
    // Both bring the stored child back at once: one of them wins, the other is refused, typed.
    const [followed, resumed] = await Promise.allSettled([host.subagents.followup(parent, childId, [text('racing')]), host.agents.resume({ sessionId: childId })]);
    const outcome = [followed, resumed].map((settled) => (settled.status === 'fulfilled' ? 'won' : (settled.reason as SubagentError).code));
    expect([['NOT_RESUMABLE', 'won'], ['won', 'DUPLICATE_SESSION']]).toContainEqual(outcome);
    if (resumed.status === 'fulfilled') await host.agents.dispose(childId);
    else await host.subagents.drainContinuableChildren(parent, [childId]);
    await host.subagents.followup(parent, childId, [text('back')]);
    expect(userTexts(host.sessions.get(childId)!.events).at(-1)).toBe('back');
  });
});

describe('drains', () => {
  async function tree() {
    const { host, parent, recorder } = await setup();
    const { childId } = await startChild(host, parent, 'c', { model: HANG });
    const child = host.agents.get(childId)!;
    const { childId: grandchildId } = await startChild(host, child, 'g', { model: HANG });
    const { childId: siblingId } = await startChild(host, parent, 's', { model: HANG });
    await untilEvent(host.agents.get(grandchildId)!, 'step/start');
    return { host, parent, recorder, child, childId, grandchildId, siblingId };
  }

  it('drainContinuableChildren releases the child after its grandchild and leaves the sibling', async () => {
    const { host, parent, recorder, childId, grandchildId, siblingId } = await tree();
    const stranger = await host.createAgent();
    await expect(host.subagents.drainContinuableChildren(stranger, [childId])).rejects.toMatchObject({ code: 'UNAUTHORIZED' });
    await expect(host.subagents.drainContinuableChildren({ ...parent } as Agent, [])).rejects.toMatchObject({ code: 'UNAUTHORIZED' });
    await host.subagents.drainContinuableChildren(parent, [childId, childId]);
    expect(recorder.ends.map((end) => [end.id, end.stopReason])).toStrictEqual([
      [grandchildId, 'aborted'],
      [childId, 'aborted'],
    ]);
    expect(host.agents.get(childId)).toBeUndefined();
    expect(host.agents.get(grandchildId)).toBeUndefined();
    expect(host.agents.get(siblingId)?.status).toBe('running');
    const rows = await host.subagents.listChildren(parent.id);
    expect(rows.find((row) => row.id === childId)).toMatchObject({ activity: 'inactive' });
    // The next message cold-resumes the drained child (a new epoch, a new agent object).
    await host.subagents.followup(parent, childId, [text('again')]);
    expect(recorder.starts.filter((start) => start.id === childId)).toHaveLength(2);
    expect(host.agents.get(childId)?.session.events.filter((e) => e.type === 'subagent/descriptor')).toHaveLength(1);
  });

  it('drainContinuableDescendants closes admission below the parent and releases child-first', async () => {
    const { host, parent, recorder, child, childId, grandchildId, siblingId } = await tree();
    await host.subagents.drainContinuableDescendants([parent]);
    expect(recorder.ends.map((end) => end.id).indexOf(grandchildId)).toBeLessThan(recorder.ends.map((end) => end.id).indexOf(childId));
    expect(new Set(recorder.ends.map((end) => end.id))).toStrictEqual(new Set([childId, grandchildId, siblingId]));
    expect(host.subagents.residentChildren).toBe(0);
    await expect(startChild(host, parent, 'late')).rejects.toMatchObject({ code: 'DRAINING' });
    await expect(host.subagents.followup(parent, childId, [text('late')])).rejects.toMatchObject({ code: 'DRAINING' });
    expect(host.agents.get(child.id)).toBeUndefined();
  });

  it('host.close() releases every continuable child child-first', async () => {
    const { host, recorder, childId, grandchildId } = await tree();
    await host.close();
    const order = recorder.ends.map((end) => end.id);
    expect(order.indexOf(grandchildId)).toBeLessThan(order.indexOf(childId));
    expect(host.subagents.residentChildren).toBe(0);
  });
});

describe('drains, what they leave alone and what they wait for', () => {
  it('drainContinuableDescendants rooted at a child leaves the root’s parent free to act', async () => {
    const { host, parent } = await setup();
    const { childId } = await startChild(host, parent, 'c', { model: HANG });
    const child = host.agents.get(childId)!;
    const { childId: grandchildId } = await startChild(host, child, 'g', { model: HANG });
    const { childId: siblingId } = await startChild(host, parent, 's', { model: HANG });
    await host.subagents.drainContinuableDescendants([child]);
    expect(host.agents.get(grandchildId)).toBeUndefined();
    // Below the root admission is closed; the root's parent and its other children are not below it.
    await expect(startChild(host, child, 'late')).rejects.toMatchObject({ code: 'DRAINING' });
    await host.subagents.followup(parent, siblingId, [text('more')]);
    const { childId: newId } = await startChild(host, parent, 'new');
    expect(host.agents.get(newId)).toBeDefined();
  });

  it('drainContinuableChildren waits for a follow-up still bringing the child back, and releases what it brought', async () => {
    const { host, parent, recorder } = await setup({ continuation: { lingerMs: 0 } });
    const { childId } = await startChild(host, parent, 'c');
    await recorder.until(() => recorder.ends.some((end) => end.id === childId));
    await eventually(() => host.agents.get(childId) === undefined);
    const sent = host.subagents.followup(parent, childId, [text('again')]);
    await host.subagents.drainContinuableChildren(parent, [childId]);
    await sent;
    expect(host.agents.get(childId)).toBeUndefined();
    expect(recorder.starts.filter((start) => start.id === childId)).toHaveLength(recorder.ends.filter((end) => end.id === childId).length);
  });

  it('drainContinuableChildren reports a failed teardown once, though a follow-up kept it waiting', async () => {
    const inner = memoryPersistence();
    // A store whose reads take a while: the follow-up's cold resume is still reading when the teardown fails.
    const slow = new Proxy(inner, {
      get(target, key) {
        const value = Reflect.get(target, key) as unknown;
        if (typeof value !== 'function') return value;
        const method = (value as (...args: unknown[]) => unknown).bind(target);
        return key === 'load' ? async (...args: unknown[]) => (await new Promise((resolve) => setTimeout(resolve, 30)), method(...args)) : method;
      },
    });
    const host = track(await createHost({ persistence: slow, providers: false, pool: { minThreads: 0 }, continuation: { lingerMs: 60_000 } }));
    host.subagents.registerProvider(inProcessProvider(host));
    host.subagents.registerContinuableSetup(() => () => {
      throw new Error('setup release failed');
    });
    const parent = await host.createAgent();
    const { childId } = await startChild(host, parent, 'c');
    await eventually(() => host.agents.get(childId)?.status === 'idle');
    const sent = host.subagents.followup(parent, childId, [text('more')]);
    await expect(host.subagents.drainContinuableChildren(parent, [childId])).rejects.toMatchObject({ code: 'ACTIVATION_TEARDOWN_FAILED' });
    await sent;
  });

  it('a parent disposed and resumed since may interrupt and drain its lingering child', async () => {
    const { host } = await setup({ continuation: { lingerMs: 60_000 } });
    // The registry's own create gives a handle the test can dispose (createAgent's agents live until close).
    const registry = host.agents as unknown as { create(options: object): Promise<{ agent: Agent; dispose(): Promise<void> }> };
    const top = await registry.create({});
    const { childId } = await startChild(host, top.agent, 'c');
    await eventually(() => host.agents.get(childId)?.status === 'idle');
    await top.dispose();
    const resumed = (await host.agents.resume({ sessionId: top.agent.id })).agent;
    await host.subagents.followup(resumed, childId, [text('again')]);
    host.subagents.interrupt(childId, { kind: 'ancestor', agent: resumed });
    await host.subagents.drainContinuableChildren(resumed, [childId]);
    expect(host.agents.get(childId)).toBeUndefined();
  });

  it('an eviction timer that runs out while a child below still works waits for that child', async () => {
    // The linger leaves room to start the grandchild first, even on a loaded machine.
    const { host, parent, recorder } = await setup({ continuation: { lingerMs: 250 } });
    const { childId } = await startChild(host, parent, 'c');
    await recorder.until(() => recorder.ends.some((end) => end.id === childId));
    const child = host.agents.get(childId)!;
    // Work started under the lingering child by the host: its own epoch stays closed.
    const { childId: grandchildId } = await startChild(host, child, 'g', { model: HANG });
    await untilEvent(host.agents.get(grandchildId)!, 'step/start');
    // The eviction timer, armed when the child settled, expires before this later, longer one.
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(host.agents.get(grandchildId)?.status).toBe('running');
    expect(host.agents.get(childId)).toBe(child);
    host.subagents.interrupt(grandchildId, { kind: 'user', parentSessionId: childId });
    // Quiet again: the child lingers out after the grandchild.
    await eventually(() => host.agents.get(childId) === undefined);
    expect(recorder.ends.filter((end) => end.id === grandchildId).map((end) => end.stopReason)).toStrictEqual(['aborted']);
  });

  it('types a report from what is not an agent and follow-up options of null', async () => {
    const { host, parent } = await setup();
    const { childId } = await startChild(host, parent, 'c', { model: HANG });
    await host.subagents.drainContinuableDescendants([host.agents.get(childId)!]);
    await expect(host.subagents.reportFrom(undefined as unknown as Agent, [text('x')], { delivery: 'quiet' })).rejects.toMatchObject({ code: 'UNAUTHORIZED' });
    await expect(host.subagents.followup(parent, childId, [text('x')], null as unknown as undefined)).resolves.toEqual(expect.any(String));
  });
});

describe('registerContinuableSetup', () => {
  it('installs before publication, on fresh and resumed children, and revokes on removal once', async () => {
    const { host, parent } = await setup();
    const seen: { id: string; published: boolean }[] = [];
    let released = 0;
    const remove = host.subagents.registerContinuableSetup((child) => {
      seen.push({ id: child.id, published: host.agents.get(child.id) !== undefined });
      return () => void released++;
    });
    const { childId } = await startChild(host, parent, 'one', { model: HANG });
    expect(seen).toStrictEqual([{ id: childId, published: false }]);
    remove();
    remove();
    expect(released).toBe(1);
    await host.subagents.drainContinuableChildren(parent, [childId]);
    expect(released).toBe(1);
    const again = host.subagents.registerContinuableSetup((child) => {
      seen.push({ id: `again:${child.id}`, published: host.agents.get(child.id) !== undefined });
      return () => void released++;
    });
    await host.subagents.followup(parent, childId, [text('two')]);
    expect(seen.at(-1)).toStrictEqual({ id: `again:${childId}`, published: false });
    await host.subagents.drainContinuableChildren(parent, [childId]);
    expect(released).toBe(2);
    again();
    expect(released).toBe(2);
  });
});
