// Argument parsing shared by the commands: options are strict, a usage error prints the message
// and the command's usage to stderr and exits 2, and `--help` prints the usage and exits 0.
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { SubagentError } from '../seam/errors.js';
import { visible } from '../seam/visible.js';

export { MAX_TIMER_MS } from '../seam/parse.js';

/**
 * An integer option value in `[min, max]`, written in decimal digits only (no sign, exponent, hex,
 * fraction or blanks: `1e3`, `0x10` and ` 3` are refused, not read as something else); undefined
 * when it is not one.
 */
export function integerValue(value: string, min: number, max: number): number | undefined {
  if (!/^\d{1,16}$/.test(value)) return undefined;
  const n = Number(value);
  return n >= min && n <= max ? n : undefined;
}

/** Writes `message` (its control characters escaped: it may quote an argument) and `usage` to stderr; returns the exit code of a usage error. */
export function usageError(command: string, usage: string, message: string): number {
  process.stderr.write(`subagent-host ${command}: ${visible(message)}\n\n${usage.trimEnd()}\n`);
  return 2;
}

/** The option every command has: `--help` / `-h` prints its usage. */
const HELP = { help: { type: 'boolean', short: 'h', default: false } } as const;

/** A command's parse: its own options plus `--help`, always strict. */
type CommandConfig<T extends Omit<ParseArgsConfig, 'strict'>> = T & { strict: true; options: T['options'] & typeof HELP };

/**
 * Parses `config.args` for `command` (strict, with `--help` added to `config.options`), or returns
 * the exit code when there is nothing left to run: 2 after a usage error, 0 after `--help`.
 */
export function parseCommand<T extends Omit<ParseArgsConfig, 'strict'>>(command: string, usage: string, config: T): ReturnType<typeof parseArgs<CommandConfig<T>>> | number {
  let parsed: ReturnType<typeof parseArgs<CommandConfig<T>>>;
  try {
    // With its tokens: parseArgs keeps the last of an option given twice (`--db a --db b` would quietly read b).
    parsed = parseArgs<CommandConfig<T>>({ ...config, strict: true, tokens: true, options: { ...config.options, ...HELP } });
  } catch (error) {
    // parseArgs throws only Errors (ERR_PARSE_ARGS_*), each naming the option or argument.
    return usageError(command, usage, (error as Error).message);
  }
  const given = new Set<string>();
  for (const token of (parsed as { tokens?: { kind: string; name?: string }[] }).tokens ?? []) {
    if (token.kind !== 'option' || token.name === undefined || config.options?.[token.name]?.multiple === true) continue;
    if (given.has(token.name)) return usageError(command, usage, `--${token.name} is given more than once`);
    given.add(token.name);
  }
  if ((parsed.values as { help?: unknown }).help === true) {
    process.stdout.write(`${usage.trimEnd()}\n`);
    return 0;
  }
  return parsed;
}

/**
 * Runs `read` (which turns option values into settings) and maps its `SubagentError` for a bad value
 * to a usage error: a bad value is the caller's mistake, like an unknown option, so it exits 2.
 */
export function readValues<T extends object>(command: string, usage: string, read: () => T): T | number {
  try {
    return read();
  } catch (error) {
    if (!(error instanceof SubagentError)) throw error;
    return usageError(command, usage, `${error.code}: ${error.message}`);
  }
}
