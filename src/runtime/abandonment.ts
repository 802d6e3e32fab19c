// Waits that give up: after a cancel, a turn on the host's thread stops waiting for a model stream
// or tool that ignores its signal (`abandonGraceMs`), and goes on without it.

/** What `Abandonment.wait` resolves with when it stopped waiting. */
export const ABANDONED: unique symbol = Symbol('abandoned');

/**
 * Waits that give up once `signal` has been aborted for `graceMs`: for work that should honour a
 * cancel but may not (a tool or model adapter ignoring its signal), the caller stops waiting and the
 * work runs on unobserved. One abort listener and one timer however many waits (a turn's model
 * chunks and tool calls); the timer holds the loop, so a close waiting on this gets to its end.
 * `dispose()` once no wait is left.
 */
export class Abandonment {
  readonly #signal: AbortSignal;
  /** How long after the abort the waits give up. */
  readonly graceMs: number;
  readonly #waiting = new Set<() => void>();
  #timer: NodeJS.Timeout | undefined;
  #fired = false;
  readonly #arm = () => {
    this.#timer = setTimeout(() => {
      this.#fired = true;
      for (const give of [...this.#waiting]) give();
    }, this.graceMs);
  };

  constructor(signal: AbortSignal, graceMs: number) {
    this.#signal = signal;
    this.graceMs = graceMs;
    if (signal.aborted) this.#arm();
    else signal.addEventListener('abort', this.#arm, { once: true });
  }

  /** Resolves as `work` does, or with `ABANDONED` once the grace after the abort ran out first. */
  wait<T>(work: Promise<T>): Promise<T | typeof ABANDONED> {
    if (this.#fired) return Promise.resolve(ABANDONED);
    return new Promise<T | typeof ABANDONED>((resolve, reject) => {
      const give = () => resolve(ABANDONED);
      this.#waiting.add(give);
      work.then(
        (value) => {
          this.#waiting.delete(give);
          resolve(value);
        },
        (error: unknown) => {
          this.#waiting.delete(give);
          reject(error);
        },
      );
    });
  }

  dispose(): void {
    clearTimeout(this.#timer);
    this.#signal.removeEventListener('abort', this.#arm);
    this.#waiting.clear();
  }
}

/** Waits through `abandonment` when there is one, else as long as `work` takes. */
export function unlessAbandoned<T>(abandonment: Abandonment | undefined, work: Promise<T>): Promise<T | typeof ABANDONED> {
  return abandonment ? abandonment.wait(work) : work;
}
