// Continuable children given bad input or failing setup: every refusal is a typed SubagentError
// naming the field or rule, and no child, installation or resident Activation is left behind.
import { describe, expect, it } from 'vitest';
import { SubagentError, SubagentService, inProcessProvider, memoryPersistence, text, type Agent, type ContinuableStartSpec, type StoredSession } from 'subagent-host';
import { deferred, makeRuntime } from './helpers.js';
import { continuationSuite, HANG, continuationHost, eventually, startChild, untilEvent, userTexts, type Recorder } from './continuation-helpers.js';

const { files, track, setup } = continuationSuite('subagent-continuation-err-');

/** Calls `fn` with a deliberately mistyped argument (the runtime checks are what is tested). */
const loose = <T>(value: unknown) => value as T;

describe('continuable operations refuse malformed input', () => {
  it('names the bad field of a start spec and creates no child', async () => {
    const { host, parent } = await setup();
    const prompt = [text('p')];
    const start = (spec: unknown) => host.subagents.startContinuable(loose<ContinuableStartSpec>(spec));
    const cases: [unknown, string][] = [
      [null, 'spec object'],
      [{ provider: '', label: 'c', request: { prompt, parent } }, 'spec.provider'],
      [{ provider: 'in-process', label: 'c', childId: '', request: { prompt, parent } }, 'spec.childId'],
      [{ provider: 'in-process', label: 'c', childId: 7, request: { prompt, parent } }, 'spec.childId'],
      [{ provider: 'in-process', label: 'c', signal: 'abort', request: { prompt, parent } }, 'spec.signal'],
      [{ provider: 'in-process', label: 'c', request: null }, 'spec.request must'],
      [{ provider: 'in-process', label: 'c', request: { prompt, parent: { name: 'p' } } }, 'spec.request.parent'],
      // A misspelt field would give a child without what it names.
      [{ provider: 'in-process', label: 'c', request: { prompt, parent, maxdepth: 0 } }, 'spec.request.maxdepth is not a field'],
      [{ provider: 'in-process', label: 'c', request: { prompt, parent, signal: new AbortController().signal } }, 'spec.request.signal is not a field'],
      [{ provider: 'in-process', label: 'c', childid: 'mine', request: { prompt, parent } }, 'spec.childid is not a field'],
    ];
    for (const [spec, field] of cases) {
      await expect(start(spec)).rejects.toMatchObject({ code: 'INVALID_REQUEST', message: expect.stringContaining(field) });
    }
    const copy = { ...parent, id: parent.id, session: parent.session } as Agent;
    await expect(start({ provider: 'in-process', label: 'c', request: { prompt, parent: copy } })).rejects.toMatchObject({ code: 'UNAUTHORIZED' });
    expect(host.agents.list()).toStrictEqual([parent]);
  });

  it('needs session persistence for continuable children and their resumption', async () => {
    // A service wired without persistence (createHost always has one).
    const runtime = makeRuntime();
    track({ close: () => runtime.agents.close() });
    const service = new SubagentService({ continuation: { agents: runtime.agents, sessions: runtime.sessions, persistence: undefined, lingerMs: 0 } });
    const parent = (await runtime.agents.create()).agent;
    const start = service.startContinuable({ provider: 'in-process', label: 'c', request: { prompt: [text('p')], parent } });
    await expect(start).rejects.toMatchObject({ code: 'PERSISTENCE_UNAVAILABLE' });
    await expect(service.followup(parent, 'stored-child', [text('p')])).rejects.toMatchObject({ code: 'PERSISTENCE_UNAVAILABLE' });
    expect(runtime.agents.list()).toStrictEqual([parent]);
  });

  it('refuses a lingerMs past a timer\'s reach in a SubagentService built with continuation (it evicted each settled child at once)', () => {
    const runtime = makeRuntime();
    track({ close: () => runtime.agents.close() });
    const build = (lingerMs: unknown) =>
      new SubagentService({ continuation: { agents: runtime.agents, sessions: runtime.sessions, persistence: undefined, lingerMs: lingerMs as number } });
    for (const lingerMs of [2 ** 31, 3e9, Number.POSITIVE_INFINITY, Number.NaN, -1, '100', null]) {
      expect(() => build(lingerMs)).toThrow(expect.objectContaining({ code: 'INVALID_OPTIONS', message: expect.stringContaining('options.continuation.lingerMs') }));
    }
    expect(build(2 ** 31 - 1)).toBeInstanceOf(SubagentService);
  });

  it('refuses a reserved id that a drained child still holds in persistence', async () => {
    const { host, parent, recorder } = await setup();
    await startChild(host, parent, 'first', { childId: 'kept' });
    await recorder.until(() => recorder.ends.length === 1);
    await host.subagents.drainContinuableChildren(parent, ['kept']);
    await eventually(() => host.sessions.get('kept') === undefined);
    await expect(startChild(host, parent, 'second', { childId: 'kept' })).rejects.toMatchObject({ code: 'DUPLICATE_CHILD' });
    expect(host.agents.list()).toStrictEqual([parent]);
    expect((await host.persistence!.load('kept'))!.events.filter((e) => e.type === 'user/message')).toHaveLength(1);
  });

  it('either rejects a start aborted or drained while it is being built, leaving nothing behind, or accepts it whole', async () => {
    // The abort (or host close) lands at a different point of the start for each gap, in microtasks.
    for (const stop of ['abort', 'close'] as const) {
      for (let gap = 0; gap < 16; gap++) {
        const file = files.file();
        const host = track(await continuationHost(file));
        const parent = await host.createAgent({ sessionId: 'parent' });
        await host.sessions.flush();
        const starts: string[] = [];
        host.subagents.on('subagent/start', (start) => void starts.push(start.id));
        const controller = new AbortController();
        const started = host.subagents.startContinuable({ provider: 'in-process', label: 'scout', childId: 'c', signal: controller.signal, request: { prompt: [text('hi')], parent } });
        for (let i = 0; i < gap; i++) await Promise.resolve();
        const closing = stop === 'abort' ? controller.abort(new Error('gave up')) : host.close();
        const outcome = await started.then(() => 'accepted' as const, () => 'rejected' as const);
        await closing;
        await host.close();
        const reopened = track(await continuationHost(file));
        const stored = await reopened.persistence!.load('c');
        const listed = (await reopened.subagents.listChildren('parent')).map((row) => row.id);
        if (outcome === 'rejected') {
          expect({ stop, gap, stored, listed, starts }).toStrictEqual({ stop, gap, stored: undefined, listed: [], starts: [] });
        } else {
          expect({ stop, gap, prompt: userTexts(stored!.events), listed }).toStrictEqual({ stop, gap, prompt: ['hi'], listed: ['c'] });
        }
        await reopened.close();
      }
    }
  });

  it('rejects a start DRAINING or CLOSED when its own subagent/start listener drains or closes, its prompt never entered', async () => {
    const expected = { descendants: 'DRAINING', children: 'DRAINING', close: 'CLOSED' } as const;
    for (const stop of ['descendants', 'children', 'close'] as const) {
      const file = files.file();
      const host = track(await continuationHost(file));
      const parent = await host.createAgent({ sessionId: 'parent' });
      let stopping: Promise<void> | undefined;
      host.subagents.on('subagent/start', (start) => {
        if (start.id !== 'c') return;
        if (stop === 'descendants') stopping = host.subagents.drainContinuableDescendants([parent]);
        else if (stop === 'children') stopping = host.subagents.drainContinuableChildren(parent, ['c']);
        else stopping = host.close();
      });
      const started = host.subagents.startContinuable({ provider: 'in-process', label: 'scout', childId: 'c', request: { prompt: [text('hi')], parent } });
      const code = await started.then(() => 'accepted', (error: unknown) => (error instanceof SubagentError ? error.code : String(error)));
      await stopping;
      await host.close();
      const reopened = track(await continuationHost(file));
      const events = (await reopened.persistence!.load('c'))?.events ?? [];
      // The child was announced (and so stored): it stays, with no message in its log.
      const entered = events.filter((e) => e.type === 'inbox/accepted' || e.type === 'user/message').length;
      expect({ stop, code, entered }).toStrictEqual({ stop, code: expected[stop], entered: 0 });
      await reopened.close();
    }
  });

  it('releases what the provider prepared for a start that is aborted after the provider answered', async () => {
    const { host, parent } = await setup();
    const local = inProcessProvider(host);
    const controller = new AbortController();
    const log: string[] = [];
    host.subagents.registerProvider({
      ...local,
      name: 'holding',
      prepareContinuable: async (request) => {
        log.push(`prepare ${request.sessionId}`);
        // The caller gives up while the provider works: the start ends after it answered.
        controller.abort(new Error('gave up'));
        return { ...(await local.prepareContinuable!(request)), release: () => Promise.resolve(void log.push(`release ${request.sessionId}`)) };
      },
    });
    const start = host.subagents.startContinuable({ provider: 'holding', label: 'c', childId: 'c', signal: controller.signal, request: { prompt: [text('p')], parent } });
    await expect(start).rejects.toThrow('gave up');
    expect(log).toStrictEqual(['prepare c', 'release c']);
    expect(host.agents.list()).toStrictEqual([parent]);
  });

  it('rejects CONTRACT_VIOLATION for a prepareContinuable that answers no spec object, and passes on one that throws synchronously', async () => {
    const { host, parent } = await setup();
    const local = inProcessProvider(host);
    const boom = new Error('provider failed');
    const answers: [string, () => unknown][] = [
      ['plain', () => ({})],
      ['nothing', () => undefined],
      ['null', () => Promise.resolve(null)],
      ['number', () => Promise.resolve(7)],
      ['release', () => Promise.resolve({ release: 'later' })],
      ['throws', () => { throw boom; }],
    ];
    const outcomes: Record<string, unknown> = {};
    for (const [name, prepare] of answers) {
      host.subagents.registerProvider({ ...local, name, prepareContinuable: prepare as NonNullable<typeof local.prepareContinuable> });
      outcomes[name] = await host.subagents
        .startContinuable({ provider: name, label: 'c', request: { prompt: [text('p')], parent } })
        .then(() => 'accepted', (error: unknown) => (error === boom ? 'its own error' : (error as SubagentError).code));
    }
    // A plain (not promised) spec object is taken as the provider's answer, as start()'s run is.
    expect(outcomes).toStrictEqual({ plain: 'accepted', nothing: 'CONTRACT_VIOLATION', null: 'CONTRACT_VIOLATION', number: 'CONTRACT_VIOLATION', release: 'CONTRACT_VIOLATION', throws: 'its own error' });
  });

  it('asks the provider’s admitInput before each message is accepted: a refused one is in no log, and the child goes on', async () => {
    const { host, parent } = await setup();
    const local = inProcessProvider(host);
    const log: string[] = [];
    // Refuses a message saying 'too much' as its transport would, and breaks on one saying 'broken'.
    const admitInput = (content: readonly unknown[]) => {
      const said = JSON.stringify(content);
      if (said.includes('too much')) throw new SubagentError('INVALID_REQUEST', 'the message is too large for this transport');
      if (said.includes('broken')) throw new Error('admitInput broke');
    };
    const spec = (request: { sessionId: string }, made: string) => ({
      providerData: { remote: true }, admitInput,
      release: () => Promise.resolve(void log.push(`release ${made} ${request.sessionId}`)),
    });
    host.subagents.registerProvider({
      ...local,
      name: 'narrow',
      prepareContinuable: async (request) => ({ ...(await local.prepareContinuable!(request)), ...spec(request, 'prepared') }),
      resumeContinuable: (request) => Promise.resolve(spec(request, 'resumed')),
    });
    const recorder = host.recorder as Recorder;
    const start = (prompt: string, childId: string) => host.subagents.startContinuable({ provider: 'narrow', label: 'c', childId, request: { prompt: [text(prompt)], parent } });
    await expect(start('too much', 'c0')).rejects.toMatchObject({ code: 'INVALID_REQUEST', message: 'the message is too large for this transport' });
    await expect(start('broken', 'c1')).rejects.toMatchObject({ code: 'CONTRACT_VIOLATION', message: expect.stringContaining('provider narrow\'s admitInput threw Error: admitInput broke') });
    expect(log).toStrictEqual(['release prepared c0', 'release prepared c1']);
    expect(await host.subagents.listChildren(parent.id)).toStrictEqual([]);
    const { childId } = await start('first', 'c2');
    await recorder.until(() => recorder.ends.length === 1);
    // Resident, then brought back: each refusal leaves the child's log and its epochs as they were.
    const follow = (said: string) => host.subagents.followup(parent, childId, [text(said)]);
    await expect(follow('too much')).rejects.toMatchObject({ code: 'INVALID_REQUEST' });
    await host.subagents.drainContinuableChildren(parent, [childId]);
    await expect(follow('too much')).rejects.toMatchObject({ code: 'INVALID_REQUEST' });
    await expect(follow('broken')).rejects.toMatchObject({ code: 'CONTRACT_VIOLATION' });
    expect(log).toStrictEqual(['release prepared c0', 'release prepared c1', 'release prepared c2', 'release resumed c2', 'release resumed c2']);
    expect(recorder.starts).toHaveLength(1);
    await follow('second');
    await recorder.until(() => recorder.ends.length === 2);
    expect(userTexts(host.sessions.get(childId)!.events)).toStrictEqual(['first', 'second']);
  });

  it('takes a spec whose hooks are methods of its class (this bound to it), from prepareContinuable and resumeContinuable alike', async () => {
    const { host, parent } = await setup();
    const local = inProcessProvider(host);
    const log: string[] = [];
    class Spec {
      readonly providerData = { remote: true };
      constructor(readonly made: string) {}
      admitInput(content: readonly unknown[]): void {
        if (JSON.stringify(content).includes('too much')) throw new SubagentError('INVALID_REQUEST', `${this.made} refuses it`);
      }
      quiesce(): Promise<void> {
        return Promise.resolve(void log.push(`quiesce ${this.made}`));
      }
      release(): Promise<void> {
        return Promise.resolve(void log.push(`release ${this.made}`));
      }
    }
    let resumed: () => unknown = () => new Spec('resumed');
    host.subagents.registerProvider({
      ...local,
      name: 'classy',
      prepareContinuable: async (request) => Object.assign(new Spec('prepared'), await local.prepareContinuable!(request)),
      resumeContinuable: () => Promise.resolve(resumed() as Spec),
    });
    const recorder = host.recorder as Recorder;
    const start = (prompt: string) => host.subagents.startContinuable({ provider: 'classy', label: 'c', request: { prompt: [text(prompt)], parent } });
    await expect(start('too much')).rejects.toMatchObject({ code: 'INVALID_REQUEST', message: 'prepared refuses it' });
    const { childId } = await start('first');
    await recorder.until(() => recorder.ends.length === 1);
    await host.subagents.drainContinuableChildren(parent, [childId]);
    const follow = (said: string) => host.subagents.followup(parent, childId, [text(said)]);
    await expect(follow('too much')).rejects.toMatchObject({ code: 'INVALID_REQUEST', message: 'resumed refuses it' });
    // Answering no spec object is the provider's fault, as it is from prepareContinuable.
    resumed = () => null;
    await expect(follow('second')).rejects.toMatchObject({ code: 'CONTRACT_VIOLATION', message: expect.stringContaining("provider classy's resumeContinuable answered no object") });
    resumed = () => new Spec('resumed');
    await follow('second');
    await recorder.until(() => recorder.ends.length === 2);
    await host.subagents.drainContinuableChildren(parent, [childId]);
    expect(log).toStrictEqual(['release prepared', 'quiesce prepared', 'release prepared', 'release resumed', 'quiesce resumed', 'release resumed']);
  });

  it("refuses a reserved id another host's running child holds without touching that child's stored log", async () => {
    const file = files.file();
    const first = track(await continuationHost(file));
    const second = track(await continuationHost(file));
    const parentA = await first.createAgent({ sessionId: 'parent-a' });
    await startChild(first, parentA, 'work', { childId: 'c', model: HANG });
    await first.sessions.flush();
    const before = (await first.persistence!.projections(['c'])).get('c');
    const parentB = await second.createAgent({ sessionId: 'parent-b' });
    await expect(startChild(second, parentB, 'mine', { childId: 'c', model: HANG })).rejects.toMatchObject({ code: 'DUPLICATE_CHILD' });
    // Its open turn stays open in the file (a load would have closed it), and its host keeps writing it.
    expect((await first.persistence!.projections(['c'])).get('c')).toStrictEqual(before);
    await expect(first.subagents.followup(parentA, 'c', [text('more')])).resolves.toEqual(expect.any(String));
    await first.sessions.flush('c');
  });

  it('refuses DUPLICATE_CHILD to the second of two hosts on one file that reserve the same id at once; only the first parent hears of c', async () => {
    const file = files.file();
    const first = track(await continuationHost(file));
    const second = track(await continuationHost(file));
    const hosts = [first, second];
    const parents = [await first.createAgent({ sessionId: 'parent-a' }), await second.createAgent({ sessionId: 'parent-b' })];
    // Both pass the stored-id check before either child exists: the store's refusal decides.
    const outcomes = await Promise.allSettled([startChild(first, parents[0]!, 'a', { childId: 'c' }), startChild(second, parents[1]!, 'b', { childId: 'c' })]);
    expect(outcomes.map((outcome) => (outcome.status === 'fulfilled' ? 'started' : (outcome.reason as SubagentError).code)).sort()).toStrictEqual(['DUPLICATE_CHILD', 'started']);
    const winner = outcomes[0]!.status === 'fulfilled' ? 0 : 1;
    const loser = 1 - winner;
    await first.sessions.flush();
    await second.sessions.flush();
    expect((await first.persistence!.load('c'))!.header.parentSession).toBe(parents[winner]!.id);
    // The refused start's child ran in its host until the refusal ended it (its epoch ended before the start rejected),
    // yet its parent is told nothing of "c": that id is the other parent's child, which it could never reach.
    const { recorder } = hosts[loser]!;
    await recorder.until(() => recorder.ends.length === recorder.starts.length);
    await parents[loser]!.whenIdle();
    expect(userTexts(parents[loser]!.session.events)).toStrictEqual([]);
    await eventually(() => userTexts(parents[winner]!.session.events).length === 1);
    expect(userTexts(parents[winner]!.session.events)[0]).toContain('Background subagent c finished');
  });

  it('refuses a follow-up to a non-string id or to a live agent that is no continuable child', async () => {
    const { host, parent } = await setup();
    const stranger = await host.createAgent();
    await expect(host.subagents.followup(parent, loose<string>(42), [text('x')])).rejects.toMatchObject({ code: 'INVALID_REQUEST' });
    // A signal that is no AbortSignal would be ignored: the caller could never stop the follow-up.
    await expect(host.subagents.followup(parent, stranger.id, [text('x')], { signal: loose<AbortSignal>({ aborted: false }) })).rejects.toMatchObject({
      code: 'INVALID_REQUEST',
      message: expect.stringContaining('opts.signal'),
    });
    await expect(host.subagents.followup(parent, stranger.id, [text('x')])).rejects.toMatchObject({
      code: 'NOT_RESUMABLE',
      message: expect.stringContaining('live but is not a continuable child'),
    });
    expect(stranger.session.events.filter((e) => e.type === 'user/message')).toHaveLength(0);
  });

  it('refuses malformed interrupt authority and drain arguments', async () => {
    const { host, parent } = await setup();
    const { childId } = await startChild(host, parent, 'work', { model: HANG });
    const child = host.agents.get(childId)!;
    await untilEvent(child, 'step/start');
    const interrupt = (authority: unknown) => () => host.subagents.interrupt(childId, loose<{ kind: 'user'; parentSessionId: string }>(authority));
    expect(interrupt(null)).toThrow(expect.objectContaining({ code: 'INVALID_REQUEST' }));
    expect(interrupt({ kind: 'root', parentSessionId: parent.id })).toThrow(expect.objectContaining({ code: 'INVALID_REQUEST' }));
    const copy = { ...parent, id: parent.id, session: parent.session } as Agent;
    expect(interrupt({ kind: 'ancestor', agent: copy })).toThrow(expect.objectContaining({ code: 'UNAUTHORIZED' }));
    await expect(host.subagents.drainContinuableChildren(parent, loose<string[]>(childId))).rejects.toMatchObject({ code: 'INVALID_REQUEST' });
    await expect(host.subagents.drainContinuableChildren(parent, loose<string[]>([childId, 42]))).rejects.toMatchObject({ code: 'INVALID_REQUEST' });
    expect(() => host.subagents.interrupt(loose<string>(42), { kind: 'user', parentSessionId: parent.id })).toThrow(expect.objectContaining({ code: 'INVALID_REQUEST' }));
    await expect(host.subagents.drainContinuableDescendants(loose<Agent[]>(parent))).rejects.toMatchObject({ code: 'INVALID_REQUEST' });
    // A stale copy of the parent is no drain root: nothing below the real parent stops.
    await host.subagents.drainContinuableDescendants([copy]);
    expect(child.status).toBe('running');
    await expect(host.subagents.followup(parent, childId, [text('still open')])).resolves.toEqual(expect.any(String));
  });

  it('refuses a report with a bad delivery, empty content or an aborted signal', async () => {
    const { host, parent, recorder } = await setup();
    const { childId } = await startChild(host, parent, 'hi');
    await recorder.until(() => recorder.ends.length === 1);
    const child = host.agents.get(childId)!;
    await expect(host.subagents.reportFrom(child, [text('x')], loose<{ delivery: 'quiet' }>({ delivery: 'loud' }))).rejects.toMatchObject({ code: 'INVALID_REQUEST' });
    const aborted = new AbortController();
    const reason = new Error('caller gave up');
    aborted.abort(reason);
    await expect(host.subagents.reportFrom(child, [text('x')], { delivery: 'quiet', signal: aborted.signal })).rejects.toBe(reason);
    await expect(host.subagents.reportFrom(child, [], { delivery: 'quiet' })).rejects.toMatchObject({ code: 'INVALID_REQUEST' });
    // Not an AbortSignal: ignored, the caller could never stop it; a look-alike's reason must not leak out untyped.
    for (const signal of ['nope', { aborted: true, reason: 'boom' }]) {
      await expect(host.subagents.reportFrom(child, [text('x')], { delivery: 'quiet', signal: loose<AbortSignal>(signal) })).rejects.toMatchObject({ code: 'INVALID_REQUEST', message: expect.stringContaining('opts.signal') });
    }
    await expect(host.subagents.reportFrom(loose<Agent>(null), [text('x')], { delivery: 'quiet' })).rejects.toMatchObject({ code: 'UNAUTHORIZED' });
    expect(parent.session.events.filter((e) => e.type === 'inbox/accepted' && (e.data as { source: { kind: string } }).source.kind === 'subagent-report')).toHaveLength(0);
  });
});

