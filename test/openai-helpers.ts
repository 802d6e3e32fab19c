// Helpers of the OpenAI adapter tests: a real HTTP server on loopback answering each request with a
// scripted reply (SSE streams, error statuses), and the adapter under test built from its address.
import { readFileSync } from 'node:fs';
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, beforeEach, expect } from 'vitest';
import type { ModelAdapter, ModelChunk, ModelRequest } from 'subagent-host';
import { createModel } from 'subagent-host/internals';

export const KEY = 'sk-secret-test-0123456789abcdef';
export const ENV = { TEST_KEY_VAR: KEY };

export function fixture(name: string): string {
  return readFileSync(new URL(`./fixtures/openai/${name}.sse`, import.meta.url), 'utf8');
}

export interface Received {
  url: string;
  headers: IncomingHttpHeaders;
  body: string;
}

export type Reply = (res: ServerResponse, req: IncomingMessage) => void;

export interface TestServer {
  baseURL: string;
  received: Received[];
}

export const cleanups: (() => Promise<void>)[] = [];

/** Timers the model adapters set (their code is on the stack) and have neither cleared nor seen fire. */
const adapterTimers = new Set<unknown>();
const ADAPTER_CODE = /[\\/]runtime[\\/]models[\\/]/;

/** Registers the hooks: servers closed after each test, then the check that no adapter timer is left. */
export function useServers(): void {
  const { setTimeout: realSet, clearTimeout: realClear } = globalThis;
  beforeEach(() => {
    adapterTimers.clear();
    globalThis.setTimeout = ((callback: (...args: unknown[]) => void, ms?: number, ...args: unknown[]) => {
      const handle = realSet(
        (...callArgs: unknown[]) => {
          adapterTimers.delete(handle);
          callback(...callArgs);
        },
        ms,
        ...args,
      );
      if (ADAPTER_CODE.test(new Error().stack ?? '')) adapterTimers.add(handle);
      return handle;
    }) as typeof setTimeout;
    globalThis.clearTimeout = ((handle: Parameters<typeof clearTimeout>[0]) => {
      adapterTimers.delete(handle);
      realClear(handle);
    }) as typeof clearTimeout;
  });
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0)) await cleanup();
    globalThis.setTimeout = realSet;
    globalThis.clearTimeout = realClear;
    // Leak check: the adapter leaves no timer of its own behind (idle timer, retry backoff).
    expect(adapterTimers.size, 'timers the adapter set and left running').toBe(0);
  });
}

/** Starts a server that answers the n-th request with `replies[n]` (the last one repeats). */
export async function serve(...replies: Reply[]): Promise<TestServer> {
  const received: Received[] = [];
  const server = createServer((req, res) => {
    const parts: Buffer[] = [];
    req.on('data', (part: Buffer) => parts.push(part));
    req.on('end', () => {
      received.push({ url: req.url ?? '', headers: req.headers, body: Buffer.concat(parts).toString('utf8') });
      const reply = replies[Math.min(received.length, replies.length) - 1]!;
      reply(res, req);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  cleanups.push(async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  const { port } = server.address() as AddressInfo;
  return { baseURL: `http://127.0.0.1:${port}/v1`, received };
}

/** Replays an SSE text in small writes, so events and characters straddle reads. */
export function sse(text: string): Reply {
  return (res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    const bytes = Buffer.from(text, 'utf8');
    for (let at = 0; at < bytes.length; at += 97) res.write(bytes.subarray(at, at + 97));
    res.end();
  };
}

export function status(code: number, body: string, headers: Record<string, string> = {}): Reply {
  return (res) => {
    res.writeHead(code, { 'content-type': 'application/json', ...headers });
    res.end(body);
  };
}

export async function model(server: TestServer, extra: Record<string, unknown> = {}, env = ENV): Promise<ModelAdapter> {
  return createModel(
    { kind: 'openai', baseURL: server.baseURL, model: 'gpt-test', apiKeyEnv: 'TEST_KEY_VAR', ...extra },
    env,
  );
}

export function request(signal: AbortSignal = new AbortController().signal): ModelRequest {
  return { messages: [{ role: 'user', content: [{ type: 'text', text: 'Hi' }] }], tools: [], signal };
}

export async function collect(adapter: ModelAdapter, req: ModelRequest = request()): Promise<ModelChunk[]> {
  const chunks: ModelChunk[] = [];
  for await (const chunk of adapter.stream(req)) chunks.push(chunk);
  return chunks;
}

export function finishOf(chunks: ModelChunk[]): ModelChunk {
  expect(chunks.filter((chunk) => chunk.type === 'finish')).toHaveLength(1);
  return chunks.at(-1)!;
}
