// How a delegated child is composed and read, shared by every local transport (in-process, and
// inside worker threads): tool restriction, the structured-output capture tool, the descriptor
// appended in the first turn, and the result read from the child's own events.
import type { JsonSchema, ToolRestriction } from '../seam/agent-types.js';
import {
  BUDGET_EVENT,
  addTreeSpend,
  budgetStopOf,
  budgetStopReason,
  describeBudgetStop,
  reachedLimit,
  readTreeSpend,
  type BudgetStop,
  type SubagentBudget,
  type TreeHeadroom,
} from '../seam/budget.js';
import { SubagentError, isSubagentError } from '../seam/errors.js';
import { finalAssistantOutput } from '../seam/output.js';
import type { SessionEvent, SessionEventMap, TurnEndReason } from '../seam/session-types.js';
import type { SubagentResult, SubagentStopReason } from '../seam/types.js';
import { UsageMeter, subtractUsage, usageOf } from '../seam/usage.js';
import type { SessionLog } from './session.js';
import type { ToolRegistry } from './tool-registry.js';
import type { AgentHooks } from './turn-context.js';

/** Name of the tool a child with an output schema must finish with. */
export const STRUCTURED_OUTPUT_TOOL = 'structured_output';

/** Appended to a structured child's system prompt. */
export const STRUCTURED_OUTPUT_INSTRUCTION =
  `When your work is complete, you MUST finish by calling the ${STRUCTURED_OUTPUT_TOOL} tool exactly once, ` +
  'with arguments matching its schema. A plain text answer does not count as your result.';

/** Holds the first valid structured output of a child. */
export interface StructuredCapture {
  captured: boolean;
  value?: unknown;
}

/** The child's system prompt: its persona, plus the structured-output instruction when needed. */
export function childPersona(persona: string | undefined, structured: boolean): string | undefined {
  const parts = [persona, structured ? STRUCTURED_OUTPUT_INSTRUCTION : undefined].filter((part) => part !== undefined && part !== '');
  return parts.length > 0 ? parts.join('\n\n') : undefined;
}

/**
 * What a child with `toolFilter` inherits from `tools`: a scope hiding what the filter hides (an
 * unknown name is the caller's mistake: `INVALID_REQUEST`), or `tools` itself without a filter. The
 * child's own scope is made under it, so a tool module's tool may take the name of a tool it hides,
 * wherever the child runs (a worker child is only ever sent the tools it may call).
 */
export function inheritedTools(tools: ToolRegistry, toolFilter: ToolRestriction | undefined): ToolRegistry {
  if (!toolFilter) return tools;
  const scope = tools.scope();
  try {
    scope.restrict(toolFilter);
  } catch (error) {
    if (isSubagentError(error, 'UNKNOWN_TOOL') || isSubagentError(error, 'INVALID_OPTIONS')) {
      throw new SubagentError('INVALID_REQUEST', `request.toolFilter: ${error.message}`, { cause: error });
    }
    throw error;
  }
  return scope;
}

/**
 * `DUPLICATE_TOOL` for an output schema asked of a child that already has a tool named like the
 * capture tool: one of the host tools, or one of its tool modules' tools.
 */
export function captureToolTaken(by: 'host' | 'module'): SubagentError {
  const holder = by === 'host' ? `a host tool is named ${STRUCTURED_OUTPUT_TOOL}: rename it, or hide it from the child with toolFilter { deny: ['${STRUCTURED_OUTPUT_TOOL}'] }` : `one of its tool modules exports a tool named ${STRUCTURED_OUTPUT_TOOL}: rename that tool`;
  return new SubagentError('DUPLICATE_TOOL', `the child's outputSchema adds the capture tool ${STRUCTURED_OUTPUT_TOOL}, but ${holder}`);
}

/** Registers the capture tool in a child's scope when an output schema was asked for. */
export function composeChildTools(tools: ToolRegistry, request: { outputSchema?: JsonSchema | undefined }): StructuredCapture | undefined {
  if (!request.outputSchema) return undefined;
  const taken = tools.get(STRUCTURED_OUTPUT_TOOL);
  if (taken) throw captureToolTaken(tools.layers().own.includes(taken) ? 'module' : 'host');
  const capture: StructuredCapture = { captured: false };
  tools.register({
    name: STRUCTURED_OUTPUT_TOOL,
    description: 'Report your final structured result. Call exactly once, when your work is complete; the arguments must match the schema.',
    parameters: request.outputSchema,
    async execute(input, ctx) {
      if (!capture.captured) {
        capture.captured = true;
        capture.value = structuredClone(input);
      }
      ctx.concludeTurn?.();
      return 'Structured output recorded.';
    },
  });
  return capture;
}

/** Hooks that append `descriptor` once, inside the child's first turn. */
export function descriptorHooks(session: () => SessionLog, descriptor: unknown): AgentHooks {
  let appended = false;
  return {
    turnStart() {
      if (appended) return;
      appended = true;
      session().append('subagent/descriptor', structuredClone(descriptor));
    },
  };
}

