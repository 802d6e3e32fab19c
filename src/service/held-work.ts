// Work an agent started that is not a run of its own lineage (the `subagent` tool's background
// tasks): it is released before its agent (child-first), and a continuable child holding some is
// still busy, so its epoch stays open until the work settled.
import type { SessionId } from '../seam/content.js';

interface Held {
  release(): Promise<void>;
  released: Promise<void> | undefined;
}

export class HeldWork {
  readonly #byOwner = new Map<SessionId, Set<Held>>();
  readonly #settled: (ownerId: SessionId) => void;

  /** `settled` hears each owner whose held work just ended (to re-check its settlement). */
  constructor(settled: (ownerId: SessionId) => void) {
    this.#settled = settled;
  }

  /**
   * Holds work for `ownerId` until the returned `done` is called; `release` stops it (called at
   * most once, when the owner goes first) and must not reject.
   */
  hold(ownerId: SessionId, release: () => Promise<void>): () => void {
    const held: Held = { release, released: undefined };
    let set = this.#byOwner.get(ownerId);
    if (!set) this.#byOwner.set(ownerId, (set = new Set()));
    set.add(held);
    let done = false;
    return () => {
      if (done) return;
      done = true;
      set.delete(held);
      if (set.size === 0 && this.#byOwner.get(ownerId) === set) this.#byOwner.delete(ownerId);
      this.#settled(ownerId);
    };
  }

  /** Whether `ownerId` holds work that has not ended. */
  holds(ownerId: SessionId): boolean {
    return this.#byOwner.has(ownerId);
  }

  /** Releases what `ownerId` holds; resolves once each release did (never rejects). */
  async release(ownerId: SessionId): Promise<void> {
    const set = this.#byOwner.get(ownerId);
    if (!set) return;
    await Promise.allSettled([...set].map((held) => (held.released ??= held.release())));
  }

  /** Releases every owner's work (host shutdown). */
  async releaseAll(): Promise<void> {
    await Promise.allSettled([...this.#byOwner.keys()].map((ownerId) => this.release(ownerId)));
  }

  /** Owners holding work (for leak checks). */
  get size(): number {
    return this.#byOwner.size;
  }
}
