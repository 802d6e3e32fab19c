// One turn of the agent loop: claim input, call the model, run its tool calls one by one, repeat
// until the model stops, and always close the turn with `turn/end` and its reason.
import { charsIn, deepToolInputFailure, largeAnswerFailure, type ContentBlock, type ToolCallBlock } from '../seam/content.js';
import { SubagentError, describeError, isSubagentError } from '../seam/errors.js';
import type { FailureInfo, SessionEvent, SessionEventMap, TurnEndReason, Usage } from '../seam/session-types.js';
import type { FinishReason, ModelChunk } from './models/types.js';
import { settled } from '../seam/once.js';
import { ABANDONED, Abandonment, unlessAbandoned } from './abandonment.js';
import { cancelCauseOf, flaggedCause } from '../seam/cancel-flag.js';
import { runTools } from './tool-calls.js';
import { isThenable } from '../seam/parse.js';
import { untilCancelled, type TurnContext } from './turn-context.js';

/** @default maxStepsPerTurn */
export const DEFAULT_MAX_STEPS_PER_TURN = 32;

type StepOutcome =
  | { kind: 'done' }
  | { kind: 'concluded' }
  | { kind: 'tools' }
  | { kind: 'max-tokens' }
  | { kind: 'refusal' }
  | { kind: 'aborted' }
  | { kind: 'error'; error: FailureInfo };

interface Streamed {
  text: string;
  reasoning: string;
  toolCalls: ToolCallBlock[];
  usage?: Usage;
  finish: FinishReason;
  failure?: FailureInfo;
}

async function streamStep(ctx: TurnContext, turn: number, step: number, signal: AbortSignal, abandonment: Abandonment | undefined): Promise<Streamed> {
  const out: Streamed = { text: '', reasoning: '', toolCalls: [], finish: 'error' };
  const request = {
    messages: ctx.history.derive(ctx.session.events),
    tools: ctx.tools.schemas(),
    signal,
    ...(ctx.options.persona === undefined ? {} : { system: ctx.options.persona }),
    ...(ctx.options.maxTokens === undefined ? {} : { maxTokens: ctx.options.maxTokens }),
  };
  let finished = false;
  /** Characters of the answer so far: its text, reasoning and tool calls' input (see largeAnswerFailure). */
  let chars = 0;
  const tooLarge = (more: number) => {
    chars += more;
    const failure = largeAnswerFailure('the model', chars);
    if (!failure) return false;
    out.finish = 'error';
    out.failure = failure;
    finished = true;
    return true;
  };
  let iterator: AsyncIterator<ModelChunk> | Iterator<ModelChunk> | undefined;
  let open = false;
  try {
    // As `for await` would take it: an async iterable, or a plain one.
    const stream = ctx.model.stream(request) as AsyncIterable<ModelChunk> & Partial<Iterable<ModelChunk>>;
    iterator = typeof stream[Symbol.asyncIterator] === 'function' ? stream[Symbol.asyncIterator]() : stream[Symbol.iterator]!();
    open = true;
    for (;;) {
      const next = await unlessAbandoned(abandonment, Promise.resolve(iterator.next()));
      if (next === ABANDONED) {
        // The adapter ignores its signal: the step ends aborted without it, and nothing waits on
        // its stream again (not even its `return()`, which would wait for the pending `next()`).
        open = false;
        void settled(Promise.resolve().then(() => iterator?.return?.()));
        break;
      }
      if (next.done === true) {
        open = false;
        break;
      }
      const chunk = next.value;
      switch (chunk.type) {
        case 'text-delta':
          if (tooLarge(chunk.text.length)) break;
          out.text += chunk.text;
          ctx.session.append('assistant/chunk', { turn, step, chunk: { type: 'text-delta', text: chunk.text } });
          break;
        case 'reasoning-delta':
          if (tooLarge(chunk.text.length)) break;
          out.reasoning += chunk.text;
          ctx.session.append('assistant/chunk', { turn, step, chunk: { type: 'reasoning-delta', text: chunk.text } });
          break;
        case 'tool-call': {
          // Results are matched to calls by id: an answer may not give two calls one id. Input nested
          // deeper than a log holds is refused here, whatever adapter sent it (adapters that can name
          // their model refuse it themselves first).
          const failure = out.toolCalls.some((call) => call.id === chunk.id)
            ? { code: 'MODEL_CONTRACT', message: `the model gave two tool calls of one answer the id ${JSON.stringify(chunk.id)}` }
            : deepToolInputFailure('the model', chunk.name, chunk.input);
          if (!failure && tooLarge(chunk.id.length + chunk.name.length + (charsIn(chunk.input) ?? 0))) break;
          if (failure) {
            out.finish = 'error';
            out.failure = failure;
            finished = true;
            break;
          }
          out.toolCalls.push({ type: 'tool_call', id: chunk.id, name: chunk.name, input: chunk.input });
          break;
        }
        case 'usage':
          out.usage = chunk.usage;
          break;
        case 'finish':
          out.finish = chunk.reason;
          if (chunk.failure) out.failure = chunk.failure;
          finished = true;
          break;
      }
      if (finished || signal.aborted) break;
    }
    if (!finished && !signal.aborted) out.failure = { code: 'NO_FINISH', message: 'the model stream ended without a finish' };
  } catch (error) {
    open = false;
    out.finish = 'error';
    out.failure = { code: 'MODEL_FAILURE', message: describeError(error) };
  }
  // Left before its end (finished, or aborted): closed as `for await` would, so its `finally` runs.
  if (open) {
    try {
      await unlessAbandoned(abandonment, Promise.resolve(iterator?.return?.()));
    } catch {
      // A stream that fails while closing has given its answer already.
    }
  }
  return out;
}

