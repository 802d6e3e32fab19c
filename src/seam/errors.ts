// The one error class of the library. `code` is a closed union so callers route on it, never on
// message text; `cause` carries the underlying failure across every boundary (see codec.ts).

/** Every code a `SubagentError` can carry. */
export const SUBAGENT_ERROR_CODES = [
  'INVALID_PROVIDER',
  'DUPLICATE_PROVIDER',
  'NO_PROVIDER',
  'UNSUPPORTED_CAPABILITY',
  'INVALID_REQUEST',
  'DEPTH_EXCEEDED',
  'CONTRACT_VIOLATION',
  'START_FAILED',
  'CONTINUATION_UNAVAILABLE',
  'PERSISTENCE_UNAVAILABLE',
  'DUPLICATE_CHILD',
  'DRAINING',
  'UNAUTHORIZED',
  'NOT_RESUMABLE',
  'ACTIVATION_CLOSING',
  'PARENT_UNAVAILABLE',
  'ACTIVATION_TEARDOWN_FAILED',
  'ACTIVATION_SETUP_REVOKED',
  'ACTIVATION_SETUP_RELEASE_FAILED',
  'CANCELLED',
  'CLOSED',
  // Substrate codes: bad options, model specs, tool input, stored data.
  'INVALID_OPTIONS',
  'INVALID_MODEL_SPEC',
  'UNKNOWN_TOOL',
  'DUPLICATE_TOOL',
  'INVALID_TOOL_INPUT',
  'UNKNOWN_SESSION',
  'DUPLICATE_SESSION',
  'SEQ_MISMATCH',
  'CORRUPT_DATA',
] as const;

export type SubagentErrorCode = (typeof SUBAGENT_ERROR_CODES)[number];

// A worker thread runs its own (bundled) copy of this class, and a tool module there may import the
// package's copy: `instanceof` recognises either by this brand.
const BRAND = Symbol.for('subagent-host.SubagentError');

/** The library's error: a stable `code`, an actionable message and an optional `cause`. */
export class SubagentError extends Error {
  readonly code: SubagentErrorCode;

  static override [Symbol.hasInstance](value: unknown): boolean {
    if (this !== SubagentError) return Function.prototype[Symbol.hasInstance].call(this, value);
    return typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[BRAND] === true;
  }

  constructor(code: SubagentErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
  }

  override get name(): string {
    return 'SubagentError';
  }

  // Factories for the messages several places raise, so each reads the same wherever it comes from.

  /** `CANCELLED`: `what` was stopped by its signal, e.g. `the start was cancelled before …`. */
  static cancelled(what: string, reason: unknown, when?: string): SubagentError {
    return new SubagentError('CANCELLED', `${what} was cancelled${when === undefined ? '' : ` ${when}`}`, { cause: reason });
  }

  /** `CLOSED`: `what` is closed (and `hint` says what to do instead). */
  static closed(what: string, hint?: string): SubagentError {
    return new SubagentError('CLOSED', `${what} is closed${hint === undefined ? '' : `; ${hint}`}`);
  }

  /** `CLOSED`: `what` closed while an operation was under way (`during`). */
  static closedWhile(what: string, during: string): SubagentError {
    return new SubagentError('CLOSED', `${what} closed while ${during}`);
  }

  /** `CONTINUATION_UNAVAILABLE`: `what` needs continuable children, which this object cannot host. */
  static continuationUnavailable(what: string, hint = 'create the service through createHost'): SubagentError {
    return new SubagentError('CONTINUATION_UNAVAILABLE', `${what} needs continuable children: ${hint}`);
  }

  /** `UNSUPPORTED_CAPABILITY`: a request carries `field`, which needs a `capability` that `provider` lacks. */
  static unsupported(provider: string, field: string, capability: string): SubagentError {
    return new SubagentError('UNSUPPORTED_CAPABILITY', `provider ${provider} does not support ${field}; drop it or use a provider with the ${capability} capability`);
  }
}

Object.defineProperty(SubagentError.prototype, BRAND, { value: true });

/** True when `value` is a `SubagentError`, optionally with the given code. */
export function isSubagentError(value: unknown, code?: SubagentErrorCode): value is SubagentError {
  return value instanceof SubagentError && (code === undefined || value.code === code);
}

/**
 * `String(value)` for a message about a caller's value, even where that throws: a template or
 * `String()` of a null-prototype object (or of a proxy that throws) is a TypeError, which would
 * replace the SubagentError being built.
 */
export function printable(value: unknown): string {
  try {
    return String(value);
  } catch {
    return typeof value === 'object' && value !== null ? '<an object>' : `<a ${typeof value}>`;
  }
}

/** Renders any thrown value as one short line, even when its own `String()` throws. */
export function describeError(value: unknown): string {
  try {
    if (value instanceof Error) return `${value.name}: ${value.message}`;
    return String(value);
  } catch {
    return '<unprintable error>';
  }
}
