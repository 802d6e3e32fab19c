// The value of a shared cancel flag (an Int32Array another thread sets): 0 while the child may run,
// then which cancellation it is, so a turn the flag stops records the same cause as the message
// that follows it (a child that never yields sees the flag alone).
import type { CancelCause } from './session-types.js';

const BY_PARENT = 1;
const BY_USER = 2;

/** The flag value for a cancellation of `cause` (any cause but the user's reads as the parent's). */
export function cancelFlagValue(cause: CancelCause): number {
  return cause.kind === 'user' ? BY_USER : BY_PARENT;
}

/** The cause a set flag (non-zero `value`) stands for. */
export function causeOfFlag(value: number): CancelCause {
  return value === BY_USER ? { kind: 'user' } : { kind: 'parent' };
}
