// A follow-up or a child's report whose acknowledging flush is still under way when the host closes
// or a drain runs: close() and the drains settle only after it, so a caller's store closed right
// after `await host.close()` is never closed under it. The message is acknowledged and stored, or
// rejected and absent: never resolved and lost, nor stored and rejected.
import { setImmediate as nextTurn } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { createHost, sqlitePersistence, subagentTool, text, type Host, type SessionEvent, type SessionPersistence } from 'subagent-host';
import { HANG, continuationHost, continuationSuite, eventually, startChild, textsOf } from './continuation-helpers.js';
import { dataOf, deferred, storeOver } from './helpers.js';

const suite = continuationSuite('subagent-continuation-acknowledge-close-');

interface Held {
  called: Promise<void>;
  release(): void;
}

/**
 * A caller's SQLite store at a new file: `hold()` holds the next flush asked of it until `release()`;
 * the appends to the sessions in `failing` are refused (nothing of them is stored).
 */
function callerStore() {
  const file = suite.files.file();
  // Closed after the host (a caller's store is the caller's to close).
  const inner = suite.track(sqlitePersistence(file));
  const failing = new Set<string>();
  let held: { called: () => void; gate: Promise<void> } | undefined;
  const persistence = storeOver(inner, {
    append: (id, events) => (failing.has(id) ? Promise.reject(new Error('disk full')) : inner.append(id, events)),
    flush: async () => {
      const hold = held;
      held = undefined;
      if (hold) {
        hold.called();
        await hold.gate;
      }
      await inner.flush();
    },
  });
  const hold = (): Held => {
    const called = deferred();
    const gate = deferred();
    held = { called: () => called.resolve(), gate: gate.promise };
    return { called: called.promise, release: () => gate.resolve() };
  };
  return { file, inner, persistence, failing, hold };
}

/** A host on `persistence` whose parent started a continuable child that stays busy (its first turn hangs). */
async function busyChild(persistence: SessionPersistence) {
  const host = suite.track(await continuationHost('', { persistence }));
  const parent = await host.createAgent();
  const { childId } = await startChild(host, parent, 'hello', { childId: 'child', model: HANG });
  return { host, parent, childId, child: host.agents.get(childId)! };
}

/** The texts of the messages a log accepted, in order. */
function acceptedTexts(events: readonly SessionEvent[]): string[] {
  return dataOf<{ content: Parameters<typeof textsOf>[0] }>(events, 'inbox/accepted').map((data) => textsOf(data.content));
}

async function storedLog(file: string, id: string): Promise<readonly SessionEvent[]> {
  const reader = await createHost({ persistence: { sqlite: file }, providers: false, pool: { minThreads: 0 } });
  try {
    return (await reader.persistence!.load(id))!.events;
  } finally {
    await reader.close();
  }
}

/**
 * Sends the message with the store's flush held; once the flush was asked for, `settle` runs (close
 * or a drain). The flush is let go after time enough for `settle` to end were it not waiting for it.
 */
async function settleWhileAcknowledging(hold: () => Held | Promise<Held>, send: () => Promise<unknown>, settle: () => Promise<unknown>) {
  const log: string[] = [];
  const holding = hold();
  const sent = send().then(
    () => void log.push('acknowledged'),
    (error: unknown) => void log.push(`rejected ${(error as { code?: string }).code}`),
  );
  const held = await holding;
  await held.called;
  const settling = settle().then(() => void log.push('settled'));
  for (let turn = 0; turn < 500 && !log.includes('settled'); turn++) await nextTurn();
  const settledMeanwhile = log.includes('settled');
  held.release();
  await Promise.all([sent, settling]);
  return { log, settledMeanwhile };
}

