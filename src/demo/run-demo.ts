// The demo job: a parent agent delegates the analysis of a directory's files, one child per chunk,
// through the `subagent` tool; children run in parallel and do real CPU work in their threads.
import { readdirSync, statSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { extname, join, relative, resolve } from 'node:path';
import type { Writable } from 'node:stream';
import type { ModelSpec } from '../seam/agent-types.js';
import { text, textOf } from '../seam/content.js';
import { SubagentError } from '../seam/errors.js';
import type { SubagentProvider } from '../seam/types.js';
import { createHost, type Host } from '../host.js';
import { inProcessProvider } from '../providers/in-process.js';
import { forkProvider, spawnProvider } from '../providers/worker/worker-provider.js';
import { subagentTool } from '../tools/subagent-tool.js';
import { CHAOS_CRASH, CHAOS_SPIN, createPlannerModel, type PlannedChild } from './models.js';
import { ProgressView, type ChildProgress } from './progress.js';

export type DemoProvider = 'spawn' | 'fork' | 'in-process';

export interface DemoOptions {
  provider: DemoProvider;
  children: number;
  dir: string;
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
}

export interface DemoReport {
  provider: DemoProvider;
  /** The delegating parent's session id (the root of the tree in `db`). */
  parentId: string;
  db: string;
  children: { id: string; label: string; stopReason: string; ms: number }[];
  totalMs: number;
  sequentialMs: number;
  files: number;
  summary: string;
}

const SOURCE = new Set(['.ts', '.js', '.mjs', '.cjs', '.tsx', '.jsx', '.json', '.md']);
const SKIP = new Set(['node_modules', 'dist', '.git', 'coverage']);

function listFiles(dir: string): string[] {
  const out: string[] = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    if (SKIP.has(entry.name)) continue;
    const path = join(dir, entry.name);
    if (entry.isDirectory()) out.push(...listFiles(path));
    else if (SOURCE.has(extname(entry.name)) && statSync(path).size < 1 << 20) out.push(path);
  }
  return out.sort();
}

function plan(files: string[], count: number, dir: string, chaos: boolean): PlannedChild[] {
  const n = Math.max(1, Math.min(count, files.length));
  const chunks: string[][] = Array.from({ length: n }, () => []);
  files.forEach((file, i) => chunks[i % n]!.push(file));
  const children = chunks.map((chunk, i) => ({
    label: `chunk ${i + 1}/${n}`,
    prompt: [
      `Analyse these ${chunk.length} files of ${dir} with your analyse_files tool and answer with its JSON result:`,
      ...chunk.map((file) => `- ${file}`),
    ].join('\n'),
  }));
  if (chaos) {
    children.push({ label: 'chaos crash', prompt: `${CHAOS_CRASH}. (This child tests failure containment.)` });
    children.push({ label: 'chaos spin', prompt: `${CHAOS_SPIN}. (This child tests failure containment.)` });
  }
  return children;
}

/** Wraps a provider so the demo sees each child's life and a runaway child meets a deadline. */
function tracked(inner: SubagentProvider, view: ProgressView, deadlineMs: number): SubagentProvider {
  return {
    name: inner.name,
    capabilities: inner.capabilities,
    inheritsParentContext: inner.inheritsParentContext,
    async start(request) {
      const child = view.queued(request.label ?? 'child');
      const run = await inner.start(request).catch((error: unknown) => {
        view.done(child, 'error', error instanceof SubagentError ? error.code : 'start failed');
        throw error;
      });
      view.running(child, run.id);
      const timer = setTimeout(() => run.cancel({ kind: 'hook', reason: 'deadline' }), deadlineMs);
      void run.result.then(
        (result) => view.done(child, result.stopReason, result.diagnostic),
        () => view.done(child, 'error', 'contract violation'),
      ).finally(() => clearTimeout(timer));
      return run;
    },
  };
}

const analystModel = (): ModelSpec => ({ kind: 'module', specifier: new URL('./models.js', import.meta.url).href, export: 'createAnalystModel' });
const childTools = new URL('./child-tools.js', import.meta.url).href;

