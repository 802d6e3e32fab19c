// The order in which an ACP server's messages arrived, kept apart from the order their handlers
// run in: the SDK hands a message to its handlers one by one, awaiting each, so a message for a
// later-registered handler is handled after one that arrived after it (a cancel after the prompt
// sent next, a load before the close sent first, or after the close sent next). Fed synchronously
// from the line reader, and told of each response as it is written: that ends its request, whether
// a handler answered it or the SDK refused it first (bad params), so nothing waits on a request
// no handler will ever see.
import type { Observe } from './ndjson.js';

/**
 * A prompt as it arrived: whether a cancel or close of its session arrived after it, or a close
 * before it (with no load or resume after that close); `after`, the load or resume of its session
 * that arrived last before it (and after any close), until that is answered.
 */
export interface ArrivedPrompt {
  sessionId: string;
  cancelled: boolean;
  closed: boolean;
  after?: Promise<void> | undefined;
}

/** A request (a close, a load or resume) until it is done: what waits for it waits on `done`. */
interface Ticket {
  sessionId: string;
  /** When it arrived, counted in messages. */
  at: number;
  done: Promise<void>;
  resolve: () => void;
}

/** A load or resume until it is answered, with the closes of its session that arrived before it. */
interface ArrivedRestore extends Ticket {
  after: Promise<unknown> | undefined;
}

function ticket(sessionId: string, at: number): Ticket {
  let resolve!: () => void;
  const done = new Promise<void>((settle) => (resolve = settle));
  return { sessionId, at, done, resolve };
}

/** The ticket of `sessionId` among `tickets` that arrived last. */
function lastOf<T extends Ticket>(tickets: Iterable<T>, sessionId: string): T | undefined {
  let last: T | undefined;
  for (const t of tickets) if (t.sessionId === sessionId && (last === undefined || t.at > last.at)) last = t;
  return last;
}

/** When every ticket of `sessionId` among `tickets` is done; undefined when there is none. */
function allDone(tickets: Iterable<Ticket>, sessionId: string): Promise<unknown> | undefined {
  const of = [...tickets].filter((t) => t.sessionId === sessionId);
  return of.length === 0 ? undefined : Promise.all(of.map((t) => t.done));
}

/** The session methods whose arrival matters, as the SDK names them. */
interface SessionMethods {
  prompt: string;
  load: string;
  resume: string;
  cancel: string;
  close: string;
}

export class Arrivals implements Observe {
  readonly #methods: SessionMethods;
  /** Cancels the running prompt of a session (a cancel or close arrived). */
  readonly #cancelRunning: (sessionId: string) => void;
  /** Prompts by request id until their handler takes them. */
  readonly #prompts = new Map<unknown, ArrivedPrompt>();
  /** Closes by request id until their handler is done (or they are answered, should none run). */
  readonly #closes = new Map<unknown, Ticket>();
  /** Loads and resumes by request id until they are answered. */
  readonly #restores = new Map<unknown, ArrivedRestore>();
  /** Closes by request id until they are answered: the loads and resumes that arrived before them, answered. */
  readonly #closeWaits = new Map<unknown, Promise<unknown>>();
  /** Messages that arrived so far: a ticket's `at`. */
  #arrivedCount = 0;
  /** Prompts by request id until their answer is written. */
  readonly #unanswered = new Map<unknown, Ticket>();

  constructor(methods: SessionMethods, cancelRunning: (sessionId: string) => void) {
    this.#methods = methods;
    this.#cancelRunning = cancelRunning;
  }

  /**
   * Every message as it arrives, in order, before any handler: a prompt, load or resume is recorded
   * under its request id; a cancel cancels the running prompt and those that arrived before it; a
   * close cancels those too, refuses the session's later prompts, holds later loads and resumes
   * back, and waits for those before it; a prompt after a load or resume of its session (sent after
   * any close of it) waits for that instead of being refused.
   */
  arrived(message: object): void {
    const kind = dispatchedAs(message);
    // A message the SDK refuses (-32600) reaches no handler: it changes nothing here either.
    if (kind === undefined) return;
    const { method, params, id } = message as { method?: unknown; params?: { sessionId?: unknown }; id?: unknown };
    const sessionId = params?.sessionId;
    if (typeof sessionId !== 'string') return;
    const methods = this.#methods;
    const request = kind === 'request';
    this.#arrivedCount += 1;
    if (method === methods.prompt) {
      if (request) {
        this.#prompt(id, sessionId);
        this.#unanswered.get(id)?.resolve();
        this.#unanswered.set(id, ticket(sessionId, this.#arrivedCount));
      }
    } else if (method === methods.load || method === methods.resume) {
      if (request) this.#restore(id, sessionId);
    } else if ((method === methods.cancel && !request) || (method === methods.close && request)) {
      // A cancel is a notification, a close a request: sent the other way the SDK refuses it
      // (answers the cancel -32601, drops the close), and it changes nothing here either.
      this.#cancel(sessionId);
      this.#cancelRunning(sessionId);
      if (method === methods.close) this.#close(sessionId, id);
    }
  }

