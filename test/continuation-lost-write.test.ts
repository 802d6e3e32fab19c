// A follow-up whose message the store lost (its append was refused, not delayed): the follow-up
// rejects typed, the child's turn on it does not stay in the child's memory, and the next follow-up
// brings the child back from its stored log and runs, on an in-process child and on a resident
// worker child alike.
import { describe, expect, it } from 'vitest';
import { spawnProvider, sqlitePersistence, text, type ModelSpec, type SessionPersistence } from 'subagent-host';
import { continuationHost, continuationSuite, turnEnds, userTexts } from './continuation-helpers.js';
import { storeOver } from './helpers.js';

const suite = continuationSuite('subagent-continuation-lost-write-');

/** Answers with every message it was given, so a test sees what the child remembers. */
const HISTORY: ModelSpec = { kind: 'module', specifier: new URL('./fixtures/echo-model.mjs', import.meta.url).href, export: 'createHistoryEchoModel' };

/** The SQLite store at `file`, whose appends to the sessions in `failing` are refused (nothing of them is stored). */
function failingStore(file: string): { store: SessionPersistence; failing: Set<string> } {
  const inner = sqlitePersistence(file);
  const failing = new Set<string>();
  const store = storeOver(inner, {
    append: (id, events) => (failing.has(id) ? Promise.reject(new Error('disk full')) : inner.append(id, events)),
  });
  return { store, failing };
}

/** A continuation host (with `spawn`) over {@link failingStore}, and a parent. */
async function failingHost() {
  const { store, failing } = failingStore(suite.files.file());
  // Closed after the host (a caller's store is the caller's to close).
  suite.track(store);
  const host = suite.track(await continuationHost('', { persistence: store, pool: { minThreads: 0, maxThreads: 2 } }));
  host.subagents.registerProvider(spawnProvider(host));
  return { failing, host, recorder: host.recorder, parent: await host.createAgent() };
}

describe('a follow-up whose message the store refused to write', () => {
  it.each(['in-process', 'spawn'])('rejects PERSISTENCE_UNAVAILABLE, and the next follow-up runs on what the store holds (%s)', async (provider) => {
    const { failing, host, recorder, parent } = await failingHost();
    const { childId } = await host.subagents.startContinuable({ provider, label: 'c', request: { prompt: [text('first')], parent, agentOptions: { model: HISTORY } } });
    await recorder.until(() => recorder.ends.length === 1);
    // Its first turn is stored whole before the store starts refusing.
    await host.sessions.flush(childId);
    failing.add(childId);
    const refused = { name: 'SubagentError', code: 'PERSISTENCE_UNAVAILABLE', message: expect.stringContaining('disk full') };
    await expect(host.subagents.followup(parent, childId, [text('lost')])).rejects.toMatchObject(refused);
    // While the store still refuses, each follow-up says why (never that the log is out of sequence).
    await expect(host.subagents.followup(parent, childId, [text('lost again')])).rejects.toMatchObject(refused);
    failing.delete(childId);
    // Each follow-up's epoch ended with the child's residency, before the follow-up rejected.
    expect(recorder.ends).toHaveLength(recorder.starts.length);

    const ended = recorder.ends.length;
    await host.subagents.followup(parent, childId, [text('next')]);
    await recorder.until(() => recorder.ends.length === ended + 1);
    expect(recorder.ends[ended]).toMatchObject({ id: childId, provider, stopReason: 'completed', lastAssistantMessage: [text('user: first | assistant: user: first | user: next')] });
    // What the child remembers is what the store holds: the refused message is in neither.
    const live = host.sessions.get(childId)!.events;
    expect(userTexts(live)).toStrictEqual(['first', 'next']);
    expect(turnEnds(live)).toStrictEqual(['completed', 'completed']);
    await host.sessions.flush(childId);
    expect((await host.persistence!.load(childId))!.events).toStrictEqual(live);
  });
});

describe('a continuable start whose prompt the store refused to write', () => {
  it.each(['in-process', 'spawn'])('rejects PERSISTENCE_UNAVAILABLE, and its parent is told nothing of the child it never got (%s)', async (provider) => {
    const { failing, host, recorder, parent } = await failingHost();
    failing.add('refused');
    const start = host.subagents.startContinuable({ provider, label: 'c', childId: 'refused', request: { prompt: [text('first')], parent } });
    await expect(start).rejects.toMatchObject({ name: 'SubagentError', code: 'PERSISTENCE_UNAVAILABLE', message: expect.stringContaining('disk full') });
    // Its epoch ended with its residency, before the start rejected: no notice of it reached the parent,
    // which would have woken it for a child it has no id of and could never resume.
    await recorder.until(() => recorder.ends.length === 1);
    await parent.whenIdle();
    expect(userTexts(parent.session.events)).toStrictEqual([]);
    expect(host.subagents.residentChildren).toBe(0);
  });
});
