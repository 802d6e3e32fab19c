// Fences the imports a worker thread makes (tool and model modules) against termination: on Node 20,
// terminating a thread while it instantiates ES modules aborts the whole process. One shared
// Int32Array per pool: word 0 is the pool's closing flag; then one slot per thread, claimed by the
// thread as it loads (its owner word) and freed by the main thread once that thread has exited. A
// slot's count word holds the imports in flight plus a FENCE bit. A thread counts itself in and
// then checks the fence and the closing flag; the main thread raises the fence (or the flag) and
// then waits for the count to drop to zero. Atomics are sequentially consistent, so one side always
// sees the other: no import starts under a fence, and none is cut short by a termination.
import { SubagentError } from '../../seam/errors.js';
import type { ImportGate } from '../../runtime/module-import.js';

const FENCE = 1 << 30;
const CLOSING = 0;
const POLL_MS = 2;

const pause = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
const ownerWord = (slot: number) => 1 + 2 * slot;
const countWord = (slot: number) => 2 + 2 * slot;

/** The shared words of one pool's gate (sent to each thread in its workerData). */
export function createGateBuffer(maxThreads: number): SharedArrayBuffer {
  // Room for every live thread, plus threads that have exited but are not yet reaped.
  const slots = 2 * maxThreads + 8;
  return new SharedArrayBuffer(Int32Array.BYTES_PER_ELEMENT * (1 + 2 * slots));
}

/** Thread side: claims a free slot for `threadId` (waiting if none is free); returns its index. */
export function claimSlot(buffer: SharedArrayBuffer, threadId: number): number {
  const words = new Int32Array(buffer);
  const slots = (words.length - 1) / 2;
  for (;;) {
    for (let slot = 0; slot < slots; slot++) {
      if (Atomics.compareExchange(words, ownerWord(slot), 0, threadId) === 0) return slot;
    }
    // Every slot is taken by threads that exited but are not yet reaped: wait a moment. (Needs more
    // unreaped exits than live threads at once, which no test arranges.)
    Atomics.wait(words, CLOSING, Atomics.load(words, CLOSING), 10);
  }
}

/** Thread side: runs each import only while no termination of this thread is pending. */
export function threadImportGate(buffer: SharedArrayBuffer, slot: number): ImportGate {
  const words = new Int32Array(buffer);
  const count = countWord(slot);
  return async (load) => {
    for (;;) {
      const before = Atomics.add(words, count, 1);
      if ((before & FENCE) === 0 && Atomics.load(words, CLOSING) === 0) break;
      Atomics.sub(words, count, 1);
      if (Atomics.load(words, CLOSING) !== 0) throw SubagentError.closed('the worker pool', 'no module is loaded any more');
      // A termination of this thread is pending (or was just called off): wait for its outcome. An
      // import racing a fence or a close is thread timing no test can order.
      await pause(POLL_MS);
    }
    try {
      return await load();
    } finally {
      Atomics.sub(words, count, 1);
    }
  };
}

/** Main side: waits for imports in flight before a thread may be terminated. */
export class ImportFence {
  readonly #words: Int32Array;
  // Fences of one slot follow each other, so one cannot lower another's.
  readonly #queues = new Map<number, Promise<void>>();

  constructor(buffer: SharedArrayBuffer) {
    this.#words = new Int32Array(buffer);
  }

  get #slots(): number {
    return (this.#words.length - 1) / 2;
  }

  /** Raises the fence of `slot`; resolves, once no import runs there, with its release. */
  async fence(slot: number): Promise<() => void> {
    const previous = this.#queues.get(slot) ?? Promise.resolve();
    let lower!: () => void;
    const mine = new Promise<void>((resolve) => (lower = resolve));
    const queued = previous.then(() => mine);
    this.#queues.set(slot, queued);
    await previous;
    const count = countWord(slot);
    Atomics.or(this.#words, count, FENCE);
    while ((Atomics.load(this.#words, count) & ~FENCE) !== 0) await pause(POLL_MS);
    return () => {
      Atomics.and(this.#words, count, ~FENCE);
      lower();
      if (this.#queues.get(slot) === queued) this.#queues.delete(slot);
    };
  }

  /** Frees the slot of a thread that has exited (whatever it left counted there). */
  free(slot: number): void {
    Atomics.store(this.#words, countWord(slot), 0);
    Atomics.store(this.#words, ownerWord(slot), 0);
  }

  /** From now on every import in every thread fails with CLOSED. */
  close(): void {
    Atomics.store(this.#words, CLOSING, 1);
    Atomics.notify(this.#words, CLOSING);
  }

  /** True once closed and no import runs in any thread (stays true). */
  get drained(): boolean {
    if (Atomics.load(this.#words, CLOSING) === 0) return false;
    for (let slot = 0; slot < this.#slots; slot++) if ((Atomics.load(this.#words, countWord(slot)) & ~FENCE) !== 0) return false;
    return true;
  }

  /** Closes, then resolves once `drained`. */
  async drain(): Promise<void> {
    this.close();
    while (!this.drained) await pause(POLL_MS);
  }
}
