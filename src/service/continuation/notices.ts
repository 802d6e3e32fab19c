// What an Activation epoch amounts to (its stop reason and closing output) and the messages the
// manager sends a parent: the settlement notice and the framing of a child's report.
import type { Agent } from '../../seam/agent-types.js';
import { BUDGET_EVENT, budgetStopOf, describeBudgetStop } from '../../seam/budget.js';
import type { ContentBlock, MessageSource, SessionId } from '../../seam/content.js';
import { headOf } from '../../seam/parse.js';
import { isSubagentError } from '../../seam/errors.js';
import { finalAssistantOutput, limitDiagnostic } from '../../seam/output.js';
import type { SessionEvent, SessionEventMap } from '../../seam/session-types.js';
import type { AdmitInput, SubagentStopReason } from '../../seam/types.js';

export interface EpochOutcome {
  stopReason: SubagentStopReason;
  output: ContentBlock[];
  /** The budget limit that stopped the epoch, e.g. `budget: turns limit 2 reached (3 used, child budget)`. */
  diagnostic?: string;
  /** Why the epoch's last turn failed (`stopReason` `error`): its code and message. */
  failure?: string;
}

/**
 * The outcome of the events an epoch appended: the last turn that ended decides; an epoch whose
 * accepted input was discarded unrun after it (or that never ran a turn) was stopped.
 */
export function epochOutcome(events: readonly SessionEvent[]): EpochOutcome {
  let stopReason: SubagentStopReason | undefined;
  let failure: string | undefined;
  let dropped = false;
  for (let i = events.length - 1; i >= 0 && stopReason === undefined; i--) {
    const event = events[i]!;
    // Input discarded after the last completed turn (a drain catching a wake before its turn opens:
    // timing no test orders) makes the epoch a stop, not a completion.
    if (event.type === 'inbox/discarded' && (event.data as SessionEventMap['inbox/discarded']).ids.length > 0) dropped = true;
    if (event.type !== 'turn/end') continue;
    const reason = (event.data as SessionEventMap['turn/end']).reason;
    switch (reason.kind) {
      case 'completed':
        stopReason = dropped ? 'aborted' : 'completed';
        break;
      case 'error':
        failure = limitDiagnostic(`${reason.error.code}: ${reason.error.message}`);
        stopReason = reason.kind;
        break;
      case 'max-tokens':
      case 'refusal':
        stopReason = reason.kind;
        break;
      default:
        stopReason = 'aborted';
    }
  }
  const outcome: EpochOutcome = { stopReason: stopReason ?? 'aborted', output: finalAssistantOutput(events), ...(failure === undefined ? {} : { failure }) };
  const budget = events.findLast((event) => event.type === BUDGET_EVENT);
  const stop = budget && budgetStopOf(budget.data);
  return stop ? { ...outcome, diagnostic: describeBudgetStop(stop) } : outcome;
}

const SENTENCES: Record<SubagentStopReason, (id: SessionId) => string> = {
  completed: (id) => `Background subagent ${id} finished and will do no further work unless you send it more.`,
  aborted: (id) => `Background subagent ${id} stopped before finishing.`,
  'max-tokens': (id) => `Background subagent ${id} ran out of room before finishing.`,
  refusal: (id) => `Background subagent ${id} declined the task.`,
  error: (id) => `Background subagent ${id} failed before finishing.`,
};

/**
 * `full` when `admit` takes it, else `leftOut(why)`: a notice is never refused (nobody could be
 * told), and the output it carries, in a log, would end the parent's turns or keep it from coming back.
 */
export function fittedNotice(full: ContentBlock[], admit: AdmitInput | undefined, leftOut: (why: string) => ContentBlock[]): ContentBlock[] {
  try {
    admit?.(full);
    return full;
  } catch (error) {
    return leftOut(isSubagentError(error) ? error.message : 'its transport refused it');
  }
}

/**
 * Delivers the notice `build` makes for the parent's `admit`; a one-shot worker parent's thread
 * refuses input too large for it only as it is sent (`INVALID_REQUEST`): the notice is then made
 * again as refused with that error, and delivered without what it carried.
 */
export function deliverFitting<T>(admit: AdmitInput | undefined, build: (admit: AdmitInput | undefined) => T, deliver: (notice: T) => void): void {
  try {
    deliver(build(admit));
  } catch (error) {
    if (!isSubagentError(error, 'INVALID_REQUEST')) throw error;
    deliver(build(() => {
      throw error;
    }));
  }
}

/**
 * The parent's settlement notice: one sentence (and why it failed or was stopped), then the text
 * and images of its closing message, or their absence. The closing message's tool calls and
 * reasoning stay out: they are the child's own turn's, and no model takes them in a user message.
 */
export function settlementNotice(
  childId: SessionId,
  outcome: EpochOutcome,
  /** The parent's `admitInput` (a continuable parent's transport bound), when it has one. */
  admit?: AdmitInput,
): { content: ContentBlock[]; source: MessageSource } {
  const sentence = SENTENCES[outcome.stopReason](childId);
  const head: ContentBlock[] = [{ type: 'text', text: sentence }];
  if (outcome.failure !== undefined) head.push({ type: 'text', text: `Diagnostic: ${outcome.failure}` });
  if (outcome.diagnostic !== undefined) head.push({ type: 'text', text: `It was stopped by its ${outcome.diagnostic}.` });
  const shown = outcome.output.filter((block) => block.type === 'text' || block.type === 'image');
  const source: MessageSource = { kind: 'subagent-settled', senderSessionId: childId, summary: headOf(sentence, 200) };
  if (shown.length === 0) return { content: [...head, { type: 'text', text: 'It left no closing message.' }], source };
  const content = fittedNotice([...head, { type: 'text', text: 'Its closing message:' }, ...structuredClone(shown)], admit, (why) => [
    ...head,
    { type: 'text', text: `Its closing message is left out: this agent could not take it (${why}); it is in the log of ${childId}.` },
  ]);
  return { content, source };
}

/** A child's report as its parent reads it. */
export function reportMessage(childId: SessionId, content: ContentBlock[]): { content: ContentBlock[]; source: MessageSource } {
  return {
    content: [{ type: 'text', text: `Subagent ${childId} reported:` }, ...structuredClone(content)],
    source: { kind: 'subagent-report', senderSessionId: childId },
  };
}

/**
 * Context for a parent no turn will read: a worker child whose result settled takes no input any
 * more (`CLOSED`), and then there is nowhere to put it.
 */
export function injectIfOpen(parent: Agent, content: ContentBlock[], source: MessageSource): void {
  try {
    parent.inject(content, { source });
  } catch (error) {
    if (!isSubagentError(error, 'CLOSED')) throw error;
  }
}
