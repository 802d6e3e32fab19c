// `subagent-host demo`: a parent agent analyses a directory through parallel worker-thread
// children, with live progress and a report of what the model delegated and what it cost.
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { constants } from 'node:os';
import { modelFromEnv, sourceFiles } from '../demo/demo-inputs.js';
import type { ModelSpec } from '../seam/agent-types.js';
import type { DemoProvider } from '../demo/report.js';
import { continuableText, reportText } from '../demo/report-text.js';
import { runDemo } from '../demo/run-demo.js';
import { runContinuableDemo } from '../demo/run-continuable.js';
import { DEFAULT_DB } from './ls.js';
import { outputGone } from './output.js';
import { MAX_TIMER_MS, integerValue, parseCommand, usageError } from './args.js';
import { unusableDatabase } from './db-check.js';

const USAGE = `usage: subagent-host demo [options]

  --provider spawn|fork|in-process   where children run (default: spawn, one worker thread each)
  --children N                       number of chunks, one child each (default: 6)
  --dir PATH                         directory to analyse (default: this package's src/)
  --continuable                      one continuable child per chunk (on --provider): each reports a partial
                                     finding, then the planner sends each a follow-up and waits for it
  --chaos                            add a child that crashes its thread and one that spins forever
                                     (worker children only: --provider spawn or fork)
  --deadline MS                      cancel a child still running after MS (default: 20000, 2000 with --chaos;
                                     one-shot children only, not with --continuable)
  --model scripted|openai            scripted (default) or a real OpenAI-compatible model: set
                                     OPENAI_BASE_URL, OPENAI_API_KEY, OPENAI_MODEL (or DEEPSEEK_API_KEY)
  --db FILE                          SQLite file the run is saved to (default: $SUBAGENT_HOST_DB, else ./${DEFAULT_DB})
  --json                             print the report as JSON: { provider, model, parentId, db, children: [{ id, label, stopReason, ms }],
                                     totalMs, parallelMs, sequentialMs, speedup, noSpeedup?, files, chunks, turn, answer, … }
`;

/** The package's own TypeScript sources in a checkout; its built JavaScript where only that is installed (npm). */
function defaultDir(): string {
  const sources = fileURLToPath(new URL('../../../src/', import.meta.url));
  return existsSync(sources) ? sources : fileURLToPath(new URL('../', import.meta.url));
}

