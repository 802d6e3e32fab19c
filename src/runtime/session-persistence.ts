// The durable-storage contract the runtime writes through. Implementations live in `persistence/`;
// the contract lives here so the runtime depends on nothing below it.
import type { SessionId } from '../seam/content.js';
import type { SubagentError } from '../seam/errors.js';
import type { SubagentIdentity, SubagentTiming } from '../seam/projections.js';
import type { SessionEvent, SessionHeader } from '../seam/session-types.js';
import type { SubagentUsage } from '../seam/usage.js';

export interface StoredSession {
  header: SessionHeader;
  events: SessionEvent[];
}

/**
 * The header fields the catalog reads. Stores may return whole headers; the SQLite store reads only
 * these columns, since every column costs time on every one of thousands of rows.
 */
export type CatalogHeader = Pick<SessionHeader, 'id' | 'createdAt' | 'parentSession' | 'origin'>;

/** What a listing row shows of a session's stored projections: its identity's mode and label, and its usage. */
export interface ListedProjections {
  /** null: no valid descriptor (the identity view is null). */
  mode: 'one-shot' | 'continuable' | null;
  label: string | undefined;
  usage: SubagentUsage;
  /**
   * With `mode: null`: the session has no events of its own yet (a child in its creation window,
   * whose descriptor comes with its first turn), so it is not listed; without it, a `null` mode is a
   * corrupt log.
   */
  pending?: true;
}

/** A stored session as the catalog enumerates it: its header and one indexed lineage fact. */
export interface CatalogRecord {
  header: CatalogHeader;
  /** Some stored session with `origin: 'subagent'` names this one as its parent. */
  hasSubagentChildren: boolean;
  /**
   * The session's stored projections as a listing shows them, read by the enumeration itself (so
   * a listing is one read of the store). Optional: the catalog reads {@link
   * SessionPersistence.projections} for a record without it.
   */
  listed?: ListedProjections;
  /**
   * The session's depth below the root (1: a child of the root). A store that returns its
   * `descendantRecords` in pre-order (depth first, siblings in creation order) sets it on every
   * record, and the catalog then takes the walk as it comes.
   */
  depth?: number;
}

/** The views of the projections stored beside a session's log (`subagentIdentity`, `subagentTiming`, `subagentUsage`). */
export interface ProjectionViews {
  subagent: SubagentIdentity | null;
  subagentTiming: SubagentTiming;
  subagentUsage: SubagentUsage;
}

/** One session's stored projections, or why they cannot be read (`CORRUPT_DATA`: row and log both unreadable). */
export type StoredProjections = { ok: true; views: ProjectionViews } | { ok: false; error: SubagentError };

/**
 * Durable sessions. `append` is seq-checked (the first event's seq must equal the stored count)
 * and may be write-behind; `flush()` is the durability barrier: once it resolves, everything
 * appended before the call is on disk. Each append also advances the session's stored projections
 * in the same transaction as its events, so reading them never replays a log.
 */
export interface SessionPersistence {
  create(header: SessionHeader): Promise<void>;
  append(id: SessionId, events: readonly SessionEvent[]): Promise<void>;
  /** The session with a turn left open by a crash closed (`turn/end` reason `interrupted`). */
  load(id: SessionId): Promise<StoredSession | undefined>;
  /** Headers in creation order; with `parentSession`, only that parent's children (indexed). */
  list(filter?: { parentSession?: SessionId }): Promise<SessionHeader[]>;
  /** The stored children of `parentId` (any origin) in creation order: one indexed query. */
  childRecords(parentId: SessionId): Promise<CatalogRecord[]>;
  /**
   * Every stored session below `rootId` by parent links, in creation order or in pre-order with
   * each record's `depth`. A parent cycle ends (each session appears once; the root itself appears
   * when it sits on a cycle).
   */
  descendantRecords(rootId: SessionId): Promise<CatalogRecord[]>;
  /**
   * The stored projection views of `ids` (ids not stored are absent), as of their committed
   * appends. A projection row found damaged is rebuilt from its log once.
   */
  projections(ids: readonly SessionId[]): Promise<Map<SessionId, StoredProjections>>;
  flush(): Promise<void>;
  close(): Promise<void>;
}

/**
 * Marks a store whose `create` and `append` take effect in call order as they are called (applied
 * or queued before the promise is returned) and whose `append` resolves only once its events are
 * durable: the live store then hands it a session's appends as they come, and one `flush()` commits
 * all of them, instead of waiting for each append to commit before the next.
 */
export const QUEUED_APPENDS: unique symbol = Symbol('subagent-host.queuedAppends');

/** Whether `persistence` declares {@link QUEUED_APPENDS}. */
export function takesQueuedAppends(persistence: SessionPersistence): boolean {
  return (persistence as { [QUEUED_APPENDS]?: unknown })[QUEUED_APPENDS] === true;
}
