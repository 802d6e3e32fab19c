// The run wrapper `start` resolves with: fields captured once, a result normalized into a deeply
// frozen SubagentResult, cancellation through one combined signal, and one memoized dispose.
import { z } from 'zod';
import type { Agent } from '../seam/agent-types.js';
import { isBudgetDiagnostic } from '../seam/budget.js';
import { onAbort } from '../seam/abort.js';
import { plainSnapshot } from '../seam/codec.js';
import { deepFreeze, plainJsonProblem, type SessionId } from '../seam/content.js';
import { SubagentError } from '../seam/errors.js';
import { settled } from '../seam/once.js';
import { limitDiagnostic } from '../seam/output.js';
import type { SubagentResult, SubagentRun, SubagentStopReason } from '../seam/types.js';
import { everyItem, isRecord, isThenable, parseOrThrow, readingInput } from '../seam/parse.js';
import { addUsage, type SubagentUsage } from '../seam/usage.js';

const runShape = z.object({
  id: z.string().min(1),
  localAgent: z.looseObject({ id: z.string() }).optional(),
  result: z.custom<Promise<unknown>>((value) => value instanceof Promise || (typeof value === 'object' && value !== null && typeof (value as { then?: unknown }).then === 'function')),
  dispose: z.custom<() => Promise<void>>((value) => typeof value === 'function'),
  cancel: z.custom<(reason?: unknown) => void>((value) => typeof value === 'function').optional(),
});

// The figures of SubagentUsage, once: `z.object` drops keys a provider put beside them.
const count = z.number().int().nonnegative();
const usageShape = z.object({
  inputTokens: count,
  outputTokens: count,
  totalTokens: count,
  requests: count,
  turns: count,
  toolCalls: count,
  wallMs: count,
}) satisfies z.ZodType<SubagentUsage>;

const resultShape = z.object({
  output: z.array(z.looseObject({ type: z.string() })),
  structured: z.unknown().optional(),
  diagnostic: z.string().optional(),
  stopReason: z.string().min(1),
  usage: usageShape.optional(),
});

type RawResult = z.infer<typeof resultShape>;
const USAGE_FIELDS = Object.keys(usageShape.shape) as (keyof SubagentUsage)[];

// Hand-written checks for the shapes every provider returns: each accepts only what its zod
// schema accepts, so a well-formed run or result skips zod; anything else goes through zod.

function plainRun(run: unknown): boolean {
  if (!isRecord(run) || typeof run['id'] !== 'string' || run['id'] === '') return false;
  const { localAgent, cancel } = run;
  if (localAgent !== undefined && !(isRecord(localAgent) && typeof localAgent['id'] === 'string')) return false;
  return isThenable(run['result']) && typeof run['dispose'] === 'function' && (cancel === undefined || typeof cancel === 'function');
}

/** The fields of a well-formed result, as zod would return them (usage reduced to its figures). */
function plainResult(raw: unknown): RawResult | undefined {
  if (!isRecord(raw)) return undefined;
  const { output, structured, diagnostic, stopReason, usage } = raw;
  if (!Array.isArray(output) || !everyItem(output, (block) => isRecord(block) && typeof block['type'] === 'string')) return undefined;
  if (typeof stopReason !== 'string' || stopReason === '' || (diagnostic !== undefined && typeof diagnostic !== 'string')) return undefined;
  const fields: RawResult = { output: output as RawResult['output'], stopReason };
  if ('structured' in raw) fields.structured = structured;
  if (diagnostic !== undefined) fields.diagnostic = diagnostic;
  if (usage === undefined) return fields;
  if (!isRecord(usage) || !USAGE_FIELDS.every((key) => Number.isSafeInteger(usage[key]) && (usage[key] as number) >= 0)) return undefined;
  fields.usage = Object.fromEntries(USAGE_FIELDS.map((key) => [key, usage[key]])) as RawResult['usage'];
  return fields;
}

/** Throws `CONTRACT_VIOLATION` unless `run` has the SubagentRun shape. */
export function assertRunShape(run: unknown, provider: string): asserts run is SubagentRun {
  if (!plainRun(run)) parseOrThrow(runShape, run, 'CONTRACT_VIOLATION', 'run', `provider ${provider} returned a malformed run`);
}

/**
 * `run`, once it has the SubagentRun shape and an id that is not its parent's or an ancestor's
 * (`clash` says which it is; the tree's links would loop). Otherwise the run is disposed
 * (when it can be) and `CONTRACT_VIOLATION` thrown.
 */
