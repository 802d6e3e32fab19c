// A live session: header plus an append-only, frozen event log whose `seq` equals the index.
// Appends are synchronous and do no I/O; observers (the store's persistence writer, mirrors,
// proxies) are notified after each append, each one contained.
import type { Session } from '../seam/agent-types.js';
import { deepFreeze, type MessageId } from '../seam/content.js';
import { SubagentError, printable } from '../seam/errors.js';
import { isRecord } from '../seam/parse.js';
import { SEED_END_EVENT, type InboxTarget, type SessionEvent, type SessionEventMap, type SessionHeader } from '../seam/session-types.js';
import type { InboxMessage } from './inbox.js';

export type SessionListener = (event: SessionEvent) => void;

function checkContiguous(events: readonly SessionEvent[], what: string): void {
  events.forEach((event, index) => {
    if (event.seq !== index) {
      throw new SubagentError('SEQ_MISMATCH', `${what}: event ${index} has seq ${printable(event.seq)}; seqs must count up from 0`);
    }
  });
}

/** The runtime's Session implementation. */
export class SessionLog implements Session {
  readonly header: SessionHeader;
  readonly #events: SessionEvent[];
  readonly #listeners = new Set<SessionListener>();
  readonly #onListenerError: ((error: unknown) => void) | undefined;
  /** Events appended while listeners were being called, delivered in order once they return. */
  readonly #undelivered: SessionEvent[] = [];
  #delivering = false;

  private constructor(header: SessionHeader, events: SessionEvent[], onListenerError?: (error: unknown) => void) {
    this.header = deepFreeze({ ...header });
    this.#events = events;
    this.#onListenerError = onListenerError;
  }

  /**
   * A new session. With a non-empty `seed` (a fork's inherited prefix) the seed is copied, a
   * `session/end-seed` marker is appended, and `header.seedLength` must equal the seed's length.
   */
  static create(header: SessionHeader, seed: readonly SessionEvent[] = [], onListenerError?: (error: unknown) => void): SessionLog {
    checkContiguous(seed, 'fork seed');
    if ((header.seedLength ?? 0) !== seed.length) {
      throw new SubagentError('INVALID_OPTIONS', `header.seedLength (${header.seedLength ?? 0}) must equal the seed length (${seed.length})`);
    }
    // Events of another live log are frozen already and shared as they are; anything else is copied.
    const copy = (event: SessionEvent) => (Object.isFrozen(event) ? event : deepFreeze(structuredClone(event)));
    const session = new SessionLog(header, seed.map(copy), onListenerError);
    if (seed.length > 0) session.append(SEED_END_EVENT, {});
    return session;
  }

  /** A session restored from storage: the log is adopted as it is. */
  static restore(header: SessionHeader, events: readonly SessionEvent[], onListenerError?: (error: unknown) => void): SessionLog {
    checkContiguous(events, `stored session ${header.id}`);
    return new SessionLog(header, events.map((event) => deepFreeze(event)), onListenerError);
  }

  get id(): string {
    return this.header.id;
  }

  get events(): readonly SessionEvent[] {
    return this.#events;
  }

  /** The seq the next event gets. */
  get seq(): number {
    return this.#events.length;
  }