type Send = (host: Host, parent: Awaited<ReturnType<typeof busyChild>>['parent'], child: Awaited<ReturnType<typeof busyChild>>['child']) => Promise<unknown>;
const SENDS: { name: string; send: Send; receiver: 'child' | 'parent'; expected: string }[] = [
  { name: 'a follow-up', send: (host, parent, child) => host.subagents.followup(parent, child.id, [text('again')]), receiver: 'child', expected: 'again' },
  { name: "a child's report", send: (host, _parent, child) => host.subagents.reportFrom(child, [text('progress')], { delivery: 'quiet' }), receiver: 'parent', expected: 'Subagent child reported: | progress' },
];

describe('a host that closes while a message to a continuable child or its parent is being acknowledged', () => {
  it.each(SENDS)('settles close() only after $name, which is stored (the caller closes its store right after close())', async ({ send, receiver, expected }) => {
    const { file, inner, persistence, hold } = callerStore();
    const { host, parent, child } = await busyChild(persistence);
    const { log, settledMeanwhile } = await settleWhileAcknowledging(hold, () => send(host, parent, child), async () => {
      await host.close();
      await inner.close();
    });
    expect(settledMeanwhile).toBe(false);
    expect(log).toStrictEqual(['acknowledged', 'settled']);
    expect(acceptedTexts(await storedLog(file, receiver === 'child' ? child.id : parent.id))).toContain(expected);
  });

  it('settles close() only after a follow-up that brought its child back, which is stored', async () => {
    const { file, inner, persistence, hold } = callerStore();
    const host = suite.track(await continuationHost('', { persistence, continuation: { lingerMs: 0 } }));
    const parent = await host.createAgent();
    const { childId } = await startChild(host, parent, 'hello', { childId: 'child' });
    await eventually(() => host.sessions.get(childId) === undefined);
    // The resumed child's epoch opens as its follow-up is delivered: the next flush is its acknowledgement.
    let armed: ReturnType<typeof hold> | undefined;
    const held = new Promise<ReturnType<typeof hold>>((resolve) => host.subagents.on('subagent/start', () => resolve((armed ??= hold()))));
    const { log, settledMeanwhile } = await settleWhileAcknowledging(
      async () => held,
      () => host.subagents.followup(parent, childId, [text('again')]),
      async () => {
        await host.close();
        await inner.close();
      },
    );
    expect(settledMeanwhile).toBe(false);
    expect(log).toStrictEqual(['acknowledged', 'settled']);
    expect(acceptedTexts(await storedLog(file, childId))).toStrictEqual(['hello', 'again']);
  });

  it('settles close() only after a follow-up whose write the store refused, which rejects with that refusal and is absent', async () => {
    const { file, inner, persistence, failing, hold } = callerStore();
    const { host, parent, childId } = await busyChild(persistence);
    failing.add(childId);
    const { log, settledMeanwhile } = await settleWhileAcknowledging(hold, () => host.subagents.followup(parent, childId, [text('lost')]), async () => {
      await host.close();
      await inner.close();
    });
    expect(settledMeanwhile).toBe(false);
    expect(log).toStrictEqual(['rejected PERSISTENCE_UNAVAILABLE', 'settled']);
    expect(acceptedTexts(await storedLog(file, childId))).toStrictEqual(['hello']);
  });
});

describe('a drain while a message to a continuable child or from it is being acknowledged', () => {
  const DRAINS = [
    { drain: 'drainContinuableDescendants', run: (host: Host, parent: { id: string }) => host.subagents.drainContinuableDescendants([host.agents.get(parent.id)!]) },
    { drain: 'drainContinuableChildren', run: (host: Host, parent: { id: string }) => host.subagents.drainContinuableChildren(host.agents.get(parent.id)!, ['child']) },
  ];
  const CASES = SENDS.flatMap((send) => DRAINS.map((drain) => ({ ...send, ...drain })));
  it.each(CASES)('$drain settles only after $name, which is stored', async ({ send, run, receiver, expected }) => {
    const { persistence, hold } = callerStore();
    const { host, parent, child } = await busyChild(persistence);
    const { log, settledMeanwhile } = await settleWhileAcknowledging(hold, () => send(host, parent, child), () => run(host, parent));
    expect(settledMeanwhile).toBe(false);
    expect(log).toStrictEqual(['acknowledged', 'settled']);
    expect(host.subagents.residentChildren).toBe(0);
    expect(acceptedTexts((await host.persistence!.load(receiver === 'child' ? child.id : parent.id))!.events)).toContain(expected);
  });
});

