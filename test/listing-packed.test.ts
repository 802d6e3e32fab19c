// Listing rows read from an SQLite file equal those of the memory store for figures at and past
// every limit of the packed listing read (large token and call counts, fractional times, unusual
// labels), for children and for descendants, and a tree's pre-order walk is the creation-order one.
import { describe, expect, it } from 'vitest';
import {
  DESCRIPTOR_EVENT,
  createHost,
  memoryPersistence,
  sqlitePersistence,
  type SessionEvent,
  type SessionPersistence,
  type SubagentDescendantListEntry,
  type SubagentListEntry,
} from 'subagent-host';
import { closeAfterEach, tempFiles } from './helpers.js';

const { file: newFile } = tempFiles('subagent-listing-packed-');
const track = closeAfterEach();

interface Child {
  id: string;
  parent?: string;
  createdAt?: number;
  mode?: 'one-shot' | 'continuable' | 'none';
  label?: string;
  input?: number;
  output?: number;
  toolCalls?: number;
  requests?: number;
  turns?: number;
  turnEnd?: number;
}

/** A log: descriptor (unless `mode: 'none'`), `turns` turns, the first with `requests` model requests and `toolCalls` calls. */
function log({ id, mode = 'one-shot', label, input = 0, output = 0, toolCalls = 0, requests = 1, turns = 1, turnEnd = 120 }: Child): SessionEvent[] {
  const events: Omit<SessionEvent, 'seq'>[] = [];
  if (mode !== 'none') {
    events.push({ time: 100, type: DESCRIPTOR_EVENT, data: { version: 2, mode, provider: 'in-process', ...(label === undefined ? {} : { label }) } });
  }
  events.push({ time: 100, type: 'turn/start', data: { turn: 1 } });
  for (let step = 0; step < requests; step++) events.push({ time: 101, type: 'step/start', data: {} });
  events.push({ time: 110, type: 'assistant/message', data: { content: [], usage: { inputTokens: input, outputTokens: output } } });
  for (let call = 0; call < toolCalls; call++) {
    events.push({ time: 111, type: 'tool/call', data: { turn: 1, step: 1, callId: `${id}-${call}`, name: 'noop', input: {} } });
  }
  events.push({ time: turnEnd, type: 'turn/end', data: { turn: 1, reason: { kind: 'completed' } } });
  for (let turn = 2; turn <= turns; turn++) {
    events.push({ time: turnEnd + turn, type: 'turn/start', data: { turn } });
    events.push({ time: turnEnd + turn + 1, type: 'turn/end', data: { turn, reason: { kind: 'completed' } } });
  }
  return events.map((event, seq) => ({ ...event, seq }));
}

// Limits of the packed read: input tokens 2^30, output tokens 2^23, tool calls 2^16.
const CHILDREN: Child[] = [
  { id: 'at-limits', input: 2 ** 30 - 1, output: 2 ** 23 - 1, toolCalls: 2 ** 16 - 1, requests: 3, turns: 2 },
  { id: 'busy', input: 123_456, output: 7_890, toolCalls: 11, requests: 13, turns: 5 },
  { id: 'input-past', input: 2 ** 30, output: 7 },
  { id: 'output-past', input: 3, output: 2 ** 23 },
  { id: 'calls-past', toolCalls: 2 ** 16 },
  { id: 'huge', input: 2 ** 52, output: 2 ** 52 - 1, mode: 'continuable', label: 'big' },
  { id: 'fractions', createdAt: 1.5, turnEnd: 120.25, label: 'fractional wall time' },
  { id: 'surrogate', label: 'lone \ud800 surrogate' },
  { id: 'escape-like', label: '\u0000not an escape' },
  { id: 'unlabelled', mode: 'one-shot' },
  { id: 'no-descriptor', mode: 'none' },
  { id: 'deep', parent: 'at-limits', input: 2 ** 31, label: 'under a packed row' },
  { id: 'deeper', parent: 'deep', toolCalls: 2 ** 16 + 1 },
  { id: 'sibling', parent: 'at-limits', createdAt: 0.5 },
];

