// Helpers of the inspector tests: `subagent-host inspect` run as a real process on a free loopback
// port, and raw HTTP requests that send a path exactly as written (no client-side normalization).
import { spawn, type ChildProcess } from 'node:child_process';
import http from 'node:http';
import { createHost, inProcessProvider, text, type SessionId } from 'subagent-host';

export const cli = new URL('../dist/src/cli.js', import.meta.url).pathname;

export interface InspectProcess {
  url: string;
  child: ChildProcess;
  /** Everything it printed so far (stdout and stderr). */
  output(): string;
  /** SIGTERM, then resolves with the exit code. */
  stop(): Promise<number | null>;
}

/** Starts `inspect --db db --port 0`; resolves once it prints the URL it serves. */
export function startInspect(db: string, ...args: string[]): Promise<InspectProcess> {
  return startInspectWith(process.env, db, ...args);
}

/** `startInspect` with the environment `env`. */
export function startInspectWith(env: NodeJS.ProcessEnv, db: string, ...args: string[]): Promise<InspectProcess> {
  const child = spawn(process.execPath, [cli, 'inspect', '--db', db, '--port', '0', ...args], { stdio: ['ignore', 'pipe', 'pipe'], env });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  let output = '';
  return new Promise((resolve, reject) => {
    const onData = (chunk: Buffer): void => {
      output += chunk.toString();
      const match = /at (http:\/\/\S+)/.exec(output);
      if (match === null) return;
      child.stdout.off('data', onData);
      resolve({
        url: match[1]!,
        child,
        output: () => output,
        async stop() {
          if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
          return exited;
        },
      });
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    void exited.then((code) => reject(new Error(`inspect exited with ${String(code)} before serving:\n${output}`)));
  });
}

export interface RawResponse {
  status: number;
  type: string;
  /** The content-length header. */
  length: string;
  body: string;
}

/** GET `path` sent verbatim (e.g. `/%2e%2e/package.json`), with optional headers. */
export function rawGet(base: string, path: string, options: { method?: string; headers?: Record<string, string> } = {}): Promise<RawResponse> {
  const { hostname, port } = new URL(base);
  return new Promise((resolve, reject) => {
    const req = http.request({ host: hostname.replace(/^\[(.*)\]$/, '$1'), port, path, method: options.method ?? 'GET', headers: options.headers ?? {} }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (body += chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, type: String(res.headers['content-type'] ?? ''), length: String(res.headers['content-length']), body }));
    });
    req.on('error', reject);
    req.end();
  });
}

/** The id of a new top-level agent stored in the SQLite file `path` (its host closed again). */
export async function storedAgent(path: string): Promise<SessionId> {
  const host = await createHost({ providers: false, persistence: { sqlite: path } });
  try {
    return (await host.createAgent()).id;
  } finally {
    await host.close();
  }
}

/** Stores in the SQLite file `path` a top-level agent with one finished in-process child labelled `label`. */
export async function storedParentWithChild(path: string, label: string): Promise<{ parentId: SessionId; childId: SessionId }> {
  const host = await createHost({ providers: false, persistence: { sqlite: path } });
  try {
    host.subagents.registerProvider(inProcessProvider(host));
    const parent = await host.createAgent();
    const run = await host.subagents.start('in-process', { label, prompt: [text('hello')], parent, signal: new AbortController().signal });
    await run.result;
    await run.dispose();
    return { parentId: parent.id, childId: run.id };
  } finally {
    await host.close();
  }
}