/** What a child's step-boundary budget check needs. */
export interface BudgetGuardOptions {
  /** The child's own budget (a tree-scoped one is enforced by the tree's owner instead). */
  budget?: SubagentBudget | undefined;
  /** Epoch ms the child started at (wall time counts from there). */
  startedAt: number;
  /** Events of the log that are not the child's own (a fork's seed). */
  seedLength: number;
  /** The stop a tree budget covering this child calls for, if any. */
  treeStop?: (() => BudgetStop | undefined) | undefined;
  /** Covering trees whose shared spend the child adds to (see `treeCounter`) and checks here (a worker child's). */
  trees?: readonly TreeHeadroom[] | undefined;
}

/**
 * The limit a covering tree has reached, as its shared spend stands now, if any: where the child
 * runs, the tree's spend stops it without waiting for the tree's owner to say so (a child that never
 * yields its thread would hear of that too late), its siblings' in other threads included.
 */
function reachedTreeLimit(trees: readonly TreeHeadroom[], now: number): BudgetStop | undefined {
  for (const tree of trees) {
    const stop = reachedLimit(tree.budget, readTreeSpend(tree.spent), now - tree.startedAt);
    if (stop) return stop;
  }
  return undefined;
}

/**
 * Adds the child's spend to each covering tree's shared spend as its log grows: call it with the
 * log at each new event. A fork's seed (before `seedLength`) is not its spend. A resident child's
 * stay (`resident`) counts only what it adds to the log it was built from (`prior`), tokens and
 * tool calls (its host counts the turns), and adds them to `ahead` too.
 */
export function treeCounter(
  trees: readonly TreeHeadroom[],
  seedLength: number,
  resident?: { ahead: BigInt64Array; prior: readonly SessionEvent[] },
): (events: readonly SessionEvent[]) => void {
  const meter = new UsageMeter(seedLength);
  let counted = resident && meter.read(resident.prior);
  return (events) => {
    const usage = meter.read(events);
    const delta = counted ? subtractUsage(usage, counted) : usage;
    counted = usage;
    if (!resident) {
      for (const tree of trees) addTreeSpend(tree.spent, delta);
      return;
    }
    const own = { ...delta, turns: 0 };
    for (const tree of trees) addTreeSpend(tree.spent, own);
    addTreeSpend(resident.ahead, own);
  };
}

/**
 * Hooks that stop the child at the step boundary where a limit is reached: the reached limit is
 * appended as a `subagent/budget` event and the turn ends `max-tokens` (tokens) or `aborted`.
 */
export function budgetHooks(session: () => SessionLog, options: BudgetGuardOptions): AgentHooks {
  const own = options.budget?.scope === 'tree' ? undefined : options.budget;
  const trees = options.trees?.length ? options.trees : undefined;
  if (own === undefined && options.treeStop === undefined && trees === undefined) return {};
  const meter = new UsageMeter(options.seedLength);
  return {
    beforeStep() {
      const log = session();
      const now = Date.now();
      const stop = (own && reachedLimit(own, meter.read(log.events), now - options.startedAt)) ?? options.treeStop?.() ?? (trees && reachedTreeLimit(trees, now));
      if (stop === undefined) return undefined;
      log.append(BUDGET_EVENT, { ...stop });
      const reason = describeBudgetStop(stop);
      return budgetStopReason(stop) === 'max-tokens' ? { kind: 'max-tokens' } : { kind: 'aborted', cause: { kind: 'hook', reason } };
    },
  };
}

function stopReasonOf(reason: TurnEndReason | undefined): SubagentStopReason {
  switch (reason?.kind) {
    case 'completed':
      return 'completed';
    case 'max-tokens':
      return 'max-tokens';
    case 'aborted':
      return 'aborted';
    case 'refusal':
      return 'refusal';
    default:
      return 'error'; // error, interrupted, or no turn end at all
  }
}

/** Reads a settled child's result from its own events (those after the fork seed). */
export function readChildResult(
  events: readonly SessionEvent[],
  options: { seedLength: number; cancelled: boolean; capture?: StructuredCapture | undefined },
): SubagentResult {
  const own = events.slice(options.seedLength);
  const output = finalAssistantOutput(own);
  const usage = usageOf(own);
  let lastEnd: TurnEndReason | undefined;
  let budget: BudgetStop | undefined;
  for (let i = own.length - 1; i >= 0 && !lastEnd; i--) {
    if (own[i]!.type === 'turn/end') lastEnd = (own[i]!.data as SessionEventMap['turn/end']).reason;
  }
  for (let i = own.length - 1; i >= 0 && own[i]!.type !== 'turn/start' && !budget; i--) {
    if (own[i]!.type === BUDGET_EVENT) budget = budgetStopOf(own[i]!.data);
  }
  let stopReason = stopReasonOf(lastEnd);
  if (options.cancelled && stopReason !== 'completed' && !budget) stopReason = 'aborted';
  let diagnostic: string | undefined;
  if (budget) diagnostic = describeBudgetStop(budget);
  else if (lastEnd?.kind === 'error') diagnostic = `${lastEnd.error.code}: ${lastEnd.error.message}`;
  else if (lastEnd === undefined && !options.cancelled) diagnostic = 'the child ended without finishing a turn';
  if (options.capture?.captured) return { output, structured: options.capture.value, stopReason, usage };
  if (options.capture && stopReason === 'completed') {
    stopReason = options.cancelled ? 'aborted' : 'error';
    diagnostic = `the child finished without calling ${STRUCTURED_OUTPUT_TOOL}`;
  }
  return diagnostic === undefined || stopReason === 'completed' ? { output, stopReason, usage } : { output, diagnostic, stopReason, usage };
}
