// Work an agent started that is not a run of its own lineage (the `subagent` tool's background
// tasks): it is released before its agent (child-first), and a continuable child holding some is
// still busy, so its epoch stays open until the work settled.
import type { Agent } from '../seam/agent-types.js';
import type { SessionId } from '../seam/content.js';
import type { AdmitInput } from '../seam/types.js';

const NOTHING_HELD = Promise.resolve();

interface Held {
  release(): Promise<void>;
  released: Promise<void> | undefined;
}

export class HeldWork {
  readonly #byOwner = new Map<Agent, Set<Held>>();
  /** Owners being released: work they start from now on (a start that was in flight) is released at once. */
  readonly #closed = new WeakSet<Agent>();
  readonly #settled: (ownerId: SessionId) => void;
  readonly #admitter: (ownerId: SessionId) => AdmitInput | undefined;

  /**
   * `settled` hears each owner whose held work just ended (to re-check its settlement); `admitter`
   * answers a continuable owner's `admitInput` (what its transport can take), which a notice is fitted to.
   */
  constructor(settled: (ownerId: SessionId) => void, admitter: (ownerId: SessionId) => AdmitInput | undefined = () => undefined) {
    this.#settled = settled;
    this.#admitter = admitter;
  }

  /** What refuses a message `owner`'s transport cannot take, when it is a continuable child that has one. */
  admitInputOf(owner: Agent): AdmitInput | undefined {
    return this.#admitter(owner.id);
  }

  /**
   * Holds work for `owner` until the returned `done` is called; `release` stops it (called at most
   * once: when the owner goes first, or at once if it is already going) and must not reject.
   */
  hold(owner: Agent, release: () => Promise<void>): () => void {
    const held: Held = { release, released: undefined };
    let set = this.#byOwner.get(owner);
    if (!set) this.#byOwner.set(owner, (set = new Set()));
    set.add(held);
    if (this.#closed.has(owner)) held.released = release();
    let done = false;
    return () => {
      if (done) return;
      done = true;
      set.delete(held);
      if (set.size === 0 && this.#byOwner.get(owner) === set) this.#byOwner.delete(owner);
      this.#settled(owner.id);
    };
  }

  /** Whether `owner` holds work that has not ended. */
  holds(owner: Agent): boolean {
    return this.#byOwner.has(owner);
  }

  /**
   * Releases what `owner` holds, and from now on what it starts; resolves once each release did
   * (never rejects). Called again, it also waits for work held since.
   */
  release(owner: Agent): Promise<void> {
    this.#closed.add(owner);
    const set = this.#byOwner.get(owner);
    // Most owners hold nothing (every child's disposal asks): one shared settled promise for them.
    if (!set) return NOTHING_HELD;
    return Promise.allSettled([...set].map((held) => (held.released ??= held.release()))).then(() => undefined);
  }

  /**
   * The owner is gone (its agent disposed): waits for what it held, as `release`. It stays released
   * (a weak entry: no memory is kept per agent), so a start of its still in flight (a worker child's
   * host call that waited for a pool slot) is released as soon as it is held, not left running.
   */
  async finish(owner: Agent): Promise<void> {
    await this.release(owner);
  }

  /** Releases every owner's work (host shutdown). */
  async releaseAll(): Promise<void> {
    await Promise.allSettled([...this.#byOwner.keys()].map((owner) => this.release(owner)));
  }

  /** Owners holding work (for leak checks). */
  get size(): number {
    return this.#byOwner.size;
  }
}
