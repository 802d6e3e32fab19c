// Short, secret-free accounts of why a worker child's thread ended (no stacks, one line, bounded),
// and the closing of the turn the dead thread left open in the child's mirrored log.
import type { SessionLog } from '../../runtime/session.js';
import type { TurnEndReason } from '../../seam/session-types.js';
import { closeInterruptedTurn } from '../../persistence/repair.js';
import { SubagentError, isSubagentError } from '../../seam/errors.js';
import { headOf } from '../../seam/parse.js';
import { messageOf } from './thread-protocol.js';


function firstLine(error: unknown): string {
  const message = messageOf(error);
  const [line] = message.split('\n', 1) as [string];
  return line.length > 200 ? `${headOf(line, 200)}…` : line;
}

/** An error that escaped a child's code (a throw in its timer, an unhandled rejection): it ended that child, not its thread. */
export class EscapedError extends Error {
  override readonly name = 'EscapedError';
}

/** Why a child's thread ended, or why its thread gave it up, for `diagnostic`. */
export function describeThreadFailure(error: unknown, killed: boolean, graceMs: number): string {
  if (killed) return `the child did not stop within ${graceMs} ms of cancellation; its thread was terminated`;
  if (error instanceof EscapedError) return `an error escaped the child’s code in its worker thread: ${firstLine(error)}`;
  if (isSubagentError(error, 'START_FAILED')) return error.message;
  const code = (error as { code?: unknown } | null)?.code;
  if (code === 'ERR_WORKER_OUT_OF_MEMORY') return 'the child exceeded its worker resource limits (out of memory); its thread was ended';
  const line = firstLine(error);
  if (/terminat/i.test(line)) return 'the child’s worker thread was terminated';
  if (/exit/i.test(line)) return `the child’s worker thread exited (${line})`;
  return `the child’s worker thread failed: ${line}`;
}

/** The pool's failure when its last thread died before loading the worker entry. */
export function entryLoadFailure(error: unknown): SubagentError {
  const code = (error as { code?: unknown } | null)?.code;
  const why =
    code === 'ERR_WORKER_OUT_OF_MEMORY'
      ? 'it ran out of memory (are options.pool.resourceLimits too small?)'
      : `it failed: ${firstLine(error)}`;
  return new SubagentError('START_FAILED', `no worker thread could load the worker entry: ${why}`, { cause: error });
}

/**
 * Records the turn of a child that wrote none of its own (after the `seedLength` inherited events):
 * `turn/start`, what `inside` gives (asked only then), `turn/end` with `reason`. False when the child has a turn.
 */
export function recordUnrunTurn(session: SessionLog, seedLength: number, reason: TurnEndReason, inside: () => readonly { type: string; data: unknown }[] = () => []): boolean {
  if (session.events.slice(seedLength).some((event) => event.type === 'turn/start')) return false;
  const previous = session.events.findLast((event) => event.type === 'turn/start')?.data as { turn?: unknown } | undefined;
  const turn = (typeof previous?.turn === 'number' ? previous.turn : 0) + 1;
  session.append('turn/start', { turn });
  for (const event of inside()) session.append(event.type, event.data);
  session.append('turn/end', { turn, reason });
  return true;
}

/**
 * Ends the turn a dead thread left open in `session` (unanswered tool calls, open step, then
 * `turn/end` with `reason`), so the stored log says how the child ended instead of staying open.
 * `seedLength` events at the start are a fork's inherited prefix, not the child's own turns.
 */
export function closeTurnOfDeadThread(session: SessionLog, seedLength: number, reason: TurnEndReason, inside: readonly { type: string; data: unknown }[] = []): void {
  let closers;
  try {
    closers = closeInterruptedTurn(session.events);
  } catch {
    return; // a log repair cannot read is left for load() to report
  }
  // The thread died before any of its events reached this side: the turn it had begun is recorded.
  // (How far a dying thread got before its death is timing; no test pins it.)
  if (closers.length === 0 && recordUnrunTurn(session, seedLength, reason, () => inside)) return;
  for (const closer of closers) {
    session.append(closer.type, closer.type === 'turn/end' ? { ...(closer.data as object), reason } : closer.data);
  }
}
