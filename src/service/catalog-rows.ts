// Pieces of the catalog: cancellation checkpoints, the corpus of candidate sessions (stored records
// overlaid by live sessions), the iterative pre-order walk, and the rows themselves.
import type { Session, SessionStore } from '../seam/agent-types.js';
import type { SessionId } from '../seam/content.js';
import { SubagentError } from '../seam/errors.js';
import type { SubagentIdentity } from '../seam/projections.js';
import type { SubagentDescendantListEntry, SubagentListEntry } from '../seam/types.js';
import type { SubagentUsage } from '../seam/usage.js';
import type { CatalogHeader, CatalogRecord, StoredProjections } from '../runtime/session-persistence.js';

/**
 * One session of the corpus: the live session replaces its stored record wholesale. Nodes belong to
 * one listing, which fills in `depth` and `stored` as it goes.
 */
export interface CorpusNode {
  header: CatalogHeader;
  /** From the stored record; the live side is added from {@link LiveIndex}. */
  hasStoredSubagentChildren: boolean;
  live: Session | undefined;
  /** Depth below the root of a walk ({@link preOrder}); 0 until the walk reaches the node. */
  depth: number;
  /** The node's projections read, once read; stays undefined when that read failed. */
  stored: StoredProjections | undefined;
}

/** `CANCELLED`, with the abort reason as cause. */
export function cancelled(signal: AbortSignal): SubagentError {
  return SubagentError.cancelled('the listing', signal.reason);
}

/** Throws `CANCELLED` when `signal` has been aborted. */
export function checkpoint(signal: AbortSignal | undefined): void {
  if (signal?.aborted) throw cancelled(signal);
}

/**
 * `read`, but rejecting `CANCELLED` as soon as `signal` aborts, and also when `read` fails after
 * the abort: an aborted listing never reports the failure its abort may have caused.
 */
export function guarded<T>(read: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (signal === undefined) return read;
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => reject(cancelled(signal));
    signal.addEventListener('abort', onAbort, { once: true });
    read.then(
      (value) => {
        signal.removeEventListener('abort', onAbort);
        if (signal.aborted) onAbort();
        else resolve(value);
      },
      (error: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(signal.aborted ? cancelled(signal) : (error as Error));
      },
    );
  });
}

/** The live sessions at one moment, indexed for the listing. */
export class LiveIndex {
  readonly byId = new Map<SessionId, Session>();
  /** Ids that some live `origin: 'subagent'` session names as its parent. */
  readonly subagentParents = new Set<SessionId>();

  constructor(store: SessionStore) {
    for (const session of store.list()) {
      this.byId.set(session.header.id, session);
      const { parentSession, origin } = session.header;
      if (origin === 'subagent' && parentSession !== undefined) this.subagentParents.add(parentSession);
    }
  }

  /**
   * The corpus restricted to `stored` plus the live sessions `include` accepts, in creation order:
   * stored order first (createdAt, then creation sequence), live-only sessions after any stored
   * session created in the same millisecond (they were created later).
   */
  corpus(stored: readonly CatalogRecord[], include: (header: CatalogHeader) => boolean): CorpusNode[] {
    const nodes: CorpusNode[] = stored.map((record) => {
      const live = this.byId.get(record.header.id);
      return {
        header: live?.header ?? record.header,
        hasStoredSubagentChildren: record.hasSubagentChildren,
        live,
        depth: 0,
        stored: undefined,
      };
    });
    if (this.byId.size > 0) {
      const storedIds = new Set(stored.map((record) => record.header.id));
      for (const session of this.byId.values()) {
        if (!storedIds.has(session.header.id) && include(session.header)) {
          nodes.push({ header: session.header, hasStoredSubagentChildren: false, live: session, depth: 0, stored: undefined });
        }
      }
    }
    // Stable: equal createdAt keep the order above.
    return nodes.sort((a, b) => a.header.createdAt - b.header.createdAt);
  }
}

/**
 * Iterative pre-order walk below `rootId` over the parent links of `nodes` (creation order among
 * siblings), setting each reached node's `depth`. An explicit stack keeps 10,000-deep chains off
 * the call stack. A node is pushed once at most, as the child of its one parent; a cycle can only
 * lead back to the root, which is never pushed, so every walk ends.
 */
export function preOrder(rootId: SessionId, nodes: readonly CorpusNode[]): CorpusNode[] {
  const childrenOf = new Map<SessionId, CorpusNode[]>();
  nodes.forEach((node) => {
    const parent = node.header.parentSession;
    if (parent === undefined) return;
    const siblings = childrenOf.get(parent);
    if (siblings === undefined) childrenOf.set(parent, [node]);
    else siblings.push(node);
  });
  const order: CorpusNode[] = [];
  const stack: CorpusNode[] = [];
  const pushChildren = (id: SessionId, depth: number): void => {
    const children = childrenOf.get(id);
    if (children === undefined) return;
    for (let i = children.length - 1; i >= 0; i--) {
      const child = children[i]!;
      if (child.depth !== 0 || child.header.id === rootId) continue;
      child.depth = depth;
      stack.push(child);
    }
  };
  pushChildren(rootId, 1);
  for (let node = stack.pop(); node !== undefined; node = stack.pop()) {
    order.push(node);
    pushChildren(node.header.id, node.depth + 1);
  }
  return order;
}

/**
 * The row of `node`, or undefined for a live child whose descriptor is not (or no longer validly)
 * in its log: a child in its creation window is not listed. `stored` is the node's projections
 * read, undefined when that read failed.
 */
export function rowOf(
  node: CorpusNode,
  hasChildren: boolean,
  liveIdentity: SubagentIdentity | null,
  stored: StoredProjections | undefined,
  liveUsage?: SubagentUsage,
): SubagentListEntry | undefined {
  const { id, createdAt } = node.header;
  if (node.live !== undefined) {
    return liveIdentity === null || liveUsage === undefined ? undefined : childRow(id, createdAt, liveIdentity, 'running', hasChildren, liveUsage);
  }
  if (stored === undefined) return { kind: 'diagnostic', id, reason: 'unavailable' };
  // A settled child without a valid descriptor cannot be listed as anything: its log is corrupt.
  if (!stored.ok || stored.views.subagent === null) return { kind: 'diagnostic', id, reason: 'corrupt' };
  return childRow(id, createdAt, stored.views.subagent, 'inactive', hasChildren, stored.views.subagentUsage);
}

function childRow(
  id: SessionId,
  createdAt: number,
  identity: SubagentIdentity,
  activity: 'running' | 'inactive',
  hasChildren: boolean,
  usage: SubagentUsage,
): SubagentListEntry {
  // Two literals rather than a conditional spread: listings build tens of thousands of these.
  return identity.label === undefined
    ? { kind: 'child', id, mode: identity.mode, activity, hasChildren, createdAt, usage }
    : { kind: 'child', id, mode: identity.mode, label: identity.label, activity, hasChildren, createdAt, usage };
}

/** `row` with its place in a tree, copied field by field (a spread is several times slower). */
export function placed(row: SubagentListEntry, parentId: SessionId, depth: number): SubagentDescendantListEntry {
  if (row.kind === 'diagnostic') return { kind: 'diagnostic', id: row.id, reason: row.reason, parentId, depth };
  const { id, mode, label, activity, hasChildren, createdAt, usage } = row;
  return label === undefined
    ? { kind: 'child', id, mode, activity, hasChildren, createdAt, usage, parentId, depth }
    : { kind: 'child', id, mode, label, activity, hasChildren, createdAt, usage, parentId, depth };
}
