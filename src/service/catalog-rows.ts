// Pieces of the catalog: cancellation checkpoints, the corpus of candidate sessions (stored records
// overlaid by live sessions), the iterative pre-order walk, and the rows themselves.
import { abortReason, onAbort } from '../seam/abort.js';
import type { Session, SessionStore } from '../seam/agent-types.js';
import type { SessionId } from '../seam/content.js';
import { SubagentError, describeError } from '../seam/errors.js';
import { readingInput } from '../seam/parse.js';
import type { SubagentIdentity } from '../seam/projections.js';
import type { SubagentDescendantListEntry, SubagentListEntry } from '../seam/types.js';
import { addUsage, addUsageInto, emptyUsage, type SubagentUsage } from '../seam/usage.js';
import type { CatalogHeader, CatalogRecord, ListedProjections, StoredProjections } from '../runtime/session-persistence.js';

/**
 * One session of the corpus: the live session replaces its stored record wholesale. Nodes belong to
 * one listing, which fills in `depth` and `stored` as it goes.
 */
export interface CorpusNode {
  header: CatalogHeader;
  /** From the stored record; the live side is added from {@link LiveIndex}. */
  hasStoredSubagentChildren: boolean;
  live: Session | undefined;
  /** What the store's enumeration read of its projections, if it read them. */
  listed: ListedProjections | undefined;
  /** Depth below the root of a walk ({@link preOrder}); 0 until the walk reaches the node. */
  depth: number;
  /** The node's parent in the walk; undefined for the root's children. */
  parent: CorpusNode | undefined;
  /** The node's projections read, once read; stays undefined when that read failed. */
  stored: StoredProjections | undefined;
  /** Usage summed over the listed descendants below the node (see {@link treeTotals}). */
  below: SubagentUsage | undefined;
}

