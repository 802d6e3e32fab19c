// The durable-storage contract the runtime writes through. Implementations live in `persistence/`;
// the contract lives here so the runtime depends on nothing below it.
import type { SessionId } from '../seam/content.js';
import type { SessionEvent, SessionHeader } from '../seam/session-types.js';

export interface StoredSession {
  header: SessionHeader;
  events: SessionEvent[];
}

/**
 * Durable sessions. `append` is seq-checked (the first event's seq must equal the stored count)
 * and may be write-behind; `flush()` is the durability barrier: once it resolves, everything
 * appended before the call is on disk.
 */
export interface SessionPersistence {
  create(header: SessionHeader): Promise<void>;
  append(id: SessionId, events: readonly SessionEvent[]): Promise<void>;
  /** The session with a turn left open by a crash closed (`turn/end` reason `interrupted`). */
  load(id: SessionId): Promise<StoredSession | undefined>;
  /** Headers in creation order; with `parentSession`, only that parent's children (indexed). */
  list(filter?: { parentSession?: SessionId }): Promise<SessionHeader[]>;
  flush(): Promise<void>;
  close(): Promise<void>;
}
