// Waits that give up: after a cancel, a turn on the host's thread stops waiting for a model stream
// or tool that ignores its signal (`abandonGraceMs`; at once when the host is closing), and goes on
// without it.

/** What `Abandonment.wait` resolves with when it stopped waiting. */
export const ABANDONED: unique symbol = Symbol('abandoned');

/**
 * Waits that give up once `signal` has been aborted for `graceMs`: for work that should honour a
 * cancel but may not (a tool or model adapter ignoring its signal), the caller stops waiting and the
 * work runs on unobserved. Once `closing` is aborted too (the host began to close), they give up
 * at once instead: a close waits for no grace, nor for a call that waits for the close. "At once" is
 * the next turn of the event loop, so work that stops as its signal aborts still answers itself.
 * One timer and an abort listener or two however many waits (a turn's model chunks and tool calls);
 * the timer holds the loop, so a close waiting on this gets to its end. `dispose()` once no wait is left.
 */
export class Abandonment {
  readonly #signal: AbortSignal;
  /** How long after the abort the waits give up. */
  readonly #graceMs: number;
  readonly #waiting = new Set<() => void>();
  #timer: NodeJS.Timeout | undefined;
  #fired = false;
  /** The waits give up (or gave up) because the host closes, not because the grace ran out. */
  #byClose = false;
  readonly #closing: AbortSignal | undefined;
  readonly #arm = () => {
    if (this.#closing?.aborted) return this.#hurry();
    this.#giveUpIn(this.#graceMs);
    this.#closing?.addEventListener('abort', this.#hurry, { once: true });
  };
  /** The host began to close: a cancelled turn waits no longer. */
  readonly #hurry = () => {
    if (this.#fired) return;
    this.#byClose = true;
    this.#giveUpIn(0);
  };

  constructor(signal: AbortSignal, graceMs: number, closing?: AbortSignal) {
    this.#signal = signal;
    this.#graceMs = graceMs;
    this.#closing = closing;
    if (signal.aborted) this.#arm();
    else signal.addEventListener('abort', this.#arm, { once: true });
  }

  #giveUpIn(ms: number): void {
    clearTimeout(this.#timer);
    this.#timer = setTimeout(() => {
      this.#fired = true;
      for (const give of [...this.#waiting]) give();
    }, ms);
  }

  /** Why the waits gave up, for the result of an abandoned call. */
  get reason(): string {
    return this.#byClose ? 'before the host closed' : `within ${this.#graceMs} ms of the cancel`;
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
    this.#closing?.removeEventListener('abort', this.#hurry);
    this.#waiting.clear();
  }
}

/** Waits through `abandonment` when there is one, else as long as `work` takes. */
export function unlessAbandoned<T>(abandonment: Abandonment | undefined, work: Promise<T>): Promise<T | typeof ABANDONED> {
  return abandonment ? abandonment.wait(work) : work;
}
