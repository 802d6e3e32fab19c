// In-memory SessionPersistence with the SQLite backend's contract (seq checks, crash repair on
// load, creation order, CLOSED after close), for tests and for hosts that need no durability.
import type { SessionPersistence, StoredSession } from '../runtime/session-persistence.js';
import type { SessionId } from '../seam/content.js';
import type { SessionEvent, SessionHeader } from '../seam/session-types.js';
import { closersFor } from './repair.js';
import type { EncodedEvent } from './validate.js';
import { closedError, duplicateSession, encodeEvents, parseHeader, unknownSession } from './validate.js';

interface StoredLog {
  header: SessionHeader;
  /** Stored as JSON text, like SQLite, so callers can never share objects with the store. */
  events: EncodedEvent[];
}

function decode(event: EncodedEvent): SessionEvent {
  return { seq: event.seq, type: event.type, time: event.time, data: JSON.parse(event.data) as unknown };
}

class MemoryPersistence implements SessionPersistence {
  /** Map order is creation order, which breaks `createdAt` ties as SQLite's `create_order` does. */
  readonly #sessions = new Map<SessionId, StoredLog>();
  #closing: Promise<void> | undefined;

  async create(header: SessionHeader): Promise<void> {
    this.#assertOpen('create a session');
    const clean = parseHeader(header);
    if (this.#sessions.has(clean.id)) throw duplicateSession(clean.id);
    this.#sessions.set(clean.id, { header: clean, events: [] });
  }

  async append(id: SessionId, events: readonly SessionEvent[]): Promise<void> {
    this.#assertOpen('append events');
    const log = this.#sessions.get(id);
    if (log === undefined) throw unknownSession(id);
    // Encoding checks every event before any is stored, so a refused append writes nothing.
    for (const event of encodeEvents(id, log.events.length, events)) log.events.push(event);
  }

  async load(id: SessionId): Promise<StoredSession | undefined> {
    this.#assertOpen('load a session');
    const log = this.#sessions.get(id);
    if (log === undefined) return undefined;
    const events = log.events.map(decode);
    const closers = closersFor(id, events);
    if (closers.length > 0) {
      for (const event of encodeEvents(id, log.events.length, closers)) {
        log.events.push(event);
        events.push(decode(event));
      }
    }
    return { header: { ...log.header }, events };
  }

  async list(filter?: { parentSession?: SessionId }): Promise<SessionHeader[]> {
    this.#assertOpen('list sessions');
    const parent = filter?.parentSession;
    const headers: SessionHeader[] = [];
    for (const { header } of this.#sessions.values()) {
      if (parent === undefined || header.parentSession === parent) headers.push({ ...header });
    }
    // Array sort is stable, so equal `createdAt` keep creation order.
    return headers.sort((a, b) => a.createdAt - b.createdAt);
  }

  async flush(): Promise<void> {
    this.#assertOpen('flush');
  }

  close(): Promise<void> {
    this.#closing ??= Promise.resolve();
    return this.#closing;
  }

  #assertOpen(operation: string): void {
    if (this.#closing !== undefined) throw closedError(operation);
  }
}

/**
 * A SessionPersistence held in memory: same contract as `sqlitePersistence` (seq checks, repair of
 * an interrupted turn on load, creation order), committed immediately, lost when the process exits.
 */
export function memoryPersistence(): SessionPersistence {
  return new MemoryPersistence();
}
