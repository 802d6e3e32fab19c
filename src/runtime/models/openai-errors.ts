// Failure mapping of the OpenAI-compatible adapter: HTTP statuses, server error bodies and network
// errors become one-line FailureInfo records with stable codes. Nothing here may leak the API key.
import type { FailureInfo } from '../../seam/session-types.js';

/** How much of a server's own error message a failure quotes. */
const MAX_DETAIL = 200;

// Out of money or quota, as servers word it (OpenAI's `insufficient_quota`, "exceeded your current
// quota", DeepSeek's "Insufficient Balance"); not every "insufficient" or "balance" ("load balancer").
const QUOTA_WORDING = /insufficient[_ ]quota|exceeded (?:your )?(?:current )?quota|quota (?:exceeded|exhausted)|insufficient (?:account )?balance|out of (?:credits|quota)/i;
const CONTEXT_WORDING = /context[ _-]?(length|window)|maximum context|too many tokens|prompt is too long/i;

/** Removes every occurrence of `secret` from text; servers sometimes echo the key they rejected. */
export type Scrub = (text: string) => string;

/** A scrubber for `secret` (no-op when there is none). */
export function scrubberFor(secret: string | undefined): Scrub {
  if (secret === undefined || secret === '') return (text) => text;
  return (text) => text.split(secret).join('[redacted]');
}

function oneLine(text: string): string {
  const flat = text.replace(/\s+/g, ' ').trim();
  return flat.length > MAX_DETAIL ? `${flat.slice(0, MAX_DETAIL - 1)}…` : flat;
}

/**
 * The server's own message from an error body (`{error:{message}}`, `{error}`, `{message}` or
 * plain text), scrubbed before it is shortened so no fragment of the key survives a cut.
 */
export function serverDetail(body: string, scrub: Scrub): string {
  let detail = body;
  try {
    const json = JSON.parse(body) as unknown;
    if (json !== null && typeof json === 'object') {
      const { error, message } = json as { error?: unknown; message?: unknown };
      const nested = error !== null && typeof error === 'object' ? (error as { message?: unknown }).message : error;
      if (typeof nested === 'string') detail = nested;
      else if (typeof message === 'string') detail = message;
    }
  } catch {
    // Not JSON: quote the text itself.
  }
  return oneLine(scrub(detail));
}

function withDetail(message: string, detail: string): string {
  return detail === '' ? message : `${message}: ${detail}`;
}

/** Where an HTTP failure happened, for its message. */
export interface HttpContext {
  status: number;
  apiKeyEnv: string;
  requestId?: string | undefined;
}

/** Maps an HTTP error response to a failure; `detail` is the output of `serverDetail`. */
export function httpFailure(context: HttpContext, detail: string): FailureInfo {
  const { status, apiKeyEnv, requestId } = context;
  const where = requestId === undefined ? `HTTP ${status}` : `HTTP ${status}, request ${requestId}`;
  const fail = (code: string, what: string): FailureInfo => ({
    code,
    message: withDetail(`${what} (${where})`, detail),
    status,
  });
  // Quota wording counts where servers report it (402 Payment Required, 429); a 400 or 5xx that
  // mentions a quota is still what its status says.
  if (status === 402 || ((status === 403 || status === 429) && QUOTA_WORDING.test(detail))) return fail('QUOTA_EXCEEDED', 'the account is out of quota or balance');
  if (status === 401 || status === 403) return fail('AUTH', `the server rejected the API key; check ${apiKeyEnv}`);
  if (status === 429) return fail('RATE_LIMIT', 'rate limited by the server; retry later');
  if (status === 400 && CONTEXT_WORDING.test(detail)) {
    return fail('CONTEXT_WINDOW_EXCEEDED', "the conversation exceeds the model's context window");
  }
  if (status === 400 || status === 413) return fail('INVALID_REQUEST', 'the server rejected the request');
  if (status >= 500) return fail('SERVER', 'the server failed');
  return fail(`HTTP_${status}`, 'unexpected response; check baseURL and model');
}

/** True for failures worth one more attempt: rate limits, server errors and requests that reached no server. */
export function isRetryable(failure: FailureInfo): boolean {
  return failure.code === 'RATE_LIMIT' || failure.code === 'SERVER' || failure.code === 'NETWORK';
}

/** An error object sent inside the event stream (some servers report overloads this way). */
export function streamErrorFailure(error: unknown, scrub: Scrub): FailureInfo {
  const detail = serverDetail(JSON.stringify({ error }), scrub);
  if (QUOTA_WORDING.test(detail)) {
    return { code: 'QUOTA_EXCEEDED', message: withDetail('quota exhausted mid-stream', detail) };
  }
  if (CONTEXT_WORDING.test(detail)) {
    return { code: 'CONTEXT_WINDOW_EXCEEDED', message: withDetail('context window exceeded mid-stream', detail) };
  }
  return { code: 'SERVER', message: withDetail('the server reported an error mid-stream', detail) };
}

/** How long a code made from a server's finish_reason may be. */
const MAX_REASON_CODE = 64;

/**
 * A failure for a finish_reason we do not know: the upper-cased reason is the code. Scrubbed before
 * it is cut or upper-cased (no fragment of the key survives) and bounded like any server detail.
 */
export function finishReasonFailure(reason: string, scrub: Scrub): FailureInfo {
  const clean = scrub(reason);
  const code = clean.toUpperCase().replace(/[^A-Z0-9]+/g, '_').slice(0, MAX_REASON_CODE);
  return { code, message: `the model stopped with finish_reason '${oneLine(clean)}'` };
}

/** The innermost useful description of a fetch failure (undici wraps the socket error). */
function describeCause(error: unknown): string {
  let current: unknown = error;
  for (let depth = 0; depth < 4; depth++) {
    const cause = current instanceof Error ? current.cause : undefined;
    if (!(cause instanceof Error)) break;
    current = cause;
  }
  if (!(current instanceof Error)) return String(current);
  const code = (current as { code?: unknown }).code;
  return typeof code === 'string' ? `${code} ${current.message}` : current.message;
}

/** A failure for a request that never got a response. */
export function networkFailure(url: string, error: unknown, scrub: Scrub): FailureInfo {
  return { code: 'NETWORK', message: `cannot reach ${url}: ${oneLine(scrub(describeCause(error)))}` };
}

/** A failure for a response body that broke off. */
export function streamClosedFailure(error: unknown, scrub: Scrub): FailureInfo {
  const why = error === undefined ? 'the server closed the stream' : oneLine(scrub(describeCause(error)));
  return { code: 'STREAM_CLOSED', message: `the response stream ended before [DONE] (${why})` };
}