  /** Every message written to the client: a response ends its request. */
  sent(message: object): void {
    if (!('method' in message) && 'id' in message) this.#answered(message.id);
  }

  #prompt(id: unknown, sessionId: string): void {
    const close = lastOf(this.#closes.values(), sessionId);
    const restore = lastOf(this.#restores.values(), sessionId);
    // A load or resume sent after the close brings the session back for it: it waits for that instead.
    const closed = close !== undefined && (restore === undefined || restore.at < close.at);
    this.#prompts.set(id, { sessionId, cancelled: false, closed, after: closed ? undefined : restore?.done });
  }

  /** A cancel or close of `sessionId` arrived: the prompts that arrived before it are cancelled. */
  #cancel(sessionId: string): void {
    for (const arrived of this.#prompts.values()) if (arrived.sessionId === sessionId) arrived.cancelled = true;
  }

  /** A load or resume of `sessionId` arrived (request `id`): it waits for the closes before it; the closes after it wait for its answer. */
  #restore(id: unknown, sessionId: string): void {
    // A client that reuses the id of a request still open gets no ordering for the first.
    this.#answered(id);
    this.#restores.set(id, { ...ticket(sessionId, this.#arrivedCount), after: allDone(this.#closes.values(), sessionId) });
  }

  /** Resolves once the closes that arrived before the load or resume `id` are done. */
  restoreMayRun(id: unknown): Promise<unknown> | undefined {
    return this.#restores.get(id)?.after;
  }

  /** Resolves once the loads and resumes that arrived before the close `id` are answered. */
  closeMayRun(id: unknown): Promise<unknown> | undefined {
    return this.#closeWaits.get(id);
  }

  /** The response to request `id` is written: it no longer holds anything back, nor is it kept. */
  #answered(id: unknown): void {
    this.#unanswered.get(id)?.resolve();
    this.#unanswered.delete(id);
    this.#restores.get(id)?.resolve();
    this.#restores.delete(id);
    this.#closeWaits.delete(id);
    this.closed(id);
    // A prompt the SDK refused before its handler took it.
    this.#prompts.delete(id);
  }

  /**
   * A close of `sessionId` arrived (request `id`): later prompts of it are refused, and later loads
   * and resumes wait until its handler is done; it waits for the loads and resumes before it. Each
   * close waits only for what arrived before it, so no two requests wait for each other.
   */
  #close(sessionId: string, id: unknown): void {
    this.closed(id);
    const before = allDone(this.#restores.values(), sessionId);
    if (before) this.#closeWaits.set(id, before);
    this.#closes.set(id, ticket(sessionId, this.#arrivedCount));
  }

  /** The handler of the close `id` is done. */
  closed(id: unknown): void {
    this.#closes.get(id)?.resolve();
    this.#closes.delete(id);
  }

  /** Resolves once the load or resume of its session that the prompt `id` arrived after is answered. */
  promptMayRun(id: unknown): Promise<void> | undefined {
    return this.#prompts.get(id)?.after;
  }

  /** Resolves once the answer to the prompt `id` is written (at once when none is awaited). */
  answerWritten(id: unknown): Promise<void> {
    return this.#unanswered.get(id)?.done ?? Promise.resolve();
  }

  /** The prompt `id` as it arrived, now taken by its handler. */
  takePrompt(id: unknown): ArrivedPrompt | undefined {
    const arrived = this.#prompts.get(id);
    this.#prompts.delete(id);
    return arrived;
  }
}

/**
 * How the SDK takes `message` (its own rules, checked as it checks them): a request (`jsonrpc`
 * "2.0", a string method, an `id` that is a string, a finite number or null), a notification (no
 * `id`), or neither (undefined: it answers -32600, or drops a response-shaped one).
 */
export function dispatchedAs(message: object): 'request' | 'notification' | undefined {
  const { jsonrpc, method, id } = message as { jsonrpc?: unknown; method?: unknown; id?: unknown };
  if (jsonrpc !== '2.0' || typeof method !== 'string') return undefined;
  if (!('id' in message)) return 'notification';
  return id === null || typeof id === 'string' || (typeof id === 'number' && Number.isFinite(id)) ? 'request' : undefined;
}
