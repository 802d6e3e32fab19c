// Tree totals of running children: what each child's descendants have spent so far. A child's
// figure reaches its parent when it settles (a one-shot result) or closes an epoch (a continuable
// child, what that epoch spent), so a result's `treeUsage` needs no log replay.
import type { SessionId } from '../seam/content.js';
import { addUsage, emptyUsage, type SubagentUsage } from '../seam/usage.js';

export class SubtreeUsage {
  /** Per open child: what its descendants reported so far (null: none reported yet). */
  readonly #open = new Map<SessionId, SubagentUsage | null>();
  /** Parent links, kept while the node or something below it is open (a late figure goes past a closed parent). */
  readonly #parent = new Map<SessionId, SessionId>();
  /** Per node: how many open children are at or below it. */
  readonly #pending = new Map<SessionId, number>();

  /**
   * What makes `id` unfit for a new child of `parentId`: it is `parentId` or one of its ancestors
   * (its parent links would loop); undefined when it is fit. (Two runs may share an id: the
   * reference's S7 mints each its own runId.)
   */
  clash(id: SessionId, parentId: SessionId): string | undefined {
    for (let at: SessionId | undefined = parentId; at !== undefined; at = this.#parent.get(at)) {
      if (at === id) return at === parentId ? 'its parent’s id' : 'the id of one of its ancestors';
    }
    return undefined;
  }

  /** Starts collecting what the descendants of `id` spend (kept when already open; never linked into a loop). */
  open(id: SessionId, parentId: SessionId): void {
    if (this.#open.has(id) || this.clash(id, parentId) !== undefined) return;
    this.#open.set(id, null);
    this.#parent.set(id, parentId);
    for (let at: SessionId | undefined = id; at !== undefined; at = this.#parent.get(at)) this.#pending.set(at, (this.#pending.get(at) ?? 0) + 1);
  }

  /** What the descendants of `id` have reported so far; undefined when none has. */
  descendants(id: SessionId): SubagentUsage | undefined {
    return this.#open.get(id) ?? undefined;
  }

  /**
   * Closes `id` and adds `spent` (its own figures plus its descendants') to its nearest open
   * ancestor (its parent, or past a one-shot parent whose result settled first); a child that
   * cannot tell its own usage still passes on its descendants'.
   */
  close(id: SessionId, parentId: SessionId, spent: SubagentUsage | undefined): void {
    const total = spent ?? this.descendants(id);
    const wasOpen = this.#open.delete(id);
    let target: SessionId | undefined = parentId;
    while (target !== undefined && !this.#open.has(target)) target = this.#parent.get(target);
    if (total && target !== undefined) this.#open.set(target, addUsage(this.#open.get(target) ?? emptyUsage(), total));
    if (!wasOpen) return;
    for (let at: SessionId | undefined = id; at !== undefined; ) {
      const up = this.#parent.get(at);
      const left = (this.#pending.get(at) ?? 1) - 1;
      if (left > 0) this.#pending.set(at, left);
      else {
        this.#pending.delete(at);
        this.#parent.delete(at);
      }
      at = up;
    }
  }

  /** Nodes tracked (for leak checks). */
  get size(): number {
    return this.#open.size + this.#parent.size + this.#pending.size;
  }
}
