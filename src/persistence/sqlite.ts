// STUB — to be implemented: SQLite SessionPersistence (better-sqlite3, WAL).
import type { SessionPersistence } from '../runtime/session-persistence.js';
export function sqlitePersistence(_path: string): SessionPersistence { throw new Error('not implemented'); }
