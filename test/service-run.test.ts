// The run wrapper `start` resolves with: a normalized, deeply frozen result, bounded diagnostics,
// contract faults, one joined dispose and cancellation (seam-spec §3, T3, O1–O2).
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { text, type SessionEvent, type SubagentRun } from 'subagent-host';
import {
  AssistantOutputFold,
  DIAGNOSTIC_LIMIT_BYTES,
  DIAGNOSTIC_TRUNCATION_MARKER,
  finalAssistantOutput,
  limitDiagnostic,
} from 'subagent-host/internals';
import { deferred, holed } from './helpers.js';
import { fakeProvider, fakeRun, testHost, type FakeRun, type TestHost } from './fake-provider.js';

let t: TestHost;

beforeEach(async () => {
  t = await testHost();
});

afterEach(async () => {
  await t.host.close();
  expect(t.host.subagents.activeRuns).toBe(0);
});

async function startWith(raw: FakeRun, signal?: AbortSignal): Promise<SubagentRun & AsyncDisposable> {
  t.host.subagents.registerProvider(fakeProvider('fake', { start: () => Promise.resolve(raw) }));
  return t.host.subagents.start('fake', t.request(signal ? { signal } : {}));
}

const bytes = (value: string) => Buffer.byteLength(value, 'utf8');

describe('result', () => {
  it('is a deeply frozen copy of the provider result', async () => {
    const raw = fakeRun();
    const run = await startWith(raw);
    const provided = { output: [text('a')], structured: { list: [1, { deep: true }] }, stopReason: 'completed' };
    raw.settle.resolve(provided);
    const result = await run.result;
    expect(result).toEqual(provided);
    expect(result).not.toBe(provided);
    for (const part of [result, result.output, result.output[0], result.structured, (result.structured as { list: unknown[] }).list]) {
      expect(Object.isFrozen(part)).toBe(true);
    }
    provided.output.push(text('later'));
    expect(result.output).toEqual([text('a')]);
    await run.dispose();
  });

  it('keeps the seven usage figures and drops keys a provider put beside them', async () => {
    const raw = fakeRun();
    const run = await startWith(raw);
    const usage = { inputTokens: 3, outputTokens: 4, totalTokens: 7, requests: 2, turns: 1, toolCalls: 1, wallMs: 5 };
    raw.settle.resolve({ output: [], stopReason: 'completed', usage: { ...usage, costUsd: 0.5 } });
    await expect(run.result).resolves.toEqual({ output: [], stopReason: 'completed', usage });
    await run.dispose();
  });

  it('drops a diagnostic from a completed result', async () => {
    const raw = fakeRun();
    const run = await startWith(raw);
    raw.settle.resolve({ output: [], diagnostic: 'noise', stopReason: 'completed' });
    await expect(run.result).resolves.toEqual({ output: [], stopReason: 'completed' });
    await run.dispose();
  });

  it('T3: cuts a long multi-byte diagnostic to the limit with the marker and no broken character', async () => {
    const raw = fakeRun();
    const run = await startWith(raw);
    raw.settle.resolve({ output: [], diagnostic: '€'.repeat(3000), stopReason: 'error' });
    const { diagnostic } = await run.result;
    expect(bytes(diagnostic!)).toBeLessThanOrEqual(DIAGNOSTIC_LIMIT_BYTES);
    expect(diagnostic!.endsWith(DIAGNOSTIC_TRUNCATION_MARKER)).toBe(true);
    expect(diagnostic).not.toContain('\uFFFD');
    expect(diagnostic!.slice(0, -DIAGNOSTIC_TRUNCATION_MARKER.length)).toMatch(/^€+$/);
    await run.dispose();
  });

  it('T3: limitDiagnostic keeps exactly 4096 bytes and cuts 4097 on a character boundary', () => {
    const exact = 'a'.repeat(DIAGNOSTIC_LIMIT_BYTES);
    expect(limitDiagnostic(exact)).toBe(exact);
    const over = 'a'.repeat(DIAGNOSTIC_LIMIT_BYTES - 30) + '😀'.repeat(10);
    const cut = limitDiagnostic(over);
    expect(bytes(cut)).toBeLessThanOrEqual(DIAGNOSTIC_LIMIT_BYTES);
    expect(cut.endsWith(DIAGNOSTIC_TRUNCATION_MARKER)).toBe(true);
    expect(cut).not.toContain('\uFFFD');
    expect(over.startsWith(cut.slice(0, -DIAGNOSTIC_TRUNCATION_MARKER.length))).toBe(true);
    expect(limitDiagnostic('short')).toBe('short');
  });

  it.each([
    ['a string output', { output: 'text', stopReason: 'completed' }],
    ['no stopReason', { output: [] }],
    ['a non-string diagnostic', { output: [], diagnostic: 5, stopReason: 'error' }],
    ['a block without type', { output: [{ text: 'x' }], stopReason: 'completed' }],
    ['a hole in its output', { output: holed({ type: 'text', text: 'x' }), stopReason: 'completed' }],
    ['an infinite token count', { output: [], stopReason: 'completed', usage: { inputTokens: Infinity, outputTokens: 0, totalTokens: 0, requests: 0, turns: 0, toolCalls: 0, wallMs: 0 } }],
    // A negative figure would let a tree budget be overspent; a fraction or 1e300 is no count either.
    ['a negative token count', { output: [], stopReason: 'completed', usage: { inputTokens: 0, outputTokens: 0, totalTokens: -5000, requests: 0, turns: 0, toolCalls: 0, wallMs: 0 } }],
    ['a fractional request count', { output: [], stopReason: 'completed', usage: { inputTokens: 0, outputTokens: 0, totalTokens: 0, requests: 1.5, turns: 0, toolCalls: 0, wallMs: 0 } }],
    ['a token count beyond safe integers', { output: [], stopReason: 'completed', usage: { inputTokens: 1e300, outputTokens: 0, totalTokens: 1e300, requests: 0, turns: 0, toolCalls: 0, wallMs: 0 } }],
    ['an uncloneable structured value', { output: [], structured: () => 1, stopReason: 'completed' }],
    // Not plain JSON: a frozen Map or Date still changes, and a typed array cannot be frozen at all.
    ['a Map as structured value', { output: [], structured: new Map([['a', 1]]), stopReason: 'completed' }],
    ['a Date inside the structured value', { output: [], structured: { at: new Date(0) }, stopReason: 'completed' }],
    ['a typed array as structured value', { output: [], structured: new Uint8Array([1, 2]), stopReason: 'completed' }],
    ['a Set inside an output block', { output: [{ type: 'text', text: 'x', tags: new Set(['a']) }], stopReason: 'completed' }],
    ['undefined', undefined],
  ])('rejects CONTRACT_VIOLATION for %s, after the provider run was disposed', async (_label, bad) => {
    const order: string[] = [];
    const raw = fakeRun('c', {
      dispose: () => {
        order.push('provider dispose');
        return Promise.resolve();
      },
    });
    const run = await startWith(raw);
    raw.settle.resolve(bad);
    await run.result.catch((error: { code?: string }) => order.push(`rejected ${error.code}`));
    expect(order).toEqual(['provider dispose', 'rejected CONTRACT_VIOLATION']);
    await run.dispose();
    expect(raw.disposeCalls).toBe(1);
  });
});

