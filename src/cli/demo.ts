// `subagent-host demo`: a parent agent analyses a directory through parallel worker-thread
// children, with live progress, a summary table and the speed-up over running them one by one.
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import type { ModelSpec } from '../seam/agent-types.js';
import { SubagentError } from '../seam/errors.js';
import { runDemo, type DemoProvider, type DemoReport } from '../demo/run-demo.js';
import { DEFAULT_DB } from './ls.js';

const USAGE = `usage: subagent-host demo [options]

  --provider spawn|fork|in-process   where children run (default: spawn, one worker thread each)
  --children N                       number of chunks, one child each (default: 6)
  --dir PATH                         directory to analyse (default: this package's src/)
  --chaos                            add a child that crashes its thread and one that spins forever
  --deadline MS                      cancel a child still running after MS (default: 20000, 2000 with --chaos)
  --model scripted|openai            scripted (default) or a real OpenAI-compatible model: set
                                     OPENAI_BASE_URL, OPENAI_API_KEY, OPENAI_MODEL (or DEEPSEEK_API_KEY)
  --db FILE                          SQLite file the run is saved to (default: $SUBAGENT_HOST_DB, else ./${DEFAULT_DB})
  --json                             print { provider, parentId, db, children: [{ id, stopReason, ms }], totalMs, sequentialMs }
`;

function realModel(env: NodeJS.ProcessEnv): ModelSpec {
  if (env['OPENAI_BASE_URL'] && env['OPENAI_MODEL']) {
    return { kind: 'openai', baseURL: env['OPENAI_BASE_URL'], model: env['OPENAI_MODEL'], apiKeyEnv: 'OPENAI_API_KEY' };
  }
  if (env['DEEPSEEK_API_KEY']) {
    return { kind: 'openai', baseURL: 'https://api.deepseek.com', model: env['OPENAI_MODEL'] ?? 'deepseek-chat', apiKeyEnv: 'DEEPSEEK_API_KEY' };
  }
  throw new SubagentError('INVALID_OPTIONS', '--model openai needs OPENAI_BASE_URL and OPENAI_MODEL (with OPENAI_API_KEY), or DEEPSEEK_API_KEY');
}

function table(report: DemoReport): string {
  const rows = report.children.map((c) => `  ${c.label.padEnd(14)} ${c.stopReason.padEnd(10)} ${String(c.ms).padStart(7)} ms  ${c.id}`);
  const speedup = report.sequentialMs > 0 ? (report.sequentialMs / report.totalMs).toFixed(2) : 'n/a';
  return [
    '',
    `  ${'child'.padEnd(14)} ${'result'.padEnd(10)} ${'time'.padStart(10)}  session`,
    ...rows,
    '',
    report.summary
      .split('\n')
      .map((line) => `  ${line}`)
      .join('\n'),
    '',
    `  ${report.files} files, ${report.children.length} children on '${report.provider}': ${report.totalMs} ms in parallel; ` +
      `the same children one by one in-process: ${report.sequentialMs} ms (speed-up ×${speedup}).`,
    '',
    `  Parent session ${report.parentId}, saved in ${report.db}. Look at it with:`,
    `    subagent-host ls ${report.parentId} --tree --db ${shellWord(report.db)}`,
    `    subagent-host inspect --db ${shellWord(report.db)}`,
    '',
  ].join('\n');
}

/** `word` quoted for a POSIX shell when it holds anything but plain path characters. */
function shellWord(word: string): string {
  return /^[\w./:@%+=,-]+$/.test(word) ? word : `'${word.replaceAll("'", `'\\''`)}'`;
}

export async function run(args: string[]): Promise<number> {
  let values;
  try {
    ({ values } = parseArgs({
      args,
      options: {
        provider: { type: 'string', default: 'spawn' },
        children: { type: 'string', default: '6' },
        dir: { type: 'string', default: fileURLToPath(new URL('../../../src/', import.meta.url)) },
        chaos: { type: 'boolean', default: false },
        deadline: { type: 'string' },
        model: { type: 'string', default: 'scripted' },
        db: { type: 'string' },
        json: { type: 'boolean', default: false },
        help: { type: 'boolean', short: 'h', default: false },
      },
      strict: true,
    }));
  } catch (error) {
    process.stderr.write(`subagent-host demo: ${(error as Error).message}\n\n${USAGE}`);
    return 2;
  }
  if (values.help) {
    process.stdout.write(USAGE);
    return 0;
  }
  const children = Number(values.children);
  const deadline = values.deadline === undefined ? (values.chaos ? 2000 : 20_000) : Number(values.deadline);
  const bad =
    !['spawn', 'fork', 'in-process'].includes(values.provider) ? '--provider must be spawn, fork or in-process'
    : !Number.isSafeInteger(children) || children < 1 || children > 64 ? '--children must be an integer from 1 to 64'
    : !Number.isSafeInteger(deadline) || deadline < 1 ? '--deadline must be a positive number of milliseconds'
    : !['scripted', 'openai'].includes(values.model) ? '--model must be scripted or openai'
    : values.db === '' ? '--db needs a file path'
    : values.chaos && values.provider === 'in-process' ? '--chaos needs worker children (--provider spawn or fork): a crash in-process would take the host down'
    : undefined;
  if (bad) {
    process.stderr.write(`subagent-host demo: ${bad}\n\n${USAGE}`);
    return 2;
  }
  const model = values.model === 'openai' ? realModel(process.env) : undefined;
  if (!values.json) process.stdout.write(`Delegating the analysis of ${values.dir} to ${children}${values.chaos ? ' + 2 chaos' : ''} '${values.provider}' children…\n`);
  const report = await runDemo({
    provider: values.provider as DemoProvider,
    children,
    dir: values.dir,
    chaos: values.chaos,
    deadlineMs: deadline,
    out: process.stdout,
    tty: process.stdout.isTTY === true,
    quiet: values.json,
    db: values.db ?? process.env['SUBAGENT_HOST_DB'] ?? DEFAULT_DB,
    ...(model ? { model } : {}),
  });
  if (values.json) {
    const { provider, parentId, db, totalMs, sequentialMs } = report;
    const json = { provider, parentId, db, children: report.children.map(({ id, stopReason, ms }) => ({ id, stopReason, ms })), totalMs, sequentialMs };
    process.stdout.write(`${JSON.stringify(json, null, 2)}\n`);
  } else {
    process.stdout.write(table(report));
  }
  return 0;
}
