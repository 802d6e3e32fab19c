#!/usr/bin/env node
// The `subagent-host` command line. Each command lives in `cli/<name>.ts` and is loaded only when
// used, so `ls` never pays for the ACP SDK and `acp` never pays for the demo.
import { SubagentError, describeError } from './seam/errors.js';
import { markOutputGone, outputFailed } from './cli/output.js';
import { visible } from './seam/visible.js';

interface Command {
  summary: string;
  load: () => Promise<{ run(args: string[]): Promise<number> }>;
}

const COMMANDS: Record<string, Command> = {};

/** Adds a command to the table (each command file registers itself here). */
function command(name: string, summary: string, load: Command['load']): void {
  COMMANDS[name] = { summary, load };
}

command('demo', 'a parent agent delegates real work to parallel worker-thread children', () => import('./cli/demo.js'));
command('bench', 'run the benchmark suites (startup, overhead, throughput, listing, queue, continuation, cancel, acp)', () => import('./cli/bench.js'));
command('ls', 'list the children (or --tree descendants) of a persisted session', () => import('./cli/ls.js'));
command('inspect', 'serve a live web view of the delegation trees in a database', () => import('./cli/inspect.js'));
command('acp', 'serve an agent over the Agent Client Protocol on stdio', () => import('./cli/acp.js'));
command('worker', 'run children queued by a host’s queue provider (BullMQ on Redis)', () => import('./cli/worker.js'));

function usage(): string {
  const lines = Object.entries(COMMANDS).map(([name, { summary }]) => `  ${name.padEnd(8)} ${summary}`);
  return ['usage: subagent-host <command> [options]', '', 'commands:', ...lines, '', 'Run `subagent-host <command> --help` for its options.'].join('\n');
}

async function main(argv: string[]): Promise<number> {
  const [name, ...args] = argv;
  // A usage error, as every other one: on stderr.
  if (name === undefined) return usageError('no command given');
  const isHelp = (word: string | undefined): boolean => word === '--help' || word === '-h' || word === 'help';
  const help = isHelp(name);
  // `help`, and help about help (`help help`, `help --help`): the command list.
  if (help && (args.length === 0 || (args.length === 1 && isHelp(args[0])))) {
    process.stdout.write(`${usage()}\n`);
    return 0;
  }
  // `help COMMAND` is `COMMAND --help`: its usage, never the general one in its place.
  const [command = name, ...rest] = help ? args : [name, ...args];
  if (help && rest.length > 0) return usageError(`unexpected argument '${visible(rest[0]!)}'`);
  const entry = Object.hasOwn(COMMANDS, command) ? COMMANDS[command] : undefined;
  if (!entry) return usageError(`unknown command '${visible(command)}'`);
  return (await entry.load()).run(help ? ['--help'] : rest);
}

/** Writes `message` and the command list to stderr; returns the exit code of a usage error. */
function usageError(message: string): number {
  process.stderr.write(`subagent-host: ${message}\n\n${usage()}\n`);
  return 2;
}

/**
 * A reader that went away (`subagent-host ls … | head -1`) is no failure of the command: its output
 * stops, and a command that listens for SIGINT (`demo`, `ls --follow`, `acp`, `inspect`, `worker`) ends
 * as if interrupted (a demo stops its children and closes its database), exit 0.
 */
function stopOutputWhenReaderLeaves(): void {
  let gone = false;
  process.stdout.on('error', (error: NodeJS.ErrnoException) => {
    if (gone) return;
    gone = true;
    const failed = error.code !== 'EPIPE';
    if (failed) {
      process.stderr.write(`subagent-host: cannot write output: ${describeError(error)}\n`);
      process.exitCode = 1;
    }
    // Later writes go nowhere instead of failing again.
    process.stdout.write = (() => true) as typeof process.stdout.write;
    markOutputGone(failed);
    if (process.listenerCount('SIGINT') > 0) process.emit('SIGINT', 'SIGINT');
  });
}

/**
 * A log reader that went away (a supervisor that died, `2>&1 | tee` ended) is no reason to stop:
 * the log lines go nowhere and the command goes on, so a worker still drains its children on SIGTERM.
 * Unhandled, the first line written after it would end the process with an 'error' event.
 */
function dropLogsWhenReaderLeaves(): void {
  process.stderr.on('error', () => {
    process.stderr.write = (() => true) as typeof process.stderr.write;
  });
}

stopOutputWhenReaderLeaves();
dropLogsWhenReaderLeaves();
main(process.argv.slice(2)).then(
  (code) => {
    // Output that could not be written (a full disk) fails a command that finished, or ended as interrupted, after it.
    process.exitCode = code === 0 && outputFailed() ? 1 : code;
  },
  (error: unknown) => {
    const message = error instanceof SubagentError ? `${error.code}: ${error.message}` : describeError(error);
    // A message may quote what a server, a file or a model said: its control characters are shown, not obeyed.
    process.stderr.write(`subagent-host: ${visible(message)}\n`);
    process.exitCode = 1;
  },
);
