// The `subagent/descriptor` event and the two projections over it (seam-spec §8.3 D1–D5, P1–P4).
import { describe, expect, it } from 'vitest';
import {
  DESCRIPTOR_EVENT,
  SUBAGENT_DESCRIPTOR_VERSION,
  SubagentError,
  foldSubagentDescriptor,
  parseSubagentDescriptor,
} from 'subagent-host';
import { snapshotSubagentDescriptor, subagentIdentity, subagentTiming } from 'subagent-host/internals';
import type { SessionEvent } from 'subagent-host';
import type { SessionProjection, SubagentDescriptorInput } from 'subagent-host/internals';

function event(seq: number, time: number, type: string, data: unknown = {}): SessionEvent {
  return { seq, time, type, data };
}

function descriptorEvent(data: unknown, seq = 0, time = 0): SessionEvent {
  return event(seq, time, DESCRIPTOR_EVENT, data);
}

function codeOf(fn: () => unknown): string | undefined {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(SubagentError);
    return (error as SubagentError).code;
  }
  return undefined;
}

function fold<S, V>(projection: SessionProjection<S, V>, events: SessionEvent[]): V {
  return projection.view(events.reduce((state, next) => projection.step(state, next), projection.initial()));
}

const continuableInput: SubagentDescriptorInput = {
  mode: 'continuable',
  provider: 'worker',
  label: 'researcher',
  agentModel: 'scripted:echo',
  persona: 'terse',
  toolFilter: { allow: ['read'], deny: ['write'] },
  maxTokens: 4096,
  maxStepsPerTurn: 8,
  toolModules: ['./tools.mjs'],
  budget: { tokens: 1000, turns: 3 },
};
const continuable = { version: 2, ...continuableInput };

