// The inspector's HTTP server (node:http): its three assets, JSON read from the database (and the
// whole text of one transcript entry), and a Server-Sent Events stream that says when the database changed. Request paths are matched
// exactly and never touch the file system, so no path can reach a file the server did not choose.
import fs, { readFileSync } from 'node:fs';
import http from 'node:http';
import { BlockList, isIP, isIPv6, type AddressInfo } from 'node:net';
import { SubagentError, describeError } from '../seam/errors.js';
import type { ErrorResponse, TreeResponse } from './api-types.js';
import { INDEX_HTML, PAGE_CSS } from './assets.js';
import { POSITION, TRANSCRIPT_ENTRIES, TREE_NODES, integerParams } from './query.js';
import { openReader, type InspectReader } from './reader.js';

/** Options of {@link startInspectServer}. */
export interface InspectServerOptions {
  db: string;
  /** 0 for any free port. */
  port: number;
  host: string;
}

/** How often the database's change counter is read while a page listens. */
const POLL_MS = 250;

export interface InspectServer {
  readonly url: string;
  /** It listens on a loopback address only (127.0.0.0/8 or ::1): nobody else can reach it. */
  readonly loopback: boolean;
  close(): Promise<void>;
}

// The page may load only what this server serves, and run no inline script (defence in depth:
// the page already renders session text as text).
const HEADERS = {
  'content-security-policy':
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'cache-control': 'no-store',
};

function loadBundle(): string {
  const url = new URL('./page.js', import.meta.url);
  // Only an incomplete build fails here; no test deletes a built file.
  try {
    return readFileSync(url, 'utf8');
  } catch (error) {
    throw new SubagentError('INVALID_OPTIONS', `the inspector page is missing at ${url.pathname}; run \`npm run build\``, { cause: error });
  }
}

function send(res: http.ServerResponse, status: number, type: string, body: string): void {
  res.writeHead(status, { ...HEADERS, 'content-type': type, 'content-length': Buffer.byteLength(body) });
  res.end(res.req.method === 'HEAD' ? undefined : body);
}

function sendJson(res: http.ServerResponse, status: number, value: unknown): void {
  send(res, status, 'application/json; charset=utf-8', JSON.stringify(value));
}

function sendError(res: http.ServerResponse, status: number, code: string, message: string): void {
  const body: ErrorResponse = { error: { code, message } };
  sendJson(res, status, body);
}

/** The decoded id of one (non-empty) path segment, or undefined when it is not valid percent-encoding. */
function segment(raw: string): string | undefined {
  try {
    return decodeURIComponent(raw);
  } catch {
    return undefined;
  }
}

const LOOPBACK = new BlockList();
LOOPBACK.addSubnet('127.0.0.0', 8, 'ipv4');
LOOPBACK.addAddress('::1', 'ipv6');
LOOPBACK.addSubnet('::ffff:127.0.0.0', 104, 'ipv6');

/** Whether `address` (an IP address, however spelled) is a loopback address. */
function isLoopback(address: string): boolean {
  const family = isIP(address);
  return family !== 0 && LOOPBACK.check(address, family === 6 ? 'ipv6' : 'ipv4');
}

/**
 * Whether a loopback server should answer: a page of another site that resolves its own name to
 * 127.0.0.1 (DNS rebinding) sends its own name as Host, and is refused. Only `localhost` and
 * loopback addresses name this server.
 */
function hostAllowed(req: http.IncomingMessage, loopback: boolean): boolean {
  if (!loopback) return true;
  // Host names are case-insensitive (RFC 3986 §3.2.2): `LOCALHOST` names this server too.
  const name = (req.headers.host ?? '').toLowerCase().replace(/:\d+$/, '').replace(/^\[(.*)\]$/, '$1');
  return name === 'localhost' || isLoopback(name);
}

/** The file at `path` as one file (inode numbers are reused at once, birth times are not), or undefined when missing. */
function fileIdentity(path: string): string | undefined {
  try {
    const stat = fs.statSync(path);
    return `${stat.dev}:${stat.ino}:${stat.birthtimeMs}`;
  } catch {
    return undefined;
  }
}

