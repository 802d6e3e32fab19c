// What the demo reports, built only from what ran: which chunks the model delegated, each child's
// outcome, and a speed-up only when the very same children also ran one by one (else why not).
import { relative } from 'node:path';
import type { TurnEndReason } from '../seam/session-types.js';
import { NOT_STARTED } from './progress.js';

export type DemoProvider = 'spawn' | 'fork' | 'in-process';

/** A chunk of the job as planned: its label and files. */
export interface PlannedChunk {
  label: string;
  files: string[];
}

/** One delegated child as the progress view saw it (times in ms on one clock). */
export interface RanChild {
  id: string;
  label: string;
  prompt: string;
  stopReason: string;
  queuedAt: number;
  startedAt: number | undefined;
  endedAt: number | undefined;
  usage?: { tokens: number; turns: number };
}

/** The one-by-one run of the same children: its time and each child's outcome, in order. */
export interface Baseline {
  ms: number;
  stopReasons: string[];
}

/** The report (also the `--json` output). */
export interface DemoReport {
  provider: DemoProvider;
  model: 'scripted' | 'openai';
  /** The delegating parent's session id: the root of the run's tree in `db`. */
  parentId: string;
  /** The SQLite file the run was saved to. */
  db: string;
  /** Every child the model delegated, in start order. */
  children: { id: string; label: string; stopReason: string; ms: number; tokens: number | null; turns: number | null }[];
  /** The parent's whole job: delegation, children, answer. */
  totalMs: number;
  /** From the first child queued to the last child finished; null when none ran. */
  parallelMs: number | null;
  /** The same children one by one in-process; null when they were not run that way. */
  sequentialMs: number | null;
  /** sequentialMs / parallelMs; null when there is nothing fair to compare (see `noSpeedup`). */
  speedup: number | null;
  noSpeedup?: string;
  files: number;
  /** Planned chunks, how many the model delegated (every file named in some child's prompt), which it left out. */
  chunks: { planned: number; delegated: number; missing: string[] };
  /** The most children that were running at the same moment. */
  maxConcurrent: number;
  /** How the parent's turn ended, and its failure when it did not complete. */
  turn: TurnEndReason['kind'];
  failure?: string;
  /** The model's final answer. */
  answer: string;
}

const escape = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/** True when `prompt` names `file`, by absolute path or relative to `dir`. */
function names(prompt: string, file: string, dir: string): boolean {
  if (prompt.includes(file)) return true;
  return new RegExp(`(^|[\\s'"\`(/])${escape(relative(dir, file))}($|[\\s'"\`),;:])`).test(prompt);
}

/** The chunks whose every file some delegated prompt names. */
export function delegatedChunks(chunks: readonly PlannedChunk[], prompts: readonly string[], dir: string): PlannedChunk[] {
  return chunks.filter((chunk) => chunk.files.every((file) => prompts.some((prompt) => names(prompt, file, dir))));
}

function maxConcurrent(children: readonly RanChild[]): number {
  const edges = children.flatMap((c) => (c.startedAt === undefined ? [] : [[c.startedAt, 1] as const, [c.endedAt ?? Infinity, -1] as const]));
  edges.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  let now = 0;
  let most = 0;
  for (const [, delta] of edges) most = Math.max(most, (now += delta));
  return most;
}

/** Why the same children cannot be run one by one for a fair comparison; undefined when they can. */
export function noBaselineReason(model: DemoReport['model'], children: readonly RanChild[]): string | undefined {
  if (children.length === 0) return 'no children ran, so there is nothing to compare';
  if (model !== 'scripted') {
    return 'the children asked a real model: running them again one by one would ask it again, and its answers and latency change from call to call, so it would not be the same work';
  }
  const failed = children.filter((c) => c.stopReason !== 'completed' && c.stopReason !== NOT_STARTED);
  const unstarted = children.filter((c) => c.stopReason === NOT_STARTED);
  const why = [
    ...failed.map((c) => `${c.label} ended ${c.stopReason}`),
    ...(unstarted.length === 0 ? [] : [`${unstarted.length} ${unstarted.length === 1 ? 'child' : 'children'} never started (cancelled before ${unstarted.length === 1 ? 'it' : 'they'} ran)`]),
  ];
  if (why.length > 0) return `${why.join(', ')}; a speed-up is measured only when every child completed`;
  return undefined;
}

