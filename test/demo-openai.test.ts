// `demo --model openai` end to end against an OpenAI-compatible server on loopback that streams
// what a real model may do: delegate every chunk, only some, none (plain text), or fail. The
// report must match what the server saw and what ran.
import { execFile, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, afterEach, describe, expect, it } from 'vitest';

const cli = new URL('../dist/src/cli.js', import.meta.url).pathname;
const dir = mkdtempSync(join(tmpdir(), 'demo-openai-'));
// Each run saves its sessions to its own database, outside the analysed directory.
const dbDir = mkdtempSync(join(tmpdir(), 'demo-openai-db-'));
let runs = 0;
for (let i = 0; i < 6; i++) writeFileSync(join(dir, `file${i}.ts`), `export const value${i} = ${i};\n`.repeat(10 + i));
afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
  rmSync(dbDir, { recursive: true, force: true });
});

type Behaviour = 'delegate-all' | 'delegate-first' | 'plain-text' | 'unauthorized' | 'hostile-error' | 'children-hang' | 'children-delegate' | 'children-hostile';

/** An error message a server may send that would set the clipboard (OSC 52), clear the screen and reverse the rest of the line. */
const HOSTILE = 'Incorrect API key\u001b]52;c;cm0gLXJmIH4=\u0007\u001b[2J\u202etxt.exe';
type Message = { role: string; content: string };
interface Seen {
  who: 'planner' | 'child';
  messages: Message[];
}

const PLAIN_ANSWER = 'I looked at the listing myself: six small TypeScript files, nothing to delegate.';
const SUMMARY = 'Summary of the chunk results: all files analysed.';

function sse(res: ServerResponse, model: string, deltas: object[], finish: string): void {
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  const event = (delta: object, finishReason: string | null) =>
    `data: ${JSON.stringify({ id: 'chatcmpl-test', object: 'chat.completion.chunk', created: 0, model, choices: [{ index: 0, delta, finish_reason: finishReason }] })}\n\n`;
  for (const delta of deltas) res.write(event(delta, null));
  res.end(`${event({}, finish)}data: [DONE]\n\n`);
}

/** Tool calls streamed as real servers do: id and name first, the arguments in two pieces. */
function toolCalls(res: ServerResponse, model: string, calls: { name: string; input: object }[]): void {
  const deltas = calls.flatMap(({ name, input }, index) => {
    const args = JSON.stringify(input);
    const half = Math.floor(args.length / 2);
    return [
      { tool_calls: [{ index, id: `call_${index}`, type: 'function', function: { name, arguments: args.slice(0, half) } }] },
      { tool_calls: [{ index, function: { arguments: args.slice(half) } }] },
    ];
  });
  sse(res, model, deltas, 'tool_calls');
}

const answer = (res: ServerResponse, model: string, text: string) => sse(res, model, [{ role: 'assistant', content: '' }, ...text.split(/(?<= )/).map((content) => ({ content }))], 'stop');

const servers: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const close of servers.splice(0)) await close();
});

