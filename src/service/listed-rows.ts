// Cold listings straight from the store's records: when no session is live and the enumeration
// listed every child, the rows are built in one pass over the records (and, for a tree, one pass
// back for the tree totals), with no corpus, walk or projection read in between. They are the
// rows the general path (catalog.ts) builds from the same records.
import type { SessionId } from '../seam/content.js';
import type { SubagentDescendantListEntry, SubagentListEntry } from '../seam/types.js';
import { addUsage, addUsageInto, emptyUsage, type SubagentUsage } from '../seam/usage.js';
import type { CatalogRecord } from '../runtime/session-persistence.js';

/**
 * The rows of `stored` children in creation order; undefined when a subagent child was not
 * listed by the enumeration or the records are out of creation order.
 */
export function listedRows(stored: readonly CatalogRecord[]): SubagentListEntry[] | undefined {
  const entries: SubagentListEntry[] = [];
  let createdAbove = -Infinity;
  const complete = stored.every(({ header, hasSubagentChildren, listed }) => {
    // Out of order: the corpus sorts them.
    if (!(header.createdAt >= createdAbove)) return false;
    createdAbove = header.createdAt;
    if (header.origin !== 'subagent') return true;
    if (listed === undefined) return false;
    const { id, createdAt } = header;
    const { mode, label, usage } = listed;
    // A child in its creation window is not listed; one literal per shape, as catalog-rows.ts builds them.
    if (listed.pending) return true;
    if (mode === null) entries.push({ kind: 'diagnostic', id, reason: 'corrupt' });
    else if (label === undefined) entries.push({ kind: 'child', id, mode, activity: 'inactive', hasChildren: hasSubagentChildren, createdAt, usage });
    else entries.push({ kind: 'child', id, mode, label, activity: 'inactive', hasChildren: hasSubagentChildren, createdAt, usage });
    return true;
  });
  return complete ? entries : undefined;
}

/**
 * The rows below `rootId` of `stored` records in pre-order with their depths, each child's tree
 * totals its own usage plus every listed descendant's (ordinary sessions passed through);
 * undefined when the records are not in that form or a subagent child was not listed.
 */
export function listedTree(rootId: SessionId, stored: readonly CatalogRecord[]): SubagentDescendantListEntry[] | undefined {
  const count = stored.length;
  const parents = new Int32Array(count);
  const path: number[] = [];
  let depthAbove = 0;
  for (let i = 0; i < count; i++) {
    const { depth, header, listed } = stored[i]!;
    // Pre-order goes at most one level down from one record to the next.
    if (depth === undefined || !Number.isInteger(depth) || depth < 1 || depth > depthAbove + 1) return undefined;
    if (header.origin === 'subagent' && listed === undefined) return undefined;
    depthAbove = depth;
    parents[i] = depth === 1 ? -1 : path[depth - 2]!;
    path[depth - 1] = i;
  }
  // Backwards, every subtree is complete before its parent; a parent's sum is its own object,
  // added to in place, and a leaf's total is its own usage object.
  const totals = new Array<SubagentUsage | undefined>(count);
  const below = new Array<SubagentUsage | undefined>(count);
  for (let i = count - 1; i >= 0; i--) {
    const { header, listed } = stored[i]!;
    // The root sits on a cycle: it is not listed, and nothing below it was enumerated.
    if (header.id === rootId) continue;
    const own = header.origin === 'subagent' && listed!.mode !== null ? listed!.usage : undefined;
    const sum = below[i];
    const total = sum === undefined ? own : own === undefined ? sum : addUsage(own, sum);
    totals[i] = own === undefined ? undefined : total;
    const parent = parents[i]!;
    if (total === undefined || parent < 0) continue;
    const into = below[parent];
    if (into === undefined) below[parent] = addUsage(emptyUsage(), total);
    else addUsageInto(into, total);
  }
  const entries: SubagentDescendantListEntry[] = [];
  for (let i = 0; i < count; i++) {
    const { header, hasSubagentChildren: hasChildren, listed, depth } = stored[i]!;
    const { id, createdAt } = header;
    if (header.origin !== 'subagent' || id === rootId) continue;
    const parentId = parents[i]! < 0 ? rootId : stored[parents[i]!]!.header.id;
    const { mode, label, usage, pending } = listed!;
    const treeUsage = totals[i] ?? usage;
    if (pending) continue;
    if (mode === null) entries.push({ kind: 'diagnostic', id, reason: 'corrupt', parentId, depth: depth! });
    else if (label === undefined) entries.push({ kind: 'child', id, mode, activity: 'inactive', hasChildren, createdAt, usage, treeUsage, parentId, depth: depth! });
    else entries.push({ kind: 'child', id, mode, label, activity: 'inactive', hasChildren, createdAt, usage, treeUsage, parentId, depth: depth! });
  }
  return entries;
}