async function runStep(ctx: TurnContext, turn: number, step: number, signal: AbortSignal, abandonment: Abandonment | undefined): Promise<StepOutcome> {
  const streamed = await streamStep(ctx, turn, step, signal, abandonment);
  const content: ContentBlock[] = [];
  if (streamed.reasoning !== '') content.push({ type: 'reasoning', text: streamed.reasoning });
  if (streamed.text !== '') content.push({ type: 'text', text: streamed.text });
  const message = { turn, step, id: ctx.newId(), content, ...(streamed.usage ? { usage: streamed.usage } : {}) };
  if (signal.aborted) {
    // What was streamed stays in history; tool calls of an interrupted answer are dropped.
    // Usage the model reported before the abort was spent all the same: it is kept (history skips an empty message).
    if (content.length > 0 || streamed.usage) ctx.session.append('assistant/message', { ...message, interrupted: true });
    return { kind: 'aborted' };
  }
  // Only calls that will run (and so get their results) enter history: a truncated answer's may be
  // cut off mid-arguments, and a failed or refused step runs none; a call left without its result
  // would make every later request of this session one a model API refuses.
  if (streamed.finish === 'stop' || streamed.finish === 'tool-calls') content.push(...streamed.toolCalls);
  if (content.length > 0 || streamed.usage) ctx.session.append('assistant/message', message);
  switch (streamed.finish) {
    case 'error':
    case 'aborted':
      return { kind: 'error', error: streamed.failure ?? { code: 'MODEL_ABORTED', message: 'the model stopped the request' } };
    case 'max-tokens':
      return { kind: 'max-tokens' };
    case 'refusal':
      return { kind: 'refusal' };
    case 'stop':
    case 'tool-calls':
      if (streamed.toolCalls.length === 0) return { kind: 'done' };
      if (await runTools(ctx, turn, step, streamed.toolCalls, signal, abandonment)) return { kind: 'concluded' };
      return signal.aborted ? { kind: 'aborted' } : { kind: 'tools' };
  }
}

