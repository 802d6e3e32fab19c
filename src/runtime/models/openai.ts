// The OpenAI-compatible chat-completions adapter: one streaming POST per model request, bounded
// retries before the first byte, an idle timeout, and every failure mapped to a `finish` chunk.
import type { ModelSpec } from '../../seam/agent-types.js';
import type { FailureInfo } from '../../seam/session-types.js';
import { headOf, wellFormedJson } from '../../seam/parse.js';
import type { Scrub } from './openai-errors.js';
import {
  errorEventFailure,
  httpFailure,
  isRetryable,
  networkFailure,
  scrubberFor,
  serverDetail,
  streamClosedFailure,
  streamErrorFailure,
} from './openai-errors.js';
import { toWireRequest } from './openai-request.js';
import { CompletionAssembler } from './openai-stream.js';
import { MAX_EVENT_CHARS, SseDecoder } from './sse.js';
import type { ModelAdapter, ModelChunk, ModelRequest } from './types.js';

/** The `openai` variant of ModelSpec. */
export type OpenAIModelSpec = Extract<ModelSpec, { kind: 'openai' }>;

const USER_AGENT = 'subagent-host';
const DEFAULT_API_KEY_ENV = 'OPENAI_API_KEY';
const DEFAULT_MAX_RETRIES = 1;
const DEFAULT_IDLE_TIMEOUT_MS = 120_000;
/**
 * The longest idle timeout the adapter can keep: Node's fetch (undici) ends a request on its own
 * after 300 s without response headers or body data, whatever a longer timer of ours would allow.
 */
export const MAX_IDLE_TIMEOUT_MS = 300_000;
const RETRY_DELAY_MS = 200;
/** A longer `retry-after` is not waited out: the caller's own policy is the better judge. */
const MAX_RETRY_AFTER_MS = 2_000;
/** Error bodies are read this far, enough to classify them and quote their message. */
const MAX_ERROR_BODY_CHARS = 16_384;

/**
 * The abort wiring of one HTTP exchange. The caller's signal and the idle timer both abort the
 * fetch; the timer only runs while we wait on the network, so a slow consumer is not a timeout.
 */
class Exchange {
  readonly controller = new AbortController();
  timedOut = false;
  #timer: NodeJS.Timeout | undefined;
  #signal: AbortSignal;
  #idleMs: number;
  #onAbort = (): void => this.controller.abort(this.#signal.reason);

  constructor(signal: AbortSignal, idleMs: number) {
    this.#signal = signal;
    this.#idleMs = idleMs;
    signal.addEventListener('abort', this.#onAbort, { once: true });
  }

  /** Awaits a network step under the idle timer. */
  async wait<T>(step: () => Promise<T>): Promise<T> {
    this.#timer = setTimeout(() => {
      this.timedOut = true;
      this.controller.abort(new Error(`idle timeout after ${this.#idleMs} ms`));
    }, this.#idleMs);
    try {
      return await step();
    } finally {
      clearTimeout(this.#timer);
    }
  }

  /** Releases the timer, the listener and (by aborting) any socket still held. Idempotent. */
  dispose(): void {
    clearTimeout(this.#timer);
    this.#signal.removeEventListener('abort', this.#onAbort);
    this.controller.abort();
  }
}

/**
 * The key as fetch sends it: a header value loses its leading and trailing HTTP whitespace (the
 * newline a key file or a CRLF `.env` leaves), so the scrubber must look for it without them.
 */
function apiKeyOf(raw: string | undefined): string | undefined {
  return raw?.replace(/^[\t\n\r ]+|[\t\n\r ]+$/g, '');
}

/** Resolves true after `ms`, or false as soon as `signal` aborts; leaves no timer behind. */
function sleep(ms: number, signal: AbortSignal): Promise<boolean> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve(false);
    const onAbort = (): void => {
      clearTimeout(timer);
      resolve(false);
    };
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve(true);
    }, ms);
    signal.addEventListener('abort', onAbort, { once: true });
  });
}

/** `retry-after` as seconds, or as an HTTP-date (`Wed, 21 Oct 2015 07:28:00 GMT`) still ahead of our clock. */
function retryDelay(response: Response): number {
  // An empty or blank header is no delay given (Number('') would be 0: a retry at once).
  const given = response.headers.get('retry-after')?.trim();
  const seconds = given ? Number(given) : Number.NaN;
  // A date already past (the server's clock behind ours) is no delay given either.
  const ms = Number.isNaN(seconds) && given?.endsWith('GMT') ? Date.parse(given) - Date.now() : seconds * 1000;
  if (Number.isFinite(ms) && ms >= 0 && ms <= MAX_RETRY_AFTER_MS) return ms;
  return RETRY_DELAY_MS;
}