export async function run(args: string[]): Promise<number> {
  const parsed = parseCommand('demo', USAGE, {
    args,
    options: {
      provider: { type: 'string', default: 'spawn' },
      children: { type: 'string', default: '6' },
      dir: { type: 'string', default: defaultDir() },
      chaos: { type: 'boolean', default: false },
      continuable: { type: 'boolean', default: false },
      deadline: { type: 'string' },
      model: { type: 'string', default: 'scripted' },
      db: { type: 'string' },
      json: { type: 'boolean', default: false },
    },
  });
  if (typeof parsed === 'number') return parsed;
  const { values } = parsed;
  const children = integerValue(values.children, 1, 64);
  const deadline = values.deadline === undefined ? (values.chaos ? 2000 : 20_000) : integerValue(values.deadline, 1, MAX_TIMER_MS);
  const bad =
    !['spawn', 'fork', 'in-process'].includes(values.provider) ? '--provider must be spawn, fork or in-process'
    : children === undefined ? '--children must be an integer from 1 to 64'
    : deadline === undefined ? `--deadline must be a whole number of milliseconds from 1 to ${MAX_TIMER_MS}`
    : values.dir === '' ? '--dir needs a directory path'
    : !['scripted', 'openai'].includes(values.model) ? '--model must be scripted or openai'
    : values.db === '' ? '--db needs a file path'
    : values.continuable && (values.chaos || values.model !== 'scripted') ? '--continuable runs the scripted models without --chaos'
    : values.continuable && values.deadline !== undefined ? '--deadline cancels one-shot children only: it does not apply with --continuable'
    : values.chaos && values.provider === 'in-process' ? '--chaos needs worker children (--provider spawn or fork): a crash in-process would take the host down'
    : undefined;
  // Every input is checked before any work starts. A bad option value, like an unknown option: its
  // code and the usage; a directory or environment that cannot be used: one line. Exit code 2.
  if (bad !== undefined || children === undefined || deadline === undefined) return usageError('demo', USAGE, `INVALID_OPTIONS: ${bad}`);
  const source = sourceFiles(values.dir);
  const model = source.ok && values.model === 'openai' ? modelFromEnv(process.env) : undefined;
  const problem = !source.ok ? source.problem : model?.ok === false ? model.problem : undefined;
  if (!source.ok || model?.ok === false) {
    process.stderr.write(`subagent-host demo: ${problem}\n`);
    return 2;
  }
  const { dir, files } = source.value;
  // One child per chunk of files: never more children than files.
  const planned = Math.max(1, Math.min(children, files.length));
  const db = values.db ?? (process.env['SUBAGENT_HOST_DB'] || DEFAULT_DB);
  // The database too is checked before the run starts: opened (made, or upgraded) once and closed.
  const unusable = await unusableDatabase(db);
  if (unusable !== undefined) {
    process.stderr.write(`subagent-host demo: ${unusable}\n`);
    return 2;
  }
  // Ctrl-C (or SIGTERM, or SIGHUP: its terminal closed) closes the host: the children are cancelled
  // and every open turn ends in the database, which `ls` and `inspect` would otherwise show running
  // for good. A second one quits.
  const interrupted = new AbortController();
  let stoppedBy: NodeJS.Signals = 'SIGINT';
  const onSignal = (by: NodeJS.Signals) => {
    if (!interrupted.signal.aborted) stoppedBy = by;
    interrupted.abort();
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  process.once('SIGHUP', onSignal);
  const { signal } = interrupted;
  try {
    const code = values.continuable
      ? await continuable({ provider: values.provider as DemoProvider, dir, files, children: planned, db, json: values.json, signal })
      : await oneShot({ provider: values.provider as DemoProvider, children, planned, dir, files, chaos: values.chaos, deadline, db, json: values.json, model: model?.ok ? model.value : undefined, signal });
    if (!signal.aborted) return code;
  } catch (error) {
    if (!signal.aborted) throw error;
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    process.off('SIGHUP', onSignal);
  }
  // A reader that went away stops the run as quietly as it stops any command's output.
  if (outputGone()) return 0;
  process.stderr.write(`subagent-host demo: interrupted; its children were stopped and ${db} closed\n`);
  // As a shell reports a command a signal ended: 130 (SIGINT), 143 (SIGTERM), 129 (SIGHUP).
  return 128 + constants.signals[stoppedBy];
}

/** The one-shot demo: the opening line, the run, then the report (text or JSON). */
async function oneShot(o: {
  provider: DemoProvider;
  children: number;
  planned: number;
  dir: string;
  files: string[];
  chaos: boolean;
  deadline: number;
  db: string;
  json: boolean;
  model: ModelSpec | undefined;
  signal: AbortSignal;
}): Promise<number> {
  if (!o.json) {
    const who = o.model ? 'a real model' : 'a scripted planner';
    process.stdout.write(`Asking ${who} to delegate the analysis of ${o.files.length} files under ${o.dir} to ${o.planned}${o.chaos ? ' + 2 chaos' : ''} '${o.provider}' children…\n`);
  }
  const report = await runDemo({
    provider: o.provider,
    children: o.children,
    dir: o.dir,
    files: o.files,
    chaos: o.chaos,
    deadlineMs: o.deadline,
    out: process.stdout,
    tty: process.stdout.isTTY === true,
    quiet: o.json,
    db: o.db,
    signal: o.signal,
    ...(o.model ? { model: o.model } : {}),
  });
  if (o.json) {
    process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
  } else {
    process.stdout.write(reportText(report));
  }
  // The report is printed either way; a parent turn that failed is still a failed run.
  return report.turn === 'error' ? 1 : 0;
}

/** `demo --continuable`: live progress, then the report (text or JSON). */
async function continuable(o: { provider: DemoProvider; dir: string; files: string[]; children: number; db: string; json: boolean; signal: AbortSignal }): Promise<number> {
  if (!o.json) process.stdout.write(`Asking a scripted planner to analyse ${o.files.length} files under ${o.dir} with ${o.children} continuable '${o.provider}' children…\n`);
  const report = await runContinuableDemo({ ...o, out: process.stdout, tty: process.stdout.isTTY === true, quiet: o.json });
  if (o.json) {
    process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
  } else {
    process.stdout.write(continuableText(report));
  }
  return report.turn === 'error' ? 1 : 0;
}
