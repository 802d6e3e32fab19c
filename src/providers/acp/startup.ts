// The startup of one ACP child: each step (connect, initialize, session/new or session/load) raced
// against the process ending, the start being aborted and the step's time limit, the error a
// failed step becomes, and the route overrides our own agent honours.
import { SubagentError } from '../../seam/errors.js';
import type { AgentOptions } from '../../seam/agent-types.js';
import { describeAcpFailure, isJsonRpcError } from './client.js';
import { type AgentProcess, describeExit, type AgentExit } from './process.js';
import { within } from '../../seam/once.js';
import { AGENT_OPTIONS_META } from './sdk.js';

/** Thrown inside a startup step when the start's signal aborted. */
export class StartAborted extends Error {}

function exitMessage(exit: AgentExit, phase: string): string {
  return `the ACP agent process ${describeExit(exit)}${exit.errno === undefined ? ` during ${phase}` : ''}`;
}

/**
 * Races one startup step against the process ending, the start being aborted and, for a step the
 * agent must answer, `timeoutMs` (a command that is no ACP agent, say a shell, never answers and
 * never exits).
 */
export async function startupStep<T>(step: Promise<T>, proc: AgentProcess, signal: AbortSignal, phase: string, timeoutMs?: number): Promise<T> {
  let onAbort: (() => void) | undefined;
  let timer: NodeJS.Timeout | undefined;
  const aborted = new Promise<never>((_, reject) => {
    onAbort = () => reject(new StartAborted());
    if (signal.aborted) onAbort();
    else signal.addEventListener('abort', onAbort, { once: true });
    if (timeoutMs === undefined) return;
    timer = setTimeout(
      () => reject(new SubagentError('START_FAILED', `the ACP agent did not answer ${phase} within ${timeoutMs} ms (is the command an ACP agent speaking on stdio?)`)),
      timeoutMs,
    );
  });
  const ended = proc.ended.then((exit): never => {
    throw new SubagentError('START_FAILED', exitMessage(exit, phase));
  });
  try {
    return await Promise.race([step, ended, aborted]);
  } catch (error) {
    if (error instanceof StartAborted || error instanceof SubagentError) throw error;
    // A dead connection is usually followed by the process's exit, which says more.
    if (!isJsonRpcError(error) && (await within(proc.ended, 1000))) throw new SubagentError('START_FAILED', exitMessage(proc.exit!, phase), { cause: error });
    throw new SubagentError('START_FAILED', `the ACP agent failed during ${phase} (${describeAcpFailure(error)})`, { cause: error });
  } finally {
    clearTimeout(timer);
    if (onAbort) signal.removeEventListener('abort', onAbort);
  }
}

/** The route overrides our own ACP agent honours, as session/new `_meta` (undefined when none). */
export function routeMeta(options: AgentOptions | undefined): Record<string, unknown> | undefined {
  const { model, maxTokens, maxStepsPerTurn, toolModules } = options ?? {};
  const route = {
    ...(model && { model }),
    ...(maxTokens && { maxTokens }),
    ...(maxStepsPerTurn && { maxStepsPerTurn }),
    ...(toolModules?.length ? { toolModules } : {}),
  };
  return Object.keys(route).length > 0 ? { [AGENT_OPTIONS_META]: route } : undefined;
}

/** A step that failed because the start was aborted → `CLOSED` (host shutdown) or `CANCELLED`. */
export function abortedStart(signal: AbortSignal, closed: AbortSignal): SubagentError {
  if (closed.aborted && !signal.aborted) return SubagentError.closedWhile('the host', 'the ACP child was starting');
  return SubagentError.cancelled('the start', signal.reason, 'before the ACP child was ready');
}

/** Throws `CANCELLED` or `CLOSED` when a start begins after its signal or the host's closed. */
export function checkOpen(signal: AbortSignal, closed: AbortSignal): void {
  if (signal.aborted) throw SubagentError.cancelled('the start', signal.reason, 'before the ACP child started');
  if (closed.aborted) throw SubagentError.closed('the host');
}
