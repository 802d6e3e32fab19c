// Tree totals on listDescendants rows: each child's `treeUsage` is its own usage plus every listed
// descendant's, through ordinary sessions in between and over live and stored children alike, and
// the same from a reopened SQLite file.
import { describe, expect, it } from 'vitest';
import {
  DESCRIPTOR_EVENT,
  createHost,
  memoryPersistence,
  sqlitePersistence,
  type Host,
  type SessionEvent,
  type SessionPersistence,
  type SubagentDescendantListEntry,
} from 'subagent-host';
import { hostParts } from 'subagent-host/internals';
import { closeAfterEach, tempFiles } from './helpers.js';

const { file: newFile } = tempFiles('subagent-listing-tree-usage-');
const track = closeAfterEach();

/** A child's log: descriptor, one turn with one model request that spent `input` + `output` tokens. */
function spent(label: string, input: number, output: number): SessionEvent[] {
  return [
    { seq: 0, time: 100, type: DESCRIPTOR_EVENT, data: { version: 2, mode: 'one-shot', provider: 'in-process', label } },
    { seq: 1, time: 100, type: 'turn/start', data: { turn: 1 } },
    { seq: 2, time: 101, type: 'step/start', data: {} },
    { seq: 3, time: 110, type: 'assistant/message', data: { content: [], usage: { inputTokens: input, outputTokens: output } } },
    { seq: 4, time: 120, type: 'turn/end', data: { turn: 1, reason: { kind: 'completed' } } },
  ];
}

/**
 * root → a (10+1) → a1 (100+10) → a11 (1000+100); root → b (20+2) → ordinary o → b1 (200+20).
 * Ordinary sessions are walked through: b1's tokens count in b's tree.
 */
async function seed(persistence: SessionPersistence): Promise<void> {
  const children: [string, string, number, number][] = [
    ['a', 'root', 10, 1],
    ['a1', 'a', 100, 10],
    ['a11', 'a1', 1000, 100],
    ['b', 'root', 20, 2],
    ['b1', 'o', 200, 20],
  ];
  await persistence.create({ id: 'root', createdAt: 1 });
  const appends: Promise<void>[] = [];
  for (const [index, [id, parent, input, output]] of children.entries()) {
    if (id === 'b1') await persistence.create({ id: 'o', createdAt: 2 + index, parentSession: 'b' });
    await persistence.create({ id, createdAt: 3 + index, parentSession: parent, origin: 'subagent' });
    appends.push(persistence.append(id, spent(id, input, output)));
  }
  await persistence.flush();
  await Promise.all(appends);
}

const tokens = (rows: SubagentDescendantListEntry[]) =>
  rows.map((row) => (row.kind === 'child' ? [row.id, row.usage.totalTokens, row.treeUsage.totalTokens] : [row.id, row.reason]));

const EXPECTED = [
  ['a', 11, 1221],
  ['a1', 110, 1210],
  ['a11', 1100, 1100],
  ['b', 22, 242],
  ['b1', 220, 220],
];

const open = async (persistence: SessionPersistence): Promise<Host> =>
  track(await createHost({ persistence, providers: false, pool: { minThreads: 0 } }));

describe.each([
  { name: 'an SQLite file', store: () => sqlitePersistence(newFile()) },
  { name: 'memory', store: () => memoryPersistence() },
])('tree totals over $name', ({ store }) => {
  it("counts a grandchild's tokens in its grandparent's tree total, through ordinary sessions", async () => {
    const persistence = track(store());
    await seed(persistence);
    const host = await open(persistence);
    const rows = await host.subagents.listDescendants('root');
    expect(tokens(rows)).toEqual(EXPECTED);
    const a = rows[0]!;
    expect(a.kind === 'child' && a.treeUsage).toStrictEqual({ inputTokens: 1110, outputTokens: 111, totalTokens: 1221, requests: 3, turns: 3, toolCalls: 0, wallMs: 60 });
    // Rooted lower, a tree counts only what is below that root.
    expect(tokens(await host.subagents.listDescendants('a1'))).toEqual([['a11', 1100, 1100]]);
  });

  it("adds a live grandchild's usage so far to its stored ancestors' totals", async () => {
    const persistence = track(store());
    await seed(persistence);
    const host = await open(persistence);
    const live = hostParts(host).sessions.create({ id: 'a12', createdAt: 50, parentSession: 'a1', origin: 'subagent' });
    for (const event of spent('a12', 5000, 500)) live.append(event.type, event.data);
    const rows = tokens(await host.subagents.listDescendants('root'));
    expect(rows.slice(0, 4)).toEqual([['a', 11, 6721], ['a1', 110, 6710], ['a11', 1100, 1100], ['a12', 5500, 5500]]);
  });

  it('keeps tree totals within the safe integers, as each child’s own are, stored and live', async () => {
    const persistence = track(store());
    const max = Number.MAX_SAFE_INTEGER;
    await persistence.create({ id: 'root', createdAt: 1 });
    await persistence.create({ id: 'x', createdAt: 2, parentSession: 'root', origin: 'subagent' });
    await persistence.create({ id: 'x1', createdAt: 3, parentSession: 'x', origin: 'subagent' });
    await persistence.create({ id: 'x2', createdAt: 4, parentSession: 'x', origin: 'subagent' });
    await persistence.append('x', spent('x', max, 1));
    await persistence.append('x1', spent('x1', max, 1));
    await persistence.append('x2', spent('x2', max, 1));
    await persistence.flush();
    const host = await open(persistence);
    const capped = { inputTokens: max, outputTokens: 3, totalTokens: max, requests: 3, turns: 3, toolCalls: 0, wallMs: 60 };
    expect((await host.subagents.listDescendants('root'))[0]).toMatchObject({ id: 'x', treeUsage: capped });
    const live = hostParts(host).sessions.create({ id: 'x3', createdAt: 50, parentSession: 'x', origin: 'subagent' });
    for (const event of spent('x3', max, 1)) live.append(event.type, event.data);
    expect((await host.subagents.listDescendants('root'))[0]).toMatchObject({ id: 'x', treeUsage: { ...capped, outputTokens: 4, requests: 4, turns: 4, wallMs: expect.any(Number) } });
  });
});

it('gives the same tree totals from a reopened SQLite file', async () => {
  const file = newFile();
  const writer = sqlitePersistence(file);
  await seed(writer);
  await writer.close();
  const reopened = await open(track(sqlitePersistence(file)));
  expect(tokens(await reopened.subagents.listDescendants('root'))).toEqual(EXPECTED);
});