export interface DemoFacts {
  provider: DemoProvider;
  model: DemoReport['model'];
  parentId: string;
  db: string;
  dir: string;
  files: number;
  chunks: readonly PlannedChunk[];
  children: readonly RanChild[];
  totalMs: number;
  turn: TurnEndReason;
  answer: string;
  baseline: Baseline | undefined;
  /**
   * Cores the parallel run could use: a one-by-one run slower than this many times waited on something
   * else (once for in-process children, which share the host's one thread).
   */
  cores: number;
}

/** The report of what ran. */
export function buildReport(facts: DemoFacts): DemoReport {
  const { children } = facts;
  const covered = delegatedChunks(facts.chunks, children.map((c) => c.prompt), facts.dir);
  // A child that never started took no part in the parallel run.
  const started = children.filter((c) => c.stopReason !== NOT_STARTED);
  const ends = started.map((c) => c.endedAt ?? c.queuedAt);
  const parallelMs = started.length === 0 ? null : Math.round(Math.max(...ends) - Math.min(...started.map((c) => c.queuedAt)));
  let noSpeedup = noBaselineReason(facts.model, children);
  const baseline = facts.baseline;
  if (noSpeedup === undefined && baseline === undefined) noSpeedup = 'the one-by-one run was not made';
  if (noSpeedup === undefined && baseline) {
    const failed = baseline.stopReasons.flatMap((reason, i) => (reason === 'completed' ? [] : [`${children[i]?.label ?? `child ${i + 1}`} ended ${reason}`]));
    if (failed.length > 0) noSpeedup = `in the one-by-one run ${failed.join(', ')}, so the two runs did not do the same work`;
    // The same work spread over N cores cannot finish more than N times sooner: a larger ratio measures
    // a stall of the one-by-one run (each of its SQLite commits blocks the main thread), not parallelism.
    // In-process children share the host's one thread, taking turns: they finish no sooner than one by one.
    const ratio = parallelMs ? baseline.ms / parallelMs : 0;
    const bound = facts.provider === 'in-process' ? { most: 1, what: "in-process children, which share the host's one thread," } : { most: facts.cores, what: `${facts.cores} cores` };
    if (noSpeedup === undefined && ratio > bound.most) {
      noSpeedup = `the one-by-one run took ×${ratio.toFixed(2)} the parallel run's time, more than ${bound.what} can explain: it waited on something other than its work (a slow disk or a busy machine), so the runs are not compared`;
    }
  }
  const sequentialMs = baseline ? Math.round(baseline.ms) : null;
  const speedup = noSpeedup === undefined && sequentialMs !== null && parallelMs ? Math.round((sequentialMs / parallelMs) * 100) / 100 : null;
  return {
    provider: facts.provider,
    model: facts.model,
    parentId: facts.parentId,
    db: facts.db,
    children: children.map((c) => ({
      id: c.id,
      label: c.label,
      stopReason: c.stopReason,
      // A child that never started ran for no time, however long it waited for a thread.
      ms: c.stopReason === NOT_STARTED ? 0 : Math.round((c.endedAt ?? c.queuedAt) - (c.startedAt ?? c.queuedAt)),
      tokens: c.usage?.tokens ?? null,
      turns: c.usage?.turns ?? null,
    })),
    totalMs: Math.round(facts.totalMs),
    parallelMs,
    sequentialMs,
    speedup,
    ...(speedup === null ? { noSpeedup: noSpeedup ?? 'the parallel run took no measurable time' } : {}),
    files: facts.files,
    chunks: { planned: facts.chunks.length, delegated: covered.length, missing: facts.chunks.filter((c) => !covered.includes(c)).map((c) => c.label) },
    maxConcurrent: maxConcurrent(children),
    turn: facts.turn.kind,
    ...(facts.turn.kind === 'error' ? { failure: `${facts.turn.error.code}: ${facts.turn.error.message}` } : {}),
    answer: facts.answer,
  };
}
