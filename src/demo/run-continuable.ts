// `demo --continuable`: the planner starts one continuable child per chunk (on the chosen provider;
// spawn and fork children stay resident in their worker threads), each child reports a partial
// finding before its answer, and the planner sends each a follow-up and waits.
import { relative } from 'node:path';
import type { Writable } from 'node:stream';
import type { ModelSpec } from '../seam/agent-types.js';
import { text, textOf, type ContentBlock } from '../seam/content.js';
import type { SessionEvent, TurnEndReason } from '../seam/session-types.js';
import { createHost } from '../host.js';
import { inProcessProvider } from '../providers/in-process.js';
import { forkProvider, spawnProvider } from '../providers/worker/worker-provider.js';
import { controlTools } from '../tools/control-tools.js';
import { reportTool } from '../tools/report-tool.js';
import { subagentTool } from '../tools/subagent-tool.js';
import { createContinuablePlannerModel } from './continuable-models.js';
import { NOT_STARTED, ProgressView, type ChildProgress } from './progress.js';
import type { DemoProvider } from './report.js';
import { closeOnAbort } from './run-demo.js';

export interface ContinuableOptions {
  provider: DemoProvider;
  dir: string;
  files: string[];
  children: number;
  out: Writable;
  tty: boolean;
  quiet: boolean;
  db: string;
  /** Aborted (Ctrl-C): the host closes at once, every turn still open ends in the log. */
  signal?: AbortSignal;
}

/** The report of `demo --continuable` (also its `--json` output). */
export interface ContinuableReport {
  mode: 'continuable';
  provider: DemoProvider;
  model: 'scripted';
  parentId: string;
  db: string;
  files: number;
  /**
   * Every child the planner started, in start order, with its turns and `report` calls; then each it
   * asked for that never started (status `not started`, no id: the host was closing, Ctrl-C).
   */
  children: { id: string; label: string; status: string; turns: number; reports: string[] }[];
  /** Follow-up messages the planner sent (accepted `send_message` calls). */
  followups: number;
  /** Follow-up messages refused (e.g. the host was closing: Ctrl-C). */
  followupsRefused: number;
  /** The run was interrupted (Ctrl-C): the host closed, stopping the children. */
  interrupted: boolean;
  totalMs: number;
  turn: TurnEndReason['kind'];
  answer: string;
}

interface Watched {
  progress: ChildProgress;
  turns: number;
  reports: string[];
  status: string;
}

const analystModel = (): ModelSpec => ({ kind: 'module', specifier: new URL('./continuable-models.js', import.meta.url).href, export: 'createContinuableAnalystModel' });
const childTools = new URL('./child-tools.js', import.meta.url).href;

function chunksOf(files: string[], count: number, dir: string): { label: string; prompt: string }[] {
  const n = Math.max(1, Math.min(count, files.length));
  const chunks: string[][] = Array.from({ length: n }, () => []);
  files.forEach((file, i) => chunks[i % n]!.push(file));
  return chunks.map((chunk, i) => ({
    label: `chunk ${i + 1}/${n}`,
    prompt: [`Analyse these ${chunk.length} files of ${dir} with your analyse_files tool, report a partial finding, then answer:`, ...chunk.map((f) => `- ${f}`)].join('\n'),
  }));
}

/**
 * The `subagent` calls of the parent that started no child: `not started` when refused as the host
 * closed (Ctrl-C) or cancelled before dispatch, as the one-shot demo lists them; else `error`.
 */
function unstarted(events: readonly SessionEvent[]): ContinuableReport['children'] {
  const failed = new Map(
    events.flatMap((e) => {
      const result = e.data as { callId: string; name?: string; isError?: boolean; code?: string };
      return e.type === 'tool/result' && result.name === 'subagent' && result.isError === true ? [[result.callId, result.code] as const] : [];
    }),
  );
  const cancelled = (code: string | undefined) => code === 'CLOSED' || code === 'CANCELLED' || code === 'ABORTED_BEFORE_DISPATCH';
  return events
    .filter((e) => e.type === 'assistant/message')
    .flatMap((e) => (e.data as { content: ContentBlock[] }).content)
    .flatMap((block) => (block.type === 'tool_call' && block.name === 'subagent' && failed.has(block.id) ? [block] : []))
    .map((call) => ({
      id: '',
      label: String((call.input as { description?: unknown }).description ?? 'child'),
      status: cancelled(failed.get(call.id)) ? NOT_STARTED : 'error',
      turns: 0,
      reports: [],
    }));
}