describe('dispose', () => {
  it('joins concurrent, repeated and re-entrant calls into one provider dispose', async () => {
    const entered = deferred();
    const release = deferred();
    const holder: { run?: SubagentRun & AsyncDisposable } = {};
    let reentrant: Promise<void> | undefined;
    const raw = fakeRun('c', {
      dispose: () => {
        reentrant = holder.run?.dispose();
        entered.resolve();
        return release.promise.then(() => raw.settle.resolve({ output: [], stopReason: 'aborted' }));
      },
    });
    const run = (holder.run = await startWith(raw));
    const first = run.dispose();
    const concurrent = run.dispose();
    await entered.promise;
    const repeated = run.dispose();
    release.resolve();
    await first;
    const calls = [concurrent, reentrant, repeated, run.dispose(), run[Symbol.asyncDispose]()];
    expect(calls.every((call) => call === first)).toBe(true);
    expect(raw.disposeCalls).toBe(1);
  });

  it('is disposed at the end of an `await using` scope', async () => {
    const raw = fakeRun('c', {
      dispose: () => {
        raw.settle.resolve({ output: [], stopReason: 'aborted' });
        return Promise.resolve();
      },
    });
    {
      await using run = await startWith(raw);
      expect(run.id).toBe('c');
      expect(raw.disposeCalls).toBe(0);
    }
    expect(raw.disposeCalls).toBe(1);
  });

  it('cancels a running run: the provider signal aborts and the result settles aborted', async () => {
    let providerSignal: AbortSignal | undefined;
    const raw = fakeRun('c', {
      dispose: () => {
        raw.settle.resolve({ output: [], stopReason: 'error', diagnostic: 'torn down' });
        return Promise.resolve();
      },
    });
    t.host.subagents.registerProvider(
      fakeProvider('fake', {
        start: (request) => {
          providerSignal = request.signal;
          return Promise.resolve(raw);
        },
      }),
    );
    const run = await t.host.subagents.start('fake', t.request());
    await run.dispose();
    expect(providerSignal?.aborted).toBe(true);
    await expect(run.result).resolves.toEqual({ output: [], stopReason: 'aborted', diagnostic: 'torn down' });
  });

  it('leaves a settled run uncancelled', async () => {
    const raw = fakeRun();
    const run = await startWith(raw);
    raw.settle.resolve({ output: [], stopReason: 'completed' });
    await run.result;
    await run.dispose();
    expect(raw.cancels).toEqual([]);
  });

  it('waits for the provider result to settle', async () => {
    const order: string[] = [];
    const released = deferred();
    const raw = fakeRun('c', {
      dispose: () => {
        released.resolve();
        return Promise.resolve();
      },
    });
    const run = await startWith(raw);
    const disposing = run.dispose().then(() => order.push('disposed'));
    await released.promise;
    // Every microtask and pending I/O callback runs before this: a dispose not waiting would be done.
    await new Promise((resolve) => setImmediate(resolve));
    order.push('settling');
    raw.settle.resolve({ output: [], stopReason: 'completed' });
    await disposing;
    expect(order).toEqual(['settling', 'disposed']);
  });

  it('rejects with an independent release failure while the result stays resolved', async () => {
    const failure = new Error('release failed');
    const raw = fakeRun('c', { dispose: () => Promise.reject(failure) });
    const run = await startWith(raw);
    raw.settle.resolve({ output: [], stopReason: 'completed' });
    await expect(run.dispose()).rejects.toBe(failure);
    await expect(run.result).resolves.toMatchObject({ stopReason: 'completed' });
    expect(t.host.subagents.activeRuns).toBe(0);
  });
});