async function readErrorBody(response: Response, exchange: Exchange): Promise<string> {
  const reader = response.body?.getReader();
  if (!reader) return '';
  const decoder = new TextDecoder();
  let text = '';
  try {
    while (text.length < MAX_ERROR_BODY_CHARS) {
      const read = await exchange.wait(() => reader.read());
      if (read.done) break;
      text += decoder.decode(read.value, { stream: true });
    }
  } catch {
    // A partial body still classifies; an abort or timeout is judged by the caller.
  }
  return text;
}

/** What opening the stream produced: a streaming response, or the closing chunks. */
type Opened = { response: Response; exchange: Exchange } | { end: ModelChunk[] };

/** `<baseURL>/chat/completions`, keeping a query the base URL carries (Azure's `?api-version=`). */
export function chatCompletionsURL(baseURL: string): string {
  const url = new URL(baseURL);
  url.pathname = `${url.pathname.replace(/\/+$/, '')}/chat/completions`;
  return url.href;
}

/** Creates an adapter for an OpenAI-compatible server; the key is read from `env` per request. */
export function openaiModel(spec: OpenAIModelSpec, env: NodeJS.ProcessEnv = process.env): ModelAdapter {
  const url = chatCompletionsURL(spec.baseURL);
  const apiKeyEnv = spec.apiKeyEnv ?? DEFAULT_API_KEY_ENV;
  const maxRetries = spec.maxRetries ?? DEFAULT_MAX_RETRIES;
  const idleMs = spec.idleTimeoutMs ?? DEFAULT_IDLE_TIMEOUT_MS;

  function fail(failure: FailureInfo): ModelChunk[] {
    return [{ type: 'finish', reason: 'error', failure }];
  }

  function aborted(): ModelChunk[] {
    return [{ type: 'finish', reason: 'aborted' }];
  }

  function idleFailure(): FailureInfo {
    return { code: 'TIMEOUT', message: `no data from ${url} for ${idleMs} ms` };
  }

  /** Why an exchange broke off: `undefined` for the caller's abort, else a timeout or `other`. */
  function breakOff(exchange: Exchange, signal: AbortSignal, other: FailureInfo): FailureInfo | undefined {
    if (signal.aborted) return undefined;
    if (exchange.timedOut) return idleFailure();
    return other;
  }

  /** POSTs the request, retrying 429/5xx/network failures before any byte of a stream arrives. */
  async function open(body: string, headers: Headers, signal: AbortSignal, scrub: Scrub): Promise<Opened> {
    for (let attempt = 0; ; attempt++) {
      const exchange = new Exchange(signal, idleMs);
      let outcome: Response | FailureInfo;
      try {
        outcome = await exchange.wait(() =>
          // Not followed: fetch would turn a 301/302 POST into a GET without its body.
          fetch(url, { method: 'POST', headers, body, signal: exchange.controller.signal, redirect: 'manual' }),
        );
      } catch (error) {
        outcome = networkFailure(url, error, scrub);
      }
      let failure: FailureInfo | undefined;
      let delay = RETRY_DELAY_MS;
      if (outcome instanceof Response) {
        if (outcome.ok) return { response: outcome, exchange };
        const location = outcome.status >= 300 && outcome.status < 400 ? outcome.headers.get('location') : null;
        const text = await readErrorBody(outcome, exchange);
        if (location !== null) {
          exchange.dispose();
          // Scrubbed before it is cut: a cut first could keep the head of a key the target quotes.
          const to = headOf(scrub(location), 200);
          return { end: fail({ code: 'REDIRECT', status: outcome.status, message: `${url} redirects (HTTP ${outcome.status}) to ${to}; set baseURL to where it points (a redirected request would lose its body)` }) };
        }
        // The server's own header: quoted like its body, scrubbed, then bounded.
        const given = outcome.headers.get('x-request-id');
        const requestId = given === null ? undefined : headOf(scrub(given), 100);
        failure = httpFailure({ status: outcome.status, apiKeyEnv, requestId }, serverDetail(text, scrub));
        delay = retryDelay(outcome);
      } else {
        failure = outcome;
      }
      failure = breakOff(exchange, signal, failure);
      // Released before the backoff: the error body is read, so no socket waits on the retry.
      exchange.dispose();
      if (!failure) return { end: aborted() };
      if (attempt >= maxRetries || !isRetryable(failure)) return { end: fail(failure) };
      if (!(await sleep(delay, signal))) return { end: aborted() };
    }
  }

  async function* run(request: ModelRequest): AsyncGenerator<ModelChunk> {
    const { signal } = request;
    if (signal.aborted) return yield* aborted();
    const key = apiKeyOf(env[apiKeyEnv]);
    if (key === undefined || key === '') {
      return yield* fail({
        code: 'AUTH',
        message: `no API key: set the environment variable ${apiKeyEnv} (or choose another with apiKeyEnv)`,
      });
    }
    const scrub = scrubberFor(key);
    const headers = new Headers({
      'content-type': 'application/json',
      accept: 'text/event-stream',
      'user-agent': USER_AGENT,
      authorization: `Bearer ${key}`,
    });
    for (const [name, value] of Object.entries(spec.headers ?? {})) headers.set(name, value);

    // Lone surrogates go as U+FFFD: strict servers refuse their escapes (HTTP 400), and the history
    // would resend them every turn, so the session could never call its model again.
    const opened = await open(wellFormedJson(toWireRequest(spec.model, request)), headers, signal, scrub);
    if ('end' in opened) return yield* opened.end;
    const { response, exchange } = opened;
    try {
      // A proxy that ignores `stream: true` answers with one JSON document; say so plainly
      // instead of reporting the missing [DONE] as a dropped connection.
      const type = response.headers.get('content-type') ?? '';
      if (type.includes('application/json') || !response.body) {
        // Some gateways answer an error with 200 and a JSON `{ error }`: quote it, classified.
        const text = response.body ? await readErrorBody(response, exchange) : '';
        // A body the caller's abort or the idle timer cut off is judged by that, not by its head.
        if (signal.aborted) return yield* aborted();
        if (exchange.timedOut) return yield* fail(idleFailure());
        let error: unknown;
        try {
          error = (JSON.parse(text) as { error?: unknown } | null)?.error;
        } catch {
          error = undefined;
        }
        if (error !== undefined && error !== null) return yield* fail(streamErrorFailure(error, scrub));
        return yield* fail({
          code: 'MALFORMED_RESPONSE',
          message: `expected an event stream from ${url}, got ${type || 'no body'}; does it support stream: true?`,
        });
      }
      const reader = response.body.getReader();
      const decoder = new SseDecoder();
      const assembler = new CompletionAssembler(scrub, `openai model ${spec.model} at ${url}`);
      let sawEvent = false;
      for (;;) {
        let read: Awaited<ReturnType<typeof reader.read>>;
        try {
          read = await exchange.wait(() => reader.read());
        } catch (error) {
          const failure = breakOff(exchange, signal, streamClosedFailure(url, error, scrub));
          return yield* failure ? assembler.fail(failure) : assembler.abort();
        }
        for (const event of read.done ? decoder.end() : decoder.push(read.value)) {
          sawEvent = true;
          if (event.type === 'error') return yield* assembler.fail(errorEventFailure(event.data, scrub));
          if (event.data.trim() === '[DONE]') return yield* assembler.complete();
          yield* assembler.accept(event.data);
          if (assembler.failure) return yield* assembler.fail(assembler.failure);
          // The caller may abort while we are suspended at a yield, with no read pending to reject.
          if (signal.aborted) return yield* assembler.abort();
        }
        if (decoder.tooLong) {
          return yield* assembler.fail({ code: 'MALFORMED_RESPONSE', message: `an event from ${url} exceeds ${MAX_EVENT_CHARS / 1024 / 1024} MiB without ending; is baseURL a chat-completions server?` });
        }
        if (read.done && !sawEvent && !type.includes('text/event-stream')) {
          return yield* fail({ code: 'MALFORMED_RESPONSE', message: `expected an event stream from ${url}, got ${type || 'no content-type'} without events; check baseURL` });
        }
        if (read.done) return yield* assembler.fail(streamClosedFailure(url, undefined, scrub));
      }
    } finally {
      exchange.dispose();
    }
  }

  /** Guards the one invariant callers rely on: no throw, exactly one `finish`, last (`run` ends at its finish). */
  async function* stream(request: ModelRequest): AsyncGenerator<ModelChunk> {
    try {
      yield* run(request);
    } catch (error) {
      // Only synchronous steps can throw (a header value fetch refuses, an input JSON cannot encode).
      const message = scrubberFor(apiKeyOf(env[apiKeyEnv]))(error instanceof Error ? error.message : String(error));
      return yield { type: 'finish', reason: 'error', failure: { code: 'INTERNAL', message } };
    }
  }

  return { stream };
}