describe('continuable children whose parent or own Activation is going away', () => {
  it('refuses a report and ignores an interrupt once the child’s drain began; a follow-up waits and resumes it', async () => {
    const { host, parent, recorder } = await setup();
    const { childId } = await startChild(host, parent, 'work', { model: HANG });
    const child = host.agents.get(childId)!;
    await untilEvent(child, 'step/start');
    const drained = host.subagents.drainContinuableChildren(parent, [childId]);
    const report = host.subagents.reportFrom(child, [text('late news')], { delivery: 'quiet' });
    expect(host.subagents.interrupt(childId, { kind: 'user', parentSessionId: parent.id })).toBeUndefined();
    const next = host.subagents.followup(parent, childId, [text('after the drain')]);
    await expect(report).rejects.toMatchObject({ code: 'ACTIVATION_CLOSING' });
    await drained;
    await next;
    await recorder.until(() => recorder.starts.filter((start) => start.id === childId).length === 2);
    expect(host.agents.get(childId)).not.toBe(child);
    expect(userTexts(host.sessions.get(childId)!.events)).toContain('after the drain');
    expect(userTexts(parent.session.events).some((t) => t.includes('late news'))).toBe(false);
  });

  it('releases a child whose start with a reserved id was in flight when its drain began: the start is accepted, then the child goes', async () => {
    const { host, parent, recorder } = await setup();
    const starting = host.subagents.startContinuable({ provider: 'in-process', label: 'late', childId: 'reserved-kid', request: { prompt: [text('hello')], parent } });
    await host.subagents.drainContinuableChildren(parent, ['reserved-kid']);
    await expect(starting).resolves.toMatchObject({ childId: 'reserved-kid' });
    expect(host.agents.get('reserved-kid')).toBeUndefined();
    expect(host.subagents.residentChildren).toBe(0);
    expect(await host.subagents.listChildren(parent.id)).toStrictEqual([expect.objectContaining({ id: 'reserved-kid', activity: 'inactive' })]);
    expect(recorder.starts.filter((start) => start.id === 'reserved-kid')).toHaveLength(recorder.ends.filter((end) => end.id === 'reserved-kid').length);
  });

  it('keeps a scoped drain to its root: other parents stay open, and the root’s resumed agent may start children again', async () => {
    const { host, parent, recorder } = await setup();
    const { childId } = await startChild(host, parent, 'c', { model: HANG });
    const child = host.agents.get(childId)!;
    await untilEvent(child, 'step/start');
    await host.subagents.drainContinuableDescendants([child]);
    await expect(startChild(host, child, 'below')).rejects.toMatchObject({ code: 'DRAINING' });
    const other = await host.createAgent();
    await expect(startChild(host, other, 'elsewhere')).resolves.toMatchObject({ childId: expect.any(String) });
    await host.subagents.drainContinuableChildren(parent, [childId]);
    await host.subagents.followup(parent, childId, [text('back')]);
    await recorder.until(() => recorder.starts.filter((start) => start.id === childId).length === 2);
    const resumed = host.agents.get(childId)!;
    await expect(startChild(host, resumed, 'below again')).resolves.toMatchObject({ childId: expect.any(String) });
  });
});