export async function publishableRun(run: unknown, provider: string, clash: (id: string) => string | undefined): Promise<SubagentRun> {
  try {
    assertRunShape(run, provider);
    const taken = clash(run.id);
    if (taken !== undefined) throw new SubagentError('CONTRACT_VIOLATION', `provider ${provider} returned a run whose id ${run.id} is ${taken}; a child's id must not be one of its lineage's`);
    return run;
  } catch (error) {
    if (isRecord(run) && typeof run['dispose'] === 'function') await disposeQuietly(run as unknown as SubagentRun);
    throw error;
  }
}

/** The budget stop a hook's cancel `reason` names; none for anything else, also a reason that cannot be read (a revoked proxy, a throwing getter). */
function budgetStop(reason: unknown): string | undefined {
  try {
    const hook = isRecord(reason) && reason['kind'] === 'hook' ? reason['reason'] : undefined;
    return typeof hook === 'string' && isBudgetDiagnostic(hook) ? hook : undefined;
  } catch {
    return undefined;
  }
}

/** What the service does around a run's life (all optional). */
export interface RunLifecycle {
  /** What the child's descendants spent, read when its result settles (its `treeUsage`). */
  descendants?: () => SubagentUsage | undefined;
  /** Releases the child's continuable descendants; dispose awaits it before disposing the child. */
  releaseDescendants?: () => Promise<void>;
  /** Waits for work the child started while it was being disposed (released as it landed); never rejects. */
  releaseLate?: () => Promise<void>;
  /** Called once the run is disposed. */
  disposed?: () => void;
}

/**
 * Normalizes a provider's raw result; `undefined` when it is malformed. `stoppedBy`: the budget stop
 * a tree's cancel named (a member without step boundaries here), the diagnostic of a result without one.
 */
function normalizeResult(raw: unknown, cancelled: boolean, descendants: (() => SubagentUsage | undefined) | undefined, stoppedBy?: string): SubagentResult | undefined {
  let fields = plainResult(raw);
  if (!fields) {
    const parsed = resultShape.safeParse(raw);
    if (!parsed.success) return undefined;
    fields = parsed.data;
  }
  // Plain JSON only, as every boundary and the log carry it: a Map, Set, Date or typed array could
  // not be frozen (a Map stays writable, a typed array throws).
  let copy = plainSnapshot(fields);
  if (copy === undefined) {
    if (plainJsonProblem(fields.output, 'output') !== undefined) return undefined;
    if (fields.structured !== undefined && plainJsonProblem(fields.structured, 'structured') !== undefined) return undefined;
    try {
      copy = structuredClone(fields);
    } catch {
      return undefined;
    }
  }
  // A run cancelled by its owner reports anything but a finished answer as aborted.
  const stopReason = (cancelled && copy.stopReason !== 'completed' ? 'aborted' : copy.stopReason) as SubagentStopReason;
  const result: SubagentResult = { output: copy.output as unknown as SubagentResult['output'], stopReason };
  if ('structured' in copy && copy.structured !== undefined) result.structured = copy.structured;
  if (copy.usage !== undefined) {
    result.usage = copy.usage;
    const below = descendants?.();
    if (below) result.treeUsage = addUsage(result.usage, below);
  }
  if (stopReason !== 'completed' && copy.diagnostic !== undefined && copy.diagnostic !== '') result.diagnostic = limitDiagnostic(copy.diagnostic);
  else if (stopReason === 'aborted' && stoppedBy !== undefined) result.diagnostic = stoppedBy;
  return deepFreeze(result);
}

/**
 * The one watch a start puts on the caller's signal, kept for the child's whole life: until the
 * run exists it aborts the start; the run then points `onAbort` at its `cancel` and calls `stop`
 * when its result settles (one watch per child instead of one per phase; children started with
 * one signal share its single listener).
 */
export interface CallerAbort {
  /** The caller's abort, once it fired (its reason, read once). */
  readonly fired: { reason: unknown } | undefined;
  readonly relay: { onAbort: (reason: unknown) => void };
  readonly stop: () => void;
}

/**
 * The caller's relay, made here so that its watch holds only the relay: the start's own frame
 * (the request, the provider's promise) is not kept alive by a watch that outlives it. A signal
 * that cannot be watched (its `addEventListener` throws) is `INVALID_REQUEST`.
 */