/**
 * Starts the server; resolves once it listens. The reader is opened first, so a bad file fails here.
 * @throws SubagentError `START_FAILED` when it cannot listen on `host`:`port` (a port in use, an address of no interface here).
 */
export async function startInspectServer(options: InspectServerOptions): Promise<InspectServer> {
  const bundle = loadBundle();
  // Undefined while the file is empty (a host is creating it): no sessions yet, opened once written.
  let reader = openReader(options.db);
  let file = fileIdentity(options.db);
  const { host, port } = options;
  const streams = new Set<http.ServerResponse>();
  let poller: NodeJS.Timeout | undefined;
  let version = reader?.version() ?? 0;
  // Set once it listens, from the address it bound (before that no request arrives).
  let loopback = true;
  let url = '';
  const tell = (event: string, data: string | number): void => {
    for (const res of streams) res.write(`event: ${event}\ndata: ${data}\n\n`);
  };

  /**
   * The file at the path was deleted or replaced (a demo run again on it), or was empty when last
   * seen: the open handle, if any, still reads the old one. A new file is read once it is a database
   * of ours; until then (or while it is missing) the page is told, and shows the last content it read.
   * A file empty from the start (a host is creating it) shows no sessions until it is written.
   */
  const reopen = (now: string | undefined): void => {
    if (now === undefined) {
      if (file !== undefined) tell('gone', 'the database file is gone');
      file = undefined;
      return;
    }
    const unreadable = (): void => {
      if (file !== undefined) tell('gone', 'the database file was replaced by one it cannot read yet');
      file = undefined; // being written: the next tick tries again
    };
    let next: InspectReader | undefined;
    try {
      next = openReader(options.db);
    } catch {
      return unreadable();
    }
    if (next === undefined) {
      // Empty since it was first seen: still no sessions, nothing to tell.
      if (reader === undefined && now === file) return;
      return unreadable();
    }
    reader?.close();
    reader = next;
    file = now;
    version = next.version();
    tell('change', version);
  };

  /** Whether the file at the path is another one than the reader's, or the empty file may have been written since. */
  const stale = (now: string | undefined): boolean => now !== file || reader === undefined;

  const poll = (): void => {
    const now = fileIdentity(options.db);
    if (stale(now)) return reopen(now);
    let next: number;
    // Busy or closing: the next tick tries again (not provoked by a test: it needs a lock held at a poll).
    try {
      next = (reader as InspectReader).version();
    } catch {
      return;
    }
    if (next === version) return;
    version = next;
    tell('change', next);
  };

  const openStream = (req: http.IncomingMessage, res: http.ServerResponse): void => {
    // HEAD gets the stream's headers and nothing to wait for.
    if (req.method === 'HEAD') {
      res.writeHead(200, { ...HEADERS, 'content-type': 'text/event-stream' });
      res.end();
      return;
    }
    res.writeHead(200, { ...HEADERS, 'content-type': 'text/event-stream', connection: 'keep-alive' });
    res.write(`retry: 1000\nevent: hello\ndata: ${version}\n\n`);
    if (file === undefined) res.write('event: gone\ndata: the database file is gone or not readable yet\n\n');
    streams.add(res);
    poller ??= setInterval(poll, POLL_MS);
    req.on('close', () => {
      streams.delete(res);
      if (streams.size === 0 && poller !== undefined) {
        clearInterval(poller);
        poller = undefined;
      }
    });
  };

  const route = (req: http.IncomingMessage, res: http.ServerResponse): void => {
    // A server's requests always carry their url (only client-side messages lack one).
    const [path, search] = (req.url as string).split(/\?(.*)/s) as [string, string | undefined];
    if (path === '/' || path === '/index.html') return send(res, 200, 'text/html; charset=utf-8', INDEX_HTML);
    if (path === '/page.js') return send(res, 200, 'text/javascript; charset=utf-8', bundle);
    if (path === '/page.css') return send(res, 200, 'text/css; charset=utf-8', PAGE_CSS);
    if (path === '/api/changes') return openStream(req, res);
    // Without a page listening nothing polls: a file replaced since is noticed here, not read stale.
    if (path.startsWith('/api/') && poller === undefined) {
      const now = fileIdentity(options.db);
      if (stale(now)) reopen(now);
    }
    if (path === '/api/roots' || path === '/api/info') {
      integerParams(search, {});
      return sendJson(res, 200, path === '/api/info' ? { db: options.db } : (reader?.roots() ?? []));
    }
    const tree = /^\/api\/roots\/([^/]+)\/tree$/.exec(path);
    if (tree !== null) {
      const { offset = 0, limit = TREE_NODES.default } = integerParams(search, { offset: POSITION, limit: { min: 1, max: TREE_NODES.max } });
      const id = segment(tree[1]!);
      const root = id === undefined ? undefined : reader?.root(id);
      if (id === undefined || root === undefined) return sendError(res, 404, 'UNKNOWN_SESSION', 'no session with this id');
      const nodes = (reader as InspectReader).tree(id);
      const body: TreeResponse = { root, nodes: nodes.slice(offset, offset + limit), total: nodes.length, now: Date.now() };
      return sendJson(res, 200, body);
    }
    const session = /^\/api\/sessions\/([^/]+)$/.exec(path);
    if (session !== null) {
      const { after, limit = TRANSCRIPT_ENTRIES.default } = integerParams(search, { after: POSITION, limit: { min: 1, max: TRANSCRIPT_ENTRIES.max } });
      const id = segment(session[1]!);
      const transcript = id === undefined ? undefined : reader?.transcript(id, after === undefined ? { limit } : { after, limit });
      if (transcript === undefined) return sendError(res, 404, 'UNKNOWN_SESSION', 'no session with this id');
      return sendJson(res, 200, transcript);
    }
    // The whole body of one entry whose text the transcript cut, as plain text.
    const event = /^\/api\/sessions\/([^/]+)\/events\/(\d{1,15})$/.exec(path);
    if (event !== null) {
      integerParams(search, {});
      const id = segment(event[1]!);
      const body = id === undefined ? undefined : reader?.entryText(id, Number(event[2]));
      if (body === undefined) return sendError(res, 404, 'UNKNOWN_EVENT', 'no transcript entry with this session id and seq');
      return send(res, 200, 'text/plain; charset=utf-8', body);
    }
    sendError(res, 404, 'NOT_FOUND', 'the inspector serves only its page and /api/…');
  };

  const server = http.createServer((req, res) => {
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.setHeader('allow', 'GET, HEAD');
      return sendError(res, 405, 'METHOD_NOT_ALLOWED', 'the inspector is read-only: GET only');
    }
    if (!hostAllowed(req, loopback)) return sendError(res, 403, 'FORBIDDEN_HOST', `only localhost or a loopback address names this server: use ${url}`);
    try {
      route(req, res);
    } catch (error) {
      const code = error instanceof SubagentError ? error.code : 'INTERNAL';
      // A bad query parameter is the request's fault; anything else (a damaged file) is the server's.
      sendError(res, code === 'INVALID_REQUEST' ? 400 : 500, code, code === 'INVALID_REQUEST' ? (error as SubagentError).message : describeError(error));
    }
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  }).catch((error: unknown) => {
    reader?.close();
    // A port in use or an address this machine lacks is no bad value: the same options work elsewhere, or later.
    const shown = isIPv6(host) ? `[${host}]` : host;
    throw new SubagentError('START_FAILED', `cannot listen on ${shown}:${port}: ${describeError(error)}`, { cause: error });
  });
  const address = server.address() as AddressInfo;
  loopback = isLoopback(address.address);
  const shown = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  url = `http://${shown}:${address.port}/`;

  let closing: Promise<void> | undefined;
  return {
    url,
    loopback,
    close() {
      closing ??= new Promise<void>((resolve) => {
        if (poller !== undefined) clearInterval(poller);
        for (const res of streams) res.end();
        streams.clear();
        server.close(() => {
          reader?.close();
          resolve();
        });
        server.closeAllConnections();
      });
      return closing;
    },
  };
}
