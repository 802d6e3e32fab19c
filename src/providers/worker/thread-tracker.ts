// Which of a pool's threads are still loading the worker entry: a thread must not be terminated
// then. The entry's last top-level step posts a ThreadLoadedNotice, which piscina relays as a
// 'message' event of the pool; a thread that exits stops counting as loading.
import type { Worker } from 'node:worker_threads';
import { isThreadLoadedNotice } from '../../seam/worker-protocol.js';

export class ThreadTracker {
  readonly #loaded = new Set<number>();
  readonly #waiters = new Map<number, Set<() => void>>();

  /** Feed every 'message' event of the pool here. */
  onMessage(message: unknown): void {
    if (!isThreadLoadedNotice(message)) return;
    this.#loaded.add(message.threadLoaded);
    for (const wake of this.#waiters.get(message.threadLoaded) ?? []) wake();
  }

  /** Feed every 'workerDestroy' event of the pool here. */
  forget(threadId: number): void {
    this.#loaded.delete(threadId);
  }

  /** True while `worker` runs but has not loaded the entry yet. */
  loading(worker: Worker): boolean {
    return worker.threadId !== -1 && !this.#loaded.has(worker.threadId);
  }

  /** Resolves once every one of `workers` has loaded the entry or exited. */
  async settle(workers: readonly Worker[]): Promise<void> {
    await Promise.all(workers.filter((worker) => this.loading(worker)).map((worker) => this.#whenLoaded(worker)));
  }

  #whenLoaded(worker: Worker): Promise<void> {
    const id = worker.threadId;
    return new Promise<void>((resolve) => {
      let waiters = this.#waiters.get(id);
      if (!waiters) this.#waiters.set(id, (waiters = new Set()));
      const done = () => {
        worker.off('exit', done);
        waiters.delete(done);
        if (waiters.size === 0 && this.#waiters.get(id) === waiters) this.#waiters.delete(id);
        resolve();
      };
      waiters.add(done);
      worker.once('exit', done);
    });
  }
}
