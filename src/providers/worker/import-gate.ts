// Fences the imports a worker thread makes (tool and model modules) against termination: on Node 20,
// terminating a thread while it instantiates ES modules aborts the whole process. One shared
// Int32Array per pool: word 0 is the pool's closing flag; each thread slot (threadId modulo SLOTS)
// counts the imports in flight there, plus a FENCE bit. A thread counts itself in and then checks
// the fence; the main thread raises the fence and then waits for the count to drop to zero. Atomics
// are sequentially consistent, so one side always sees the other: no import starts under a fence.
import { SubagentError } from '../../seam/errors.js';
import type { ImportGate } from '../../runtime/module-import.js';

const SLOTS = 64;
const FENCE = 1 << 30;
const CLOSING = 0;
const POLL_MS = 2;

const pause = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
const slotOf = (threadId: number) => 1 + (threadId % SLOTS);

/** The shared words of one pool's gate (sent to each thread in its workerData). */
export function createGateBuffer(): SharedArrayBuffer {
  return new SharedArrayBuffer(Int32Array.BYTES_PER_ELEMENT * (SLOTS + 1));
}

/** Thread side: runs each import only while no termination of this thread is pending. */
export function threadImportGate(buffer: SharedArrayBuffer, threadId: number): ImportGate {
  const words = new Int32Array(buffer);
  const slot = slotOf(threadId);
  return async (load) => {
    for (;;) {
      const before = Atomics.add(words, slot, 1);
      if ((before & FENCE) === 0 && Atomics.load(words, CLOSING) === 0) break;
      Atomics.sub(words, slot, 1);
      if (Atomics.load(words, CLOSING) !== 0) throw new SubagentError('CLOSED', 'the worker pool is closing; no module is loaded any more');
      // Another thread of this slot is being terminated: wait until that is done.
      await pause(POLL_MS);
    }
    try {
      return await load();
    } finally {
      Atomics.sub(words, slot, 1);
    }
  };
}

/** Main side: waits for imports in flight before a thread may be terminated. */
export class ImportFence {
  readonly #words: Int32Array;
  // Fences of one slot follow each other (two threads may share a slot).
  readonly #slotQueues = new Map<number, Promise<void>>();

  constructor(buffer: SharedArrayBuffer) {
    this.#words = new Int32Array(buffer);
  }

  /** Raises the fence of `threadId`'s slot; resolves, once no import runs there, with its release. */
  async fence(threadId: number): Promise<() => void> {
    const slot = slotOf(threadId);
    const previous = this.#slotQueues.get(slot) ?? Promise.resolve();
    let lower!: () => void;
    const mine = new Promise<void>((resolve) => (lower = resolve));
    const queued = previous.then(() => mine);
    this.#slotQueues.set(slot, queued);
    await previous;
    Atomics.or(this.#words, slot, FENCE);
    while ((Atomics.load(this.#words, slot) & ~FENCE) !== 0) await pause(POLL_MS);
    return () => {
      Atomics.and(this.#words, slot, ~FENCE);
      lower();
      if (this.#slotQueues.get(slot) === queued) this.#slotQueues.delete(slot);
    };
  }

  /** From now on every import in every thread fails with CLOSED. */
  close(): void {
    Atomics.store(this.#words, CLOSING, 1);
  }

  /** True once closed and no import runs in any thread (stays true). */
  get drained(): boolean {
    if (Atomics.load(this.#words, CLOSING) === 0) return false;
    for (let slot = 1; slot <= SLOTS; slot++) if ((Atomics.load(this.#words, slot) & ~FENCE) !== 0) return false;
    return true;
  }

  /** Resolves once `drained`. */
  async drain(): Promise<void> {
    this.close();
    while (!this.drained) await pause(POLL_MS);
  }
}
