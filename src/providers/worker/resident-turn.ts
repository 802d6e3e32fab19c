// One turn of a resident worker child as its host-side agent runs it: the child's own events (its
// steps, tool calls and results, usage) are written into the host-side log as they arrive, inside
// the host-side turn, so that log reads like an in-process child's. The host-side step only frames
// them: it yields no content, just the finish the child's turn ended with.
import type { ModelChunk } from '../../seam/model-types.js';
import type { CancelCause, SessionEvent, SessionEventMap, TurnEndReason } from '../../seam/session-types.js';
import { closeInterruptedTurn } from '../../persistence/repair.js';
import type { SessionLog } from '../../runtime/session.js';
import { settled, within } from '../../seam/once.js';

/** The child's events the host-side turn writes itself: its frame, its input and its inbox. */
const FRAMED = new Set(['turn/start', 'user/message', 'inbox/accepted', 'inbox/discarded']);

function finishOf(reason: TurnEndReason, aborted: boolean): ModelChunk {
  switch (reason.kind) {
    case 'completed':
      return { type: 'finish', reason: 'stop' };
    case 'max-tokens':
      return { type: 'finish', reason: 'max-tokens' };
    case 'refusal':
      return { type: 'finish', reason: 'refusal' };
    case 'error':
      return { type: 'finish', reason: 'error', failure: reason.error };
    default:
      // Only the host cancels a resident child's turn; anything else stopping it is a failure.
      return aborted
        ? { type: 'finish', reason: 'aborted' }
        : { type: 'finish', reason: 'error', failure: { code: 'TURN_STOPPED', message: 'the child’s turn was stopped in its thread' } };
  }
}

/** Copies a turn's events into the host-side log as they arrive; `chunks()` yields its finish. */
export class TurnRelay {
  readonly #signal: AbortSignal;
  readonly #session: SessionLog;
  /** The host-side turn's number (the child's copy may count its turns differently). */
  readonly #turn: number;
  /** The host-side step this child turn runs in: the child's step 1 is it, its later steps follow on. */
  readonly #step: number;
  #finish: ModelChunk | undefined;
  #began = false;
  #wake: (() => void) | undefined;
  /** The child's first `step/start` is the host-side step's own. */
  #stepsSeen = 0;
  /** A `step/end` held back: the host-side step writes the last one. */
  #stepEnd: SessionEvent | undefined;
  #ended!: () => void;
  /** Resolves once the child's turn is over in its thread (or the thread is gone). */
  readonly ended = new Promise<void>((resolve) => (this.#ended = resolve));

  readonly #hookStop: (cause: CancelCause) => void;
  /** The signal of the host calls the child's turn makes (see `callSignal`). */
  readonly #calls = new AbortController();
  readonly #relayAbort = () => this.#calls.abort(this.#signal.reason);
  /** The host calls of the child's turn still out (a `subagent` call's child still ending). */
  readonly #out = new Set<Promise<void>>();

  /** `hookStop` cancels the host-side turn with the cause a hook (the child's budget) stopped the child's turn with. */
  constructor(signal: AbortSignal, session: SessionLog, at: { turn: number; step: number }, hookStop: (cause: CancelCause) => void) {
    this.#signal = signal;
    this.#session = session;
    this.#turn = at.turn;
    this.#step = at.step;
    this.#hookStop = hookStop;
    if (signal.aborted) this.#relayAbort();
    else signal.addEventListener('abort', this.#relayAbort, { once: true });
  }

  /** Aborted when the host-side turn is cancelled or the child's turn is over (its thread gone included): host calls it made stop. */
  get callSignal(): AbortSignal {
    return this.#calls.signal;
  }

  /** Runs one host call of the child's turn, kept until it is answered (see `chunks`). */
  call<T>(run: () => Promise<T>): Promise<T> {
    const answered = run();
    const out: Promise<void> = settled(answered).then(() => void this.#out.delete(out));
    this.#out.add(out);
    return answered;
  }

  /** Whether the turn has its finish (its end came, or it was lost). */
  get finished(): boolean {
    return this.#finish !== undefined;
  }

  /** Whether any event of the child's turn came: its thread began it. */
  get began(): boolean {
    return this.#began;
  }

  /** Aborted when the host-side turn is cancelled. */
  get signal(): AbortSignal {
    return this.#signal;
  }

  /** The child's new events (its turn's, in order). */
  events(events: readonly SessionEvent[]): void {
    if (events.length > 0) this.#began = true;
    for (const event of events) {
      if (this.#finish) return;
      this.#event(event);
    }
  }

  #event(event: SessionEvent): void {
    if (event.type === 'turn/end') {
      this.#stepEnd = undefined;
      const { reason } = event.data as SessionEventMap['turn/end'];
      if (reason.kind === 'aborted' && reason.cause.kind === 'hook' && !this.#signal.aborted) this.#hookStop(reason.cause);
      return this.#settle(finishOf(reason, this.#signal.aborted));
    }
    if (FRAMED.has(event.type)) return;
    if (event.type === 'step/start' && this.#stepsSeen++ === 0) return;
    if (this.#stepEnd) this.#append(this.#stepEnd);
    this.#stepEnd = undefined;
    if (event.type === 'step/end') this.#stepEnd = event;
    else this.#append(event);
  }

  /** Appends a child's event numbered as the host-side log counts (its own copy numbers from 1 each turn). */
  #append(event: SessionEvent): void {
    const data = event.data as { turn?: unknown; step?: unknown } | null;
    if (data === null || typeof data !== 'object' || !('turn' in data)) {
      this.#session.append(event.type, data);
      return;
    }
    const step = typeof data.step === 'number' ? { step: this.#step + data.step - 1 } : {};
    this.#session.append(event.type, { ...data, turn: this.#turn, ...step });
  }

  #settle(finish: ModelChunk): void {
    this.#finish = finish;
    this.#signal.removeEventListener('abort', this.#relayAbort);
    if (!this.#calls.signal.aborted) this.#calls.abort({ kind: 'parent' });
    this.#wake?.();
    this.#ended();
  }

  /**
   * The child's thread is gone: tool calls it left unanswered get their error results, and the
   * turn ends `error` (or `aborted` when the host was cancelling it).
   */
  lost(why: string): void {
    if (this.#finish) return;
    this.#stepEnd = undefined;
    for (const closer of closeInterruptedTurn(this.#session.events)) {
      if (closer.type === 'tool/result') this.#session.append(closer.type, closer.data);
    }
    this.#settle(this.#signal.aborted ? { type: 'finish', reason: 'aborted' } : { type: 'finish', reason: 'error', failure: { code: 'THREAD_FAILED', message: why } });
  }

  /**
   * Yields the turn's finish once it came and the host calls it left are answered, within `callsBoundMs`:
   * a cancelled child's turn ends in its thread without waiting for them (they were stopped with it),
   * so a `subagent` call's child ends first and is counted, and a drain leaves nothing running.
   * Once `closing` is aborted (the host began to close) the calls get no bound but a turn of the
   * event loop: one may be waiting for the close.
   */
  async *chunks(callsBoundMs: number, closing: AbortSignal): AsyncGenerator<ModelChunk> {
    while (!this.#finish) {
      await new Promise<void>((resolve) => (this.#wake = resolve));
      this.#wake = undefined;
    }
    if (this.#out.size > 0) await within(Promise.all(this.#out), callsBoundMs, closing);
    yield this.#finish;
  }
}