describe('descriptor snapshot and fold', () => {
  it('D1: folds no events to undefined and round-trips a minimal one-shot descriptor', () => {
    expect(SUBAGENT_DESCRIPTOR_VERSION).toBe(2);
    expect(foldSubagentDescriptor([])).toBeUndefined();
    const data = snapshotSubagentDescriptor({ mode: 'one-shot', provider: 'spawn' });
    expect(data).toStrictEqual({ version: 2, mode: 'one-shot', provider: 'spawn' });
    expect(foldSubagentDescriptor([descriptorEvent(data)])).toStrictEqual(data);
  });

  it('D1: keeps a continuable child’s provider data as a detached JSON copy', () => {
    const providerData = { sessionId: 'remote-1', command: '/usr/bin/agent', args: ['acp'], cwd: '/work' };
    const data = snapshotSubagentDescriptor({ ...continuableInput, providerData } as SubagentDescriptorInput);
    expect(data).toStrictEqual({ ...continuable, providerData });
    providerData.args.push('changed');
    expect(foldSubagentDescriptor([descriptorEvent(data)])).toMatchObject({ providerData: { args: ['acp'] } });
    expect(() => snapshotSubagentDescriptor({ ...continuableInput, providerData: { at: new Date(0) } } as SubagentDescriptorInput)).toThrow(
      expect.objectContaining({ code: 'INVALID_REQUEST' }),
    );
  });

  it('D1: keeps a one-shot label only when one is given', () => {
    expect(snapshotSubagentDescriptor({ mode: 'one-shot', provider: 'spawn', label: 'scan' })).toStrictEqual({
      version: 2, mode: 'one-shot', provider: 'spawn', label: 'scan',
    });
    const input = { mode: 'one-shot', provider: 'spawn', label: undefined } as unknown as SubagentDescriptorInput;
    expect(Object.keys(snapshotSubagentDescriptor(input))).toEqual(['version', 'mode', 'provider']);
  });

  it('D2: round-trips a full continuable descriptor and accepts a filter with only allow or only deny', () => {
    const data = snapshotSubagentDescriptor(structuredClone(continuableInput));
    expect(data).toStrictEqual(continuable);
    expect(foldSubagentDescriptor([descriptorEvent(data)])).toStrictEqual(continuable);
    for (const toolFilter of [{ allow: ['read'] }, { deny: [] }]) {
      const only = snapshotSubagentDescriptor({ mode: 'continuable', provider: 'p', label: 'l', toolFilter });
      expect(foldSubagentDescriptor([descriptorEvent(only)])).toStrictEqual({ ...only, toolFilter });
    }
  });

  it('returns a snapshot detached from its input', () => {
    const allow = ['read'];
    const data = snapshotSubagentDescriptor({ mode: 'continuable', provider: 'p', label: 'l', toolFilter: { allow } });
    allow.push('write');
    expect(data).toStrictEqual({ version: 2, mode: 'continuable', provider: 'p', label: 'l', toolFilter: { allow: ['read'] } });
  });

  it('D3: folds a payload of another version to undefined without throwing', () => {
    expect(foldSubagentDescriptor([descriptorEvent({ version: 3, mode: 'hologram', extra: [1] })])).toBeUndefined();
    expect(parseSubagentDescriptor({ version: 1 })).toBeUndefined();
  });

  const badInputs: [string, unknown][] = [
    ['a BigInt label', { mode: 'one-shot', provider: 'p', label: 1n }],
    ['a function persona', { mode: 'continuable', provider: 'p', label: 'l', persona: () => 'x' }],
    ['a Symbol in toolFilter.allow', { mode: 'continuable', provider: 'p', label: 'l', toolFilter: { allow: [Symbol('x')] } }],
    ['a hole in toolFilter.deny', { mode: 'continuable', provider: 'p', label: 'l', toolFilter: { deny: ['a', , 'b'] } }],
    ['a continuable without label', { mode: 'continuable', provider: 'p' }],
    ['an unknown mode', { mode: 'forked', provider: 'p' }],
    ['a non-string provider', { mode: 'one-shot', provider: 7 }],
    ['an empty toolFilter', { mode: 'continuable', provider: 'p', label: 'l', toolFilter: {} }],
    ['a fractional maxTokens', { mode: 'continuable', provider: 'p', label: 'l', maxTokens: 1.5 }],
    ['an empty tool module', { mode: 'continuable', provider: 'p', label: 'l', toolModules: [''] }],
    ['a negative budget', { mode: 'continuable', provider: 'p', label: 'l', budget: { turns: -1 } }],
  ];

  it.each(badInputs)('D3: snapshot of %s throws INVALID_REQUEST', (_name, input) => {
    expect(codeOf(() => snapshotSubagentDescriptor(input as SubagentDescriptorInput))).toBe('INVALID_REQUEST');
  });

  const corrupt: [string, unknown][] = [
    ['a string payload', 'descriptor'],
    ['a null payload', null],
    ['an array payload', [continuable]],
    ['a missing version', { mode: 'one-shot', provider: 'p' }],
    ['a string version', { version: '2', mode: 'one-shot', provider: 'p' }],
    ['a missing mode', { version: 2, provider: 'p' }],
    ['an invalid mode', { version: 2, mode: 'forked', provider: 'p' }],
    ['a one-shot with persona', { version: 2, mode: 'one-shot', provider: 'p', persona: 'x' }],
    ['a one-shot label 7', { version: 2, mode: 'one-shot', provider: 'p', label: 7 }],
    ['a continuable with an unknown key', { ...continuable, budget: 5 }],
    ['a continuable with agentProvider (not in our vocabulary)', { ...continuable, agentProvider: 'x' }],
    ['a missing provider', { version: 2, mode: 'one-shot' }],
    ['a non-string provider', { version: 2, mode: 'one-shot', provider: 1 }],
    ['a continuable without label', { version: 2, mode: 'continuable', provider: 'p' }],
    ['a continuable non-string label', { ...continuable, label: ['l'] }],
    ['a non-string agentModel', { ...continuable, agentModel: { id: 'm' } }],
    ['a non-object providerData', { ...continuable, providerData: 'session-1' }],
    ['a one-shot with providerData', { version: 2, mode: 'one-shot', provider: 'p', providerData: { sessionId: 's' } }],
    ['a non-string persona', { ...continuable, persona: false }],
    ['a toolFilter array', { ...continuable, toolFilter: ['read'] }],
    ['a toolFilter unknown key', { ...continuable, toolFilter: { allow: ['read'], only: [] } }],
    ['an empty toolFilter', { ...continuable, toolFilter: {} }],
    ['a non-array allow', { ...continuable, toolFilter: { allow: 'read' } }],
    ['a non-string deny item', { ...continuable, toolFilter: { deny: ['write', 3] } }],
  ];

  it.each(corrupt)('D4: fold of %s throws CORRUPT_DATA', (_name, data) => {
    expect(codeOf(() => foldSubagentDescriptor([descriptorEvent(data)]))).toBe('CORRUPT_DATA');
  });

  it('D5: takes the first of two descriptor events', () => {
    const first = snapshotSubagentDescriptor({ mode: 'one-shot', provider: 'a' });
    const second = snapshotSubagentDescriptor({ mode: 'continuable', provider: 'b', label: 'l' });
    const events = [event(0, 0, 'turn/start'), descriptorEvent(first, 1), descriptorEvent(second, 2)];
    expect(foldSubagentDescriptor(events)).toStrictEqual(first);
  });
});