  append<K extends keyof SessionEventMap>(type: K, data: SessionEventMap[K]): SessionEvent;
  append(type: string, data: unknown): SessionEvent;
  append(type: string, data: unknown): SessionEvent {
    const event: SessionEvent = deepFreeze({ seq: this.#events.length, time: Date.now(), type, data });
    this.#events.push(event);
    this.#notify(event);
    return event;
  }

  /**
   * Appends events produced elsewhere (a worker's copy of this session), keeping their seq and
   * time; each must continue the log exactly (`SEQ_MISMATCH` otherwise).
   */
  mirror(events: readonly SessionEvent[]): void {
    for (const source of events) {
      if (source.seq !== this.#events.length) {
        throw new SubagentError('SEQ_MISMATCH', `session ${this.id}: mirrored event has seq ${source.seq}, expected ${this.#events.length}`);
      }
      const event = deepFreeze({ seq: source.seq, time: source.time, type: source.type, data: source.data });
      this.#events.push(event);
      this.#notify(event);
    }
  }

  #notify(event: SessionEvent): void {
    // An append made by a listener (a follow-up sent on `turn/end`) is delivered after every
    // listener has seen the event being delivered: each listener sees the log in seq order.
    this.#undelivered.push(event);
    if (this.#delivering) return;
    this.#delivering = true;
    try {
      for (let index = 0; index < this.#undelivered.length; index++) {
        const next = this.#undelivered[index]!;
        for (const listener of this.#listeners) {
          try {
            listener(next);
          } catch (error) {
            this.#onListenerError?.(error);
          }
        }
      }
    } finally {
      this.#undelivered.length = 0;
      this.#delivering = false;
    }
  }

  /** Calls `listener` after every later append; returns the unsubscriber. */
  subscribe(listener: SessionListener): () => void {
    // Refused here, not at each later append (where its TypeError would only be contained).
    if (typeof listener !== 'function') throw new SubagentError('INVALID_REQUEST', 'subscribe(): the listener must be a function');
    // Subscribed while an event is being delivered (its seq is below `from`): that one was appended before.
    const from = this.#events.length;
    const entry: SessionListener = (event) => {
      if (event.seq >= from) listener(event);
    };
    this.#listeners.add(entry);
    return () => {
      this.#listeners.delete(entry);
    };
  }
}

/**
 * The completed-turn prefix a fork inherits: events up to and including the last `turn/end`.
 * Empty when no turn has completed (the fork then behaves as a fresh spawn). Input the parent
 * accepted in it but had not taken by then (a message for its current turn) is the parent's, not
 * the fork's: its `inbox/accepted` is left out, and the later events renumbered.
 */
export function completedTurnPrefix(events: readonly SessionEvent[]): readonly SessionEvent[] {
  let end = events.length - 1;
  while (end >= 0 && events[end]!.type !== 'turn/end') end--;
  if (end < 0) return [];
  const prefix = events.slice(0, end + 1);
  const pending = new Set(pendingInbox(prefix).map(({ message }) => message.id));
  if (pending.size === 0) return prefix;
  const kept = prefix.filter((event) => event.type !== 'inbox/accepted' || !pending.has((event.data as SessionEventMap['inbox/accepted']).id));
  return kept.map((event, seq) => (event.seq === seq ? event : { ...event, seq }));
}

/** `CORRUPT_DATA` naming a logged event whose data is not what its type says. */
function malformed(event: SessionEvent, what: string): SubagentError {
  return new SubagentError('CORRUPT_DATA', `session event ${event.seq} (${event.type}) is malformed: ${what}`);
}

/**
 * The number of the last turn a log started or ended (0 when none did), which the next turn follows.
 * `CORRUPT_DATA` for a `turn/start` or `turn/end` that holds no such number (a damaged stored row):
 * the agent would otherwise number its turns NaN, stored as null.
 */
export function lastTurnOf(events: readonly SessionEvent[]): number {
  for (let i = events.length - 1; i >= 0; i--) {
    const event = events[i]!;
    if (event.type !== 'turn/start' && event.type !== 'turn/end') continue;
    const turn = isRecord(event.data) ? event.data['turn'] : undefined;
    if (!Number.isSafeInteger(turn) || (turn as number) < 1) throw malformed(event, "its data must hold the turn's number (a whole number ≥ 1)");
    return turn as number;
  }
  return 0;
}

/**
 * Pending input of a stored log: accepted, not yet claimed by a step, not discarded. `CORRUPT_DATA`
 * for an input event whose data could not be read (valid JSON of another shape).
 */
export function pendingInbox(events: readonly SessionEvent[]): { target: InboxTarget; message: InboxMessage; wake: boolean }[] {
  const pending = new Map<MessageId, { target: InboxTarget; message: InboxMessage; wake: boolean }>();
  for (const event of events) {
    if (event.type === 'inbox/accepted') {
      const data = event.data as SessionEventMap['inbox/accepted'] | null;
      if (!isRecord(data) || typeof data.id !== 'string' || !Array.isArray(data.content)) throw malformed(event, 'its data must hold the message id and content');
      pending.set(data.id, { target: data.target, message: { id: data.id, content: data.content, source: data.source }, wake: data.wake !== false });
    } else if (event.type === 'user/message') {
      const data = event.data as SessionEventMap['user/message'] | null;
      if (!isRecord(data)) throw malformed(event, 'its data must be an object');
      pending.delete(data.id);
    } else if (event.type === 'inbox/discarded') {
      const data = event.data as SessionEventMap['inbox/discarded'] | null;
      if (!isRecord(data) || !Array.isArray(data.ids)) throw malformed(event, 'its data must hold the discarded ids');
      for (const id of data.ids) pending.delete(id);
    }
  }
  return [...pending.values()];
}
