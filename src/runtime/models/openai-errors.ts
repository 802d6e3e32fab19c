// Failure mapping of the OpenAI-compatible adapter: HTTP statuses, server error bodies and network
// errors become one-line FailureInfo records with stable codes. Nothing here may leak the API key.
import type { FailureInfo } from '../../seam/session-types.js';
import { headOf } from '../../seam/parse.js';

/** How much of a server's own error message a failure quotes. */
const MAX_DETAIL = 200;

// Out of money or quota, as servers word it (OpenAI's `insufficient_quota`, "exceeded your current
// quota", DeepSeek's "Insufficient Balance"); not every "insufficient" or "balance" ("load balancer").
const QUOTA_WORDING = /insufficient[_ ]quota|exceeded (?:your )?(?:current )?quota|quota (?:exceeded|exhausted)|insufficient (?:account )?balance|out of (?:credits|quota)/i;
// A conversation too long for the model, as servers word it: OpenAI's and vLLM's "maximum context
// length", Ollama's "exceeds the context length", llama.cpp's "exceeds the available context size"
// (type `exceed_context_size_error`), Groq's "reduce the length of the messages", Gemini's "input
// token count … exceeds the maximum number of tokens allowed" (not a `max_tokens` asked too large),
// Anthropic's "prompt is too long".
const CONTEXT_WORDING = /context[ _-]?(?:length|window|size)|maximum context|too many tokens|prompt is too long|reduce the length of the messages|input token count[^.]*exceeds the maximum number of tokens/i;

/** Removes every occurrence of `secret` from text; servers sometimes echo the key they rejected. */
export type Scrub = (text: string) => string;

/** A scrubber for `secret` (no-op when there is none). */
export function scrubberFor(secret: string | undefined): Scrub {
  if (secret === undefined || secret === '') return (text) => text;
  return (text) => text.split(secret).join('[redacted]');
}

function oneLine(text: string): string {
  const flat = text.replace(/\s+/g, ' ').trim();
  return flat.length > MAX_DETAIL ? `${headOf(flat, MAX_DETAIL - 1)}…` : flat;
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

/** The server's own `type` and `code` of an error object, as `type T, code C` (or ''). */
function errorLabels(error: unknown, scrub: Scrub): string {
  if (error === null || typeof error !== 'object') return '';
  const { type, code } = error as { type?: unknown; code?: unknown };
  const labels: string[] = [];
  if (typeof type === 'string' && type.trim() !== '') labels.push(`type ${type}`);
  if ((typeof code === 'string' && code.trim() !== '') || typeof code === 'number') labels.push(`code ${code}`);
  return labels.length === 0 ? '' : oneLine(headOf(scrub(labels.join(', ')), 100));
}

/** An error object sent inside the event stream (some servers report overloads this way). */
export function streamErrorFailure(error: unknown, scrub: Scrub): FailureInfo {
  const message = serverDetail(JSON.stringify({ error }), scrub);
  const labels = errorLabels(error, scrub);
  const detail = labels === '' ? message : `${message} (${labels})`;
  if (QUOTA_WORDING.test(detail)) {
    return { code: 'QUOTA_EXCEEDED', message: withDetail('quota exhausted mid-stream', detail) };
  }
  if (CONTEXT_WORDING.test(detail)) {
    return { code: 'CONTEXT_WINDOW_EXCEEDED', message: withDetail('context window exceeded mid-stream', detail) };
  }
  return { code: 'SERVER', message: withDetail('the server reported an error mid-stream', detail) };
}

/**
 * The failure of an `event: error` (Anthropic-style gateways, some proxies): its data is an error
 * object with or without an `{ error }` wrapper, or plain text.
 */
export function errorEventFailure(data: string, scrub: Scrub): FailureInfo {
  let error: unknown = data;
  try {
    const json = JSON.parse(data) as unknown;
    const wrapped = json !== null && typeof json === 'object' ? (json as { error?: unknown }).error : undefined;
    error = wrapped ?? json;
  } catch {
    // Plain text: quoted as it is.
  }
  return streamErrorFailure(error, scrub);
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

/** The innermost error of a fetch failure (undici wraps the socket error). */
function innermost(error: unknown): unknown {
  let current: unknown = error;
  for (let depth = 0; depth < 4; depth++) {
    const cause = current instanceof Error ? current.cause : undefined;
    if (!(cause instanceof Error)) break;
    current = cause;
  }
  return current;
}

function codeOf(error: unknown): string | undefined {
  const code = error instanceof Error ? (error as { code?: unknown }).code : undefined;
  return typeof code === 'string' ? code : undefined;
}

/** The innermost useful description of a fetch failure. */
function describeCause(error: unknown): string {
  const current = innermost(error);
  if (!(current instanceof Error)) return String(current);
  const code = codeOf(current);
  return code === undefined ? current.message : `${code} ${current.message}`;
}

/**
 * Timers of fetch's own (undici's headersTimeout and bodyTimeout, 300 s by default, or what a
 * global dispatcher sets): the request reached the server, so this is a timeout, not a failure to
 * connect, and is not retried (the server may still be generating the first answer).
 */
const FETCH_TIMEOUT_CODES = new Set(['UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT']);

function fetchTimeoutFailure(url: string, error: unknown): FailureInfo | undefined {
  const code = codeOf(innermost(error));
  if (code === undefined || !FETCH_TIMEOUT_CODES.has(code)) return undefined;
  return { code: 'TIMEOUT', message: `no data from ${url} within the HTTP client's own timeout (${code})` };
}

/** A failure for a request that never got a response. */
export function networkFailure(url: string, error: unknown, scrub: Scrub): FailureInfo {
  return fetchTimeoutFailure(url, error) ?? { code: 'NETWORK', message: `cannot reach ${url}: ${oneLine(scrub(describeCause(error)))}` };
}

/** A failure for a response body from `url` that broke off. */
export function streamClosedFailure(url: string, error: unknown, scrub: Scrub): FailureInfo {
  const timeout = fetchTimeoutFailure(url, error);
  if (timeout) return timeout;
  const why = error === undefined ? 'the server closed the stream' : oneLine(scrub(describeCause(error)));
  return { code: 'STREAM_CLOSED', message: `the response stream ended before [DONE] (${why})` };
}
