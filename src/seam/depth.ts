// Delegation depth: a child's depth is its parent's + 1; the persisted header is a monotone floor
// that a runtime option can raise but never lower.
import type { Agent } from './agent-types.js';
import { SubagentError, printable } from './errors.js';
import { isRecord } from './parse.js';

function isDepth(value: unknown): value is number {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 0 && !Object.is(value, -0);
}

/** A refused depth as the caller wrote it: `-0` is not `0`, and the string "1" is not the number 1. */
function shown(value: unknown): string {
  if (Object.is(value, -0)) return '-0';
  if (typeof value === 'string') return JSON.stringify(value);
  return printable(value);
}

/** Throws `INVALID_REQUEST` unless `value` is absent or a non-negative safe integer (not -0). */
export function assertSubagentMaxDepth(value: unknown): void {
  if (value === undefined || isDepth(value)) return;
  throw new SubagentError(
    'INVALID_REQUEST',
    `maxDepth must be a non-negative safe integer (got ${shown(value)})`,
  );
}

/** The agent's delegation depth: max(header.delegationDepth, options.subagentDepth). */
export function delegationDepthOf(agent: Agent): number {
  const { options, session } = (isRecord(agent) ? agent : {}) as Partial<Agent>;
  if (!isRecord(options) || !isRecord(session) || !isRecord(session.header)) {
    throw new SubagentError('INVALID_REQUEST', 'delegationDepthOf() takes an Agent (with options and session.header)');
  }
  const runtime = options.subagentDepth;
  if (runtime !== undefined && !isDepth(runtime)) {
    throw new SubagentError(
      'INVALID_OPTIONS',
      `options.subagentDepth must be a non-negative safe integer (got ${shown(runtime)})`,
    );
  }
  return Math.max(session.header.delegationDepth ?? 0, runtime ?? 0);
}

/** The depth a child of `parent` gets; `DEPTH_EXCEEDED` when it would pass `maxDepth`. */
export function resolveChildDepth(parent: Agent, maxDepth: number | undefined): number {
  const depth = delegationDepthOf(parent) + 1;
  if (!Number.isSafeInteger(depth)) {
    throw new SubagentError('DEPTH_EXCEEDED', 'child delegation depth overflows a safe integer');
  }
  if (maxDepth !== undefined && depth > maxDepth) {
    throw new SubagentError(
      'DEPTH_EXCEEDED',
      `a child here would be at depth ${depth}, above maxDepth ${maxDepth}; delegate less deeply or raise maxDepth`,
    );
  }
  return depth;
}
