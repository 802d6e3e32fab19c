// One published ACP child: the prompt, the result (stop reason mapping, short secret-free
// diagnostics), cancellation that waits for the agent's cooperation (its answer carries the
// turn's usage) no longer than the SIGTERM grace, and dispose.
import type * as acp from '@agentclientprotocol/sdk';
import type { ContentBlock } from '../../seam/content.js';
import type { Usage } from '../../seam/session-types.js';
import type { SubagentResult, SubagentRun, SubagentStopReason } from '../../seam/types.js';
import { usageOf } from '../../seam/usage.js';
import type { LiveSessionStore } from '../../runtime/session-store.js';
import { describeAcpFailure, describeOversizeMessage, isJsonRpcError } from './client.js';
import type { SessionMirror } from './mirror.js';
import type { WarmChild } from './pool.js';
import { describeExit, type ReapGraces } from './process.js';
import { within } from '../../seam/once.js';

/** ACP stop reason → ours; anything unknown is an error. */
export function mapStopReason(reason: acp.StopReason | string): SubagentStopReason {
  switch (reason) {
    case 'end_turn':
      return 'completed';
    case 'max_tokens':
      return 'max-tokens';
    case 'refusal':
      return 'refusal';
    case 'cancelled':
      return 'aborted';
    default:
      return 'error'; // max_turn_requests, and whatever a newer agent may send
  }
}

/** A stop reason safe to quote in a diagnostic (a protocol token, not free text). */
function quotable(reason: unknown): string {
  return typeof reason === 'string' && /^[a-z_]{1,32}$/.test(reason) ? reason : 'an unknown value';
}

/** Why a turn the agent ended with `reason` (one mapped to `error`) failed, naming the reason when it is a protocol token. */
export function stopReasonDiagnostic(reason: unknown): string {
  return `the ACP agent ended the turn with stop reason ${quotable(reason)}`;
}

export interface AcpRunInit {
  child: WarmChild;
  mirror: SessionMirror;
  sessions: LiveSessionStore;
  prompt: string[];
  /** Cancels the run when aborted (the caller's signal combined with host shutdown). */
  signal: AbortSignal;
  graces: ReapGraces;
}

type Outcome = { kind: 'response'; response: acp.PromptResponse } | { kind: 'failed'; error: unknown } | { kind: 'cancelled' };

/**
 * Where a run is: its prompt in flight, cancelled before the outcome arrived, settled (`cancelled`
 * says whether the result is `aborted`), or being disposed (its teardown, memoized).
 */
type RunState =
  | { kind: 'prompting' }
  | { kind: 'cancelled' }
  | { kind: 'settled'; cancelled: boolean }
  | { kind: 'disposing'; done: Promise<void> };

/** The token usage an agent reported on its PromptResponse (ACP's unstable `usage`), if well-formed. */
export function reportedUsage(response: acp.PromptResponse): Usage | undefined {
  const usage = (response as { usage?: unknown }).usage;
  if (usage === null || typeof usage !== 'object') return undefined;
  const { inputTokens, outputTokens } = usage as { inputTokens?: unknown; outputTokens?: unknown };
  const count = (value: unknown) => typeof value === 'number' && Number.isSafeInteger(value) && value >= 0;
  return count(inputTokens) && count(outputTokens) ? { inputTokens: inputTokens as number, outputTokens: outputTokens as number } : undefined;
}

/** A published ACP child run (`localAgent` is always undefined: the agent is remote). */
export class AcpRun implements SubagentRun {
  readonly id: string;
  readonly localAgent = undefined;
  readonly result: Promise<SubagentResult>;
  readonly #init: AcpRunInit;
  readonly #cancelled: Promise<Outcome>;
  #onCancel!: () => void;
  #state: RunState = { kind: 'prompting' };
  readonly #abort = () => this.cancel();

