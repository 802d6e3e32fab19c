// `subagent-host acp [--model scripted|openai|<json ModelSpec>] [--db FILE] [--text-only]`: serves our agent over
// ACP on stdio until stdin ends. stdout carries protocol only; every log line goes to stderr.
import type { ModelSpec } from '../seam/agent-types.js';
import { Console } from 'node:console';
import { tmpdir } from 'node:os';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { SubagentError, describeError } from '../seam/errors.js';
import { visible } from '../seam/visible.js';
import { assertEnvModelSpec, assertModelSpec } from '../runtime/models/create.js';
import { createHost } from '../host.js';
import { serveAcp } from '../providers/acp/server.js';
import { startWarmUp } from './acp-warm-up.js';
import { parseCommand, readValues } from './args.js';
import { unusableDatabase } from './db-check.js';
import { outputFailed, outputGone } from './output.js';

const USAGE = `usage: subagent-host acp [--model scripted|openai|<json ModelSpec>] [--db FILE] [--text-only]

Serves an agent over the Agent Client Protocol on stdin/stdout (logs go to stderr).

  --model M   scripted (default; deterministic, echoes), openai (OPENAI_BASE_URL, OPENAI_MODEL,
              key in OPENAI_API_KEY), or a ModelSpec as JSON (a module's relative specifier is
              resolved from the current directory)
  --db FILE   keep sessions in this SQLite database (enables session/load across runs)
  --text-only advertise no image support and refuse prompts with images, and loads of sessions
              holding them (for a model that takes text only: an image would stay in the session
              and fail every later turn)`;

/** The `--model` value as a ModelSpec; `INVALID_MODEL_SPEC` when it is none. */
export function parseModel(value: string | undefined): ModelSpec {
  if (value === undefined || value === 'scripted') return { kind: 'scripted' };
  if (value === 'openai') {
    const spec: ModelSpec = {
      kind: 'openai',
      baseURL: process.env['OPENAI_BASE_URL'] ?? 'https://api.openai.com/v1',
      model: process.env['OPENAI_MODEL'] ?? 'gpt-4o-mini',
    };
    // Checked here, naming the variable: the host would refuse it after the checks, naming a spec field.
    assertEnvModelSpec(spec, { baseURL: 'OPENAI_BASE_URL', model: 'OPENAI_MODEL' });
    return spec;
  }
  let spec: unknown;
  try {
    spec = JSON.parse(value);
  } catch {
    throw new SubagentError('INVALID_MODEL_SPEC', '--model must be scripted, openai or a ModelSpec as JSON');
  }
  assertModelSpec(spec);
  // On a command line, a relative path means one from the current directory (the library would
  // resolve it from its own files).
  if (spec.kind === 'module' && /^\.\.?(\/|$)/.test(spec.specifier)) return { ...spec, specifier: pathToFileURL(resolve(spec.specifier)).href };
  return spec;
}

/**
 * Where the warm-up's throwaway sessions say they run. Any absolute path does: every real session
 * names its own cwd. The current directory may have been removed (process.cwd() then throws).
 */
function warmUpCwd(): string {
  try {
    return process.cwd();
  } catch {
    return tmpdir();
  }
}

/** One line on stderr; an error it quotes may carry a model's or a client's text: control characters are shown escaped. */
function log(message: string, data?: unknown): void {
  process.stderr.write(`subagent-host acp: ${visible(`${message}${data === undefined ? '' : ` ${describeError(data)}`}`)}\n`);
}

/** Runs the ACP server; resolves with the exit code once stdin ended and the host closed. */
export async function run(args: string[]): Promise<number> {
  const parsed = parseCommand('acp', USAGE, {
    args,
    options: { model: { type: 'string' }, db: { type: 'string' }, 'text-only': { type: 'boolean' } },
  });
  if (typeof parsed === 'number') return parsed;
  const { values } = parsed;
  const model = readValues('acp', USAGE, () => {
    if (values.db === '') throw new SubagentError('INVALID_OPTIONS', '--db needs a file path');
    return parseModel(values.model);
  });
  if (typeof model === 'number') return model;
  // SIGTERM (a client's dispose ladder), SIGINT (Ctrl-C) and SIGHUP (its terminal closed) still flush
  // the sessions before exiting; one during startup, before the host exists (nothing stored yet),
  // exits the same way at once.
  let closeHost = () => Promise.resolve();
  const exitAfterClose = (code: number) => () => void closeHost().finally(() => process.exit(code));
  const onTerm = exitAfterClose(143);
  const onHup = exitAfterClose(129);
  // A client that went away (its end of our stdout closed) ends the server as a finished one: exit 0
  // (1 when our output failed otherwise, a full disk say).
  const onInt = () => exitAfterClose(outputGone() ? (outputFailed() ? 1 : 0) : 130)();
  process.once('SIGTERM', onTerm);
  process.once('SIGINT', onInt);
  process.once('SIGHUP', onHup);
  try {
    // SQLite opens a file this process may only read as read-only without a word: checked before
    // serving, or the client would get sessions whose every prompt fails.
    const unusable = values.db === undefined ? undefined : await unusableDatabase(values.db);
    if (unusable !== undefined) {
      process.stderr.write(`subagent-host acp: ${unusable}\n`);
      return 2;
    }
    // stdout carries protocol only: what code the agent loads (a module model) prints through the
    // console goes to stderr, not into the client's message stream.
    globalThis.console = new Console({ stdout: process.stderr, stderr: process.stderr });
    const host = await createHost({
      model,
      persistence: values.db === undefined ? 'memory' : { sqlite: values.db },
      // The served agent has no delegation tool, so no worker threads are warmed for it.
      providers: false,
      logger: { warn: log },
    });
    closeHost = () => host.close();
    // The first rounds run before serving (requests wait in the pipe), so `initialize` is answered by a
    // warm process; the rest while no session exists yet, so a real prompt never shares the CPU with them.
    const warm = startWarmUp(warmUpCwd());
    await warm.ready;
    let ended = false;
    const idleRounds = warm.continueWhileIdle(() => ended || host.agents.list().length > 0);
    try {
      await serveAcp(host, undefined, { images: values['text-only'] !== true });
    } finally {
      ended = true;
      await idleRounds;
      await host.close();
    }
  } finally {
    // The handlers stay until the host closed: a SIGTERM during the close still waits for it to store what ran.
    process.off('SIGTERM', onTerm);
    process.off('SIGINT', onInt);
    process.off('SIGHUP', onHup);
  }
  exitOnceWritten();
  return 0;
}

/**
 * Ends the process once what it wrote to stdout left it. The host is closed, but work it let go of
 * (a model or tool that ignored its cancel, abandoned after `abandonGraceMs`) may keep timers running
 * long after: the server is done. With nothing else left, the process ends by itself first.
 */
function exitOnceWritten(): void {
  // Exits with the code the command line set when this returned (the callbacks run after it).
  const exit = () => void setImmediate(() => process.exit()).unref();
  if (process.stdout.writableLength === 0) exit();
  else process.stdout.write('', exit);
}
