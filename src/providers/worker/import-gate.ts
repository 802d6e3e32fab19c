// Fences the imports a worker thread makes (tool and model modules) against termination: on Node 20,
// terminating a thread while it instantiates ES modules aborts the whole process. One shared
// Int32Array per pool: word 0 is the pool's closing flag; then one slot per thread, claimed by the
// thread as it loads (its owner word) and freed by the main thread once that thread has exited. A
// slot's count word holds the imports in flight plus a FENCE bit. A thread counts itself in and
// then checks the fence and the closing flag; the main thread raises the fence (or the flag) and
// then waits for the count to drop to zero. Atomics are sequentially consistent, so one side always
// sees the other: no import starts under a fence, and none is cut short by a termination.
//
// An import may never finish (a module whose top-level await never settles), and waiting for it
// would keep its thread, and whoever waits to end it, forever. So a slot also has an exit word: the
// main thread asks there instead of waiting, and the thread, which watches the word from its first
// import on, parks itself in `Atomics.wait` from a task of its own event loop (where no module is
// being instantiated) and says so in the word; a parked thread is safe to terminate. A thread that
// never returns to its event loop (a synchronous loop in a module's top level, an import loop that
// never yields) cannot see it: after a grace it is terminated after all, which then almost surely
// stops it while it runs that code, not while it instantiates a module.
import { SubagentError } from '../../seam/errors.js';
import type { ImportGate } from '../../runtime/module-import.js';

const FENCE = 1 << 30;
const CLOSING = 0;
const POLL_MS = 2;
const WORDS_PER_SLOT = 3;
/** How long a thread asked to park is given at least (a grace of 0 still lets it park first). */
export const MIN_PARK_WAIT_MS = 100;
/** Exit word values: the main thread asks the thread to park; the thread says it has. */
const EXIT_ASKED = 1;
const EXIT_PARKED = 2;

const pause = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
const ownerWord = (slot: number) => 1 + WORDS_PER_SLOT * slot;
const countWord = (slot: number) => 2 + WORDS_PER_SLOT * slot;
const exitWord = (slot: number) => 3 + WORDS_PER_SLOT * slot;
const slotsOf = (words: Int32Array) => (words.length - 1) / WORDS_PER_SLOT;

type WaitAsyncResult = { async: false; value: string } | { async: true; value: Promise<string> };
/** `Atomics.waitAsync` (ES2024; in Node since 16, not in this project's ES2023 library types). */
const waitAsync = (words: Int32Array, index: number, value: number): WaitAsyncResult =>
  (Atomics as unknown as { waitAsync(array: Int32Array, index: number, value: number): WaitAsyncResult }).waitAsync(words, index, value);

/** The shared words of one pool's gate (sent to each thread in its workerData). */
export function createGateBuffer(maxThreads: number): SharedArrayBuffer {
  // Room for every live thread, plus threads that have exited but are not yet reaped.
  const slots = 2 * maxThreads + 8;
  return new SharedArrayBuffer(Int32Array.BYTES_PER_ELEMENT * (1 + WORDS_PER_SLOT * slots));
}

/** Thread side: claims a free slot for `threadId` (waiting if none is free); returns its index. */
export function claimSlot(buffer: SharedArrayBuffer, threadId: number): number {
  const words = new Int32Array(buffer);
  const slots = slotsOf(words);
  for (;;) {
    for (let slot = 0; slot < slots; slot++) {
      if (Atomics.compareExchange(words, ownerWord(slot), 0, threadId) === 0) return slot;
    }
    // Every slot is taken by threads that exited but are not yet reaped: wait a moment. (Needs more
    // unreaped exits than live threads at once, which no test arranges.)
    Atomics.wait(words, CLOSING, Atomics.load(words, CLOSING), 10);
  }
}

/**
 * Thread side: parks this thread for good once the main thread asks in the slot's exit word. The
 * check runs in a task of the thread's own event loop (never inside a module's instantiation), and
 * the thread then blocks in this frame until it is terminated.
 */
