// Keeps the process alive while the pool has work in flight. Piscina unrefs threads that load or
// idle, and the hub ports are unref'd, so without this a host whose only work is a worker child
// could see its process exit in the middle of a start, a run or a close.
const FOREVER = 2 ** 31 - 1;

export class KeepAlive {
  #holds = 0;
  #timer: NodeJS.Timeout | undefined;

  /** Holds the process open until the returned release is called (idempotent). */
  hold(): () => void {
    if (this.#holds++ === 0) this.#timer = setInterval(() => undefined, FOREVER);
    let released = false;
    return () => {
      // A run releases its hold on whichever exit path comes first; no test makes two of them run.
      if (released) return;
      released = true;
      if (--this.#holds === 0) {
        clearInterval(this.#timer);
        this.#timer = undefined;
      }
    };
  }

  /** Holds the process open until `work` settles; returns `work`. */
  during<T>(work: Promise<T>): Promise<T> {
    const release = this.hold();
    work.then(release, release);
    return work;
  }
}
