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

/** The cause the flag stands for once set, or undefined while it is clear (or there is none). */
export function flaggedCause(flag: Int32Array | undefined): CancelCause | undefined {
  const value = flag ? Atomics.load(flag, 0) : 0;
  if (value === 0) return undefined;
  return value === BY_USER ? { kind: 'user' } : { kind: 'parent' };
}
