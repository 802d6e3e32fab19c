// A caller's SessionPersistence behind the checks the built-in stores keep themselves: whatever it
// throws or rejects with reaches our callers as a SubagentError (`PERSISTENCE_UNAVAILABLE`), and
// what it returns is checked before the host builds on it (`CORRUPT_DATA`): a log of another
// session, events out of seq order, records of another parent or twice over, a result of no shape.
import type { SessionId } from '../seam/content.js';
import { SubagentError, describeError, isSubagentError, printable } from '../seam/errors.js';
import { isRecord } from '../seam/parse.js';
import { emptyUsage } from '../seam/usage.js';
import {
  QUEUED_APPENDS,
  takesQueuedAppends,
  type CatalogRecord,
  type SessionPersistence,
  type StoredProjections,
  type StoredSession,
} from './session-persistence.js';

const USAGE_KEYS = Object.keys(emptyUsage());

function failed(method: string, error: unknown): SubagentError {
  if (isSubagentError(error)) return error;
  return new SubagentError('PERSISTENCE_UNAVAILABLE', `the session persistence's ${method}() failed: ${describeError(error)}`, { cause: error });
}

function malformed(call: string, what: string): SubagentError {
  return new SubagentError('CORRUPT_DATA', `the session persistence's ${call} returned ${what}; a SessionPersistence must keep the contract of its interface`);
}

/** `method(...args)` of `persistence`, its throw (also a synchronous one) or rejection made a SubagentError. */
async function call<T>(persistence: SessionPersistence, method: keyof SessionPersistence, args: unknown[]): Promise<T> {
  try {
    return await (persistence[method] as (...values: unknown[]) => Promise<T>).apply(persistence, args);
  } catch (error) {
    throw failed(method, error);
  }
}

const optionalText = (value: unknown) => value === undefined || typeof value === 'string';
/** Usage as the folds make it: whole non-negative safe counts, and a non-negative wall time. */
const isUsage = (value: unknown) =>
  isRecord(value) &&
  USAGE_KEYS.every((key) => {
    const figure = value[key];
    return typeof figure === 'number' && figure >= 0 && (key === 'wallMs' ? Number.isFinite(figure) : Number.isSafeInteger(figure));
  });

function checkStored(id: SessionId, stored: unknown): StoredSession | undefined {
  if (stored === undefined || stored === null) return undefined;
  const at = `load(${printable(id)})`;
  if (!isRecord(stored) || !isRecord(stored['header']) || !Array.isArray(stored['events'])) throw malformed(at, 'no { header, events }');
  const { header, events } = stored as { header: Record<string, unknown>; events: unknown[] };
  if (header['id'] !== id) throw malformed(at, `the log of session ${printable(header['id'])}`);
  if (!Number.isFinite(header['createdAt'])) throw malformed(at, 'a header without a numeric createdAt');
  events.forEach((event, index) => {
    if (!isRecord(event) || event['seq'] !== index || typeof event['type'] !== 'string' || event['type'] === '' || !Number.isFinite(event['time'])) {
      throw malformed(at, `events[${index}] that is not the session's event ${index} ({ seq: ${index}, time, type, data })`);
    }
  });
  return stored as unknown as StoredSession;
}

function checkRecords(call: string, records: unknown, parentId?: SessionId): CatalogRecord[] {
  if (!Array.isArray(records)) throw malformed(call, 'no array of catalog records');
  const seen = new Set<unknown>();
  records.forEach((record: unknown, index) => {
    const bad = (what: string) => malformed(call, `records[${index}] ${what}`);
    if (!isRecord(record) || !isRecord(record['header']) || typeof record['hasSubagentChildren'] !== 'boolean') throw bad('that is no { header, hasSubagentChildren }');
    const { header, listed, depth } = record as { header: Record<string, unknown>; listed?: unknown; depth?: unknown };
    const { id, createdAt, parentSession, origin } = header;
    if (typeof id !== 'string' || id === '' || !Number.isFinite(createdAt) || !optionalText(parentSession) || (origin !== undefined && origin !== 'subagent')) {
      throw bad('with a header that is not a session header');
    }
    if (parentId !== undefined && parentSession !== parentId) throw bad(`of session ${id}, which is not a child of ${printable(parentId)}`);
    if (seen.has(id)) throw bad(`of session ${id} once more`);
    seen.add(id);
    if (depth !== undefined && !(Number.isSafeInteger(depth) && (depth as number) >= 1)) throw bad('with a depth that is not a whole number ≥ 1');
    if (listed === undefined) return;
    const mode = isRecord(listed) ? listed['mode'] : undefined;
    if (!isRecord(listed) || !(mode === null || mode === 'one-shot' || mode === 'continuable') || !optionalText(listed['label']) || !isUsage(listed['usage'])) {
      throw bad('with listed projections that are no { mode, label, usage }');
    }
  });
  return records as CatalogRecord[];
}

function checkProjections(read: unknown): Map<SessionId, StoredProjections> {
  if (!(read instanceof Map)) throw malformed('projections()', 'no Map of session ids to projections');
  for (const [id, entry] of read as Map<unknown, unknown>) {
    const views: unknown = isRecord(entry) ? entry['views'] : undefined;
    const ok = isRecord(entry) && (entry['ok'] === true
      ? isRecord(views) && (views['subagent'] === null || isRecord(views['subagent'])) && isRecord(views['subagentTiming']) && isUsage(views['subagentUsage'])
      : entry['ok'] === false && isSubagentError(entry['error']));
    if (!ok) throw malformed('projections()', `for session ${printable(id)} neither { ok: true, views } nor { ok: false, error: SubagentError }`);
  }
  return read as Map<SessionId, StoredProjections>;
}

/** `persistence` behind the checks above; its appends queue as its own do ({@link QUEUED_APPENDS}). */
export function checkedPersistence(persistence: SessionPersistence): SessionPersistence {
  return {
    [QUEUED_APPENDS]: takesQueuedAppends(persistence),
    create: (header) => call(persistence, 'create', [header]),
    append: (id, events) => call(persistence, 'append', [id, events]),
    load: async (id) => checkStored(id, await call(persistence, 'load', [id])),
    list: (filter) => call(persistence, 'list', filter === undefined ? [] : [filter]),
    childRecords: async (parentId) => checkRecords(`childRecords(${printable(parentId)})`, await call(persistence, 'childRecords', [parentId]), parentId),
    descendantRecords: async (rootId) => checkRecords(`descendantRecords(${printable(rootId)})`, await call(persistence, 'descendantRecords', [rootId])),
    projections: async (ids) => checkProjections(await call(persistence, 'projections', [ids])),
    flush: () => call(persistence, 'flush', []),
    close: () => call(persistence, 'close', []),
  } as SessionPersistence;
}

/**
 * The host's public view of its store. `load(id)` of a session live in this host gives `live(id)`:
 * its log flushed and read as stored, turn still open. The store's own load would close a turn its
 * log has open (crash repair) behind the live agent's back, whose later writes it then refuses.
 */
export function liveGuardedPersistence(persistence: SessionPersistence, live: (id: SessionId) => Promise<StoredSession | undefined> | undefined): SessionPersistence {
  const load = (id: SessionId): Promise<StoredSession | undefined> => (typeof id === 'string' ? live(id) : undefined) ?? persistence.load(id);
  return new Proxy(persistence, {
    get(target, key) {
      if (key === 'load') return load;
      const value: unknown = Reflect.get(target, key, target);
      return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
    },
  });
}
