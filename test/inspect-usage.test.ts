// The inspector's token counts agree with the library's listings for the same file: usage a log
// holds that is not a count (a string, a negative, a fraction, a boolean) counts as the usage fold
// counts it, and sums beyond the safe integers are capped as the fold caps them, never an error.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DESCRIPTOR_EVENT, createHost, sqlitePersistence, type SessionEvent } from 'subagent-host';
import { tempFiles } from './helpers.js';
import { rawGet, startInspect, type InspectProcess } from './inspect-helpers.js';

const files = tempFiles('inspect-usage-');
const db = files.file();
let server: InspectProcess;

/** A child's log: descriptor, one turn with one model request per reported usage. */
function spent(label: string, usages: unknown[]): SessionEvent[] {
  const events: SessionEvent[] = [
    { seq: 0, time: 100, type: DESCRIPTOR_EVENT, data: { version: 2, mode: 'one-shot', provider: 'in-process', label } },
    { seq: 1, time: 100, type: 'turn/start', data: { turn: 1 } },
  ];
  for (const usage of usages) {
    events.push({ seq: events.length, time: 101, type: 'step/start', data: {} });
    events.push({ seq: events.length, time: 110, type: 'assistant/message', data: { content: [], usage } });
  }
  events.push({ seq: events.length, time: 120, type: 'turn/end', data: { turn: 1, reason: { kind: 'completed' } } });
  return events;
}

const CHILDREN: Record<string, unknown[]> = {
  // Not counts: each counts 0, a fraction its rounded value.
  odd: [
    { inputTokens: '12', outputTokens: -5 },
    { inputTokens: 2.6, outputTokens: true },
  ],
  // Each a safe integer, their sum is not: capped at Number.MAX_SAFE_INTEGER.
  large: [
    { inputTokens: Number.MAX_SAFE_INTEGER, outputTokens: 1 },
    { inputTokens: Number.MAX_SAFE_INTEGER, outputTokens: 1 },
  ],
  // Sums beyond what SQLite adds as integers (2^63 − 1) and as finite reals.
  huge: [
    { inputTokens: 5e18, outputTokens: 1e308 },
    { inputTokens: 5e18, outputTokens: 1e308 },
  ],
  plain: [{ inputTokens: 30, outputTokens: 4 }],
  // The largest number below one half rounds to 0 (SQLite's round adds one half first: 1).
  'below-half': [{ inputTokens: 0.49999999999999994, outputTokens: 0.5 }],
};

/** The tokens each child's listing row shows, from a host on the same file. */
let listed: Map<string, { inputTokens: number; outputTokens: number }>;

beforeAll(async () => {
  const persistence = sqlitePersistence(db);
  await persistence.create({ id: 'root', createdAt: 1 });
  for (const [index, [id, usages]] of Object.entries(CHILDREN).entries()) {
    await persistence.create({ id, createdAt: 2 + index, parentSession: 'root', origin: 'subagent' });
    await persistence.append(id, spent(id, usages));
  }
  await persistence.close();
  const host = await createHost({ providers: false, persistence: { sqlite: db } });
  try {
    listed = new Map();
    for (const row of await host.subagents.listDescendants('root')) {
      if (row.kind === 'child') listed.set(row.id, { inputTokens: row.usage.inputTokens, outputTokens: row.usage.outputTokens });
    }
  } finally {
    await host.close();
  }
  server = await startInspect(db);
});

afterAll(async () => {
  await server?.stop();
});

describe('token counts in the inspector', () => {
  it('are those of the listing rows, for counts that are not whole numbers and sums beyond the safe integers', async () => {
    expect(Object.fromEntries(listed)).toEqual({
      odd: { inputTokens: 3, outputTokens: 0 },
      large: { inputTokens: Number.MAX_SAFE_INTEGER, outputTokens: 2 },
      huge: { inputTokens: Number.MAX_SAFE_INTEGER, outputTokens: Number.MAX_SAFE_INTEGER },
      plain: { inputTokens: 30, outputTokens: 4 },
      'below-half': { inputTokens: 0, outputTokens: 1 },
    });
    const tree = await rawGet(server.url, '/api/roots/root/tree');
    expect(tree.status).toBe(200);
    const nodes = (JSON.parse(tree.body) as { nodes: { id: string; usage?: unknown }[] }).nodes;
    expect(Object.fromEntries(nodes.map((node) => [node.id, node.usage]))).toEqual(Object.fromEntries(listed));
  });

  it('are those of the listing rows on each child’s transcript', async () => {
    for (const [id, tokens] of listed) {
      const transcript = await rawGet(server.url, `/api/sessions/${id}`);
      expect(transcript.status).toBe(200);
      expect((JSON.parse(transcript.body) as { usage?: unknown }).usage).toEqual(tokens);
    }
  });
});
