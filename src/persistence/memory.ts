// In-memory SessionPersistence with the SQLite backend's contract (seq checks, crash repair on
// load, creation order, CLOSED after close), for tests and for hosts that need no durability.
import type {
  CatalogRecord,
  SessionPersistence,
  StoredProjections,
  StoredSession,
} from '../runtime/session-persistence.js';
import { QUEUED_APPENDS } from '../runtime/session-persistence.js';
import type { SessionId } from '../seam/content.js';
import { inheritedCount, type KnownEventType, type SessionEvent, type SessionHeader } from '../seam/session-types.js';
import type { ProjectionStates } from './projection-states.js';
import { initialStates, listedOf, stepStates, viewsOf } from './projection-states.js';
import { closersFor } from './repair.js';
import type { EncodedEvent } from './validate.js';
import { assertIdList, closedError, duplicateSession, encodeEvents, parseHeader, unknownSession } from './validate.js';

/**
 * One session's log, column by column (an event's seq is its index): a host without durable
 * storage keeps every finished child's log for the catalog, so an event costs its JSON text and
 * little else (no object, no boxed time, one shared string per known type).
 */
interface StoredLog {
  header: SessionHeader;
  types: string[];
  times: number[];
  /** Stored as JSON text, like SQLite, so callers can never share objects with the store. */
  data: string[];
  projections: ProjectionStates;
}

/** Every built-in event type (the compiler checks the list is whole). */
const KNOWN_TYPES: Record<KnownEventType, true> = {
  'turn/start': true, 'turn/end': true, 'step/start': true, 'step/end': true, 'user/message': true, 'assistant/chunk': true,
  'assistant/message': true, 'tool/call': true, 'tool/result': true, 'inbox/accepted': true, 'inbox/discarded': true,
  'session/end-seed': true, 'subagent/descriptor': true,
};

/** One copy of each built-in type, shared by every stored event of that type (an event's own copy is dropped). */
const TYPES = new Map(Object.keys(KNOWN_TYPES).map((type) => [type, type]));

function store(log: StoredLog, encoded: readonly EncodedEvent[]): void {
  for (const event of encoded) {
    log.types.push(TYPES.get(event.type) ?? event.type);
    log.times.push(event.time);
    log.data.push(flat(event.data));
  }
}

function decode(log: StoredLog, seq: number): SessionEvent {
  return { seq, type: log.types[seq]!, time: log.times[seq]!, data: JSON.parse(log.data[seq]!) as unknown };
}

/** Where {@link flat} puts the character it reads, so an optimizing compiler cannot drop the read. */
let _flattenSink = 0;

/**
 * `text` as one flat string. V8 builds JSON.stringify's longer results from pieces (a rope); a
 * rope kept for the life of the store costs a header per piece. Reading a character flattens it
 * in place, and the collector then drops the pieces.
 */
function flat(text: string): string {
  _flattenSink ^= text.length > 0 ? text.charCodeAt(0) : 0;
  return text;
}

class MemoryPersistence implements SessionPersistence {
  readonly [QUEUED_APPENDS] = true;
  /** Map order is creation order, which breaks `createdAt` ties as SQLite's `create_order` does. */
  readonly #sessions = new Map<SessionId, StoredLog>();
  #closing: Promise<void> | undefined;

  async create(header: SessionHeader): Promise<void> {
    this.#assertOpen('create a session');
    const clean = parseHeader(header);
    if (this.#sessions.has(clean.id)) throw duplicateSession(clean.id);
    this.#sessions.set(clean.id, { header: clean, types: [], times: [], data: [], projections: initialStates() });
  }

  async append(id: SessionId, events: readonly SessionEvent[]): Promise<void> {
    this.#assertOpen('append events');
    const log = this.#sessions.get(id);
    if (log === undefined) throw unknownSession(id);
    // Encoding checks every event before any is stored, so a refused append writes nothing.
    store(log, encodeEvents(id, log.types.length, events));
    log.projections = stepStates(log.projections, events);
  }

  async load(id: SessionId): Promise<StoredSession | undefined> {
    this.#assertOpen('load a session');
    const log = this.#sessions.get(id);
    if (log === undefined) return undefined;
    const events = log.types.map((_, seq) => decode(log, seq));
    const closers = closersFor(id, events);
    if (closers.length > 0) {
      const from = log.types.length;
      store(log, encodeEvents(id, from, closers));
      for (let seq = from; seq < log.types.length; seq++) events.push(decode(log, seq));
      log.projections = stepStates(log.projections, closers);
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

  async childRecords(parentId: SessionId): Promise<CatalogRecord[]> {
    this.#assertOpen('list sessions');
    return this.#records((header) => header.parentSession === parentId);
  }

  async descendantRecords(rootId: SessionId): Promise<CatalogRecord[]> {
    this.#assertOpen('list sessions');
    const children = new Map<SessionId, SessionId[]>();
    for (const { header } of this.#sessions.values()) {
      if (header.parentSession === undefined) continue;
      const siblings = children.get(header.parentSession);
      if (siblings === undefined) children.set(header.parentSession, [header.id]);
      else siblings.push(header.id);
    }
    // An explicit stack and a visited set: deep chains cannot overflow, and cycles end.
    const below = new Set<SessionId>();
    const stack = [rootId];
    for (let next = stack.pop(); next !== undefined; next = stack.pop()) {
      for (const child of children.get(next) ?? []) {
        if (below.has(child)) continue;
        below.add(child);
        stack.push(child);
      }
    }
    return this.#records((header) => below.has(header.id));
  }

  async projections(ids: readonly SessionId[]): Promise<Map<SessionId, StoredProjections>> {
    this.#assertOpen('read projections');
    assertIdList(ids);
    const found = new Map<SessionId, StoredProjections>();
    for (const id of ids) {
      const log = this.#sessions.get(id);
      if (log !== undefined) found.set(id, { ok: true, views: viewsOf(log.projections) });
    }
    return found;
  }

  async flush(): Promise<void> {
    this.#assertOpen('flush');
  }

  close(): Promise<void> {
    this.#closing ??= Promise.resolve();
    return this.#closing;
  }

  /** Matching sessions as catalog records with their listed projections, in creation order. */
  #records(matches: (header: SessionHeader) => boolean): CatalogRecord[] {
    const parents = new Set<SessionId>();
    for (const { header } of this.#sessions.values()) {
      if (header.origin === 'subagent' && header.parentSession !== undefined) parents.add(header.parentSession);
    }
    const records: CatalogRecord[] = [];
    for (const { header, projections, types } of this.#sessions.values()) {
      if (!matches(header)) continue;
      const listed = listedOf(projections);
      // No identity and no events of its own yet: a child in its creation window.
      if (listed.mode === null && types.length <= inheritedCount(header)) listed.pending = true;
      records.push({ header: { ...header }, hasSubagentChildren: parents.has(header.id), listed });
    }
    return records.sort((a, b) => a.header.createdAt - b.header.createdAt);
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