describe('subagent projections', () => {
  const descriptor = { version: 2, mode: 'one-shot', provider: 'p' };

  it('P1: an empty log projects timing {settledMs: 0} and identity null', () => {
    expect(fold(subagentTiming, [])).toStrictEqual({ settledMs: 0 });
    expect(fold(subagentIdentity, [])).toBeNull();
  });

  it('P2: timing restarts at each descriptor and sums the turns after it', () => {
    const times: [string, number][] = [
      ['turn/start', 100], [DESCRIPTOR_EVENT, 110], ['turn/end', 300],
      ['turn/start', 1000], [DESCRIPTOR_EVENT, 1100], ['turn/end', 4100],
      ['turn/start', 10000], ['turn/end', 12000],
    ];
    const events = times.map(([type, time], seq) => event(seq, time, type, type === DESCRIPTOR_EVENT ? descriptor : {}));
    expect(fold(subagentTiming, events)).toStrictEqual({ settledMs: 5100 });
  });

  it('P2: timing clamps a clock step backwards and extends the open turn to the latest event', () => {
    const events = [
      event(0, 1000, 'turn/start'), descriptorEvent(descriptor, 1, 1100), event(2, 900, 'turn/end'),
      event(3, 2000, 'turn/start'), event(4, 2500, 'assistant/chunk'),
    ];
    expect(fold(subagentTiming, events)).toStrictEqual({ settledMs: 0, active: { since: 2000, through: 2500 } });
  });

  it('P3: timing no-ops return the same state object', () => {
    const initial = subagentTiming.initial();
    expect(subagentTiming.step(initial, event(0, 5, 'user/message'))).toBe(initial);
    expect(subagentTiming.step(initial, event(0, 5, 'turn/end'))).toBe(initial);
    const settled = subagentTiming.step(initial, descriptorEvent(descriptor, 0, 10));
    expect(subagentTiming.step(settled, event(1, 20, 'turn/end'))).toBe(settled);
  });

  it('P3: a turn that ended before the descriptor is not counted', () => {
    const events = [event(0, 100, 'turn/start'), event(1, 200, 'turn/end'), descriptorEvent(descriptor, 2, 300)];
    expect(fold(subagentTiming, events)).toStrictEqual({ settledMs: 0 });
  });

  it('P4: identity follows the last descriptor and a malformed one clears it to null', () => {
    const valid = descriptorEvent({ version: 2, mode: 'continuable', provider: 'p', label: 'helper' }, 1);
    expect(fold(subagentIdentity, [event(0, 0, 'turn/start'), valid])).toStrictEqual({
      mode: 'continuable', label: 'helper', seq: 1,
    });
    const view = fold(subagentIdentity, [valid, descriptorEvent({ version: 2, mode: 'one-shot' }, 2)]);
    expect(view).toBeNull();
    expect(JSON.parse(JSON.stringify({ subagent: view }))).toStrictEqual({ subagent: null });
  });

  it('identity ignores other events and a descriptor of another version yields null', () => {
    const initial = subagentIdentity.initial();
    expect(subagentIdentity.step(initial, event(0, 0, 'turn/start'))).toBe(initial);
    const oneShot = fold(subagentIdentity, [descriptorEvent(descriptor, 4)]);
    expect(oneShot).toStrictEqual({ mode: 'one-shot', seq: 4 });
    expect(fold(subagentIdentity, [descriptorEvent(descriptor, 4), descriptorEvent({ version: 3 }, 5)])).toBeNull();
  });

  it('resumes folding from a state that went through JSON', () => {
    const events = [
      event(0, 100, 'turn/start'), descriptorEvent(descriptor, 1, 150), event(2, 400, 'turn/end'),
      event(3, 500, 'turn/start'), event(4, 700, 'assistant/message'),
    ];
    for (const projection of [subagentTiming, subagentIdentity] as SessionProjection<unknown, unknown>[]) {
      let state = projection.initial();
      events.forEach((next, index) => {
        state = projection.step(state, next);
        if (index === 2) state = JSON.parse(JSON.stringify(state)) as unknown;
      });
      expect(projection.view(state)).toStrictEqual(fold(projection, events));
    }
  });
});
