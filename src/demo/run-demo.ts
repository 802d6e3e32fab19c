// The demo job: a parent agent delegates the analysis of a directory's files, one child per chunk,
// through the `subagent` tool; children run in parallel and do real CPU work in their threads.
import { mkdtemp, rm } from 'node:fs/promises';
import { availableParallelism, tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import type { Writable } from 'node:stream';
import type { Agent, ModelSpec } from '../seam/agent-types.js';
import { text, textOf, type ContentBlock } from '../seam/content.js';
import { SubagentError } from '../seam/errors.js';
import { onAbort } from '../seam/abort.js';
import type { SessionEvent, TurnEndReason } from '../seam/session-types.js';
import type { SubagentProvider, SubagentRun, SubagentStartRequest } from '../seam/types.js';
import { createHost, type Host } from '../host.js';
import { inProcessProvider } from '../providers/in-process.js';
import { forkProvider, spawnProvider } from '../providers/worker/worker-provider.js';
import { subagentTool } from '../tools/subagent-tool.js';
import { CHAOS_CRASH, CHAOS_SPIN, createPlannerModel, type PlannedChild } from './models.js';
import { NOT_STARTED, ProgressView, type ChildProgress } from './progress.js';
import { buildReport, noBaselineReason, type Baseline, type DemoProvider, type DemoReport, type PlannedChunk, type RanChild } from './report.js';

export interface DemoOptions {
  provider: DemoProvider;
  children: number;
  /** The checked directory (absolute) and its source files, at least one (see `sourceFiles`). */
  dir: string;
  files: string[];
  chaos: boolean;
  /** Real model spec for parent and children; scripted planner/analyst when absent. */
  model?: ModelSpec;
  /** A child still running this long is cancelled (its thread terminated after the grace). */
  deadlineMs: number;
  out: Writable;
  tty: boolean;
  quiet: boolean;
  /** SQLite file every session of the run is persisted to. */
  db: string;
  /** Aborted (Ctrl-C): the host closes at once, every turn still open ends in the log. */
  signal?: AbortSignal;
}

function plan(files: string[], count: number, dir: string, chaos: boolean): (PlannedChild & PlannedChunk)[] {
  const n = Math.max(1, Math.min(count, files.length));
  const chunks: string[][] = Array.from({ length: n }, () => []);
  files.forEach((file, i) => chunks[i % n]!.push(file));
  const children = chunks.map((chunk, i) => ({
    label: `chunk ${i + 1}/${n}`,
    files: chunk,
    prompt: [
      `Analyse these ${chunk.length} files of ${dir} with your analyse_files tool and answer with its JSON result:`,
      ...chunk.map((file) => `- ${file}`),
    ].join('\n'),
  }));
  if (chaos) {
    children.push({ label: 'chaos crash', files: [], prompt: `${CHAOS_CRASH}. (This child tests failure containment.)` });
    children.push({ label: 'chaos spin', files: [], prompt: `${CHAOS_SPIN}. (This child tests failure containment.)` });
  }
  return children;
}

/** A child the model delegated: its progress and the request, to run the same child again. */
interface Delegated {
  progress: ChildProgress;
  /** Settles once the child's run has (its progress then holds its end); never rejects. */
  settled?: Promise<void>;
  request: Pick<SubagentStartRequest, 'label' | 'agentOptions'> & { prompt: ContentBlock[] };
}

/**
 * Wraps a provider so the demo sees the life of each child of the run's parent (`ours` says which
 * starts those are: a child that delegates again is not another of the parent's children) and a
 * runaway child meets a deadline.
 */
function tracked(inner: SubagentProvider, progress: () => ProgressView, deadlineMs: number, delegated: Delegated[], ours: (parentId: string) => boolean): SubagentProvider {
  return {
    name: inner.name,
    capabilities: inner.capabilities,
    inheritsParentContext: inner.inheritsParentContext,
    async start(request) {
      if (!ours(request.parent.id)) return inner.start(request);
      const view = progress();
      const child = view.queued(request.label ?? 'child');
      const { label, prompt, agentOptions } = request;
      const entry: Delegated = { progress: child, request: { prompt: [...prompt], ...(label === undefined ? {} : { label }), ...(agentOptions ? { agentOptions } : {}) } };
      delegated.push(entry);
      const run = await inner.start(request).catch((error: unknown) => {
        // A start rejected leaves no session: one cancelled (Ctrl-C) while it waited for a thread never ran.
        const cancelled = error instanceof SubagentError && (error.code === 'CANCELLED' || error.code === 'CLOSED');
        if (cancelled) view.done(child, NOT_STARTED, 'cancelled before it ran');
        else view.done(child, 'error', error instanceof SubagentError ? error.code : 'start failed');
        throw error;
      });
      view.running(child, run.id);
      const timer = setTimeout(() => run.cancel({ kind: 'hook', reason: 'deadline' }), deadlineMs);
      entry.settled = run.result.then(
        (result) => view.done(child, result.stopReason, result.diagnostic, result.usage && { tokens: result.usage.totalTokens, turns: result.usage.turns }),
        () => view.done(child, 'error', 'contract violation'),
      ).finally(() => clearTimeout(timer));
      return run;
    },
  };
}

const analystModel = (): ModelSpec => ({ kind: 'module', specifier: new URL('./models.js', import.meta.url).href, export: 'createAnalystModel' });
const childTools = new URL('./child-tools.js', import.meta.url).href;

/**
 * Runs one child of `parent` through `inner` outside the demo's view (threads and JIT warm-up): it
 * analyses one chunk's files, so the analysis is compiled as it is after a long-lived host's first
 * children (one file left the first real child on each thread about twice as slow as the rest).
 */
async function warmUpChild(parent: Agent, inner: SubagentProvider, files: readonly string[], model: ModelSpec): Promise<void> {
  const run = await inner.start({
    prompt: [text(`Analyse:\n${files.map((file) => `- ${file}`).join('\n')}`)],
    parent,
    signal: new AbortController().signal,
    agentOptions: { model, toolModules: [childTools] },
    descriptor: { version: 2, mode: 'one-shot', provider: inner.name, label: 'warm-up' },
  });
  await run.result;
  await run.dispose();
}

// The one-by-one run is short, so it is made three times and the fastest counts: a disk stall or a
// busy neighbour during one of them (SQLite syncs each commit) does not inflate the speed-up.
const BASELINE_RUNS = 3;

/**
 * Runs the very children the model delegated again, one by one in the main thread. They save to a
 * SQLite file of their own (same settings as the demo's), removed afterwards: the user's database
 * holds the run the report is about, not three copies of its children under a stand-in parent.
 */
async function sequentialBaseline(delegated: readonly Delegated[], warmUpFiles: readonly string[], signal?: AbortSignal): Promise<Baseline> {
  const dir = await mkdtemp(join(tmpdir(), 'subagent-host-baseline-'));
  try {
    const host = await createHost({ providers: false, persistence: { sqlite: join(dir, 'baseline.db') }, pool: { minThreads: 0 } });
    // Ctrl-C stops the one-by-one run too: its host closes, cancelling the child it runs.
    const stop = closeOnAbort(host, signal);
    try {
      const baseline = inProcessProvider(host, { name: 'baseline' });
      host.subagents.registerProvider(baseline);
      const parent = await host.createAgent();
      await warmUpChild(parent, baseline, warmUpFiles, analystModel());
      let fastest: Baseline | undefined;
      for (let i = 0; i < BASELINE_RUNS; i++) {
        await checkpoint(signal);
        const measured = await oneByOne(host, parent, delegated, signal);
        if (measured.stopReasons.some((reason) => reason !== 'completed')) return measured;
        if (fastest === undefined || measured.ms < fastest.ms) fastest = measured;
      }
      return fastest!;
    } finally {
      stop();
      await host.close();
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/**
 * Lets the event loop turn (in-process children chain only microtasks, so a Ctrl-C would wait for
 * the whole one-by-one run), then throws if the run was interrupted.
 */
async function checkpoint(signal: AbortSignal | undefined): Promise<void> {
  await new Promise((resolve) => setImmediate(resolve));
  signal?.throwIfAborted();
}

/**
 * One pass over the children, timed like the parallel run: from the first start to the last result.
 * Disposing (which waits for each session to be on disk) comes after the clock, as it does there.
 */
async function oneByOne(host: Host, parent: Agent, delegated: readonly Delegated[], signal?: AbortSignal): Promise<Baseline> {
  const runs: SubagentRun[] = [];
  const stopReasons: string[] = [];
  const t0 = performance.now();
  try {
    for (const { request } of delegated) {
      await checkpoint(signal);
      const run = await host.subagents.start('baseline', { ...request, parent, signal: new AbortController().signal });
      runs.push(run);
      stopReasons.push((await run.result).stopReason);
    }
    return { ms: performance.now() - t0, stopReasons };
  } finally {
    await Promise.all(runs.map((run) => run.dispose()));
  }
}

function ran({ progress, request }: Delegated): RanChild {
  return {
    id: progress.id ?? '',
    label: progress.label,
    prompt: textOf(request.prompt),
    stopReason: progress.stopReason ?? 'error',
    queuedAt: progress.queuedAt,
    startedAt: progress.startedAt,
    endedAt: progress.endedAt,
    ...(progress.usage ? { usage: progress.usage } : {}),
  };
}

/**
 * The `subagent` calls of the parent that never reached the provider: the turn was cancelled
 * (Ctrl-C) while they waited for a tool slot. The model delegated them; they never ran.
 */
function undispatched(events: readonly SessionEvent[]): RanChild[] {
  const calls = events
    .filter((e) => e.type === 'assistant/message')
    .flatMap((e) => (e.data as { content: ContentBlock[] }).content)
    .flatMap((block) => (block.type === 'tool_call' && block.name === 'subagent' ? [block] : []));
  return events
    .filter((e) => e.type === 'tool/result' && (e.data as { code?: string }).code === 'ABORTED_BEFORE_DISPATCH')
    .flatMap((e) => calls.filter((call) => call.id === (e.data as { callId: string }).callId))
    .map((call) => {
      const { description, prompt } = call.input as { description?: unknown; prompt?: unknown };
      return { id: '', label: String(description ?? 'child'), prompt: String(prompt ?? ''), stopReason: NOT_STARTED, queuedAt: 0, startedAt: undefined, endedAt: undefined };
    });
}

/** Runs the demo job and reports what ran. */
export async function runDemo(options: DemoOptions): Promise<DemoReport> {
  const { dir, files } = options;
  const children = plan(files, options.children, relative(process.cwd(), dir) || '.', options.chaos);
  // CPU-bound children: one thread per core, warmed before the clock starts.
  const threads = Math.max(2, availableParallelism());
  const host = await createHost({ providers: false, persistence: { sqlite: options.db }, pool: { minThreads: threads, maxThreads: threads, cancelGraceMs: 500 } });
  const stop = closeOnAbort(host, options.signal);
  let view: ProgressView | undefined;
  const delegated: Delegated[] = [];
  try {
    const inner =
      options.provider === 'in-process' ? inProcessProvider(host) : options.provider === 'fork' ? forkProvider(host) : spawnProvider(host);
    // Set once the run's parent exists (the warm-up's children are not tracked).
    const run: { parentId?: string } = {};
    // The view exists once the job starts, which is when the run's parent starts children.
    host.subagents.registerProvider(tracked(inner, () => view!, options.deadlineMs, delegated, (id) => id === run.parentId));
    const childModel = options.model ?? analystModel();
    subagentTool(host, { provider: inner.name, agentOptions: { model: childModel, toolModules: [childTools] } });
    // Warm every thread (modules loaded, analysis compiled) as a long-lived host's threads are, with
    // the scripted analyst so no model is asked; the one-by-one run gets the same warm-up. Their
    // parent is created first, so the run's parent is the newest root in the database.
    const warmUp = await host.createAgent();
    await Promise.all(Array.from({ length: threads }, () => warmUpChild(warmUp, inner, children[0]!.files, analystModel())));
    const parent = await host.createAgent(
      options.model
        ? { agentOptions: { model: options.model, persona: 'You coordinate code analysis. Delegate each chunk with the subagent tool, all chunks in one answer, then summarize their results.' } }
        : { model: createPlannerModel(children) },
    );
    // The job's clock, which times the progress lines and the whole job alike, starts here: the
    // warm-up and making the parent are no part of it.
    view = new ProgressView(options.out, { tty: options.tty, quiet: options.quiet });
    run.parentId = parent.id;
    parent.followup([text(`Analyse the ${files.length} files under ${dir} in ${children.length} parallel children:\n\n${children.map((c) => `## ${c.label}\n${c.prompt}`).join('\n\n')}`)]);
    await parent.whenIdle();
    const totalMs = view.elapsed();
    // A turn stopped by Ctrl-C does not wait for the children it delegated (the host is closing):
    // their ends are reported as they come, which is at once (the close cancels them).
    await Promise.all(delegated.map((child) => child.settled));
    view.close();
    const events = parent.session.events;
    const messages = events.filter((e) => e.type === 'assistant/message');
    const answer = textOf((messages.at(-1)?.data as { content?: [] } | undefined)?.content ?? []);
    const turnEnd = events.findLast((e) => e.type === 'turn/end');
    const turn = (turnEnd?.data as { reason: TurnEndReason } | undefined)?.reason ?? { kind: 'error', error: { code: 'UNKNOWN', message: 'the turn did not end' } };
    const ranChildren = [...delegated.map(ran), ...undispatched(events)];
    const model = options.model ? 'openai' : 'scripted';
    const baseline = noBaselineReason(model, ranChildren) === undefined && !options.signal?.aborted ? await sequentialBaseline(delegated, children[0]!.files, options.signal) : undefined;
    return buildReport({ provider: options.provider, model, parentId: parent.id, db: options.db, dir, files: files.length, chunks: children.filter((c) => c.files.length > 0), children: ranChildren, totalMs, turn, answer, baseline, cores: availableParallelism() });
  } finally {
    stop();
    view?.close();
    await host.close();
  }
}

/** Closes `host` when `signal` aborts; returns the unsubscriber. */
export function closeOnAbort(host: { close(): Promise<void> }, signal: AbortSignal | undefined): () => void {
  if (!signal) return () => undefined;
  const close = () => void host.close().catch(() => undefined);
  if (!signal.aborted) return onAbort(signal, close);
  close();
  return () => undefined;
}