describe('cold resumes that cannot complete', () => {
  /** A memory store whose reads the test can break or rewrite, as a failing or damaged store would. */
  function tamperable() {
    const inner = memoryPersistence();
    const state: {
      load?: (stored: StoredSession | undefined) => StoredSession | undefined;
      list?: () => never;
      projections?: (read: Awaited<ReturnType<typeof inner.projections>>) => Awaited<ReturnType<typeof inner.projections>>;
    } = {};
    const store = new Proxy(inner, {
      get(target, property) {
        if (property === 'load' && state.load) {
          const rewrite = state.load;
          return async (id: string) => rewrite(await target.load(id));
        }
        if (property === 'list' && state.list) return async () => state.list!();
        if (property === 'projections' && state.projections) {
          const rewrite = state.projections;
          return async (ids: string[]) => rewrite(await target.projections(ids));
        }
        const value: unknown = Reflect.get(target, property, target);
        return typeof value === 'function' ? (value as () => unknown).bind(target) : value;
      },
    });
    return { store, state };
  }

  async function storedChild(options: Parameters<typeof continuationHost>[1] = {}) {
    const host = await continuationHost(files.file(), options);
    track(host);
    const parent = await host.createAgent();
    const recorder = host.recorder as Recorder;
    const { childId } = await startChild(host, parent, 'first');
    await recorder.until(() => recorder.ends.length === 1);
    await host.subagents.drainContinuableChildren(parent, [childId]);
    await eventually(() => host.sessions.get(childId) === undefined);
    return { host, parent, childId, recorder };
  }

  it('refuses NOT_RESUMABLE, naming the cause, when the store fails or holds a damaged descriptor', async () => {
    const { store, state } = tamperable();
    const { host, parent, childId } = await storedChild({ persistence: store });
    const follow = () => host.subagents.followup(parent, childId, [text('again')]);
    state.load = () => {
      throw new Error('store offline');
    };
    await expect(follow()).rejects.toMatchObject({ code: 'NOT_RESUMABLE', message: expect.stringMatching(/cannot be read from persistence: .*Error: store offline/) });
    const rewriteDescriptor = (data: Record<string, unknown>) => (stored: StoredSession | undefined) =>
      stored && { ...stored, events: stored.events.map((e) => (e.type === 'subagent/descriptor' ? { ...e, data: { ...(e.data as object), ...data } } : e)) };
    state.load = rewriteDescriptor({ label: 42 });
    await expect(follow()).rejects.toMatchObject({ code: 'NOT_RESUMABLE', message: expect.stringContaining('corrupt descriptor') });
    state.load = rewriteDescriptor({ agentModel: '{not json' });
    await expect(follow()).rejects.toMatchObject({ code: 'NOT_RESUMABLE', message: expect.stringContaining('stored model of this child is not readable') });
    // The log, read whole, has the last word when it disagrees with the projections read before it.
    state.load = rewriteDescriptor({ mode: 'one-shot' });
    await expect(follow()).rejects.toMatchObject({ code: 'NOT_RESUMABLE', message: expect.stringContaining('is not a continuable child') });
    state.load = () => undefined;
    await expect(follow()).rejects.toMatchObject({ code: 'NOT_RESUMABLE', message: expect.stringContaining('is stored; check the id') });
    delete state.load;
    // The reads that come before the load (who the parent is, what the child is) fail the same way.
    state.list = () => {
      throw new Error('index offline');
    };
    await expect(follow()).rejects.toMatchObject({ code: 'NOT_RESUMABLE', message: expect.stringMatching(/cannot be read from persistence: .*Error: index offline/) });
    delete state.list;
    // A session stored under the parent without a single event (its host stopped between storing the
    // header and its first events) is named as such.
    await store.create({ id: 'ghost', createdAt: 1, parentSession: parent.id, origin: 'subagent', delegationDepth: 1 });
    await expect(host.subagents.followup(parent, 'ghost', [text('hello?')])).rejects.toMatchObject({ code: 'NOT_RESUMABLE', message: expect.stringContaining('has no subagent descriptor') });
    // Projections that cannot be read leave the verdict to the load, which reads the log itself.
    state.projections = (read) => new Map([...read].map(([id]) => [id, { ok: false as const, error: new SubagentError('CORRUPT_DATA', 'unreadable row') }]));
    await follow();
    expect(userTexts(host.sessions.get(childId)!.events)).toStrictEqual(['first', 'again']);
  });

  it('stops a resume whose provider never brings the child back when a drain above it begins: DRAINING', async () => {
    const { host, parent } = await setup();
    const local = inProcessProvider(host);
    let resuming = 0;
    // A remote child whose agent never answers the load (but honours the resume's signal).
    host.subagents.registerProvider({
      ...local,
      name: 'remote',
      prepareContinuable: async (request) => ({ ...(await local.prepareContinuable!(request)), providerData: { remote: true } }),
      resumeContinuable: ({ signal }) => {
        resuming++;
        return new Promise((_, reject) => signal.addEventListener('abort', () => reject(signal.reason as Error), { once: true }));
      },
    });
    const { childId } = await startChild(host, parent, 'first', { provider: 'remote' });
    await host.subagents.drainContinuableChildren(parent, [childId]);
    const follow = host.subagents.followup(parent, childId, [text('again')]);
    await eventually(() => resuming === 1);
    await host.subagents.drainContinuableDescendants([parent]);
    await expect(follow).rejects.toMatchObject({ code: 'DRAINING' });
  });

  it('refuses a resume whose setup contribution fails or is removed meanwhile; the child stays stored', async () => {
    const { host, parent, childId, recorder } = await storedChild();
    const follow = () => host.subagents.followup(parent, childId, [text('again')]);
    const broken = host.subagents.registerContinuableSetup(() => {
      throw new Error('setup broke');
    });
    await expect(follow()).rejects.toMatchObject({ code: 'NOT_RESUMABLE', message: expect.stringContaining('setup broke') });
    broken();
    let released = 0;
    const revoking = host.subagents.registerContinuableSetup(() => {
      queueMicrotask(() => revoking());
      return () => void released++;
    });
    await expect(follow()).rejects.toMatchObject({ code: 'ACTIVATION_SETUP_REVOKED' });
    expect(released).toBe(1);
    expect(host.agents.get(childId)).toBeUndefined();
    await follow();
    await recorder.until(() => recorder.ends.length === 2);
    expect(userTexts(host.sessions.get(childId)!.events)).toStrictEqual(['first', 'again']);
  });
});

