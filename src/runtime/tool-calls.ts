// Runs the tool calls of one model answer. Calls run one by one, except that consecutive calls of
// concurrency-safe tools run together; either way `tool/result`s are committed in model order.
import type { ToolCallBlock } from '../seam/content.js';
import { describeError, isSubagentError, printable } from '../seam/errors.js';
import type { SessionEventMap } from '../seam/session-types.js';
import { ABANDONED, type Abandonment } from './abandonment.js';
import type { ToolResultContent } from './tool-registry.js';
import { isThenable } from '../seam/parse.js';
import { untilCancelled, type TurnContext } from './turn-context.js';

/**
 * A view of `signal` whose `aborted` also reads a shared flag, so a tool looping in synchronous
 * code sees a cancellation set by another thread before its own event loop could deliver it.
 */
export function flagAwareSignal(signal: AbortSignal, flag: Int32Array | undefined): AbortSignal {
  if (!flag) return signal;
  const flagged = () => signal.aborted || Atomics.load(flag, 0) !== 0;
  return new Proxy(signal, {
    get(target, property) {
      if (property === 'aborted') return flagged();
      if (property === 'throwIfAborted') {
        return () => {
          if (flagged()) throw target.reason ?? new DOMException('This operation was aborted', 'AbortError');
        };
      }
      const value: unknown = Reflect.get(target, property, target);
      return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
    },
  });
}

/** Most concurrency-safe calls of one answer that run at once. */
export const MAX_PARALLEL_TOOL_CALLS = 16;

type ResultData = Omit<SessionEventMap['tool/result'], 'turn' | 'step' | 'callId' | 'name'>;

interface Outcome {
  result: ResultData;
  concludes: boolean;
}

function failure(text: string, code: string): ResultData {
  return { content: [{ type: 'text', text }], isError: true, code };
}

const notDispatched = () => failure('Error: the turn was cancelled before this tool call started', 'ABORTED_BEFORE_DISPATCH');

async function execute(ctx: TurnContext, call: ToolCallBlock, signal: AbortSignal): Promise<Outcome> {
  let concludes = false;
  try {
    if (ctx.hooks.beforeTool) {
      // Awaited until the turn is cancelled, as every hook is: a checkpoint that never settles (a
      // store that never answers) ends the call at the cancel, not after abandonGraceMs or never.
      const checked: unknown = ctx.hooks.beforeTool(call.id);
      if (isThenable(checked)) await untilCancelled(checked, signal);
      // Cancelled while the checkpoint ran: the body never starts, as for a call the cancel came before.
      if (signal.aborted) return { result: notDispatched(), concludes: false };
    }
    // The logged call is frozen; the tool gets its own copy, as a host tool called from a worker child does.
    // No deeper than MAX_CONTENT_DEPTH (the turn refuses deeper input): the copy cannot overflow.
    const result: ToolResultContent = await ctx.tools.execute(call.name, structuredClone(call.input), {
      agent: ctx.agent,
      callId: call.id,
      signal,
      concludeTurn: () => {
        concludes = true;
      },
    });
    return { result, concludes: concludes && !result.isError };
  } catch (error) {
    let code: string = signal.aborted ? 'ABORTED' : 'TOOL_FAILED';
    let message = '<unprintable error>';
    try {
      if (isSubagentError(error)) code = error.code;
      message = error instanceof Error ? printable(error.message) : describeError(error);
    } catch {
      // A thrown proxy, or an Error whose getters throw: still one failed call, not a failed turn.
    }
    return { result: failure(`Error: ${message}`, code), concludes: false };
  }
}

/** The result of a call the turn stopped waiting for: its tool ignored the cancel. */
function abandoned(abandonment: Abandonment): ResultData {
  return failure(`Error: the tool did not stop ${abandonment.reason}; the turn ended without its result`, 'ABANDONED');
}

/** Splits calls into runs that may execute together (consecutive concurrency-safe calls). */
function batches(ctx: TurnContext, calls: ToolCallBlock[]): ToolCallBlock[][] {
  const out: ToolCallBlock[][] = [];
  let parallel: ToolCallBlock[] = [];
  for (const call of calls) {
    if (ctx.tools.get(call.name)?.concurrencySafe === true && parallel.length < MAX_PARALLEL_TOOL_CALLS) {
      parallel.push(call);
      continue;
    }
    if (parallel.length > 0) out.push(parallel);
    parallel = [];
    if (ctx.tools.get(call.name)?.concurrencySafe === true) parallel.push(call);
    else out.push([call]);
  }
  if (parallel.length > 0) out.push(parallel);
  return out;
}

/** Runs the calls; true when one of them concluded the turn. */
export async function runTools(ctx: TurnContext, turn: number, step: number, calls: ToolCallBlock[], turnSignal: AbortSignal, abandonment?: Abandonment): Promise<boolean> {
  const signal = flagAwareSignal(turnSignal, ctx.cancelFlag);
  let concluded = false;
  for (const batch of batches(ctx, calls)) {
    const running: (Promise<Outcome> | ResultData)[] = batch.map((call) => {
      ctx.session.append('tool/call', { turn, step, callId: call.id, name: call.name, input: call.input });
      if (signal.aborted) return notDispatched();
      if (concluded) return failure('Error: not executed: an earlier call in this answer completed the turn', 'TURN_CONCLUDED');
      if (!abandonment) return execute(ctx, call, signal);
      return abandonment.wait(execute(ctx, call, signal)).then((outcome) => (outcome === ABANDONED ? { result: abandoned(abandonment), concludes: false } : outcome));
    });
    for (const [index, pending] of running.entries()) {
      const call = batch[index]!;
      const outcome = pending instanceof Promise ? await pending : { result: pending, concludes: false };
      ctx.session.append('tool/result', { turn, step, callId: call.id, name: call.name, ...outcome.result });
      concluded ||= outcome.concludes;
    }
  }
  return concluded;
}