function watchExitWord(words: Int32Array, slot: number): void {
  const word = exitWord(slot);
  const check = (): void => {
    if (Atomics.load(words, word) === EXIT_ASKED) {
      Atomics.store(words, word, EXIT_PARKED);
      Atomics.notify(words, word);
      for (;;) Atomics.wait(words, word, Atomics.load(words, word));
    }
    const wait = waitAsync(words, word, 0);
    if (wait.async) void wait.value.then(check);
    else check();
  };
  check();
}

/** Thread side: runs each import only while no termination of this thread is pending. */
export function threadImportGate(buffer: SharedArrayBuffer, slot: number): ImportGate {
  const words = new Int32Array(buffer);
  const count = countWord(slot);
  let watching = false;
  return async (load) => {
    if (!watching) {
      watching = true;
      watchExitWord(words, slot);
    }
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
    return slotsOf(this.#words);
  }

  /**
   * Raises the fence of `slot`; resolves, once no import runs there, with its release. When imports
   * are in flight and `exitIfBusy` returns true, the thread is asked to park instead of being waited
   * for (see `#settled`); if it has not within `graceMs` (at least MIN_PARK_WAIT_MS), this resolves anyway.
   */
  async fence(slot: number, exitIfBusy?: () => boolean, graceMs = Infinity): Promise<() => void> {
    const previous = this.#queues.get(slot) ?? Promise.resolve();
    let lower!: () => void;
    const mine = new Promise<void>((resolve) => (lower = resolve));
    const queued = previous.then(() => mine);
    this.#queues.set(slot, queued);
    await previous;
    const count = countWord(slot);
    Atomics.or(this.#words, count, FENCE);
    let deadline = Infinity;
    if (!this.#settled(slot) && exitIfBusy) {
      // Not wanted any more (the child is done, the thread gone): nothing to wait for.
      if (!exitIfBusy()) return this.#lowering(count, lower, queued, slot);
      this.#askExit(slot);
      deadline = performance.now() + Math.max(graceMs, MIN_PARK_WAIT_MS);
    }
    while (!this.#settled(slot) && performance.now() < deadline) await pause(POLL_MS);
    return this.#lowering(count, lower, queued, slot);
  }

  /** The release of a raised fence. */
  #lowering(count: number, lower: () => void, queued: Promise<void>, slot: number): () => void {
    return () => {
      Atomics.and(this.#words, count, ~FENCE);
      lower();
      if (this.#queues.get(slot) === queued) this.#queues.delete(slot);
    };
  }

  #askExit(slot: number): void {
    if (Atomics.compareExchange(this.#words, exitWord(slot), 0, EXIT_ASKED) === 0) Atomics.notify(this.#words, exitWord(slot));
  }

  /** No import runs in `slot`'s thread, or it is parked (safe to terminate), or it has exited (see `free`). */
  #settled(slot: number): boolean {
    return (Atomics.load(this.#words, countWord(slot)) & ~FENCE) === 0 || Atomics.load(this.#words, exitWord(slot)) === EXIT_PARKED;
  }

  /** Frees the slot of a thread that has exited (whatever it left counted there). */
  free(slot: number): void {
    Atomics.store(this.#words, countWord(slot), 0);
    Atomics.store(this.#words, exitWord(slot), 0);
    Atomics.store(this.#words, ownerWord(slot), 0);
  }

  /** From now on every import in every thread fails with CLOSED. */
  close(): void {
    Atomics.store(this.#words, CLOSING, 1);
    Atomics.notify(this.#words, CLOSING);
  }

  /** True once closed and no import runs in any thread but a parked one (stays true). */
  get drained(): boolean {
    if (Atomics.load(this.#words, CLOSING) === 0) return false;
    for (let slot = 0; slot < this.#slots; slot++) if (!this.#settled(slot)) return false;
    return true;
  }

  /**
   * Closes, then resolves true once `drained`, or false at `deadline` (a `performance.now()` time).
   * The threads of imports still in flight are asked to park: they are about to be terminated
   * anyway, and such an import may never finish.
   */
  async drain(deadline = Infinity): Promise<boolean> {
    this.close();
    for (let slot = 0; slot < this.#slots; slot++) if (!this.#settled(slot)) this.#askExit(slot);
    while (!this.drained) {
      if (performance.now() >= deadline) return false;
      await pause(POLL_MS);
    }
    return true;
  }
}
