// Notices a piscina whose threads all fail before loading the worker entry (a heap limit too small
// to load it, a broken install). piscina does not replace a thread that fails while it starts, so
// the tasks it queued for that thread would wait forever: once no thread is left, none has ever
// loaded the entry and tasks still wait, they reject START_FAILED with the thread's error. A task
// whose own thread died before any thread loaded the entry rejects START_FAILED the same way.
import type { Piscina } from 'piscina';
import { isThreadLoadedNotice } from './thread-protocol.js';
import { entryLoadFailure } from './thread-failure.js';

export class EntryWatch {
  // The rejections of guarded tasks still pending. (Not a race with one shared pending promise:
  // each race would leave a reaction on it for as long as the pool lives.)
  readonly #waiting = new Set<(error: unknown) => void>();
  #loaded = false;
  #settled = false;
  // A thread may exit while it starts without an 'error' event: then this is all that is known.
  #error: unknown = new Error('a worker thread exited before it loaded the worker entry');

  /** Calls `onFailed` once, when the tasks still waiting have been rejected. */
  constructor(pool: Piscina<never, unknown>, onFailed: () => void) {
    const check = () => {
      if (this.#settled || this.#loaded || pool.threads.length > 0 || pool.queueSize === 0) return;
      this.#settled = true;
      const failure = entryLoadFailure(this.#error);
      for (const reject of this.#waiting) reject(failure);
      this.#waiting.clear();
      onFailed();
    };
    pool.on('message', (message: unknown) => {
      if (isThreadLoadedNotice(message)) this.#loaded = true;
    });
    // piscina reports a thread's error here only when the thread had no task (one that failed while
    // starting); a thread's other errors reject its tasks.
    pool.on('error', (error: unknown) => {
      this.#error = error;
      check();
    });
    // Emitted while piscina still lists the thread: look once it is gone.
    pool.on('workerDestroy', () => queueMicrotask(check));
  }

  /** `task` (one of this piscina's), or START_FAILED if the entry fails to load first. */
  guard<T>(task: Promise<T>): Promise<T> {
    // Once a thread has loaded the entry, the watch neither fails nor maps anything: no cost per task.
    if (this.#loaded) return task;
    return new Promise<T>((resolve, reject) => {
      this.#waiting.add(reject);
      task.then(
        (value) => {
          this.#waiting.delete(reject);
          resolve(value);
        },
        (error: unknown) => {
          this.#waiting.delete(reject);
          reject(this.#loaded ? error : entryLoadFailure(error));
        },
      );
    });
  }
}
