// The demo report as text for a terminal: the children table, the model's answer, then plain
// sentences on what the model delegated and what the timings do (and do not) show.
import type { DemoReport } from './report.js';
import type { ContinuableReport } from './run-continuable.js';
import { NOT_STARTED } from './progress.js';
import { visible, visibleLines } from '../seam/visible.js';

const indent = (text: string) =>
  text
    .split('\n')
    .map((line) => `  ${line}`)
    .join('\n');

function delegation(report: DemoReport): string {
  const { chunks, children } = report;
  const n = children.length;
  const failed = report.failure ? `The model's turn failed (${visible(report.failure)}). ` : report.turn !== 'completed' ? `The model's turn ended ${report.turn}. ` : '';
  if (n === 0) return `${failed}The model delegated nothing: it did not call the subagent tool, so no child ran.`;
  const many = `${n} ${n === 1 ? 'child' : 'children'}`;
  const unstarted = children.filter((c) => c.stopReason === NOT_STARTED).length;
  const at = `up to ${report.maxConcurrent} running at once${unstarted === 0 ? '' : `; ${unstarted} of them never started: cancelled before ${unstarted === 1 ? 'it' : 'they'} ran`}`;
  if (chunks.missing.length === 0) return `${failed}The model delegated ${many} covering all ${chunks.planned} chunks (${at}).`;
  return (
    `${failed}The model delegated ${many} covering ${chunks.delegated} of ${chunks.planned} chunks (${at}); ` +
    `not delegated: ${chunks.missing.join(', ')}.`
  );
}

function timing(report: DemoReport): string {
  const job = `${report.files} files, the whole job took ${report.totalMs} ms`;
  // In-process children are not parallel: they take turns on the host's thread.
  const how = report.provider === 'in-process' ? "taking turns on the host's thread ('in-process')" : `in parallel on '${report.provider}'`;
  if (report.speedup !== null) {
    return (
      `${job}. The ${report.children.length} children took ${report.parallelMs} ms ${how}; ` +
      `the same children one by one in-process: ${report.sequentialMs} ms (speed-up ×${report.speedup.toFixed(2)}).`
    );
  }
  const parallel = report.parallelMs === null ? '' : `, the children ${report.parallelMs} ms of it on '${report.provider}'`;
  return `${job}${parallel}. No speed-up: ${report.noSpeedup}.`;
}

/** The report as printed after the progress lines. */
export function reportText(report: DemoReport): string {
  const figure = (value: number | null) => (value === null ? '-' : String(value));
  const rows = report.children.map(
    (c) => `  ${visible(c.label).padEnd(14)} ${c.stopReason.padEnd(11)} ${String(c.ms).padStart(7)} ms ${figure(c.tokens).padStart(7)} ${figure(c.turns).padStart(5)}  ${c.id}`,
  );
  const header = `  ${'child'.padEnd(14)} ${'result'.padEnd(11)} ${'time'.padStart(10)} ${'tokens'.padStart(7)} ${'turns'.padStart(5)}  session`;
  const table = rows.length === 0 ? [] : [header, ...rows, ''];
  const answer = report.answer.trim() === '' ? ['  The model gave no answer.'] : [`  The model's answer:`, indent(indent(visibleLines(report.answer.trim())))];
  const db = shellWord(report.db);
  const look = [
    `  Parent session ${report.parentId}, saved in ${report.db}. Look at it with:`,
    `    subagent-host ls ${report.parentId} --tree --db ${db}`,
    `    subagent-host inspect --db ${db}`,
  ];
  return ['', ...table, ...answer, '', indent(delegation(report)), indent(timing(report)), '', ...look, ''].join('\n');
}

const count = (n: number, one: string, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;

/**
 * The `demo --continuable` report as printed after the progress lines: each child, the model's
 * answer, the totals and, after Ctrl-C, what the interruption stopped and refused.
 */
export function continuableText(report: ContinuableReport): string {
  const { children } = report;
  const lines = children.map((c) => `  ${visible(c.label)}: ${count(c.turns, 'turn')}, ${c.status}; reported: ${visibleLines(c.reports.join(' | ')) || 'nothing'}`);
  const refused = report.followupsRefused === 0 ? '' : ` (${report.followupsRefused} refused)`;
  const ended = report.turn === 'completed' ? [] : [`  The model's turn ended ${report.turn}.`];
  const unstarted = children.filter((c) => c.status === NOT_STARTED).length;
  const stopped = children.filter((c) => c.status === 'aborted').length;
  const interrupted = report.interrupted
    ? [
        `  Interrupted (Ctrl-C): the host closed, so ${stopped} of the ${count(children.length - unstarted, 'started child', 'started children')} stopped before finishing` +
          `${unstarted === 0 ? '' : `, ${unstarted} never started (cancelled before ${unstarted === 1 ? 'it' : 'they'} ran)`}` +
          ` and ${count(report.followupsRefused, 'follow-up')} ${report.followupsRefused === 1 ? 'was' : 'were'} refused.`,
      ]
    : [];
  return [
    '',
    ...lines,
    '',
    report.answer.trim() === '' ? '  The model gave no answer.' : `  The model's answer:\n    ${visibleLines(report.answer)}`,
    ...ended,
    `  ${count(children.length, 'child', 'children')}, ${count(report.followups, 'follow-up')}${refused}, ${report.totalMs} ms.`,
    ...interrupted,
    '',
    `Saved to ${report.db}. Parent session: ${report.parentId}`,
    `  subagent-host ls ${report.parentId} --tree --db ${shellWord(report.db)}`,
    '',
  ].join('\n');
}

/** `word` quoted for a POSIX shell when it holds anything but plain path characters. */
export function shellWord(word: string): string {
  return /^[\w./:@%+=,-]+$/.test(word) ? word : `'${word.replaceAll("'", `'\\''`)}'`;
}
