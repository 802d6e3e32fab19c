// The rule for a session id a caller chooses (`createAgent({ sessionId })`, a continuable start's
// `childId`): every tool must be able to show it and to be given it back. `subagent-host ls` takes
// it as a command-line argument (which cannot hold a NUL) and the inspector in its URL path (which
// Node's HTTP server refuses past 16 KiB of request head).
import { SubagentError, type SubagentErrorCode } from './errors.js';
import { wellFormed } from './parse.js';

/** The longest session id a caller may choose, in UTF-16 units: percent-encoded, it stays under 10 KiB. */
export const MAX_SESSION_ID_LENGTH = 1024;

/** C0 and C1 controls: no terminal shows them, and a command line cannot pass a NUL. */
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/;

/**
 * `code` naming `field` unless `id` is a session id a caller may choose. A `stored` id (one to look
 * up, which an earlier release may have written) needs only be a non-empty string SQLite keeps.
 */
export function assertSessionId(id: unknown, field: string, code: SubagentErrorCode, stored = false): asserts id is string {
  const refuse = (rule: string): never => {
    throw new SubagentError(code, `${field} must be ${rule}`);
  };
  if (typeof id !== 'string' || id === '') return refuse('a non-empty string');
  if (!wellFormed(id)) return refuse('well-formed text (it has a lone UTF-16 surrogate, which no store keeps)');
  if (stored) return;
  if (id.length > MAX_SESSION_ID_LENGTH) return refuse(`at most ${MAX_SESSION_ID_LENGTH} characters long (it has ${id.length})`);
  if (CONTROL.test(id)) return refuse('free of control characters (a newline, a tab, a NUL, an escape): listings could not show it, nor a command line pass it');
}
