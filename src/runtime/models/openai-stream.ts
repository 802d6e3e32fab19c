// Assembles streamed chat-completion chunks into ModelChunks: deltas pass straight through, while
// tool calls, usage and the finish wait for [DONE] (usage often arrives in a trailing chunk).
import { z } from 'zod';
import type { FailureInfo, Usage } from '../../seam/session-types.js';
import type { Scrub } from './openai-errors.js';
import { finishReasonFailure, streamErrorFailure } from './openai-errors.js';
import { lazy } from '../../seam/once.js';
import type { FinishReason, ModelChunk } from './types.js';
import { describeIssue, headOf } from '../../seam/parse.js';
import { deepToolInputFailure, parsedNonFinite } from '../../seam/content.js';

// Loose on purpose: compatible servers add fields, send `null` for absent ones, and differ in
// which optional parts they send at all.
const wireChunk = lazy(() => {
  // Usage is an account of the answer, not part of it: a count of the wrong type (a string, a
  // negative number) or a details field that is no object is read as absent, and the answer kept.
  const count = z.number().nonnegative().nullish().catch(undefined);
  return z.object({
    error: z.unknown().optional(),
    choices: z
      .array(
        z.object({
          index: z.number().nullish(),
          delta: z
            .object({
              content: z.string().nullish(),
              // OpenAI's structured outputs stream a refusal's text here instead of `content`.
              refusal: z.string().nullish(),
              reasoning_content: z.string().nullish(),
              reasoning: z.string().nullish(),
              tool_calls: z
                .array(
                  z.object({
                    index: z.number().int().nonnegative().nullish(),
                    id: z.string().nullish(),
                    // Some servers (llama.cpp, TGI) send the arguments as a JSON object, not its text.
                    function: z.object({ name: z.string().nullish(), arguments: z.union([z.string(), z.record(z.string(), z.unknown())]).nullish() }).nullish(),
                  }),
                )
                .nullish(),
            })
            .nullish(),
          finish_reason: z.string().nullish(),
        }),
      )
      .nullish(),
    usage: z
      .object({
        prompt_tokens: count,
        completion_tokens: count,
        prompt_cache_hit_tokens: count,
        prompt_tokens_details: z.object({ cached_tokens: count }).nullish().catch(undefined),
        completion_tokens_details: z.object({ reasoning_tokens: count }).nullish().catch(undefined),
      })
      .nullish()
      .catch(undefined),
  });
});

type WireChunk = z.infer<ReturnType<typeof wireChunk>>;
type WireUsage = NonNullable<WireChunk['usage']>;
type WireDelta = NonNullable<NonNullable<WireChunk['choices']>[number]['delta']>;
type WireToolCallDelta = NonNullable<WireDelta['tool_calls']>[number];

interface PendingCall {
  id: string;
  name: string;
  args: string;
}

/** Our usage record from the wire's; cached prompt tokens are counted apart from fresh input. */
export function toUsage(wire: WireUsage): Usage {
  const cached = wire.prompt_tokens_details?.cached_tokens ?? wire.prompt_cache_hit_tokens ?? 0;
  const usage: Usage = {
    inputTokens: Math.max(0, (wire.prompt_tokens ?? 0) - cached),
    outputTokens: wire.completion_tokens ?? 0,
  };
  if (cached > 0) usage.cacheReadTokens = cached;
  const reasoning = wire.completion_tokens_details?.reasoning_tokens;
  if (reasoning !== undefined && reasoning !== null) usage.reasoningTokens = reasoning;
  return usage;
}

/**
 * Parsed arguments: `{}` for none; the raw text when it is not JSON, is a JSON string or holds a
 * number no double holds (`1e309`: Infinity, which the log would store as null and a structured
 * result could not carry). Kept as sent, the history replays it exactly; the tool's input check
 * tells the model what was wrong.
 */
function parseArguments(args: string): unknown {
  if (args.trim() === '') return {};
  try {
    const parsed = JSON.parse(args) as unknown;
    return typeof parsed === 'string' || parsedNonFinite(args, parsed) ? args : parsed;
  } catch {
    return args;
  }
}

