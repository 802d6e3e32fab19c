// STUB — to be implemented: in-memory SessionPersistence with the SQLite backend's contract.
import type { SessionPersistence } from '../runtime/session-persistence.js';
export function memoryPersistence(): SessionPersistence { throw new Error('not implemented'); }