/** Counts a child's turns and `report` calls from its log events, updating its progress line. */
function account(view: ProgressView, child: Watched, events: readonly SessionEvent[]): void {
  for (const event of events) {
    if (event.type === 'turn/end') child.turns++;
    if (event.type === 'assistant/message') {
      for (const block of (event.data as { content: ContentBlock[] }).content) {
        if (block.type === 'tool_call' && block.name === 'report') child.reports.push(String((block.input as { output?: unknown }).output ?? ''));
      }
    }
  }
  const note = `${child.turns} turn${child.turns === 1 ? '' : 's'}, ${child.reports.length} report${child.reports.length === 1 ? '' : 's'}${child.reports.length > 0 ? `: ${child.reports.at(-1)}` : ''}`;
  if (note !== child.progress.note) view.note(child.progress, note);
}

export async function runContinuableDemo(options: ContinuableOptions): Promise<ContinuableReport> {
  const chunks = chunksOf(options.files, options.children, relative(process.cwd(), options.dir) || '.');
  const host = await createHost({ providers: false, persistence: { sqlite: options.db }, pool: { minThreads: 0 } });
  const stop = closeOnAbort(host, options.signal);
  const view = new ProgressView(options.out, { tty: options.tty, quiet: options.quiet });
  const watched = new Map<string, Watched>();
  const unsubscribe: (() => void)[] = [];
  try {
    const { provider } = options;
    host.subagents.registerProvider(provider === 'in-process' ? inProcessProvider(host) : provider === 'fork' ? forkProvider(host) : spawnProvider(host));
    subagentTool(host, { provider, mode: 'continuable', agentOptions: { model: analystModel(), toolModules: [childTools] } });
    controlTools(host);
    reportTool(host, { delivery: 'next-step' });
    const parent = await host.createAgent({ model: createContinuablePlannerModel(chunks) });
    unsubscribe.push(host.subagents.on('subagent/start', ({ id }) => {
      const session = host.sessions.get(id);
      const existing = watched.get(id);
      if (existing !== undefined) return view.running(existing.progress, id);
      if (session === undefined || session.header.parentSession !== parent.id) return;
      const descriptor = session.events.find((e) => e.type === 'subagent/descriptor')?.data as { label?: string } | undefined;
      const child: Watched = { progress: view.queued(descriptor?.label ?? 'child'), turns: 0, reports: [], status: 'running' };
      watched.set(id, child);
      view.running(child.progress, id);
      account(view, child, session.events);
      unsubscribe.push(session.subscribe((event) => account(view, child, [event])));
    }));
    unsubscribe.push(host.subagents.on('subagent/end', ({ id, stopReason }) => {
      const child = watched.get(id);
      if (child === undefined) return;
      child.status = stopReason;
      view.done(child.progress, stopReason, child.progress.note);
    }));
    const t0 = performance.now();
    parent.followup([text(`Analyse the ${options.files.length} files under ${options.dir} in ${chunks.length} continuable children:\n\n${chunks.map((c) => `## ${c.label}\n${c.prompt}`).join('\n\n')}`)]);
    await parent.whenIdle();
    // Settlement notices still on their way become the parent's next turns: let them land.
    await host.subagents.drainContinuableChildren(parent, [...watched.keys()]);
    await parent.whenIdle();
    const totalMs = performance.now() - t0;
    view.close();
    const events = parent.session.events;
    const results = events.filter((e) => e.type === 'tool/result').map((e) => e.data as { callId: string; isError?: boolean });
    const followups = results.filter((r) => r.callId.startsWith('followup_'));
    const answers = events.filter((e) => e.type === 'assistant/message').map((e) => textOf((e.data as { content: ContentBlock[] }).content)).filter((t) => t !== '' && t !== 'Noted.');
    const turnEnd = events.findLast((e) => e.type === 'turn/end');
    const turn = (turnEnd?.data as { reason: TurnEndReason } | undefined)?.reason.kind ?? 'error';
    return {
      mode: 'continuable',
      provider: options.provider,
      model: 'scripted',
      parentId: parent.id,
      db: options.db,
      files: options.files.length,
      children: [...[...watched].map(([id, c]) => ({ id, label: c.progress.label, status: c.status, turns: c.turns, reports: c.reports })), ...unstarted(events)],
      followups: followups.filter((r) => r.isError !== true).length,
      followupsRefused: followups.filter((r) => r.isError === true).length,
      interrupted: options.signal?.aborted === true,
      totalMs: Math.round(totalMs),
      turn,
      answer: answers.at(-1) ?? '',
    };
  } finally {
    stop();
    for (const off of unsubscribe) off();
    view.close();
    await host.close();
  }
}
