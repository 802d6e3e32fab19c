// Which of a pool's threads are still loading the worker entry (a thread must not be terminated
// then), and which import-gate slot each loaded thread holds. The entry's last top-level step posts
// a ThreadLoadedNotice, which piscina relays as a 'message' event of the pool; once a thread has
// exited it no longer counts as loading, and its slot is freed.
import type { Worker } from 'node:worker_threads';
import { isThreadLoadedNotice } from './thread-protocol.js';

export class ThreadTracker {
  readonly #slots = new Map<number, number>();
  readonly #waiters = new Map<number, Set<() => void>>();
  readonly #freeSlot: (slot: number) => void;

  constructor(freeSlot: (slot: number) => void) {
    this.#freeSlot = freeSlot;
  }

  /** Feed every 'message' event of the pool here, with the pool's threads at that moment. */
  onMessage(message: unknown, threads: readonly Worker[]): void {
    if (!isThreadLoadedNotice(message)) return;
    const { threadLoaded: id, slot } = message;
    const thread = threads.find((candidate) => candidate.threadId === id);
    // A thread that exited before piscina relayed its notice: its exit timing is not under test control.
    if (!thread) return this.#freeSlot(slot);
    this.#slots.set(id, slot);
    thread.once('exit', () => {
      this.#slots.delete(id);
      this.#freeSlot(slot);
    });
    for (const wake of this.#waiters.get(id) ?? []) wake();
  }

  /** The import-gate slot of a loaded, running thread. */
  slotOf(thread: Worker): number | undefined {
    return this.#slots.get(thread.threadId);
  }

  /** True while `thread` runs but has not loaded the entry yet. */
  loading(thread: Worker): boolean {
    return thread.threadId !== -1 && !this.#slots.has(thread.threadId);
  }

  /** Resolves once every one of `threads` has loaded the entry or exited. */
  async settle(threads: readonly Worker[]): Promise<void> {
    await Promise.all(threads.filter((thread) => this.loading(thread)).map((thread) => this.#whenLoaded(thread)));
  }

  #whenLoaded(thread: Worker): Promise<void> {
    const id = thread.threadId;
    return new Promise<void>((resolve) => {
      let waiters = this.#waiters.get(id);
      if (!waiters) this.#waiters.set(id, (waiters = new Set()));
      const done = () => {
        thread.off('exit', done);
        waiters.delete(done);
        if (waiters.size === 0 && this.#waiters.get(id) === waiters) this.#waiters.delete(id);
        resolve();
      };
      waiters.add(done);
      thread.once('exit', done);
    });
  }
}
