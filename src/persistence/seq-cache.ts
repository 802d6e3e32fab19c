// The next-seq cache of a SQLite store: a bounded map in least-recently-used order, so a long-lived
// store remembers only the sessions it wrote lately; a miss is answered from the queue or the file.
import type { SessionId } from '../seam/content.js';

/**
 * Sessions whose next seq a SQLite store keeps in memory (about 150 bytes each). More sessions than
 * this appending at once only cost a one-row read each on a miss.
 */
export const SEQ_CACHE_SIZE = 1024;

export class SeqCache {
  readonly #limit: number;
  // A Map iterates in insertion order: re-inserting on use keeps the least recent entry first.
  readonly #entries = new Map<SessionId, number>();

  constructor(limit = SEQ_CACHE_SIZE) {
    this.#limit = limit;
  }

  get size(): number {
    return this.#entries.size;
  }

  get(id: SessionId): number | undefined {
    const seq = this.#entries.get(id);
    if (seq !== undefined) {
      this.#entries.delete(id);
      this.#entries.set(id, seq);
    }
    return seq;
  }

  set(id: SessionId, seq: number): void {
    this.#entries.delete(id);
    this.#entries.set(id, seq);
    if (this.#entries.size > this.#limit) this.#entries.delete(this.#entries.keys().next().value!);
  }

  delete(id: SessionId): void {
    this.#entries.delete(id);
  }
}
