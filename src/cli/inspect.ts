// `subagent-host inspect [--db FILE] [--port N] [--host H] [--open]`: a local web page showing the
// delegation trees of a database, live while another process writes to it. Serves until interrupted.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import { isIPv6 } from 'node:net';
import { SubagentError } from '../seam/errors.js';
import { visible } from '../seam/visible.js';
import { startInspectServer } from '../inspect/server.js';
import { DEFAULT_DB } from './ls.js';
import { parseCommand, usageError as commandUsageError } from './args.js';

/** The port `inspect` listens on without `--port`. */
export const DEFAULT_PORT = 4777;

const USAGE = `usage: subagent-host inspect [--db FILE] [--port N] [--host H] [--open]

Serves a live view of the delegation trees stored in a database: root sessions, the tree of each
root's descendants, a timeline of their turns and each child's transcript. Read-only.

  --db FILE   the database (default: $SUBAGENT_HOST_DB, else ./${DEFAULT_DB})
  --port N    port to listen on, 0 for any free one (default: ${DEFAULT_PORT})
  --host H    interface to listen on, an IPv6 address bare or in brackets (default: 127.0.0.1;
              anything else exposes your sessions)
  --open      open the page in the default browser`;

const usageError = (message: string): number => commandUsageError('inspect', USAGE, message);

/** Opens `url` with the platform's opener; failing to open is reported, never fatal. */
function openBrowser(url: string): void {
  const command = process.platform === 'darwin' ? 'open' : process.platform === 'win32' ? 'explorer' : 'xdg-open';
  const child = spawn(command, [url], { stdio: 'ignore', detached: true });
  child.on('error', (error) => process.stderr.write(`subagent-host inspect: could not run ${command} (${error.message}); open ${url} yourself\n`));
  child.unref();
}

/** Runs `inspect`; resolves with the exit code once SIGINT, SIGTERM or SIGHUP has closed the server. */
export async function run(args: string[]): Promise<number> {
  const parsed = parseCommand('inspect', USAGE, {
    args,
    options: {
      db: { type: 'string' },
      port: { type: 'string' },
      host: { type: 'string' },
      open: { type: 'boolean', default: false },
    },
  });
  if (typeof parsed === 'number') return parsed;
  const { values } = parsed;
  const port = values.port === undefined ? DEFAULT_PORT : Number(values.port);
  if (!/^\d+$/.test(values.port ?? '0') || !Number.isSafeInteger(port) || port > 65535) return usageError('--port must be an integer from 0 to 65535');
  if (values.db === '') return usageError('--db needs a file path');
  if (values.host === '') return usageError('--host needs an interface address');

  const file = values.db ?? (process.env['SUBAGENT_HOST_DB'] || DEFAULT_DB);
  // Read-only: a missing file is an error, never an empty database created on the spot.
  if (!fs.existsSync(file)) throw new SubagentError('PERSISTENCE_UNAVAILABLE', `no database at ${file}; pass --db FILE`);
  // `[::1]`, as a URL writes it, names the address inside the brackets.
  const bracketed = /^\[(.*)\]$/.exec(values.host ?? '')?.[1];
  const host = bracketed !== undefined && isIPv6(bracketed) ? bracketed : (values.host ?? '127.0.0.1');
  const server = await startInspectServer({ db: file, port, host });
  // Judged from the address it bound: 127.0.0.2 or 0:0:0:0:0:0:0:1 are loopback too, 0.0.0.0 is every interface.
  if (!server.loopback) {
    process.stderr.write(
      `subagent-host inspect: warning: listening on ${host} rather than 127.0.0.1: anyone who can reach this address can read every session in ${file}\n`,
    );
  }
  // Listening for signals before the URL is printed: whoever reads it may stop us at once. SIGHUP
  // (its terminal closed) too: killed by it, the reader would leave its -wal/-shm files behind.
  const signals = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;
  const stopped = new Promise<void>((resolve) => {
    const stop = (): void => {
      for (const signal of signals) process.off(signal, stop);
      resolve();
    };
    for (const signal of signals) process.on(signal, stop);
  });
  process.stdout.write(`Inspecting ${visible(file)} at ${server.url} (Ctrl-C to stop)\n`);
  if (values.open) openBrowser(server.url);
  await stopped;
  await server.close();
  return 0;
}