  /** Publishes nothing new: the mirror exists; this sends the prompt at once. */
  constructor(init: AcpRunInit) {
    this.#init = init;
    this.id = init.mirror.id;
    this.#cancelled = new Promise((resolve) => {
      this.#onCancel = () => resolve({ kind: 'cancelled' });
    });
    init.signal.addEventListener('abort', this.#abort, { once: true });
    if (init.signal.aborted) this.cancel();
    this.result = this.#settle();
    // A finished child's process is retired at once (dispose waits for the same teardown), on the
    // next turn of the event loop: closing its stdin is no part of handing the result over.
    const retire = () => void setImmediate(() => void init.child.proc.reap(init.graces));
    void this.result.then(retire, retire);
  }

  async #settle(): Promise<SubagentResult> {
    const { child, mirror } = this.#init;
    const sent = this.#state.kind === 'prompting';
    const prompted: Promise<Outcome> = !sent
      ? this.#cancelled
      : child.client.prompt(this.#init.prompt, (update) => mirror.update(update)).then(
          (response) => ({ kind: 'response', response }),
          (error: unknown) => ({ kind: 'failed', error }),
        );
    let outcome = await Promise.race([prompted, this.#cancelled]);
    // A cooperative agent answers the cancelled prompt, with what the turn spent: that answer is
    // waited for within the SIGTERM grace, so an agent that ignores session/cancel cannot wedge the parent.
    if (sent && outcome.kind === 'cancelled' && (await within(prompted, this.#init.graces.graceMs))) outcome = await prompted;
    // Dispose cancels first, so any state but `prompting` here means the run was cancelled.
    const cancelled = outcome.kind === 'cancelled' || this.#state.kind !== 'prompting';
    if (this.#state.kind !== 'disposing') this.#state = { kind: 'settled', cancelled };
    this.#init.signal.removeEventListener('abort', this.#abort);
    const result = await this.#resultOf(outcome, cancelled, mirror.output());
    const reported = outcome.kind === 'response' ? reportedUsage(outcome.response) : undefined;
    mirror.end(result, reported);
    // Without the agent's own report the figures would be made up: usage is then absent.
    return reported ? { ...result, usage: usageOf(mirror.session.events) } : result;
  }

  async #resultOf(outcome: Outcome, cancelled: boolean, output: ContentBlock[]): Promise<SubagentResult> {
    if (outcome.kind === 'cancelled' || cancelled) return { output, stopReason: 'aborted' };
    if (outcome.kind === 'response') {
      const stopReason = mapStopReason(outcome.response.stopReason);
      if (stopReason !== 'error') return { output, stopReason };
      return { output, stopReason, diagnostic: stopReasonDiagnostic(outcome.response.stopReason) };
    }
    // The connection failed: say whether the process died (its exit usually follows stdout's end).
    const oversize = describeOversizeMessage(outcome.error);
    if (oversize !== undefined) return { output, stopReason: 'error', diagnostic: oversize };
    const { proc } = this.#init.child;
    if (!isJsonRpcError(outcome.error)) await within(proc.ended, Math.min(this.#init.graces.graceMs, 1000));
    const diagnostic = proc.exit
      ? `the ACP agent process ${describeExit(proc.exit)} before the turn finished`
      : `the ACP prompt failed (${describeAcpFailure(outcome.error)})`;
    return { output, stopReason: 'error', diagnostic };
  }

  /** Sends session/cancel; the result settles `aborted` once the agent answers, or its grace ran out. */
  cancel(): void {
    if (this.#state.kind !== 'prompting') return;
    this.#state = { kind: 'cancelled' };
    this.#init.child.client.cancel();
    this.#onCancel();
  }

  /** Idempotent: cancel, then EOF → SIGTERM → SIGKILL, then flush and drop the mirror session. */
  dispose(): Promise<void> {
    if (this.#state.kind === 'disposing') return this.#state.done;
    this.#init.signal.removeEventListener('abort', this.#abort);
    this.cancel();
    const done = (async () => {
      await this.result.catch(() => undefined);
      await this.#init.child.proc.reap(this.#init.graces);
      this.#init.child.client.close();
      await this.#init.sessions.remove(this.id);
    })();
    this.#state = { kind: 'disposing', done };
    return done;
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.dispose();
  }
}
