// Every model-facing sentence of the subagent tool, in one table, derived from whether the bound
// provider's children see the parent's completed turns.
import { isBudgetDiagnostic } from '../seam/budget.js';
import { textOf } from '../seam/content.js';
import type { SubagentResult } from '../seam/types.js';

const WORDING = {
  freshTool:
    'Delegate a self-contained task to a separate agent that works in its own context and returns only its result. ' +
    'It does not see this conversation. Independent tasks can be delegated together in one answer; they run in parallel.',
  forkTool:
    'Delegate a task to a separate agent that inherits this conversation’s completed turns (not the turn in progress) ' +
    'and returns only its result. Independent tasks can be delegated together in one answer; they run in parallel.',
  freshPrompt:
    'The complete, self-contained task. The agent does not see this conversation, so include everything it needs: ' +
    'context, inputs, constraints and the form of the answer.',
  forkPrompt:
    'The task. The agent already sees the completed turns of this conversation; build on them and state only what is new.',
  continuable:
    ' The agent runs in the background: this answers at once with its id, you get a message when its work is done, ' +
    'and you can send it more work later (send_message).',
  background: ' The task runs in the background: this answers at once with a task id, and you get a message with its output when it ends.',
  headlines: {
    aborted: 'subagent run was cancelled',
    error: 'subagent run failed',
    'max-tokens': 'subagent run hit its token limit before finishing',
    refusal: 'subagent declined the task',
  } as Record<string, string>,
} as const;

export function toolDescription(inheritsParentContext: boolean, run: 'foreground' | 'continuable' | 'background' = 'foreground'): string {
  const base = inheritsParentContext ? WORDING.forkTool : WORDING.freshTool;
  return run === 'foreground' ? base : base + WORDING[run];
}

export function promptWording(inheritsParentContext: boolean): string {
  return inheritsParentContext ? WORDING.forkPrompt : WORDING.freshPrompt;
}

/** Whether an `aborted` result was its budget's stop, not a cancel (its diagnostic names the limit). */
export function stoppedByBudget(result: SubagentResult): boolean {
  return result.stopReason === 'aborted' && isBudgetDiagnostic(result.diagnostic);
}

/** The error text of a run that did not complete: headline, diagnostic, partial output. */
export function foregroundFailure(result: SubagentResult): string {
  const headline = stoppedByBudget(result) ? 'subagent run was stopped by its budget' : WORDING.headlines[result.stopReason];
  const lines = [headline ?? `subagent run ended abnormally (${result.stopReason})`];
  if (result.diagnostic) lines.push(`Diagnostic: ${result.diagnostic}`);
  const partial = textOf(result.output);
  if (partial) lines.push(`Partial output before the run ended:\n${partial}`);
  return lines.join('\n');
}