/** Runs one small child through `inner` outside the demo's view (threads and JIT warm-up). */
async function warmUpChild(host: Host, inner: SubagentProvider, file: string, model: ModelSpec): Promise<void> {
  const parent = await host.createAgent();
  const run = await inner.start({
    prompt: [text(`Analyse:\n- ${file}`)],
    parent,
    signal: new AbortController().signal,
    agentOptions: { model, toolModules: [childTools] },
    descriptor: { version: 2, mode: 'one-shot', provider: inner.name, label: 'warm-up' },
  });
  await run.result;
  await run.dispose();
}

async function sequentialBaseline(host: Host, children: PlannedChild[], model: ModelSpec, file: string): Promise<number> {
  const baseline = inProcessProvider(host, { name: 'baseline' });
  const off = host.subagents.registerProvider(baseline);
  await warmUpChild(host, baseline, file, model);
  const parent = await host.createAgent();
  const t0 = performance.now();
  try {
    for (const child of children) {
      if (child.label.startsWith('chaos')) continue; // a crash would take the main thread with it
      const run = await host.subagents.start('baseline', {
        label: child.label,
        prompt: [text(child.prompt)],
        parent,
        signal: new AbortController().signal,
        agentOptions: { model, toolModules: [childTools] },
      });
      await run.result;
      await run.dispose();
    }
    return performance.now() - t0;
  } finally {
    off();
  }
}

/** Runs the demo job and reports every child. */
export async function runDemo(options: DemoOptions): Promise<DemoReport> {
  const dir = resolve(options.dir);
  const files = listFiles(dir);
  if (files.length === 0) throw new SubagentError('INVALID_OPTIONS', `no source files under ${dir}; pass --dir with a folder of code`);
  const children = plan(files, options.children, relative(process.cwd(), dir) || '.', options.chaos);
  // CPU-bound children: one thread per core, warmed before the clock starts.
  const threads = Math.max(2, availableParallelism());
  const host = await createHost({ providers: false, persistence: { sqlite: options.db }, pool: { minThreads: threads, maxThreads: threads, cancelGraceMs: 500 } });
  const view = new ProgressView(options.out, { tty: options.tty, quiet: options.quiet });
  try {
    const inner =
      options.provider === 'in-process' ? inProcessProvider(host) : options.provider === 'fork' ? forkProvider(host) : spawnProvider(host);
    host.subagents.registerProvider(tracked(inner, view, options.deadlineMs));
    const childModel = options.model ?? analystModel();
    subagentTool(host, { provider: inner.name, agentOptions: { model: childModel, toolModules: [childTools] } });
    const parent = await host.createAgent(
      options.model
        ? { agentOptions: { model: options.model, persona: 'You coordinate code analysis. Delegate each chunk with the subagent tool, all chunks in one answer, then summarize their results.' } }
        : { model: createPlannerModel(children) },
    );
    // Warm every thread (modules loaded, analysis compiled) as a long-lived host's threads are;
    // the sequential baseline gets the same warm-up in the main thread.
    await Promise.all(Array.from({ length: threads }, () => warmUpChild(host, inner, files[0]!, childModel)));
    const t0 = performance.now();
    parent.followup([text(`Analyse the ${files.length} files under ${dir} in ${children.length} parallel children:\n\n${children.map((c) => `## ${c.label}\n${c.prompt}`).join('\n\n')}`)]);
    await parent.whenIdle();
    const totalMs = performance.now() - t0;
    view.close();
    const messages = parent.session.events.filter((e) => e.type === 'assistant/message');
    const summary = textOf((messages.at(-1)?.data as { content?: [] } | undefined)?.content ?? []);
    const sequentialMs = await sequentialBaseline(host, children, childModel, files[0]!);
    return {
      provider: options.provider,
      parentId: parent.id,
      db: options.db,
      children: view.children.map((c: ChildProgress) => ({
        id: c.id ?? '',
        label: c.label,
        stopReason: c.stopReason ?? 'error',
        ms: Math.round((c.endedAt ?? 0) - (c.startedAt ?? c.queuedAt)),
      })),
      totalMs: Math.round(totalMs),
      sequentialMs: Math.round(sequentialMs),
      files: files.length,
      summary,
    };
  } finally {
    view.close();
    await host.close();
  }
}
