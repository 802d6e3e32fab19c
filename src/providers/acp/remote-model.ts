// The model of a continuable ACP child: each step of its local agent is one `session/prompt` on the
// remote session, streamed back as chunks. The local agent thus keeps the inbox, the turns and the
// log (the mirror), while the remote agent keeps its own history: only the new user text is sent.
import type * as acp from '@agentclientprotocol/sdk';
import type { ModelAdapter, ModelChunk, ModelMessage, ModelRequest } from '../../seam/model-types.js';
import { onAbort as whenAborted } from '../../seam/abort.js';
import { describeAcpFailure, describeOversizeMessage, isJsonRpcError, promptTexts } from './client.js';
import type { WarmChild } from './pool.js';
import { describeExit } from './process.js';
import { within } from '../../seam/once.js';
import { SubagentError } from '../../seam/errors.js';
import { mapStopReason, reportedUsage, stopReasonDiagnostic } from './run.js';
import type { Usage } from '../../seam/session-types.js';

/**
 * The text of the user messages after the last assistant message that were not sent yet: what the
 * remote has not seen. (A cancelled turn may leave no assistant message behind its prompt.)
 */
export function pendingText(messages: readonly ModelMessage[], sent: WeakSet<object>): string[] {
  const texts: string[] = [];
  for (let i = messages.length - 1; i >= 0 && messages[i]!.role === 'user'; i--) {
    const { content } = messages[i]!;
    if (sent.has(content)) break;
    sent.add(content);
    texts.unshift(...promptTexts(content));
  }
  return texts;
}

function chunkOf(update: acp.SessionUpdate): ModelChunk | undefined {
  switch (update.sessionUpdate) {
    case 'agent_message_chunk':
      return update.content.type === 'text' && update.content.text !== '' ? { type: 'text-delta', text: update.content.text } : undefined;
    case 'agent_thought_chunk':
      return update.content.type === 'text' && update.content.text !== '' ? { type: 'reasoning-delta', text: update.content.text } : undefined;
    case 'tool_call':
      // The remote agent runs its own tools; the local log notes them without executing anything.
      return { type: 'reasoning-delta', text: `[remote tool call: ${update.title}]\n` };
    default:
      return undefined;
  }
}

/**
 * What one prompt spent, from the session's running totals after it (`now`) and before it
 * (`before`): ACP's `usage` counts across all turns. Totals that went down were restarted by the
 * agent, and count whole.
 */
function promptUsage(now: Usage, before: Usage): Usage {
  if (now.inputTokens < before.inputTokens || now.outputTokens < before.outputTokens) return now;
  return { inputTokens: now.inputTokens - before.inputTokens, outputTokens: now.outputTokens - before.outputTokens };
}

const FINISH: Record<string, ModelChunk & { type: 'finish' }> = {
  completed: { type: 'finish', reason: 'stop' },
  'max-tokens': { type: 'finish', reason: 'max-tokens' },
  refusal: { type: 'finish', reason: 'refusal' },
  aborted: { type: 'finish', reason: 'aborted' },
};

type Settled = { kind: 'response'; response: acp.PromptResponse } | { kind: 'failed'; error: unknown } | { kind: 'aborted' };

/** Drives one remote ACP session; `graceMs` bounds the wait for a cancelled prompt before the next. */
export class RemoteSessionModel implements ModelAdapter {
  #child: WarmChild;
  readonly #graceMs: number;
  readonly #answered: () => void;
  readonly #relaunch: ((signal: AbortSignal) => Promise<WarmChild>) | undefined;
  /** The user messages already prompted (history hands back the same content arrays each step). */
  readonly #sent = new WeakSet<object>();
  /** The prompt in flight (a cancelled one may still be running remotely). */
  #inflight: Promise<unknown> = Promise.resolve();
  /** The session's running token totals as last reported (or as the child's log counts them). */
  #total: Usage;

  /**
   * `answered` runs after each prompt's answer (or failure) arrived; `relaunch` brings the session
   * back on a fresh process when the current one has ended; `spent` is what the session's turns
   * were counted so far (a resumed child's log), where its running totals continue from.
   */
  constructor(
    child: WarmChild,
    graceMs: number,
    answered: () => void = () => undefined,
    relaunch?: (signal: AbortSignal) => Promise<WarmChild>,
    spent: Usage = { inputTokens: 0, outputTokens: 0 },
  ) {
    this.#child = child;
    this.#total = { inputTokens: spent.inputTokens, outputTokens: spent.outputTokens };
    this.#graceMs = graceMs;
    this.#answered = answered;
    this.#relaunch = relaunch;
  }

  /** Replaces an ended process before a prompt; the finish chunk of the turn when that fails. */
  async #comeBack(signal: AbortSignal): Promise<ModelChunk | undefined> {
    const { proc, client } = this.#child;
    if (!this.#relaunch || (!proc.exit && !client.signal.aborted)) return undefined;
    const relaunched = this.#relaunch(signal);
    // An interrupt ends the turn at once, as it would a prompt: the relaunch reaps what it spawned
    // meanwhile (an agent ignoring stdin EOF and SIGTERM takes both graces). A process it brought up
    // all the same is retired by the next relaunch, which this child's next prompt starts.
    relaunched.catch(() => undefined);
    let unwatch = (): void => undefined;
    const stopped = new Promise<undefined>((resolve) => (unwatch = whenAborted(signal, () => resolve(undefined))));
    try {
      const next = signal.aborted ? undefined : await Promise.race([relaunched, stopped]);
      if (next === undefined) return FINISH['aborted']!;
      this.#child = next;
      this.#inflight = Promise.resolve();
      return undefined;
    } catch (error) {
      // An interrupt during the relaunch ends the turn aborted whatever this says (the turn reads its signal).
      const why = error instanceof SubagentError ? error.message : describeAcpFailure(error);
      return { type: 'finish', reason: 'error', failure: { code: 'ACP_TURN_FAILED', message: `the ACP agent process had ended and a new one could not load the session (${why})` } };
    } finally {
      unwatch();
    }
  }