/** Whether `args` is the whole JSON text of a call's arguments (an object), so more text is another call's. */
function completeArguments(args: string): boolean {
  if (!args.trimEnd().endsWith('}')) return false;
  try {
    JSON.parse(args);
    return true;
  } catch {
    return false;
  }
}

/** The state of one streamed completion (choice 0 only; we never ask for `n > 1`). */
export class CompletionAssembler {
  #scrub: Scrub;
  readonly #model: string;
  #sawText = false;
  #sawReasoning = false;
  #sawRefusal = false;
  #calls = new Map<number, PendingCall>();
  /** Per wire index, the key of the newest call sent at it (see #addFragment). */
  readonly #newestAt = new Map<number, number>();
  #lastKey: number | undefined;
  #usage: Usage | undefined;
  #finishReason: string | undefined;
  #failure: FailureInfo | undefined;

  /** `model` names the model in failures (`openai model <name> at <url>`). */
  constructor(scrub: Scrub, model: string) {
    this.#scrub = scrub;
    this.#model = model;
  }

  /** The failure a chunk reported (malformed, or an in-stream error); the stream should end. */
  get failure(): FailureInfo | undefined {
    return this.#failure;
  }

  /** Absorbs one event payload; returns the deltas to emit now. */
  accept(payload: string): ModelChunk[] {
    let json: unknown;
    try {
      json = JSON.parse(payload);
    } catch {
      return this.#malformed(`an event is not JSON: ${headOf(this.#scrub(payload), 80)}`);
    }
    const parsed = wireChunk().safeParse(json);
    if (!parsed.success) {
      return this.#malformed(`unexpected chunk shape at ${describeIssue(parsed.error, 'chunk')}`);
    }
    const chunk = parsed.data;
    if (chunk.error !== undefined && chunk.error !== null) {
      this.#failure = streamErrorFailure(chunk.error, this.#scrub);
      return [];
    }
    if (chunk.usage) this.#usage = toUsage(chunk.usage);
    const out: ModelChunk[] = [];
    for (const choice of chunk.choices ?? []) {
      if ((choice.index ?? 0) !== 0) continue;
      const delta = choice.delta;
      const reasoning = delta?.reasoning_content ?? delta?.reasoning;
      if (reasoning) {
        this.#sawReasoning = true;
        out.push({ type: 'reasoning-delta', text: reasoning });
      }
      if (delta?.content) {
        this.#sawText = true;
        out.push({ type: 'text-delta', text: delta.content });
      }
      if (delta?.refusal) {
        this.#sawRefusal = true;
        out.push({ type: 'text-delta', text: delta.refusal });
      }
      for (const fragment of delta?.tool_calls ?? []) this.#addFragment(fragment);
      if (choice.finish_reason) this.#finishReason = choice.finish_reason;
    }
    return out;
  }

