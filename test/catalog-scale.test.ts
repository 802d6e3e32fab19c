// The catalog at scale: 10,000 children persisted in one SQLite file are all listed, in creation
// order, by a new host that reopens the file (so every child is cold and read from stored projections).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, expect, it } from 'vitest';
import { DESCRIPTOR_EVENT, createHost, sqlitePersistence, type SubagentListEntry } from 'subagent-host';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'subagent-catalog-scale-'));
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));

const COUNT = 10_000;
const NO_USAGE = { inputTokens: 0, outputTokens: 0, totalTokens: 0, requests: 0, turns: 0, toolCalls: 0, wallMs: 0 };

it(`lists ${COUNT} persisted children from a reopened database`, async () => {
  const file = path.join(tmp, 'scale.db');
  // Not one fsync per create: what is listed is the point here, not how durably it was written.
  const writer = sqlitePersistence(file, { synchronous: 'normal' });
  await writer.create({ id: 'parent', createdAt: 1 });
  // Ten children share each millisecond and ids are scrambled, so only creation order explains the result.
  const ids = Array.from({ length: COUNT }, (_, i) => `child-${String((i * 7919) % COUNT).padStart(5, '0')}`);
  const appends: Promise<void>[] = [];
  for (const [i, id] of ids.entries()) {
    await writer.create({ id, createdAt: 1000 + Math.floor(i / 10), parentSession: 'parent', origin: 'subagent' });
    // Not awaited one by one: write-behind commits them in a few large transactions.
    appends.push(writer.append(id, [{ seq: 0, time: 2000, type: DESCRIPTOR_EVENT, data: { version: 2, mode: 'one-shot', provider: 'spawn', label: `task ${i}` } }]));
  }
  await writer.flush();
  await Promise.all(appends);
  await writer.close();

  const host = await createHost({ persistence: { sqlite: file }, providers: false, pool: { minThreads: 0 } });
  try {
    const expected: SubagentListEntry[] = ids.map((id, i) => ({
      kind: 'child',
      id,
      mode: 'one-shot',
      label: `task ${i}`,
      activity: 'inactive',
      hasChildren: false,
      createdAt: 1000 + Math.floor(i / 10),
      usage: NO_USAGE,
    }));
    expect(await host.subagents.listChildren('parent')).toStrictEqual(expected);
    expect(await host.subagents.listDescendants('parent')).toStrictEqual(expected.map((row) => ({ ...row, treeUsage: NO_USAGE, parentId: 'parent', depth: 1 })));
  } finally {
    await host.close();
  }
}, 180_000);
