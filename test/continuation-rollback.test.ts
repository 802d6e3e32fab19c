// Cold resumes of a continuable child that fail (the provider refuses, the caller gives up, a setup
// contribution fails or is revoked, the host closes): input the child had queued stays pending in
// its log, what the provider brought is released, and the next follow-up brings the child back.
import { describe, expect, it } from 'vitest';
import { inProcessProvider, text, type Agent, type ContinuableCreateSpec, type Host } from 'subagent-host';
import { continuationHost, continuationSuite, eventually, startChild, userTexts, type Recorder } from './continuation-helpers.js';

const suite = continuationSuite('subagent-continuation-rollback-');
const { setup } = suite;

type RecordingHost = Host & { recorder: Recorder };

/** A middle child (of `provider`) evicted with a quiet report from its own child pending in its log. */
async function evictedWithQuietReport(host: RecordingHost, parent: Agent, provider = 'in-process') {
  const { childId: middleId } = await startChild(host, parent, 'lead', { provider });
  await host.recorder.until(() => host.recorder.ends.length === 1);
  const { childId: leafId } = await startChild(host, host.agents.get(middleId)!, 'dig');
  await host.recorder.until(() => host.recorder.ends.length === 3);
  await host.subagents.reportFrom(host.agents.get(leafId)!, [text('found it')], { delivery: 'quiet' });
  await eventually(() => host.sessions.get(middleId) === undefined);
  return { middleId, leafId };
}

/** The next follow-up's turn takes it and the report that was queued; nothing was ever discarded. */
async function expectReportRead(host: RecordingHost, parent: Agent, middleId: string, leafId: string) {
  const ended = host.recorder.ends.length;
  await host.subagents.followup(parent, middleId, [text('what now')]);
  await host.recorder.until(() => host.recorder.ends.slice(ended).some((end) => end.id === middleId));
  const events = host.agents.get(middleId)?.session.events ?? (await host.persistence!.load(middleId))!.events;
  const last = events.findLastIndex((e) => e.type === 'turn/start');
  expect(userTexts(events.slice(last))).toStrictEqual(['what now', `Subagent ${leafId} reported: | found it`]);
  expect(events.some((e) => e.type === 'inbox/discarded')).toBe(false);
}

/** The in-process provider as a remote one: its children come back through `resumeContinuable`, which the test steers. */
function remoteProvider(host: Host) {
  const local = inProcessProvider(host);
  const state = { mode: 'ok' as 'ok' | 'reject' | 'reject-once' | 'hang', resuming: 0, released: 0 };
  host.subagents.registerProvider({
    ...local,
    name: 'remote',
    prepareContinuable: async (request) => ({ ...(await local.prepareContinuable!(request)), providerData: { remote: true } }),
    resumeContinuable: ({ signal }): Promise<ContinuableCreateSpec> => {
      state.resuming++;
      if (state.mode === 'reject-once') state.mode = 'ok';
      else if (state.mode === 'hang') return new Promise((_, reject) => signal.addEventListener('abort', () => reject(signal.reason as Error), { once: true }));
      else if (state.mode === 'ok') return Promise.resolve({ release: async () => void state.released++ });
      return Promise.reject(new Error('remote side refused'));
    },
  });
  return state;
}

describe('a cold resume that fails', () => {
  it('keeps a quiet report pending when a setup contribution is revoked while the resumed child is set up', async () => {
    const { host, parent } = await setup({ continuation: { lingerMs: 300 } });
    const { middleId, leafId } = await evictedWithQuietReport(host, parent);
    let released = 0;
    const remove = host.subagents.registerContinuableSetup((child) => {
      if (child.id === middleId) remove();
      return () => void released++;
    });
    await expect(host.subagents.followup(parent, middleId, [text('lost')])).rejects.toMatchObject({ code: 'ACTIVATION_SETUP_REVOKED' });
    expect(released).toBe(1);
    expect(host.agents.get(middleId)).toBeUndefined();
    expect(host.sessions.get(middleId)).toBeUndefined();
    expect((await host.persistence!.load(middleId))!.events.some((e) => e.type === 'inbox/discarded')).toBe(false);
    await expectReportRead(host, parent, middleId, leafId);
  });

  it('keeps the report pending when the provider refuses or a setup contribution fails, releasing what the provider brought', async () => {
    const { host, parent } = await setup({ continuation: { lingerMs: 300 } });
    const remote = remoteProvider(host);
    const { middleId, leafId } = await evictedWithQuietReport(host, parent, 'remote');
    remote.mode = 'reject';
    await expect(host.subagents.followup(parent, middleId, [text('lost')])).rejects.toMatchObject({ code: 'NOT_RESUMABLE' });
    remote.mode = 'ok';
    const broken = host.subagents.registerContinuableSetup(() => {
      throw new Error('setup broke');
    });
    await expect(host.subagents.followup(parent, middleId, [text('lost')])).rejects.toThrow('setup broke');
    broken();
    expect(remote.released).toBe(1);
    expect(host.agents.get(middleId)).toBeUndefined();
    await expectReportRead(host, parent, middleId, leafId);
  });

  it("rejects with the caller's own abort reason, not NOT_RESUMABLE, when the caller gives up while the provider brings the child back", async () => {
    const { host, parent } = await setup({ continuation: { lingerMs: 300 } });
    const remote = remoteProvider(host);
    const { middleId, leafId } = await evictedWithQuietReport(host, parent, 'remote');
    remote.mode = 'hang';
    const controller = new AbortController();
    const aborted = host.subagents.followup(parent, middleId, [text('lost')], { signal: controller.signal });
    await eventually(() => remote.resuming === 1);
    const reason = new Error('gave up');
    controller.abort(reason);
    await expect(aborted).rejects.toBe(reason);
    remote.mode = 'ok';
    await expectReportRead(host, parent, middleId, leafId);
  });

  it('lets a second follow-up queued behind a failed one bring the child back, with the report', async () => {
    const { host, parent } = await setup({ continuation: { lingerMs: 300 } });
    const remote = remoteProvider(host);
    const { middleId, leafId } = await evictedWithQuietReport(host, parent, 'remote');
    remote.mode = 'reject-once';
    const first = expect(host.subagents.followup(parent, middleId, [text('lost')])).rejects.toMatchObject({ code: 'NOT_RESUMABLE' });
    await expectReportRead(host, parent, middleId, leafId);
    await first;
    expect(remote.resuming).toBe(2);
  });

  it('keeps the report pending through a host that closes while the provider brings the child back', async () => {
    const file = suite.files.file();
    const host = suite.track(await continuationHost(file, { continuation: { lingerMs: 300 } }));
    const parent = await host.createAgent();
    const remote = remoteProvider(host);
    const { middleId, leafId } = await evictedWithQuietReport(host, parent, 'remote');
    remote.mode = 'hang';
    const follow = host.subagents.followup(parent, middleId, [text('lost')]);
    await eventually(() => remote.resuming === 1);
    await host.close();
    await expect(follow).rejects.toMatchObject({ code: 'CLOSED' });
    const again = suite.track(await continuationHost(file, { continuation: { lingerMs: 300 } }));
    remoteProvider(again);
    const back = (await again.agents.resume({ sessionId: parent.id })).agent;
    await expectReportRead(again, back, middleId, leafId);
  });
});
