// The command line of `bench`: suite names and `--json FILE`, checked before any suite runs (a
// mistake found after minutes of measuring loses the run).
import { accessSync, constants as fsConstants, statSync } from 'node:fs';
import { dirname, sep } from 'node:path';
import { parseCommand, usageError } from '../src/cli/args.js';
import { notReplaceable, targetOf } from './json-file.js';
import { SUITES, isSuite } from './suites.js';

export const USAGE = `usage: subagent-host bench [SUITE…] [--json FILE]

Runs the benchmark suites (all when none is named), each in its own process, and prints each
table beside its floors. A suite may be named once.

  SUITE        ${Object.keys(SUITES).join(', ')}
  --json FILE  also write the rows as JSON to FILE (new, or the output of an earlier run)`;

/** What `bench` was asked to do. */
export interface BenchArgs {
  names: string[];
  json: string | undefined;
}

/** Why the rows could not be written to `file` (checked before any suite runs), or undefined. */
function unwritable(file: string): string | undefined {
  if (file === '') return 'needs a file path';
  // resolve() drops a trailing slash, which writing does not: `new-dir/` is refused now, not after the run.
  if (file.endsWith('/') || file.endsWith(sep)) return `${file} names a directory, not a file`;
  // The folder the rows go to: that of the file a symlink FILE names.
  const path = targetOf(file);
  try {
    if (statSync(path, { throwIfNoEntry: false })?.isDirectory()) return `${file} is a directory`;
    if (!statSync(dirname(path)).isDirectory()) return `${dirname(path)} is not a directory`;
    // The rows are renamed into place from a temp file beside that file: its folder must take new files.
    accessSync(dirname(path), fsConstants.W_OK);
  } catch {
    return `cannot be written: ${dirname(path)} is not a writable directory`;
  }
  return notReplaceable(file);
}

/** Each name given more than once, once. */
function repeated(names: string[]): string[] {
  return [...new Set(names.filter((name, i) => names.indexOf(name) !== i))];
}

/** Parses the arguments of `bench`, or returns the exit code when there is nothing to run (a usage error, `--help`). */
export function parseBenchArgs(args: string[]): BenchArgs | number {
  const parsed = parseCommand('bench', USAGE, {
    args,
    allowPositionals: true,
    options: { json: { type: 'string', multiple: true } },
  });
  if (typeof parsed === 'number') return parsed;
  const { values, positionals } = parsed;
  if (values.json !== undefined && values.json.length > 1) return usageError('bench', USAGE, '--json is given more than once');
  const json = values.json?.[0];
  const names = positionals.length > 0 ? positionals : Object.keys(SUITES);
  const unknown = names.filter((name) => !isSuite(name));
  if (unknown.length > 0) return usageError('bench', USAGE, `unknown suite: ${unknown.join(', ')}`);
  // A suite run twice would give its row ids twice in the --json output.
  const twice = repeated(names);
  if (twice.length > 0) return usageError('bench', USAGE, `suite named more than once: ${twice.join(', ')}`);
  const jsonProblem = json === undefined ? undefined : unwritable(json);
  if (jsonProblem !== undefined) return usageError('bench', USAGE, `--json ${jsonProblem}`);
  return { names, json };
}