export function callerAbort(signal: AbortSignal, onAbortStart: (reason: unknown) => void): CallerAbort {
  const caller: { fired: { reason: unknown } | undefined; relay: CallerAbort['relay']; stop: () => void } = { fired: undefined, relay: { onAbort: onAbortStart }, stop: () => undefined };
  caller.stop = readingInput('request.signal', 'INVALID_REQUEST', () =>
    onAbort(signal, (reason) => {
      caller.fired = { reason };
      caller.relay.onAbort(reason);
    }),
  );
  return caller;
}

export class ManagedRun implements SubagentRun {
  readonly id: SessionId;
  readonly localAgent: Agent | undefined;
  readonly result: Promise<SubagentResult>;
  readonly #run: SubagentRun;
  readonly #controller: AbortController;
  /**
   * running: no outcome yet, not cancelled · settled: the provider's result came in first ·
   * cancelled: the owner cancelled (before or after the result; cancellation is forwarded once).
   */
  #state: 'running' | 'settled' | 'cancelled' = 'running';
  #disposing: Promise<void> | undefined;
  readonly #lifecycle: RunLifecycle;
  /** The budget stop the cancel was for (`{ kind: 'hook', reason }` naming a reached limit). */
  #stoppedBy: string | undefined;

  /**
   * `controller` is the run's own cancellation, already combined into the signal the provider
   * got; aborting the caller's signal has the same effect as `cancel()` (through `caller`, whose
   * listener the run removes once its result settles).
   */
  constructor(run: SubagentRun, provider: string, controller: AbortController, caller: CallerAbort, lifecycle: RunLifecycle = {}) {
    const { descendants } = lifecycle;
    this.#run = run;
    this.#lifecycle = lifecycle;
    this.#controller = controller;
    this.id = run.id;
    this.localAgent = run.localAgent;
    const { relay, stop: unwatch } = caller;
    relay.onAbort = (reason) => this.cancel(reason);
    // The caller aborted while the provider started (its signal is not read again: a getter may throw).
    if (caller.fired) relay.onAbort(caller.fired.reason);
    this.result = Promise.resolve(run.result).then(
      async (raw) => {
        if (this.#state === 'running') this.#state = 'settled';
        unwatch();
        const result = normalizeResult(raw, this.#state === 'cancelled', descendants, this.#stoppedBy);
        if (result) return result;
        // The run is released before the fault is reported, so nothing outlives the rejection.
        await this.dispose().catch(() => undefined);
        throw new SubagentError('CONTRACT_VIOLATION', `provider ${provider} resolved a malformed result; expected { output: ContentBlock[], stopReason, structured?, diagnostic?, usage? }`);
      },
      (error: unknown) => {
        if (this.#state === 'running') this.#state = 'settled';
        unwatch();
        throw error;
      },
    );
  }

  cancel(reason?: unknown): void {
    if (this.#state === 'cancelled') return;
    this.#state = 'cancelled';
    this.#stoppedBy = budgetStop(reason);
    this.#controller.abort(reason ?? { kind: 'parent' });
    try {
      this.#run.cancel(reason);
    } catch {
      // The combined signal already carries the cancellation; a throwing provider cancel adds nothing.
    }
  }

  dispose(): Promise<void> {
    if (this.#disposing) return this.#disposing;
    // Memoized before any provider code runs, so a re-entrant call from inside the provider's
    // cancel or dispose joins this one instead of starting a second.
    const disposing = (this.#disposing = Promise.resolve().then(() => this.#release()));
    // Disposal stops remaining work: a run still going settles aborted, whatever the provider says.
    if (this.#state === 'running') this.cancel();
    return disposing;
  }

  async #release(): Promise<void> {
    // Child-first: the child's continuable descendants go before it, so none outlives its parent.
    const below = await this.#lifecycle.releaseDescendants?.().then(
      () => undefined,
      (error: unknown) => ({ error }),
    );
    try {
      await this.#run.dispose();
    } finally {
      // The provider's own result, not ours: ours may itself be waiting on this dispose.
      await settled(this.#run.result);
      await this.#lifecycle.releaseLate?.();
      this.#lifecycle.disposed?.();
    }
    if (below) throw below.error;
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.dispose();
  }
}

/** Disposes a run the caller will never see; a dispose that throws, even synchronously, is ignored. */
export async function disposeQuietly(run: SubagentRun): Promise<void> {
  try {
    await run.dispose();
  } catch {
    // The start's own error is the one to report.
  }
}