async function seed(persistence: SessionPersistence): Promise<void> {
  await persistence.create({ id: 'root', createdAt: 0 });
  const appends: Promise<void>[] = [];
  for (const [index, child] of CHILDREN.entries()) {
    await persistence.create({ id: child.id, createdAt: child.createdAt ?? 10 + index, parentSession: child.parent ?? 'root', origin: 'subagent' });
    appends.push(persistence.append(child.id, log(child)));
  }
  await persistence.flush();
  await Promise.all(appends);
}

async function listings(persistence: SessionPersistence): Promise<[SubagentListEntry[], SubagentDescendantListEntry[]]> {
  const host = track(await createHost({ persistence, providers: false, pool: { minThreads: 0 } }));
  return [await host.subagents.listChildren('root'), await host.subagents.listDescendants('root')];
}

describe('listing figures past the packed read', () => {
  it('lists from a reopened SQLite file exactly what the memory store lists', { timeout: 120_000 }, async () => {
    const memory = track(memoryPersistence());
    await seed(memory);
    const file = newFile();
    const writer = sqlitePersistence(file);
    await seed(writer);
    await writer.close();
    const [children, descendants] = await listings(track(sqlitePersistence(file)));
    const [memoryChildren, memoryDescendants] = await listings(memory);
    expect(children).toStrictEqual(memoryChildren);
    expect(descendants).toStrictEqual(memoryDescendants);

    const usage = new Map(descendants.map((row) => [row.id, row.kind === 'child' ? row.usage : row.reason]));
    expect(usage.get('at-limits')).toMatchObject({ inputTokens: 2 ** 30 - 1, outputTokens: 2 ** 23 - 1, toolCalls: 2 ** 16 - 1, requests: 3, turns: 2 });
    expect(usage.get('busy')).toMatchObject({ inputTokens: 123_456, outputTokens: 7_890, toolCalls: 11, requests: 13, turns: 5 });
    expect(usage.get('input-past')).toMatchObject({ inputTokens: 2 ** 30, outputTokens: 7, totalTokens: 2 ** 30 + 7 });
    expect(usage.get('output-past')).toMatchObject({ inputTokens: 3, outputTokens: 2 ** 23 });
    expect(usage.get('calls-past')).toMatchObject({ toolCalls: 2 ** 16, requests: 1, turns: 1 });
    expect(usage.get('huge')).toMatchObject({ inputTokens: 2 ** 52, outputTokens: 2 ** 52 - 1 });
    expect(usage.get('fractions')).toMatchObject({ wallMs: 20.25 });
    expect(usage.get('deeper')).toMatchObject({ toolCalls: 2 ** 16 + 1 });
    expect(usage.get('no-descriptor')).toBe('corrupt');
    expect(children.map((row) => row.id)).toEqual([
      'fractions', 'at-limits', 'busy', 'input-past', 'output-past', 'calls-past', 'huge', 'surrogate', 'escape-like', 'unlabelled', 'no-descriptor',
    ]);
    // Pre-order, siblings in creation order: 'sibling' was created first of at-limits' children.
    expect(descendants.map((row) => [row.id, row.depth])).toEqual([
      ['fractions', 1], ['at-limits', 1], ['sibling', 2], ['deep', 2], ['deeper', 3], ['busy', 1], ['input-past', 1], ['output-past', 1],
      ['calls-past', 1], ['huge', 1], ['surrogate', 1], ['escape-like', 1], ['unlabelled', 1], ['no-descriptor', 1],
    ]);
    const top = descendants.find((row) => row.id === 'at-limits');
    expect(top?.kind === 'child' && top.hasChildren && top.treeUsage.toolCalls).toBe(2 ** 16 - 1 + 2 ** 16 + 1);
  });
});
