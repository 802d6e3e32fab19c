// Storage failures reach the caller they concern, typed: a lock held past busyTimeoutMs is
// PERSISTENCE_UNAVAILABLE, a continuable start that could not be made durable leaves no child, and
// one session's failed write is reported by that session's own flush, not by another's.
import Database from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import { createHost, text, type Host } from 'subagent-host';
import { continuationHost, type Recorder } from './continuation-helpers.js';
import { tempFiles } from './helpers.js';

const files = tempFiles('storage-failures-');
const hosts: Host[] = [];
afterEach(async () => {
  await Promise.all(hosts.splice(0).map((host) => host.close().catch(() => undefined)));
});

const HANG = { kind: 'scripted' as const, steps: [{ finish: 'hang' as const }] };

/** Another connection holding the write lock of `file` until `release()`. */
function lockWriters(file: string): { release(): void } {
  const other = new Database(file);
  other.exec('BEGIN IMMEDIATE');
  return {
    release() {
      other.exec('COMMIT');
      other.close();
    },
  };
}

describe('storage failures', () => {
  it('rejects PERSISTENCE_UNAVAILABLE while another connection holds the lock, and works once it is released', async () => {
    const file = files.file();
    const host = await continuationHost(file, { persistence: { sqlite: file, busyTimeoutMs: 50 } });
    hosts.push(host);
    const parent = await host.createAgent({ sessionId: 'parent' });
    await host.subagents.startContinuable({ provider: 'in-process', label: 'c', childId: 'c', request: { prompt: [text('start')], parent, agentOptions: { model: HANG } } });
    const lock = lockWriters(file);
    const unavailable = { name: 'SubagentError', code: 'PERSISTENCE_UNAVAILABLE' };
    await expect(host.subagents.followup(parent, 'c', [text('m1')])).rejects.toMatchObject(unavailable);
    await expect(host.subagents.listChildren('parent')).rejects.toMatchObject(unavailable);
    await expect(host.persistence!.flush()).rejects.toMatchObject(unavailable);
    lock.release();
    await host.subagents.followup(parent, 'c', [text('m2')]);
    expect((await host.subagents.listChildren('parent')).map((entry) => entry.id)).toStrictEqual(['c']);
  });

  it('a continuable start that could not be made durable rejects, and its running child is ended, not listed or stored', async () => {
    const file = files.file();
    const host = await continuationHost(file, { persistence: { sqlite: file, busyTimeoutMs: 50 } });
    hosts.push(host);
    const parent = await host.createAgent({ sessionId: 'parent' });
    await host.persistence!.flush();
    const lock = lockWriters(file);
    const starting = host.subagents.startContinuable({ provider: 'in-process', label: 'x', childId: 'x', request: { prompt: [text('work')], parent, agentOptions: { model: HANG } } });
    await expect(starting).rejects.toMatchObject({ code: 'PERSISTENCE_UNAVAILABLE' });
    lock.release();
    const recorder = host.recorder as Recorder;
    // Its turn was under way: the rollback ends it.
    expect(recorder.ends.map((end) => [end.id, end.stopReason])).toStrictEqual([['x', 'aborted']]);
    expect(host.agents.get('x')).toBeUndefined();
    expect(host.sessions.get('x')).toBeUndefined();
    await host.persistence!.flush();
    expect(await host.subagents.listChildren('parent')).toStrictEqual([]);
    await expect(host.subagents.followup(parent, 'x', [text('more')])).rejects.toMatchObject({ code: 'NOT_RESUMABLE' });
  });

  it('reports a session’s failed write to that session’s follow-up only', async () => {
    const file = files.file();
    const host = await continuationHost(file);
    hosts.push(host);
    const parent = await host.createAgent({ sessionId: 'parent' });
    for (const childId of ['victim', 'bystander']) {
      await host.subagents.startContinuable({ provider: 'in-process', label: childId, childId, request: { prompt: [text('start')], parent, agentOptions: { model: HANG } } });
    }
    // A second writer touches `victim` (loading repairs its open turn): this host's next append to it is stale.
    const other = await createHost({ persistence: { sqlite: file }, providers: false, pool: { minThreads: 0 } });
    await other.persistence!.load('victim');
    await other.close();
    for (const order of [['bystander', 'victim'], ['victim', 'bystander']]) {
      const outcomes = await Promise.allSettled(order.map((id) => host.subagents.followup(parent, id, [text(`to ${id}`)])));
      const byId = Object.fromEntries(order.map((id, index) => [id, outcomes[index]!.status]));
      expect(byId).toStrictEqual({ bystander: 'fulfilled', victim: 'rejected' });
    }
  });
});
