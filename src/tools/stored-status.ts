// The status of a child that is in no live place (evicted, or stored by an earlier run of the host
// on the same database), read from its durable log: `failed` when its last turn ended in error, as
// the `subagent/end` of that stretch said, else `idle` (nothing of it runs).
import type { SessionId } from '../seam/content.js';
import { isRecord } from '../seam/parse.js';
import type { SessionEvent } from '../seam/session-types.js';
import type { SessionPersistence } from '../runtime/session-persistence.js';

/** What the read needs of a host: its store, and its live agents and sessions (never loaded). */
export interface StoredStatusHost {
  readonly persistence: Pick<SessionPersistence, 'load' | 'projections'>;
  readonly sessions: { get(id: SessionId): unknown };
  readonly agents: { get(id: SessionId): unknown };
}

/**
 * Whether the last turn that ended in `events` ended in error. A `turn/end` whose data says nothing
 * of it (a damaged row) reads as not failed, rather than failing the read of its siblings' logs too.
 */
export function lastTurnFailed(events: readonly SessionEvent[]): boolean {
  const data = events.findLast((event) => event.type === 'turn/end')?.data;
  const reason = isRecord(data) ? data['reason'] : undefined;
  return isRecord(reason) && reason['kind'] === 'error';
}

const live = (host: StoredStatusHost, id: SessionId) => host.agents.get(id) !== undefined || host.sessions.get(id) !== undefined;

/**
 * The stored status of each of `ids` in no live place; ids live or not stored are left out (the
 * caller reads them as before). A log whose turn a crash left open reads `idle`: that turn ends
 * `interrupted` when the child is loaded, and nothing of it runs meanwhile. An unreadable log reads
 * `idle` too (list_agents reports it among its diagnostics). A failed read of the store rejects.
 */
export async function storedStatuses(host: StoredStatusHost, ids: readonly SessionId[]): Promise<Map<SessionId, 'idle' | 'failed'>> {
  const statuses = new Map<SessionId, 'idle' | 'failed'>();
  const stored = await host.persistence.projections(ids.filter((id) => !live(host, id)));
  for (const [id, projections] of stored) {
    if (!projections.ok || projections.views.subagent === null) continue;
    // load() closes a turn left open: so never for such a turn, nor for a child that a resume made
    // live meanwhile (checked right before the call, whose built-in stores read without yielding;
    // the caller drops what it read of a child live by then).
    const readable = projections.views.subagentTiming.active === undefined && !live(host, id);
    const session = readable ? await host.persistence.load(id).catch(() => undefined) : undefined;
    statuses.set(id, session !== undefined && lastTurnFailed(session.events.slice(session.header.seedLength ?? 0)) ? 'failed' : 'idle');
  }
  return statuses;
}