  /** The closing chunks after [DONE]: tool calls, usage, then exactly one finish. */
  complete(): ModelChunk[] {
    const reason = this.#finishReason ?? 'stop';
    switch (reason) {
      case 'stop':
      // What servers other than OpenAI's send for an answer that simply ended (TGI, Together, gateways).
      case 'eos':
      case 'eos_token':
      case 'end':
      case 'end_turn':
      case 'stop_sequence':
      case 'tool_calls':
      case 'function_call': {
        // Judged by what arrived: some servers end tool-call turns with `stop`, and a
        // `tool_calls` finish without calls would leave the driver nothing to run.
        const calls = this.#toolCalls();
        for (const call of calls) {
          const deep = deepToolInputFailure(this.#model, call.name, call.input);
          if (deep) return this.fail(deep);
        }
        if (calls.length > 0) return [...calls, ...this.#close('tool-calls')];
        if (this.#sawRefusal) return this.#close('refusal');
        if (this.#sawText || this.#sawReasoning) return this.#close('stop');
        return this.fail({ code: 'EMPTY_RESPONSE', message: 'the model returned no content and no tool calls' });
      }
      case 'length':
        // Tool calls cut off by the token limit are incomplete: drop them.
        return this.#close('max-tokens');
      case 'content_filter':
        return this.#close('refusal');
      default:
        return this.fail(finishReasonFailure(reason, this.#scrub));
    }
  }

  /** The closing chunks of a failed stream: usage when known, then the error finish. */
  fail(failure: FailureInfo): ModelChunk[] {
    return this.#close('error', failure);
  }

  /** The closing chunks of an aborted stream. */
  abort(): ModelChunk[] {
    return this.#close('aborted');
  }

  #close(reason: FinishReason, failure?: FailureInfo): ModelChunk[] {
    const out: ModelChunk[] = [];
    if (this.#usage) out.push({ type: 'usage', usage: this.#usage });
    out.push(failure ? { type: 'finish', reason, failure } : { type: 'finish', reason });
    return out;
  }

  #malformed(message: string): ModelChunk[] {
    this.#failure = { code: 'MALFORMED_RESPONSE', message: this.#scrub(message.replace(/\s+/g, ' ')) };
    return [];
  }

  #addFragment(fragment: WireToolCallDelta): void {
    let key: number;
    const index = fragment.index;
    if (index === undefined || index === null) {
      // Some servers omit `index`: a new id starts a call, anything else extends the last one.
      const known = fragment.id ? [...this.#calls].find(([, call]) => call.id === fragment.id) : undefined;
      key = known?.[0] ?? (fragment.id || this.#lastKey === undefined ? this.#nextKey() : this.#lastKey);
      if (!known && !fragment.id && this.#startsAnother(this.#calls.get(key), fragment)) key = this.#nextKey();
    } else {
      key = this.#newestAt.get(index) ?? index;
      // Some servers (Ollama, SGLang) send every parallel call at index 0: a new id there is a new
      // call, and so is a named fragment after a call whose arguments are complete (no ids at all).
      const current = this.#calls.get(key);
      const newId = fragment.id && current && current.id !== '' && current.id !== fragment.id;
      if (newId || (!fragment.id && this.#startsAnother(current, fragment))) {
        key = this.#nextKey();
        this.#newestAt.set(index, key);
      }
    }
    this.#lastKey = key;
    let call = this.#calls.get(key);
    if (!call) {
      call = { id: '', name: '', args: '' };
      this.#calls.set(key, call);
    }
    if (fragment.id) call.id = fragment.id;
    const name = fragment.function?.name;
    // Some servers (Gemini) split a long name across fragments as they do the arguments; others
    // (MiniMax, Anthropic gateways) repeat the whole name on each fragment, which adds nothing.
    if (name && (call.name === '' || (call.args === '' && name !== call.name))) call.name += name;
    const args = fragment.function?.arguments;
    if (typeof args === 'string') call.args += args;
    else if (args) {
      // Arguments sent as an object are kept as their text, which would recurse as deep as they nest.
      const deep = deepToolInputFailure(this.#model, call.name, args);
      if (deep) this.#failure = deep;
      else call.args += JSON.stringify(args);
    }
  }

  /**
   * A fragment without an id that names a tool, with arguments or another name, after `current`
   * has a name and whole arguments (a repeat of the name alone adds nothing to `current`).
   */
  #startsAnother(current: PendingCall | undefined, fragment: WireToolCallDelta): boolean {
    const name = fragment.function?.name;
    if (!current || current.name === '' || !name || !completeArguments(current.args)) return false;
    const args = fragment.function?.arguments;
    // Blank text after the name (a server repeating the name on each fragment) is no new call.
    return name !== current.name || (typeof args === 'string' ? args.trim() !== '' : Boolean(args));
  }

  /** A key after every call's so far. */
  #nextKey(): number {
    let next = 0;
    for (const key of this.#calls.keys()) next = Math.max(next, key + 1);
    return next;
  }

  #toolCalls(): Extract<ModelChunk, { type: 'tool-call' }>[] {
    return [...this.#calls]
      .sort(([a], [b]) => a - b)
      .map(([key, call]) => ({
        type: 'tool-call',
        id: call.id || `call_${key}`,
        name: call.name,
        input: parseArguments(call.args),
      }));
  }
}