/** Runs one turn to its end under `controller`; appends `turn/start` … `turn/end`. */
export async function runTurn(ctx: TurnContext, turn: number, controller: AbortController): Promise<TurnEndReason> {
  const { session, inbox } = ctx;
  const signal = controller.signal;
  const perTurn = ctx.options.maxStepsPerTurn ?? DEFAULT_MAX_STEPS_PER_TURN;
  const maxSteps = Math.min(perTurn, ctx.stepAllowance ?? perTurn);
  ctx.stepAllowance = undefined;
  session.append('turn/start', { turn });
  // A cancel flag set by another thread aborts the turn at its next checkpoint, even if the
  // message carrying the cancellation has not been delivered yet.
  const flag = ctx.cancelFlag;
  const observeFlag = () => {
    const cause = flaggedCause(flag);
    if (cause && !signal.aborted) controller.abort(cause);
  };
  let reason: TurnEndReason = { kind: 'completed' };
  let truncated = false;
  let claimed = false;
  // One for the whole turn: its model streams and tool batches wait through it after a cancel.
  const abandonment = ctx.abandonGraceMs === undefined ? undefined : new Abandonment(signal, ctx.abandonGraceMs, ctx.closing);
  try {
    const started: unknown = ctx.hooks.turnStart?.(turn);
    if (isThenable(started)) await untilCancelled(started, signal);
    for (let step = 1; (observeFlag(), !signal.aborted); step++) {
      if (step > maxSteps) {
        reason = { kind: 'error', error: { code: 'MAX_STEPS', message: `the turn needed more than ${perTurn} model calls (maxStepsPerTurn)` } };
        break;
      }
      let answer: unknown = ctx.hooks.beforeStep?.(turn, step);
      if (isThenable(answer)) {
        answer = await untilCancelled(answer, signal);
        if (signal.aborted) break;
      }
      const verdict = stepVerdict(answer);
      if (verdict) {
        reason = verdict;
        const ids = inbox.clear();
        if (ids.length > 0) session.append('inbox/discarded', { ids });
        break;
      }
      const batch = inbox.claim(step === 1);
      claimed = true;
      session.append('step/start', { turn, step });
      for (const m of batch) session.append('user/message', { id: m.id, content: m.content, source: m.source });
      let outcome: StepOutcome;
      try {
        outcome = await runStep(ctx, turn, step, signal, abandonment);
      } finally {
        // A model that writes another agent's steps into this log (a resident worker child's
        // turn) leaves the last of them open: this step/end closes it, and the count moves on.
        step = openStep(session.events)?.step ?? step;
        session.append('step/end', { turn, step });
      }
      observeFlag();
      if (outcome.kind === 'error') {
        reason = { kind: 'error', error: outcome.error };
        break;
      }
      if (outcome.kind === 'refusal') {
        reason = { kind: 'refusal' };
        break;
      }
      if (outcome.kind === 'max-tokens') truncated = true;
      if (outcome.kind === 'concluded') break;
      if (outcome.kind === 'tools') continue;
      // The model has answered: input that came meanwhile gets another step only if the turn may
      // take one; otherwise it waits for the next turn, and this one ends as its answer did.
      if (inbox.nextStep.length === 0 || step >= maxSteps) break;
    }
  } catch (error) {
    reason = { kind: 'error', error: { code: errorCode(error), message: describeError(error) } };
    // A turn that failed before it claimed any input (a hook threw) leaves that input queued: the
    // agent would start turn after turn on it, in microtasks alone. It is discarded, as a verdict's is.
    if (!claimed) {
      const ids = inbox.clear();
      if (ids.length > 0) session.append('inbox/discarded', { ids });
    }
  } finally {
    abandonment?.dispose();
    if (signal.aborted && reason.kind !== 'max-tokens' && reason.kind !== 'aborted') reason = { kind: 'aborted', cause: cancelCauseOf(signal.reason) };
    else if (truncated && reason.kind === 'completed') reason = { kind: 'max-tokens' };
    session.append('turn/end', { turn, reason });
  }
  return reason;
}

/** The turn and step the log has open: the latest `step/start`'s. */
export function openStep(events: readonly SessionEvent[]): SessionEventMap['step/start'] | undefined {
  return events.findLast((event) => event.type === 'step/start')?.data as SessionEventMap['step/start'] | undefined;
}

/**
 * The turn end a `beforeStep` answer calls for, built afresh (the hook's object is neither frozen
 * nor logged as it is: a BigInt or a function in it would fail every store); nothing for no verdict.
 * `CONTRACT_VIOLATION` for anything but `{ kind: 'max-tokens' }` or `{ kind: 'aborted', cause }`.
 */
function stepVerdict(answer: unknown): TurnEndReason | undefined {
  if (answer === undefined || answer === null || answer === false) return undefined;
  const kind = typeof answer === 'object' ? (answer as { kind?: unknown }).kind : undefined;
  if (kind === 'max-tokens') return { kind: 'max-tokens' };
  if (kind === 'aborted') return { kind: 'aborted', cause: cancelCauseOf((answer as { cause?: unknown }).cause) };
  const what = typeof kind === 'string' ? `a verdict of kind ${JSON.stringify(kind.slice(0, 64))}` : typeof answer === 'object' ? 'an object with no known kind' : `a ${typeof answer}`;
  throw new SubagentError('CONTRACT_VIOLATION', `hooks.beforeStep returned ${what}; it must return { kind: 'max-tokens' }, { kind: 'aborted', cause }, or undefined to go on`);
}

/** The code of what a turn threw, even when reading it throws (a revoked proxy). */
function errorCode(error: unknown): string {
  try {
    return isSubagentError(error) ? error.code : 'UNKNOWN';
  } catch {
    return 'UNKNOWN';
  }
}