  async *stream(request: ModelRequest): AsyncIterable<ModelChunk> {
    // The agent refuses a prompt while the previous one runs: let a cancelled one wind down first.
    // An interrupt during the wait ends it at once; the turn's text is not marked sent (next prompt carries it).
    let unwatch = (): void => undefined;
    const stopped = request.signal.aborted ? Promise.resolve() : new Promise<void>((resolve) => (unwatch = whenAborted(request.signal, () => resolve())));
    const wound = await within(Promise.race([this.#inflight, stopped]), this.#graceMs);
    unwatch();
    if (request.signal.aborted) {
      yield FINISH['aborted']!;
      return;
    }
    if (!wound) {
      // Its late updates would be taken for the new prompt's (updates carry no prompt id). This
      // turn's text is not marked sent: the next prompt carries it.
      yield { type: 'finish', reason: 'error', failure: { code: 'ACP_TURN_FAILED', message: 'the ACP agent has not ended its cancelled prompt yet' } };
      return;
    }
    const failed = await this.#comeBack(request.signal);
    if (failed) {
      yield failed;
      return;
    }
    const text = pendingText(request.messages, this.#sent);
    if (text.length === 0) {
      yield { type: 'finish', reason: 'error', failure: { code: 'ACP_EMPTY_PROMPT', message: 'an ACP child receives text only; the message had none' } };
      return;
    }
    // Refused before it is sent (the agent would close the connection); the text stays marked sent.
    const oversize = this.#child.client.oversizePrompt(text);
    if (oversize !== undefined) {
      yield { type: 'finish', reason: 'error', failure: { code: 'INVALID_REQUEST', message: oversize } };
      return;
    }
    const chunks: ModelChunk[] = [];
    let wake: (() => void) | undefined;
    const push = (chunk: ModelChunk) => {
      chunks.push(chunk);
      wake?.();
    };
    let settled: Settled | undefined;
    const settle = (outcome: Settled) => {
      settled ??= outcome;
      wake?.();
    };
    const { client } = this.#child;
    /** The prompt's answer, also one that came after its cancel (it carries what the prompt spent). */
    let answer: acp.PromptResponse | undefined;
    const onAbort = () => {
      client.cancel();
      settle({ kind: 'aborted' });
    };
    request.signal.addEventListener('abort', onAbort, { once: true });
    const sent = !request.signal.aborted;
    if (!sent) onAbort();
    else {
      this.#inflight = client.prompt(text, (update) => {
        const chunk = chunkOf(update);
        if (chunk) push(chunk);
      }).then(
        (response) => settle({ kind: 'response', response: (answer = response) }),
        (error: unknown) => settle({ kind: 'failed', error }),
      );
      void this.#inflight.then(this.#answered);
    }
    try {
      for (;;) {
        while (chunks.length > 0) yield chunks.shift()!;
        if (settled) break;
        await new Promise<void>((resolve) => (wake = resolve));
        wake = undefined;
      }
      // A cancelled prompt's answer is waited for within the grace, for what it spent; one that comes
      // later than that is counted by the next answer's totals.
      if (settled.kind === 'aborted' && sent) await within(this.#inflight, this.#graceMs);
      const reported = answer ? reportedUsage(answer) : undefined;
      if (reported) {
        // Counted before it is handed over: an interrupted turn stops reading at this chunk.
        const spent = promptUsage(reported, this.#total);
        this.#total = reported;
        yield { type: 'usage', usage: spent };
      }
      yield await this.#finish(settled);
    } finally {
      request.signal.removeEventListener('abort', onAbort);
    }
  }

  async #finish(outcome: Settled): Promise<ModelChunk> {
    if (outcome.kind === 'aborted') return FINISH['aborted']!;
    if (outcome.kind === 'response') {
      const reason = mapStopReason(outcome.response.stopReason);
      return FINISH[reason] ?? { type: 'finish', reason: 'error', failure: { code: 'ACP_TURN_FAILED', message: stopReasonDiagnostic(outcome.response.stopReason) } };
    }
    const oversize = describeOversizeMessage(outcome.error);
    if (oversize !== undefined) return { type: 'finish', reason: 'error', failure: { code: 'ACP_TURN_FAILED', message: oversize } };
    const { proc } = this.#child;
    if (!isJsonRpcError(outcome.error)) await within(proc.ended, Math.min(this.#graceMs, 1000));
    const message = proc.exit ? `the ACP agent process ${describeExit(proc.exit)} before the turn finished` : `the ACP prompt failed (${describeAcpFailure(outcome.error)})`;
    return { type: 'finish', reason: 'error', failure: { code: 'ACP_TURN_FAILED', message } };
  }
}
