// The value of a shared cancel flag (an Int32Array another thread sets): 0 while the child may run,
// then which cancellation it is, so a turn the flag stops records the same cause as the message
// that follows it (a child that never yields sees the flag alone).
import { printable } from './errors.js';
import type { CancelCause } from './session-types.js';

const BY_PARENT = 1;
const BY_USER = 2;

/**
 * The cancel cause `agent.cancel` was given, as the log keeps it; any other value (one whose reading
 * throws too) is the user's. A worker child's cause crosses to its thread as this: a function, a
 * symbol or a cycle in what the caller passed could not cross (nor be logged), on any transport.
 */
export function cancelCauseOf(reason: unknown): CancelCause {
  try {
    if (reason !== null && typeof reason === 'object' && 'kind' in reason) {
      const kind = (reason as { kind: unknown }).kind;
      if (kind === 'user' || kind === 'parent' || kind === 'disposed') return { kind };
      if (kind === 'hook') return { kind: 'hook', reason: printable((reason as { reason?: unknown }).reason ?? '') };
    }
  } catch {
    // A revoked proxy, or a throwing `kind` getter: the turn still ends, aborted by its user.
  }
  return { kind: 'user' };
}

/** The flag value for a cancellation of `cause` (any cause but the user's reads as the parent's). */
export function cancelFlagValue(cause: CancelCause): number {
  return cause.kind === 'user' ? BY_USER : BY_PARENT;
}

/** The cause the flag stands for once set, or undefined while it is clear (or there is none). */
export function flaggedCause(flag: Int32Array | undefined): CancelCause | undefined {
  const value = flag ? Atomics.load(flag, 0) : 0;
  if (value === 0) return undefined;
  return value === BY_USER ? { kind: 'user' } : { kind: 'parent' };
}