describe('follow-ups to one child while the one before is being acknowledged', () => {
  it('are delivered without waiting for that acknowledgement (the child’s lock is not held for it)', async () => {
    const { persistence, hold } = callerStore();
    const { host, parent, childId } = await busyChild(persistence);
    const held = hold();
    const first = host.subagents.followup(parent, childId, [text('first')]);
    await held.called;
    const second = host.subagents.followup(parent, childId, [text('second')]);
    for (let turn = 0; turn < 500 && !acceptedTexts(host.sessions.get(childId)!.events).includes('second'); turn++) await nextTurn();
    const delivered = acceptedTexts(host.sessions.get(childId)!.events);
    held.release();
    await Promise.all([first, second]);
    expect(delivered).toStrictEqual(['hello', 'first', 'second']);
    expect(acceptedTexts((await host.persistence!.load(childId))!.events)).toStrictEqual(['hello', 'first', 'second']);
  });
});

describe('a drain called in the same tick as a start or a follow-up, with nothing resident', () => {
  it('drainContinuableDescendants settles only after the start and the follow-up it refused (DRAINING)', async () => {
    const host = suite.track(await continuationHost(suite.files.file(), { continuation: { lingerMs: 0 } }));
    const parent = await host.createAgent();
    const { childId } = await startChild(host, parent, 'hello');
    await eventually(() => host.subagents.residentChildren === 0);
    const log: string[] = [];
    const record = (name: string) => (promise: Promise<unknown>) =>
      promise.then(
        () => void log.push(`${name} accepted`),
        (error: unknown) => void log.push(`${name} rejected ${(error as { code?: string }).code}`),
      );
    const calls = [
      record('follow-up')(host.subagents.followup(parent, childId, [text('again')])),
      record('start')(startChild(host, parent, 'another')),
    ];
    await host.subagents.drainContinuableDescendants([parent]);
    log.push('settled');
    await Promise.all(calls);
    expect(log.at(-1)).toBe('settled');
    expect(log.slice(0, -1).sort()).toStrictEqual(['follow-up rejected DRAINING', 'start rejected DRAINING']);
    expect(host.subagents.residentChildren).toBe(0);
  });

  it('settles with a follow-up that waits for a child whose teardown disposes the one-shot subagent it runs', async () => {
    const host = suite.track(await continuationHost(suite.files.file(), { abandonGraceMs: 600_000 }));
    subagentTool(host, { provider: 'in-process', agentOptions: { model: HANG } });
    const parent = await host.createAgent();
    const delegating = host.recorder.until(() => host.recorder.starts.length === 2);
    const steps = [{ toolCalls: [{ name: 'subagent', input: { prompt: 'wait', description: 'waiter' } }] }, { text: 'done' }];
    const { childId } = await startChild(host, parent, 'delegate', { model: { kind: 'scripted', steps } });
    await delegating;
    // The follow-up waits for the child's teardown, which disposes its one-shot subagent (whose own drain must not wait for it).
    const drained = host.subagents.drainContinuableChildren(parent, [childId]);
    const next = host.subagents.followup(parent, childId, [text('again')]);
    await host.subagents.drainContinuableDescendants([parent]);
    await expect(next).rejects.toMatchObject({ code: 'DRAINING' });
    await drained;
    expect(host.subagents.residentChildren).toBe(0);
    expect(host.subagents.activeRuns).toBe(0);
  });
});
