// Tree totals of running children: what each child's descendants have spent so far. A child's
// figure reaches its parent when it settles (a one-shot result) or closes an epoch (a continuable
// child, what that epoch spent), so a result's `treeUsage` needs no log replay.
import type { SessionId } from '../seam/content.js';
import { addUsage, emptyUsage, type SubagentUsage } from '../seam/usage.js';

export class SubtreeUsage {
  /** Per open child: what its descendants reported so far (null: none reported yet). */
  readonly #open = new Map<SessionId, SubagentUsage | null>();

  /** Starts collecting what the descendants of `id` spend (kept when already open). */
  open(id: SessionId): void {
    if (!this.#open.has(id)) this.#open.set(id, null);
  }

  /** What the descendants of `id` have reported so far; undefined when none has. */
  descendants(id: SessionId): SubagentUsage | undefined {
    return this.#open.get(id) ?? undefined;
  }

  /**
   * Closes `id` and adds `spent` (its own figures plus its descendants') to its parent, if open;
   * a child that cannot tell its own usage still passes on its descendants'.
   */
  close(id: SessionId, parentId: SessionId, spent: SubagentUsage | undefined): void {
    const total = spent ?? this.descendants(id);
    this.#open.delete(id);
    if (!total || !this.#open.has(parentId)) return;
    this.#open.set(parentId, addUsage(this.#open.get(parentId) ?? emptyUsage(), total));
  }
}