/** `CANCELLED`, with the abort reason as cause. */
export function cancelled(signal: AbortSignal, reason = abortReason(signal)): SubagentError {
  return SubagentError.cancelled('the listing', reason);
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
  let rejectListing: (error: Error) => void = () => undefined;
  let unwatch: () => void;
  try {
    // A signal that cannot be watched (its addEventListener throws) is bad input.
    unwatch = readingInput('the listing signal', 'INVALID_REQUEST', () => onAbort(signal, (reason) => rejectListing(cancelled(signal, reason))));
  } catch (error) {
    read.catch(() => undefined);
    return Promise.reject(error as Error);
  }
  return new Promise<T>((resolve, reject) => {
    rejectListing = reject;
    read.then(
      (value) => {
        unwatch();
        if (signal.aborted) reject(cancelled(signal));
        else resolve(value);
      },
      (error: unknown) => {
        unwatch();
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
  /** How many live sessions have a parent. */
  readonly #withParent: number = 0;

  constructor(store: SessionStore) {
    for (const session of store.list()) {
      this.byId.set(session.header.id, session);
      const { parentSession, origin } = session.header;
      if (parentSession !== undefined) this.#withParent++;
      if (origin === 'subagent' && parentSession !== undefined) this.subagentParents.add(parentSession);
    }
  }

  /**
   * The walk below `rootId` of `stored` records that came in pre-order with their depths, live
   * sessions overriding stored ones, each node's `depth` and `parent` set as {@link preOrder} sets
   * them. Undefined when the records are not in that form, or when a live session other than the
   * root and not among them has a parent (it could belong in the walk): the caller then builds the
   * corpus and walks it.
   */
  preOrdered(rootId: SessionId, stored: readonly CatalogRecord[]): CorpusNode[] | undefined {
    const walk: CorpusNode[] = [];
    const path: CorpusNode[] = [];
    let matched = 0;
    let depthAbove = 0;
    const ordered = stored.every((record) => {
      const { depth } = record;
      // Pre-order goes at most one level down from one record to the next.
      if (depth === undefined || !Number.isInteger(depth) || depth < 1 || depth > depthAbove + 1) return false;
      depthAbove = depth;
      // The root sits on a cycle: it is never walked, and nothing below it was enumerated.
      if (record.header.id === rootId) return true;
      const live = this.byId.size === 0 ? undefined : this.byId.get(record.header.id);
      if (live !== undefined && live.header.parentSession !== undefined) matched++;
      const node: CorpusNode = {
        header: live?.header ?? record.header,
        hasStoredSubagentChildren: record.hasSubagentChildren,
        live,
        listed: record.listed,
        depth,
        parent: depth === 1 ? undefined : path[depth - 2],
        stored: undefined,
        below: undefined,
      };
      path[depth - 1] = node;
      walk.push(node);
      return true;
    });
    // Every live session with a parent, the root aside, is among the records.
    const liveRoot = this.byId.get(rootId)?.header.parentSession === undefined ? 0 : 1;
    return ordered && matched === this.#withParent - liveRoot ? walk : undefined;
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
        listed: record.listed,
        depth: 0,
        parent: undefined,
        stored: undefined,
        below: undefined,
      };
    });
    if (this.byId.size > 0) {
      const storedIds = new Set(stored.map((record) => record.header.id));
      for (const session of this.byId.values()) {
        if (!storedIds.has(session.header.id) && include(session.header)) {
          nodes.push({
            header: session.header,
            hasStoredSubagentChildren: false,
            live: session,
            listed: undefined,
            depth: 0,
            parent: undefined,
            stored: undefined,
            below: undefined,
          });
        }
      }
    }
    // Stable: equal createdAt keep the order above.
    return nodes.sort((a, b) => a.header.createdAt - b.header.createdAt);
  }
}

/**
 * Iterative pre-order walk below `rootId` over the parent links of `nodes` (creation order among
 * siblings), setting each reached node's `depth` and `parent`. An explicit stack keeps 10,000-deep chains off
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
  const pushChildren = (id: SessionId, parent: CorpusNode | undefined, depth: number): void => {
    const children = childrenOf.get(id);
    if (children === undefined) return;
    for (let i = children.length - 1; i >= 0; i--) {
      const child = children[i]!;
      if (child.depth !== 0 || child.header.id === rootId) continue;
      child.depth = depth;
      child.parent = parent;
      stack.push(child);
    }
  };
  pushChildren(rootId, undefined, 1);
  for (let node = stack.pop(); node !== undefined; node = stack.pop()) {
    order.push(node);
    pushChildren(node.header.id, node, node.depth + 1);
  }
  return order;
}

/**
 * The row of `node`, or undefined for a live child whose descriptor is not (or no longer validly)
 * in its log: a child in its creation window is not listed. A cold node is listed from what the
 * enumeration read (`node.listed`) or else from `stored`, its projections read (undefined when
 * that read failed).
 */
export function rowOf(
  node: CorpusNode,
  hasChildren: boolean,
  liveIdentity: Pick<SubagentIdentity, 'mode' | 'label'> | null,
  stored: StoredProjections | undefined,
  liveUsage?: SubagentUsage,
): SubagentListEntry | undefined {
  const { id, createdAt } = node.header;
  if (node.live !== undefined) {
    return liveIdentity === null || liveUsage === undefined
      ? undefined
      : childRow(id, createdAt, liveIdentity.mode, liveIdentity.label, 'running', hasChildren, liveUsage);
  }
  const { listed } = node;
  // A settled child without a valid descriptor cannot be listed as anything: its log is corrupt.
  // One without events of its own is in its creation window (in another process): not listed yet.
  if (listed !== undefined) {
    if (listed.pending) return undefined;
    return listed.mode === null
      ? { kind: 'diagnostic', id, reason: 'corrupt' }
      : childRow(id, createdAt, listed.mode, listed.label, 'inactive', hasChildren, listed.usage);
  }
  if (stored === undefined) return { kind: 'diagnostic', id, reason: 'unavailable' };
  if (!stored.ok || stored.views.subagent === null) return { kind: 'diagnostic', id, reason: 'corrupt' };
  const identity = stored.views.subagent;
  return childRow(id, createdAt, identity.mode, identity.label, 'inactive', hasChildren, stored.views.subagentUsage);
}

function childRow(
  id: SessionId,
  createdAt: number,
  mode: 'one-shot' | 'continuable',
  label: string | undefined,
  activity: 'running' | 'inactive',
  hasChildren: boolean,
  usage: SubagentUsage,
): SubagentListEntry {
  // Two literals rather than a conditional spread: listings build tens of thousands of these.
  return label === undefined
    ? { kind: 'child', id, mode, activity, hasChildren, createdAt, usage }
    : { kind: 'child', id, mode, label, activity, hasChildren, createdAt, usage };
}

/**
 * The tree totals of a walk ({@link preOrder}) whose listed rows are `rows` (aligned with it,
 * undefined where a node is not listed): for each child row, its own usage plus every listed
 * descendant's, ordinary sessions in between passed through. Walking the pre-order backwards
 * completes every subtree before its parent; a leaf's total is its own usage object.
 */
export function treeTotals(walk: readonly CorpusNode[], rows: readonly (SubagentListEntry | undefined)[]): (SubagentUsage | undefined)[] {
  const totals = new Array<SubagentUsage | undefined>(walk.length);
  for (let i = walk.length - 1; i >= 0; i--) {
    const node = walk[i]!;
    const row = rows[i];
    const own = row?.kind === 'child' ? row.usage : undefined;
    const below = node.below;
    const total = below === undefined ? own : own === undefined ? below : addUsage(own, below);
    totals[i] = own === undefined ? undefined : total;
    const parent = node.parent;
    if (total === undefined || parent === undefined) continue;
    // The parent's accumulator is its own object, added to in place.
    if (parent.below === undefined) parent.below = addUsage(emptyUsage(), total);
    else addUsageInto(parent.below, total);
  }
  return totals;
}

/** `row` with its place in a tree (and, for a child, its tree totals), copied field by field (a spread is several times slower). */
export function placed(row: SubagentListEntry, parentId: SessionId, depth: number, treeUsage: SubagentUsage | undefined): SubagentDescendantListEntry {
  if (row.kind === 'diagnostic') return { kind: 'diagnostic', id: row.id, reason: row.reason, parentId, depth };
  const { id, mode, label, activity, hasChildren, createdAt, usage } = row;
  const tree = treeUsage ?? usage;
  return label === undefined
    ? { kind: 'child', id, mode, activity, hasChildren, createdAt, usage, treeUsage: tree, parentId, depth }
    : { kind: 'child', id, mode, label, activity, hasChildren, createdAt, usage, treeUsage: tree, parentId, depth };
}

/** A listing's arguments: a session id (an unknown one lists nothing) and an optional AbortSignal. */
export function listingProblem(method: string, id: unknown, signal: unknown): SubagentError | undefined {
  if (typeof id !== 'string' || id === '') return new SubagentError('INVALID_REQUEST', `${method}(): the session id must be a non-empty string (got ${id === '' ? 'an empty string' : typeof id})`);
  // `instanceof` asks a proxy's getPrototypeOf trap, which may throw: no AbortSignal either.
  const isSignal = (): boolean => {
    try {
      return signal instanceof AbortSignal;
    } catch {
      return false;
    }
  };
  if (signal === undefined) return undefined;
  if (!isSignal()) return new SubagentError('INVALID_REQUEST', `${method}(): signal must be an AbortSignal`);
  // A signal whose `aborted` getter throws cannot be read: bad input, as in a start request.
  try {
    void (signal as AbortSignal).aborted;
  } catch (error) {
    return new SubagentError('INVALID_REQUEST', `${method}(): signal could not be read: its aborted getter threw (${describeError(error)})`, { cause: error });
  }
  return undefined;
}
