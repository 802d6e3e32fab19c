// The order in which an ACP server's messages arrived, kept apart from the order their handlers
// run in: the SDK hands a message to its handlers one by one, awaiting each, so a message for a
// later-registered handler is handled after one that arrived after it (a cancel after the prompt
// sent next, a load before the close sent first). Fed synchronously from the line reader.

/** A prompt as it arrived: whether a cancel or close of its session arrived after it, or a close before it. */
export interface ArrivedPrompt {
  sessionId: string;
  cancelled: boolean;
  closed: boolean;
}

interface CloseGate {
  count: number;
  done: Promise<void>;
  resolve: () => void;
}

export class Arrivals {
  /** Prompts by request id until their handler takes them. */
  readonly #prompts = new Map<unknown, ArrivedPrompt>();
  /** Sessions a close arrived for whose handler has not finished. */
  readonly #closes = new Map<string, CloseGate>();

  prompt(id: unknown, sessionId: string): void {
    this.#prompts.set(id, { sessionId, cancelled: false, closed: this.#closes.has(sessionId) });
  }

  /** A cancel or close of `sessionId` arrived: the prompts that arrived before it are cancelled. */
  cancel(sessionId: string): void {
    for (const arrived of this.#prompts.values()) if (arrived.sessionId === sessionId) arrived.cancelled = true;
  }

  /** A close of `sessionId` arrived: later prompts of it are refused, and loads wait until its handler is done. */
  close(sessionId: string): void {
    const gate = this.#closes.get(sessionId);
    if (gate) {
      gate.count++;
      return;
    }
    let resolve!: () => void;
    const done = new Promise<void>((settle) => (resolve = settle));
    this.#closes.set(sessionId, { count: 1, done, resolve });
  }

  /** The handler of a close of `sessionId` is done. */
  closed(sessionId: string): void {
    const gate = this.#closes.get(sessionId);
    if (!gate || --gate.count > 0) return;
    this.#closes.delete(sessionId);
    gate.resolve();
  }

  /** Resolves once every close of `sessionId` that arrived so far was handled. */
  closing(sessionId: string): Promise<void> | undefined {
    return this.#closes.get(sessionId)?.done;
  }

  /** The prompt `id` as it arrived, now taken by its handler. */
  takePrompt(id: unknown): ArrivedPrompt | undefined {
    const arrived = this.#prompts.get(id);
    this.#prompts.delete(id);
    return arrived;
  }
}