describe('registerContinuableSetup failures', () => {
  it('refuses a contribution that is not a function, or one that returns no disposer, and creates no child', async () => {
    const { host, parent } = await setup();
    expect(() => host.subagents.registerContinuableSetup(loose<() => () => void>('install'))).toThrow(expect.objectContaining({ code: 'INVALID_REQUEST' }));
    let released = 0;
    host.subagents.registerContinuableSetup(() => () => void released++);
    const remove = host.subagents.registerContinuableSetup(loose<() => () => void>(() => undefined));
    await expect(startChild(host, parent, 'p')).rejects.toMatchObject({ code: 'INVALID_REQUEST', message: expect.stringContaining('disposer') });
    expect(released).toBe(1);
    expect(host.agents.list()).toStrictEqual([parent]);
    remove();
    await startChild(host, parent, 'p', { childId: 'after' });
    expect(host.agents.get('after')).toBeDefined();
  });

  it('refuses an async contribution without an unhandled rejection, and runs the disposer it resolves to', async () => {
    const { host, parent } = await setup();
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown) => unhandled.push(reason);
    process.on('unhandledRejection', onUnhandled);
    try {
      const released = deferred();
      const resolving = host.subagents.registerContinuableSetup(loose<() => () => void>(async () => () => released.resolve()));
      await expect(startChild(host, parent, 'p')).rejects.toMatchObject({ code: 'INVALID_REQUEST', message: expect.stringContaining('not a promise') });
      await released.promise;
      resolving();
      const rejecting = host.subagents.registerContinuableSetup(loose<() => () => void>(async () => Promise.reject(Symbol('installer failed'))));
      await expect(startChild(host, parent, 'p')).rejects.toMatchObject({ code: 'INVALID_REQUEST' });
      rejecting();
      // Node reports an unhandled rejection after the microtasks of the turn it was made in.
      await new Promise((resolve) => setImmediate(resolve));
      expect(unhandled).toStrictEqual([]);
      expect(host.agents.list()).toStrictEqual([parent]);
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
  });

  it('rolls back earlier installations when an installer throws, and surfaces that installer’s error', async () => {
    const { host, parent } = await setup();
    const log: string[] = [];
    host.subagents.registerContinuableSetup(() => {
      log.push('install 1');
      return () => {
        log.push('release 1');
        throw new Error('release 1 failed too');
      };
    });
    const failure = new Error('installer 2 failed');
    const second = host.subagents.registerContinuableSetup(() => {
      throw failure;
    });
    host.subagents.registerContinuableSetup(() => {
      log.push('install 3');
      return () => undefined;
    });
    await expect(startChild(host, parent, 'p')).rejects.toBe(failure);
    expect(log).toStrictEqual(['install 1', 'release 1']);
    expect(host.agents.list()).toStrictEqual([parent]);
    second();
  });

  it('fails a start with ACTIVATION_SETUP_REVOKED when a contribution is removed while the child is set up', async () => {
    const { host, parent } = await setup();
    let released = 0;
    const remove = host.subagents.registerContinuableSetup(() => {
      queueMicrotask(() => remove());
      return () => void released++;
    });
    let revokeSelf: () => void = () => undefined;
    revokeSelf = host.subagents.registerContinuableSetup(() => {
      revokeSelf();
      return () => void released++;
    });
    await expect(startChild(host, parent, 'p')).rejects.toMatchObject({ code: 'ACTIVATION_SETUP_REVOKED' });
    expect(released).toBe(2);
    expect(host.agents.list()).toStrictEqual([parent]);
  });

  it('attempts every disposer on removal and on drain, then reports the failures', async () => {
    const { host, parent } = await setup();
    const released: string[] = [];
    const remove = host.subagents.registerContinuableSetup((child) => () => {
      released.push(child.id);
      throw new Error(`disposer of ${child.id} failed`);
    });
    await startChild(host, parent, 'a', { childId: 'a', model: HANG });
    await startChild(host, parent, 'b', { childId: 'b', model: HANG });
    expect(() => remove()).toThrow(expect.objectContaining({ code: 'ACTIVATION_SETUP_RELEASE_FAILED', message: expect.stringContaining('2 continuable setup disposer(s) threw') }));
    expect(released.sort()).toStrictEqual(['a', 'b']);
    remove();
    expect(released).toHaveLength(2);
    host.subagents.registerContinuableSetup((child) => () => {
      throw new Error(`second disposer of ${child.id} failed`);
    });
    await startChild(host, parent, 'c', { childId: 'c', model: HANG });
    await startChild(host, parent, 'd', { childId: 'd', model: HANG });
    await expect(host.subagents.drainContinuableChildren(parent, ['c', 'd'])).rejects.toMatchObject({
      code: 'ACTIVATION_TEARDOWN_FAILED',
      message: expect.stringContaining('2 continuable children failed to tear down'),
    });
    expect(host.agents.get('c')).toBeUndefined();
    expect(host.agents.get('d')).toBeUndefined();
  });
});