describe('cancellation', () => {
  it('cancel() aborts the provider signal once and settles aborted', async () => {
    let providerSignal: AbortSignal | undefined;
    const raw = fakeRun();
    t.host.subagents.registerProvider(
      fakeProvider('fake', {
        start: (request) => {
          providerSignal = request.signal;
          request.signal.addEventListener('abort', () => raw.settle.resolve({ output: [text('partial')], stopReason: 'error' }));
          return Promise.resolve(raw);
        },
      }),
    );
    const run = await t.host.subagents.start('fake', t.request());
    run.cancel('enough');
    run.cancel('again');
    expect(providerSignal?.aborted).toBe(true);
    expect(raw.cancels).toEqual(['enough']);
    await expect(run.result).resolves.toEqual({ output: [text('partial')], stopReason: 'aborted' });
    await run.dispose();
  });

  it('an abort of the caller signal after start settles the run aborted', async () => {
    const controller = new AbortController();
    const raw = fakeRun();
    const run = await startWith(raw, controller.signal);
    const reason = new Error('caller gave up');
    controller.abort(reason);
    expect(raw.cancels).toEqual([reason]);
    raw.settle.resolve({ output: [], stopReason: 'error', diagnostic: 'stopped' });
    await expect(run.result).resolves.toMatchObject({ stopReason: 'aborted' });
    await run.dispose();
  });

  it('an abort while the provider was starting cancels the run at publication', async () => {
    const controller = new AbortController();
    const release = deferred();
    const raw = fakeRun();
    t.host.subagents.registerProvider(fakeProvider('slow', { start: () => release.promise.then(() => raw) }));
    const starting = t.host.subagents.start('slow', t.request({ signal: controller.signal }));
    controller.abort('late');
    release.resolve();
    const run = await starting;
    expect(raw.cancels).toEqual(['late']);
    raw.settle.resolve({ output: [], stopReason: 'error' });
    await expect(run.result).resolves.toMatchObject({ stopReason: 'aborted' });
    await run.dispose();
  });

  it('keeps a completed result completed when cancel comes after', async () => {
    const raw = fakeRun();
    const run = await startWith(raw);
    raw.settle.resolve({ output: [text('done')], stopReason: 'completed' });
    run.cancel();
    await expect(run.result).resolves.toEqual({ output: [text('done')], stopReason: 'completed' });
    await run.dispose();
  });
});

describe('output selection', () => {
  let seq = 0;
  const message = (content: unknown[]): SessionEvent => ({ seq: seq++, time: 0, type: 'assistant/message', data: { turn: 1, step: 1, id: 'm', content } });
  const delta = (value: string, type = 'text-delta'): SessionEvent => ({ seq: seq++, time: 0, type: 'assistant/chunk', data: { turn: 1, step: 1, chunk: { type, text: value } } });
  const toolResult: SessionEvent = { seq: 0, time: 0, type: 'tool/result', data: { callId: 'c', name: 't', content: [text('tool says')] } };

  it('O1: the last non-empty assistant message wins', () => {
    expect(finalAssistantOutput([message([text('one')]), message([text('two')]), message([])])).toEqual([text('two')]);
    expect(finalAssistantOutput([delta('x'), message([text('complete')]), delta('y'), message([])])).toEqual([text('complete')]);
    const reasoning = [{ type: 'reasoning', text: 'hmm' }];
    expect(finalAssistantOutput([message([text('one')]), message(reasoning)])).toEqual(reasoning);
  });

  it('O2: without messages the text deltas join into one block; nothing said is nothing', () => {
    expect(finalAssistantOutput([delta('thinking', 'reasoning-delta'), delta('partial '), toolResult, delta('answer'), message([])])).toEqual([text('partial answer')]);
    expect(finalAssistantOutput([])).toEqual([]);
    const fold = new AssistantOutputFold();
    fold.push(delta('hmm', 'reasoning-delta'));
    fold.push(message([]));
    fold.pushText('');
    expect(fold.collect()).toBeUndefined();
    fold.pushText('raw');
    expect(fold.collect()).toEqual([text('raw')]);
  });
});
