// `subagent-host acp` as an ACP client runs it, over raw JSON-RPC lines: `--model openai` asks the
// OpenAI-compatible server of its environment, and SIGTERM (a client's dispose ladder) saves the
// sessions to `--db` before it exits 143.
import { execFileSync, spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { chmodSync, mkdtempSync, readdirSync, readlinkSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import { createHost } from 'subagent-host';
import { afterAll, describe, expect, it } from 'vitest';
import { CLI } from './acp-helpers.js';
import { tempFiles } from './helpers.js';

const files = tempFiles('acp-cli-');

interface Agent {
  child: ChildProcessWithoutNullStreams;
  exited: Promise<number | null>;
  stderr(): string;
  /** The stdout lines that were no JSON (stdout must carry protocol only). */
  junk: string[];
  /** Every stdout line, as written. */
  lines: string[];
  /** Sends a request; resolves with its response (notifications in between are skipped). */
  request(method: string, params: object): Promise<{ result?: Record<string, unknown>; error?: unknown }>;
}

/** Starts `subagent-host acp args…` in `files.dir`, or with `removedCwd` in that directory after it was removed. */
function startAgent(args: string[], env: NodeJS.ProcessEnv = process.env, removedCwd?: string): Agent {
  const child = removedCwd === undefined
    ? spawn(process.execPath, [CLI, 'acp', ...args], { stdio: ['pipe', 'pipe', 'pipe'], cwd: files.dir, env })
    : spawn('bash', ['-c', 'cd "$1" && rmdir "$1" && shift && exec "$0" "$@"', process.execPath, removedCwd, CLI, 'acp', ...args], { stdio: ['pipe', 'pipe', 'pipe'], env });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const waiting = new Map<number, (response: { result?: Record<string, unknown>; error?: unknown }) => void>();
  let buffered = '';
  let stderr = '';
  let nextId = 1;
  const junk: string[] = [];
  const lines: string[] = [];
  child.stderr.on('data', (chunk: Buffer) => void (stderr += chunk.toString()));
  child.stdout.on('data', (chunk: Buffer) => {
    buffered += chunk.toString();
    for (let end = buffered.indexOf('\n'); end !== -1; end = buffered.indexOf('\n')) {
      const line = buffered.slice(0, end);
      buffered = buffered.slice(end + 1);
      lines.push(line);
      let message: { id?: number; result?: Record<string, unknown>; error?: unknown };
      try {
        message = JSON.parse(line) as typeof message;
      } catch {
        junk.push(line);
        continue;
      }
      if (message.id !== undefined) waiting.get(message.id)?.(message);
    }
  });
  return {
    child,
    exited,
    stderr: () => stderr,
    junk,
    lines,
    request(method, params) {
      const id = nextId++;
      return new Promise((resolve) => {
        waiting.set(id, resolve);
        child.stdin.write(`${JSON.stringify({ jsonrpc: '2.0', id, method, params })}\n`);
      });
    },
  };
}

async function prompt(agent: Agent, text: string): Promise<string> {
  const init = await agent.request('initialize', { protocolVersion: 1, clientCapabilities: {} });
  expect(init.result).toMatchObject({ protocolVersion: 1 });
  const created = await agent.request('session/new', { cwd: files.dir, mcpServers: [] });
  const sessionId = String(created.result?.['sessionId']);
  const answered = await agent.request('session/prompt', { sessionId, prompt: [{ type: 'text', text }] });
  expect(answered.result).toMatchObject({ stopReason: 'end_turn' });
  return sessionId;
}

/** The event types stored for `sessionId` in `db`, in order. */
function storedTypes(db: string, sessionId: string): string[] {
  const saved = new Database(db, { readonly: true });
  try {
    return (saved.prepare('SELECT type FROM events WHERE session_id = ? ORDER BY seq').all(sessionId) as { type: string }[]).map((row) => row.type);
  } finally {
    saved.close();
  }
}

const closers: (() => Promise<void>)[] = [];
afterAll(async () => {
  for (const close of closers) await close();
});

describe('subagent-host acp', () => {
  it('asks the OpenAI-compatible server of OPENAI_BASE_URL with --model openai, model gpt-4o-mini unless OPENAI_MODEL says otherwise', async () => {
    const asked: { model: string; authorization: string | undefined }[] = [];
    const server = createServer((req, res) => {
      let body = '';
      req.on('data', (chunk: Buffer) => void (body += chunk.toString()));
      req.on('end', () => {
        asked.push({ model: (JSON.parse(body) as { model: string }).model, authorization: req.headers.authorization });
        const chunk = (delta: object, finish: string | null) => `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 0, model: 'm', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.end(`${chunk({ role: 'assistant', content: 'served answer' }, null)}${chunk({}, 'stop')}data: [DONE]\n\n`);
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    closers.push(() => new Promise((resolve) => server.close(() => resolve())));
    const env: NodeJS.ProcessEnv = { ...process.env, OPENAI_BASE_URL: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`, OPENAI_API_KEY: 'sk-acp-test' };
    delete env['OPENAI_MODEL'];
    const agent = startAgent(['--model', 'openai'], env);
    await prompt(agent, 'hello');
    expect(asked).toEqual([{ model: 'gpt-4o-mini', authorization: 'Bearer sk-acp-test' }]);
    agent.child.stdin.end();
    expect(await agent.exited).toBe(0);
  });

  it('with --text-only advertises no images and refuses a prompt with one', async () => {
    const agent = startAgent(['--text-only']);
    const init = await agent.request('initialize', { protocolVersion: 1, clientCapabilities: {} });
    expect(init.result).toMatchObject({ agentCapabilities: { promptCapabilities: { image: false } } });
    const created = await agent.request('session/new', { cwd: files.dir, mcpServers: [] });
    const image = { type: 'image', mimeType: 'image/png', data: 'iVBORw0KGgo=' };
    const refused = await agent.request('session/prompt', { sessionId: String(created.result?.['sessionId']), prompt: [image] });
    expect(refused.error).toMatchObject({ code: -32602 });
    agent.child.stdin.end();
    expect(await agent.exited).toBe(0);
  });

  it('keeps stdout protocol only when a module model prints through the console: that goes to stderr', async () => {
    const model = { kind: 'module', specifier: new URL('./fixtures/echo-model.mjs', import.meta.url).href, export: 'createChattyModel' };
    const agent = startAgent(['--model', JSON.stringify(model)]);
    await prompt(agent, 'hello');
    agent.child.stdin.end();
    expect(await agent.exited).toBe(0);
    expect(agent.junk).toStrictEqual([]);
    expect(agent.stderr()).toContain('chatty model created');
    expect(agent.stderr()).toContain('chatty model asked with 1 message(s)');
  });

  // Before the fix the process outlived its answers and its closed host by as long as the model's timer ran.
  it('exits once its input ended and its host closed, though a model it let go of keeps a timer running', async () => {
    const model = { kind: 'module', specifier: new URL('./fixtures/echo-model.mjs', import.meta.url).href, export: 'createStubbornModel', options: { ms: 600_000 } };
    const agent = startAgent(['--model', JSON.stringify(model)]);
    await agent.request('initialize', { protocolVersion: 1, clientCapabilities: {} });
    const created = await agent.request('session/new', { cwd: files.dir, mcpServers: [] });
    const answered = agent.request('session/prompt', { sessionId: String(created.result?.['sessionId']), prompt: [{ type: 'text', text: 'go' }] });
    while (!agent.lines.some((line) => line.includes('stubborn'))) await new Promise((resolve) => setTimeout(resolve, 10));
    agent.child.stdin.end();
    // Answered cancelled once the host let the model go (abandonGraceMs, 5 s), then the process ends.
    expect((await answered).result).toMatchObject({ stopReason: 'cancelled' });
    expect(await agent.exited).toBe(0);
  }, 30_000);

  it('writes a lone surrogate of its output as U+FFFD, which clients on serde_json (Zed) can read', async () => {
    const model = { kind: 'scripted', steps: [{ text: 'half \ud83d of an emoji' }] };
    const agent = startAgent(['--model', JSON.stringify(model)]);
    await prompt(agent, 'hello');
    agent.child.stdin.end();
    expect(await agent.exited).toBe(0);
    expect(agent.lines.filter((line) => /\\ud[89a-f][0-9a-f]{2}/i.test(line))).toStrictEqual([]);
    const texts = agent.lines.map((line) => (JSON.parse(line) as { params?: { update?: { content?: { text?: string } } } }).params?.update?.content?.text);
    expect(texts.join('')).toBe('half \ufffd of an emoji');
  });

  it('resolves a module model\'s relative specifier from its current directory', async () => {
    const specifier = relative(files.dir, fileURLToPath(new URL('./fixtures/echo-model.mjs', import.meta.url)));
    expect(specifier).toMatch(/^\.\.\//);
    const agent = startAgent(['--model', JSON.stringify({ kind: 'module', specifier, export: 'createChattyModel' })]);
    await prompt(agent, 'hello');
    agent.child.stdin.end();
    expect(await agent.exited).toBe(0);
    expect(agent.stderr()).toContain('chatty model created');
  });

  it.each([
    ['SIGTERM', 143],
    ['SIGINT', 130],
    // Its terminal closed: left to its default, SIGHUP would end it without storing what runs.
    ['SIGHUP', 129],
  ] as const)('saves the sessions to --db and exits on %s while serving (code %i)', async (signal, code) => {
    const db = files.file();
    const agent = startAgent(['--db', db]);
    const sessionId = await prompt(agent, 'remember me');
    // stdin stays open: only the signal ends it.
    agent.child.kill(signal);
    expect(await agent.exited).toBe(code);
    expect(storedTypes(db, sessionId).at(-1)).toBe('turn/end');
  });

  it('exits 143 on a SIGTERM during startup, before it serves (its --db held locked by another connection)', async () => {
    const db = files.file();
    await (await createHost({ persistence: { sqlite: db }, providers: false })).close();
    // The server's startup opens the file, and waits on the write lock held here.
    const lock = new Database(db);
    lock.exec('BEGIN IMMEDIATE');
    try {
      const agent = startAgent(['--db', db]);
      const opened = () => {
        try {
          return readdirSync(`/proc/${agent.child.pid}/fd`).some((fd) => readlinkSync(`/proc/${agent.child.pid}/fd/${fd}`) === db);
        } catch {
          return false; // it exited (then the assertion below says how), or closed that fd meanwhile
        }
      };
      while (!opened() && agent.child.exitCode === null) await new Promise((resolve) => setTimeout(resolve, 5));
      agent.child.kill('SIGTERM');
      lock.exec('ROLLBACK');
      expect(await agent.exited).toBe(143);
      expect(agent.junk).toStrictEqual([]);
    } finally {
      lock.close();
    }
  });

  // SQLite opens a file it may not write as read-only, quietly: the server would take sessions
  // whose every prompt fails, then exit 1.
  it('refuses a --db file it may not write with one line on stderr and exit code 2, before serving', async () => {
    const db = files.file();
    await (await createHost({ persistence: { sqlite: db }, providers: false })).close();
    // Root writes any file its mode forbids: an immutable one it may not.
    const root = process.getuid?.() === 0;
    if (root) execFileSync('chattr', ['+i', db]);
    else chmodSync(db, 0o444);
    try {
      const agent = startAgent(['--db', db]);
      agent.child.stdin.end();
      expect(await agent.exited).toBe(2);
      expect(agent.stderr()).toMatch(/^subagent-host acp: cannot use .*\.db: SQLite may not write it \([^\n]*readonly[^\n]*\)\n$/);
      expect(agent.junk).toStrictEqual([]);
    } finally {
      if (root) execFileSync('chattr', ['-i', db]);
    }
  });

  it('serves when started in a directory that was removed: every session names its own cwd', async () => {
    const agent = startAgent([], process.env, mkdtempSync(join(files.dir, 'removed-')));
    const early = agent.exited.then((code) => Promise.reject(new Error(`exited ${code} before answering: ${agent.stderr()}`)));
    await Promise.race([prompt(agent, 'still here'), early]);
    agent.child.stdin.end();
    expect(await agent.exited).toBe(0);
    expect(agent.stderr()).toBe('');
  });

  it('ends as a finished server, exit 0, when its client stops reading its output', async () => {
    const agent = startAgent([]);
    await agent.request('initialize', { protocolVersion: 1, clientCapabilities: {} });
    // The client goes away from our stdout but still writes: the answer to this request cannot be read.
    agent.child.stdout.destroy();
    agent.child.stdin.write(`${JSON.stringify({ jsonrpc: '2.0', id: 99, method: 'session/new', params: { cwd: files.dir, mcpServers: [] } })}\n`);
    expect(await agent.exited).toBe(0);
    expect(agent.stderr()).not.toContain('Error');
  });

  it('answers a prompt only once its turn is stored: killed (SIGKILL) right after the answer, the turn is in --db', async () => {
    const db = files.file();
    const agent = startAgent(['--db', db]);
    const sessionId = await prompt(agent, 'remember me');
    agent.child.kill('SIGKILL');
    await agent.exited;
    const types = storedTypes(db, sessionId);
    expect(types).toContain('user/message');
    expect(types.at(-1)).toBe('turn/end');
  });
});
