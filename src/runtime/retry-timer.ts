// Timers of the session store's writes: a cancellable wait, and a retry that backs off.

/** A wait of `ms` and its cancel: whoever made it clears it once done, so no timer outlives its use. */
export function delay(ms: number): { wait: Promise<void>; clear: () => void } {
  let timer: NodeJS.Timeout | undefined;
  const wait = new Promise<void>((resolve) => (timer = setTimeout(resolve, ms)));
  return { wait, clear: () => clearTimeout(timer) };
}

/**
 * Runs `attempt` `first` ms after `arm()`, then again at waits doubling up to `most` ms for as long
 * as it answers true (something is left to do). Its timer does not keep the process up; `stop()`
 * ends it, and a later `arm()` starts again from `first`.
 */
export class RetryTimer {
  #timer: NodeJS.Timeout | undefined;
  #ms = 0;

  constructor(
    private readonly attempt: () => Promise<boolean>,
    private readonly first: number,
    private readonly most: number,
  ) {}

  /** Schedules the first attempt, unless one is scheduled or running. */
  arm(): void {
    if (this.#timer !== undefined || this.#ms !== 0) return;
    this.#schedule(this.first);
  }

  stop(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#ms = 0;
  }

  #schedule(ms: number): void {
    this.#ms = ms;
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      void this.attempt().then(
        (again) => {
          // Stopped meanwhile: nothing more.
          if (this.#ms === 0) return;
          if (again) this.#schedule(Math.min(this.most, 2 * ms));
          else this.#ms = 0;
        },
        () => (this.#ms = 0),
      );
    }, ms);
    this.#timer.unref();
  }
}