/** A model server that answers the planner (parent) and the analysts (children) per `behaviour`. */
async function modelServer(behaviour: Behaviour): Promise<{ baseURL: string; seen: Seen[] }> {
  const seen: Seen[] = [];
  const server = createServer((req, res) => {
    const parts: Buffer[] = [];
    req.on('data', (part: Buffer) => parts.push(part));
    req.on('end', () => {
      const body = JSON.parse(Buffer.concat(parts).toString('utf8')) as { model: string; messages: Message[]; tools?: { function: { name: string } }[] };
      const tools = (body.tools ?? []).map((tool) => tool.function.name);
      // Children are offered `subagent` too (they may delegate further): `analyse_files` marks them.
      const who = tools.includes('analyse_files') ? 'child' : 'planner';
      seen.push({ who, messages: body.messages });
      const last = body.messages.at(-1)!;
      const user = body.messages.find((m) => m.role === 'user')?.content ?? '';
      if (behaviour === 'unauthorized' || behaviour === 'hostile-error' || (behaviour === 'children-hostile' && who === 'child')) {
        res.writeHead(401, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ error: { message: behaviour === 'unauthorized' ? 'Incorrect API key provided' : HOSTILE, type: 'invalid_request_error' } }));
      } else if (last.role === 'tool') {
        answer(res, body.model, who === 'planner' ? SUMMARY : `Analysed: ${last.content.slice(0, 60)}`);
      } else if (who === 'child' && behaviour === 'children-delegate' && user !== 'sub-task') {
        toolCalls(res, body.model, [{ name: 'subagent', input: { description: 'nested', prompt: 'sub-task' } }]);
      } else if (who === 'child' && behaviour === 'children-hang') {
        res.writeHead(200, { 'content-type': 'text/event-stream' }); // and nothing more
      } else if (who === 'child') {
        toolCalls(res, body.model, [{ name: 'analyse_files', input: { files: user.split('\n').filter((l) => l.startsWith('- ')).map((l) => l.slice(2)) } }]);
      } else if (behaviour === 'plain-text') {
        answer(res, body.model, PLAIN_ANSWER);
      } else {
        const sections = user.split(/\n\n(?=## )/).filter((section) => section.startsWith('## '));
        const chunks = sections.map((section) => ({ description: section.slice(3, section.indexOf('\n')), prompt: section.slice(section.indexOf('\n') + 1) }));
        toolCalls(res, body.model, (behaviour === 'delegate-first' ? chunks.slice(0, 1) : chunks).map((input) => ({ name: 'subagent', input })));
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  servers.push(async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return { baseURL: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`, seen };
}

interface Report {
  model: string;
  children: { id: string; label: string; stopReason: string; ms: number }[];
  totalMs: number;
  parallelMs: number | null;
  sequentialMs: number | null;
  speedup: number | null;
  noSpeedup?: string;
  chunks: { planned: number; delegated: number; missing: string[] };
  turn: string;
  failure?: string;
  answer: string;
}

/** Runs the demo CLI against `baseURL`; resolves with its exit code and output (never rejects). */
function demo(baseURL: string, ...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const env = { ...process.env, OPENAI_BASE_URL: baseURL, OPENAI_MODEL: 'test-model', OPENAI_API_KEY: 'sk-test' };
  return new Promise((resolve) => {
    execFile(process.execPath, [cli, 'demo', '--model', 'openai', '--children', '3', '--dir', dir, '--db', join(dbDir, `run-${++runs}.db`), ...args], { env, timeout: 60_000 }, (error, stdout, stderr) => {
      resolve({ code: error ? Number((error as { code?: unknown }).code ?? 1) : 0, stdout, stderr });
    });
  });
}

const json = async (baseURL: string) => {
  const run = await demo(baseURL, '--json');
  return { ...run, report: JSON.parse(run.stdout) as Report };
};

describe('demo --model openai against a local OpenAI-compatible server', () => {
  it('reports the children the model delegated, one per chunk, and no speed-up it did not measure', { timeout: 90_000 }, async () => {
    const server = await modelServer('delegate-all');
    const { code, report } = await json(server.baseURL);
    expect(code).toBe(0);
    expect(report.children.map((c) => [c.label, c.stopReason])).toEqual([
      ['chunk 1/3', 'completed'],
      ['chunk 2/3', 'completed'],
      ['chunk 3/3', 'completed'],
    ]);
    expect(report.chunks).toEqual({ planned: 3, delegated: 3, missing: [] });
    expect([report.model, report.turn, report.answer]).toEqual(['openai', 'completed', SUMMARY]);
    expect([report.speedup, report.sequentialMs, typeof report.noSpeedup, typeof report.parallelMs]).toEqual([null, null, 'string', 'number']);
    // Each child asked the model twice (tool call, then answer), the planner twice; nothing else asked it.
    expect(server.seen.filter((s) => s.who === 'child')).toHaveLength(6);
    const planner = server.seen.filter((s) => s.who === 'planner');
    expect(planner).toHaveLength(2);
    expect(planner[1]!.messages.filter((m) => m.role === 'tool').map((m) => m.content)).toEqual(Array.from({ length: 3 }, () => expect.stringMatching(/^Analysed: \{"files"/)));
  });

  it('reports only the parent’s own children when the children delegate again', { timeout: 90_000 }, async () => {
    const server = await modelServer('children-delegate');
    const { code, report } = await json(server.baseURL);
    expect(code).toBe(0);
    expect(report.children.map((c) => c.label)).toEqual(['chunk 1/3', 'chunk 2/3', 'chunk 3/3']);
    expect(report.chunks).toEqual({ planned: 3, delegated: 3, missing: [] });
    // The grandchildren did run: each child's model saw its own child's answer.
    expect(server.seen.filter((s) => s.who === 'child' && s.messages.some((m) => m.content === 'sub-task'))).not.toEqual([]);
  });

  it('says which chunks were left out when the model delegates only some', { timeout: 90_000 }, async () => {
    const server = await modelServer('delegate-first');
    const { code, report } = await json(server.baseURL);
    expect(code).toBe(0);
    expect(report.children.map((c) => c.stopReason)).toEqual(['completed']);
    expect(report.chunks).toEqual({ planned: 3, delegated: 1, missing: ['chunk 2/3', 'chunk 3/3'] });

    const text = await demo(server.baseURL);
    expect(text.code).toBe(0);
    expect(text.stdout.split('\n')[0]).toBe(`Asking a real model to delegate the analysis of 6 files under ${dir} to 3 'spawn' children…`);
    expect(text.stdout).toContain('  The model delegated 1 child covering 1 of 3 chunks (up to 1 running at once); not delegated: chunk 2/3, chunk 3/3.\n');
    expect(text.stdout).toMatch(/, the children \d+ ms of it on 'spawn'\. No speed-up: the children asked a real model: /);
  });

  it('reports that nothing was delegated, with the answer, when the model answers in plain text', { timeout: 90_000 }, async () => {
    const server = await modelServer('plain-text');
    const { code, report } = await json(server.baseURL);
    expect(code).toBe(0);
    expect(report.children).toEqual([]);
    expect(report.chunks).toEqual({ planned: 3, delegated: 0, missing: ['chunk 1/3', 'chunk 2/3', 'chunk 3/3'] });
    expect([report.answer, report.turn, report.parallelMs, report.sequentialMs, report.speedup]).toEqual([PLAIN_ANSWER, 'completed', null, null, null]);
    expect(server.seen.map((s) => s.who)).toEqual(['planner']);

    const text = await demo(server.baseURL);
    expect(text.code).toBe(0);
    expect(text.stdout).toContain(PLAIN_ANSWER);
    expect(text.stdout).toContain('The model delegated nothing');
    expect(text.stdout).toContain('No speed-up: no children ran');
    expect(text.stdout).not.toContain('speed-up ×');
  });

  it('Ctrl-C stops the children and closes the database: exit 130, no turn left open in it', { timeout: 90_000 }, async () => {
    const server = await modelServer('children-hang');
    const db = join(dbDir, `run-${++runs}.db`);
    const env = { ...process.env, OPENAI_BASE_URL: server.baseURL, OPENAI_MODEL: 'test-model', OPENAI_API_KEY: 'sk-test' };
    const child = spawn(process.execPath, [cli, 'demo', '--model', 'openai', '--children', '3', '--dir', dir, '--db', db], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => void (stderr += chunk.toString()));
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    // Two children wait on the model (one per pool thread, two on this machine); the third is queued.
    while (server.seen.filter((s) => s.who === 'child').length < 2) await new Promise((resolve) => setTimeout(resolve, 20));
    child.kill('SIGINT');
    expect(await exited).toBe(130);
    expect(stderr).toContain(`subagent-host demo: interrupted; its children were stopped and ${db} closed`);
    const stored = new Database(db, { readonly: true });
    try {
      const turns = stored.prepare("SELECT session_id AS id, sum(type = 'turn/start') AS started, sum(type = 'turn/end') AS ended FROM events GROUP BY session_id").all() as { id: string; started: number; ended: number }[];
      expect(turns.length).toBeGreaterThanOrEqual(4);
      expect(turns.filter((t) => t.started !== t.ended)).toEqual([]);
      // The children of the run's parent (the newest root; the warm-up's parent came first).
      const ends = stored
        .prepare("SELECT data FROM events e JOIN sessions s ON s.id = e.session_id WHERE s.parent_session = (SELECT id FROM sessions WHERE parent_session IS NULL ORDER BY created_at DESC, create_order DESC LIMIT 1) AND e.type = 'turn/end'")
        .pluck()
        .all() as string[];
      // A child still queued for a thread never started a turn.
      const kinds = ends.map((data) => (JSON.parse(data) as { reason: { kind: string } }).reason.kind);
      expect(kinds.length).toBeGreaterThanOrEqual(2);
      expect(new Set(kinds)).toEqual(new Set(['aborted']));
    } finally {
      stored.close();
    }
  });

  it("reports the model's failure and exits 1 when the server rejects the key", { timeout: 90_000 }, async () => {
    const server = await modelServer('unauthorized');
    const { code, report } = await json(server.baseURL);
    expect(code).toBe(1);
    expect([report.turn, report.failure?.split(':')[0], report.children]).toEqual(['error', 'AUTH', []]);

    const text = await demo(server.baseURL);
    expect(text.code).toBe(1);
    expect(text.stdout).toContain(`  The model's turn failed (${report.failure}). The model delegated nothing: it did not call the subagent tool, so no child ran.\n`);
    expect(text.stdout).toContain('  The model gave no answer.\n');
  });

  it("shows the server's error message with its control characters escaped: they never reach the terminal (the JSON report keeps them)", { timeout: 90_000 }, async () => {
    const server = await modelServer('hostile-error');
    const { code, report } = await json(server.baseURL);
    expect(code).toBe(1);
    expect(report.failure).toContain(HOSTILE);

    const text = await demo(server.baseURL);
    expect(text.code).toBe(1);
    expect(text.stdout).toContain('Incorrect API key\\x1b]52;c;cm0gLXJmIH4=\\x07\\x1b[2J\\u202etxt.exe). The model delegated nothing');
    expect(text.stdout).not.toMatch(/[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u202e]/);
  });

  it("shows a child's failure on its progress line with its control characters escaped", { timeout: 90_000 }, async () => {
    const server = await modelServer('children-hostile');
    const text = await demo(server.baseURL);
    // Each child's line says how it ended and why, as a person can read it.
    expect(text.stdout).toMatch(/^ {2}chunk 1\/3 +error in \d+ ms — .*Incorrect API key\\x1b\]52;c;cm0gLXJmIH4=\\x07\\x1b\[2J\\u202etxt\.exe/m);
    expect(text.stdout).not.toMatch(/[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u202e]/);
  });
});
