// A forest of stored sessions in an insertion order that exercises every way a session's place in a
// tree is stored: siblings created out of order and tied, children stored before their parent,
// parents never stored, parent cycles, chains deeper than the keyed depth. Shared by the listing
// and upgrade tests, which list it from every root and compare with the memory store.
import { DESCRIPTOR_EVENT, createHost, type SessionPersistence } from 'subagent-host';

/** A session: its parent, createdAt, and whether it is an ordinary (not subagent) session. */
export interface ForestSession {
  id: string;
  parent?: string;
  createdAt: number;
  ordinary?: boolean;
}

function chain(prefix: string, from: number, to: number, parentOfFirst: string | undefined, createdAt: number): ForestSession[] {
  const sessions: ForestSession[] = [];
  for (let i = from; i <= to; i++) {
    const parent = i === from ? parentOfFirst : `${prefix}${i - 1}`;
    sessions.push({ id: `${prefix}${i}`, ...(parent === undefined ? {} : { parent }), createdAt: createdAt + i });
  }
  return sessions;
}

/** In insertion order. */
export const FOREST: readonly ForestSession[] = [
  { id: 'top', createdAt: 0 },
  { id: 'b', parent: 'top', createdAt: 20 },
  // Stored after 'b' but created before it; 'a2' ties with 'a' and was stored later.
  { id: 'a', parent: 'top', createdAt: 10 },
  { id: 'a2', parent: 'top', createdAt: 10 },
  { id: 'neg', parent: 'top', createdAt: -3.5 },
  ...chain('a-', 1, 4, 'a', 5),
  { id: 'ord', parent: 'top', createdAt: 15, ordinary: true },
  { id: 'ord-sub', parent: 'ord', createdAt: 16 },
  { id: 'frac', parent: 'b', createdAt: 20.25 },
  { id: 'frac2', parent: 'b', createdAt: 20.125 },
  // Stored before their parent 'late', which is stored later under 'b'.
  { id: 'kid', parent: 'late', createdAt: 30 },
  { id: 'kid-1', parent: 'kid', createdAt: 31 },
  { id: 'late', parent: 'b', createdAt: 29 },
  // Parents never stored, among them ids that are prefixes of each other and non-ASCII ones.
  { id: 'gone-1', parent: 'gone', createdAt: 40 },
  { id: 'gone-1-1', parent: 'gone-1', createdAt: 41 },
  { id: 'gone-2', parent: 'gone', createdAt: 39 },
  { id: 'x1', parent: 'p', createdAt: 42 },
  { id: 'x2', parent: 'p1', createdAt: 42 },
  { id: 'é', parent: '😀', createdAt: 43 },
  { id: 'é-1', parent: 'é', createdAt: 44 },
  // A cycle closed by its last session, a session below it, and a session that is its own parent.
  { id: 'c1', parent: 'c3', createdAt: 50 },
  { id: 'c2', parent: 'c1', createdAt: 51 },
  { id: 'c3', parent: 'c2', createdAt: 52 },
  { id: 'c2-leaf', parent: 'c2', createdAt: 53 },
  { id: 'self', parent: 'self', createdAt: 54 },
  { id: 'self-kid', parent: 'self', createdAt: 55 },
  // A chain 40 deep with side children, and a chain stored before its parent that moves it past
  // the keyed depth when that parent is stored at depth 26.
  ...chain('d', 0, 40, undefined, 100),
  { id: 'd20-side', parent: 'd20', createdAt: 200 },
  { id: 'd35-side', parent: 'd35', createdAt: 201 },
  ...chain('e', 1, 10, 'e0', 300),
  { id: 'e0', parent: 'd25', createdAt: 299 },
  // A chain whose last session is at the keyed depth, with no children.
  ...chain('f', 0, 31, undefined, 400),
];

/** The sessions that keep no lineage key: on or below a parent cycle, or below the keyed depth. */
export const UNKEYED: readonly string[] = [
  'c1', 'c2', 'c3', 'c2-leaf', 'self', 'self-kid',
  ...chain('d', 32, 40, undefined, 0).map((session) => session.id), 'd35-side',
  ...chain('e', 6, 10, undefined, 0).map((session) => session.id),
];

/** Roots worth listing: every session, the parents never stored, and an unknown id. */
export const ROOTS: readonly string[] = [...FOREST.map((session) => session.id), 'gone', 'p', 'p1', '😀', 'nobody'];

const descriptor = (id: string) => ({ version: 2, mode: 'one-shot', provider: 'in-process', label: `task ${id}` });

/** Stores {@link FOREST} through `persistence`, each subagent session with its descriptor. */
export async function storeForest(persistence: SessionPersistence): Promise<void> {
  const appends: Promise<void>[] = [];
  for (const { id, parent, createdAt, ordinary } of FOREST) {
    await persistence.create({ id, createdAt, ...(parent === undefined ? {} : { parentSession: parent }), ...(ordinary || parent === undefined ? {} : { origin: 'subagent' as const }) });
    appends.push(persistence.append(id, [{ seq: 0, time: 1000, type: DESCRIPTOR_EVENT, data: descriptor(id) }]));
  }
  await persistence.flush();
  await Promise.all(appends);
}

/** Children and descendants of every root of {@link ROOTS}, listed by a host over `persistence`. */
export async function listEveryRoot(persistence: SessionPersistence): Promise<Map<string, [unknown, unknown]>> {
  const host = await createHost({ persistence, providers: false, pool: { minThreads: 0 } });
  try {
    const listed = new Map<string, [unknown, unknown]>();
    for (const root of ROOTS) listed.set(root, [await host.subagents.listChildren(root), await host.subagents.listDescendants(root)]);
    return listed;
  } finally {
    await host.close();
  }
}
