// The OpenAI-compatible adapter at its edges: a key with surrounding whitespace, a key quoted where a
// cut or a label would keep it, an error body that never ends, an abort after the rest of the answer
// was read, the caller's signal left clean, a JSON answer cut off mid-body, and stream shapes that
// cross one event's bounds or split a tool's name.
import { getEventListeners } from 'node:events';
import { describe, expect, it } from 'vitest';
import type { ModelChunk } from 'subagent-host';
import { ENV, KEY, collect, finishOf, model, request, serve, sse, status, useServers } from './openai-helpers.js';

useServers();

const event = (chunk: unknown): string => `data: ${JSON.stringify(chunk)}\n\n`;
const delta = (content: string): unknown => ({ choices: [{ index: 0, delta: { content } }] });
const DONE = 'data: [DONE]\n\n';

function failureOf(chunks: ModelChunk[]): { code: string; message: string } {
  const finish = finishOf(chunks);
  if (finish.type !== 'finish' || finish.failure === undefined) throw new Error(`no failure in ${JSON.stringify(finish)}`);
  return finish.failure;
}

describe('openai model: the key never leaks', () => {
  it('sends a key read with a trailing newline or spaces as fetch does, and scrubs it where the server echoes it', async () => {
    const server = await serve((res, req) => {
      res.writeHead(401, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: { message: `Incorrect API key provided: ${(req.headers.authorization ?? '').slice('Bearer '.length)}.` } }));
    });
    for (const raw of [`${KEY}\n`, `${KEY}\r\n`, ` ${KEY} `]) {
      const finish = finishOf(await collect(await model(server, {}, { TEST_KEY_VAR: raw })));
      expect(finish).toMatchObject({ reason: 'error', failure: { code: 'AUTH', status: 401 } });
      expect(JSON.stringify(finish)).toContain('[redacted]');
      expect(JSON.stringify(finish)).not.toContain(KEY.slice(0, 12));
    }
    expect(server.received.map((received) => received.headers.authorization)).toEqual([`Bearer ${KEY}`, `Bearer ${KEY}`, `Bearer ${KEY}`]);
  });

  it('takes a key of whitespace alone as no key, without a request', async () => {
    const server = await serve(sse(event(delta('ok')) + DONE));
    expect(failureOf(await collect(await model(server, {}, { TEST_KEY_VAR: ' \n' })))).toMatchObject({ code: 'AUTH' });
    expect(server.received).toHaveLength(0);
  });

  it('ends INTERNAL without the key when the key holds a character no header may carry', async () => {
    const server = await serve(sse(event(delta('ok')) + DONE));
    const raw = `${KEY.slice(0, 16)}\n${KEY.slice(16)}`;
    const failure = failureOf(await collect(await model(server, {}, { TEST_KEY_VAR: raw })));
    expect(failure.code).toBe('INTERNAL');
    expect(failure.message).toContain('[redacted]');
    expect(failure.message).not.toContain(KEY.slice(0, 12));
    expect(server.received).toHaveLength(0);
  });

  it('scrubs a key the server quotes across the 200th character of its message, before the cut', async () => {
    const server = await serve(status(400, JSON.stringify({ error: { message: `${'x'.repeat(190)}${KEY} was refused` } })));
    const failure = failureOf(await collect(await model(server)));
    expect(failure.code).toBe('INVALID_REQUEST');
    expect(failure.message).not.toContain(KEY.slice(0, 6));
  });

  it('scrubs the key from the type and code of an error sent inside the stream', async () => {
    const server = await serve(sse(event(delta('Hel')) + event({ error: { message: 'refused', type: `bad key ${KEY}`, code: KEY } }) + DONE));
    const failure = failureOf(await collect(await model(server)));
    expect(failure.message).toContain('refused');
    expect(failure.message).not.toContain(KEY.slice(0, 12));
  });

  it.each([
    [403, '{"error":{"message":"You exceeded your current quota."}}', 'QUOTA_EXCEEDED'],
    [403, '{"error":{"message":"Project does not have access to model"}}', 'AUTH'],
  ])('maps HTTP %i (%s) to %s', async (code, body, expected) => {
    const server = await serve(status(code, body));
    expect(failureOf(await collect(await model(server)))).toMatchObject({ code: expected, status: code });
    expect(server.received).toHaveLength(1);
  });
});

describe('openai model: bounds and cancellation', () => {
  it('classifies an error response whose body never ends, reading only its head', async () => {
    let closed!: () => void;
    const connectionClosed = new Promise<void>((resolve) => (closed = resolve));
    const server = await serve((res, req) => {
      req.socket.on('close', closed);
      res.writeHead(500, { 'content-type': 'text/plain' });
      const chunk = 'overloaded '.repeat(100);
      const pump = (): void => {
        while (!res.destroyed && res.write(chunk));
        if (!res.destroyed) res.once('drain', pump);
      };
      pump();
    });
    const failure = failureOf(await collect(await model(server, { maxRetries: 0 })));
    expect(failure).toMatchObject({ code: 'SERVER', status: 500 });
    expect(failure.message).toContain('the server failed (HTTP 500): overloaded overloaded');
    await connectionClosed;
  });

  it('ends aborted, not stop, when the caller aborts while the rest of the answer is already read', async () => {
    const server = await serve((res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      // One write: the whole answer, [DONE] included, arrives in one read.
      res.end(event(delta('a')) + event(delta('b')) + event(delta('c')) + DONE);
    });
    const controller = new AbortController();
    const chunks: ModelChunk[] = [];
    for await (const chunk of (await model(server)).stream(request(controller.signal))) {
      chunks.push(chunk);
      if (chunk.type === 'text-delta') controller.abort();
    }
    expect(chunks).toEqual([
      { type: 'text-delta', text: 'a' },
      { type: 'finish', reason: 'aborted' },
    ]);
  });

  it("leaves no listener on the caller's signal after a stream and after a retried failure", async () => {
    const server = await serve(status(503, '{"error":{"message":"busy"}}'), sse(event(delta('ok')) + DONE));
    const controller = new AbortController();
    const adapter = await model(server, {}, ENV);
    expect(finishOf(await collect(adapter, request(controller.signal)))).toEqual({ type: 'finish', reason: 'stop' });
    expect(finishOf(await collect(adapter, request(controller.signal)))).toEqual({ type: 'finish', reason: 'stop' });
    expect(server.received).toHaveLength(3);
    expect(getEventListeners(controller.signal, 'abort')).toHaveLength(0);
  });
});

describe('openai model: a JSON answer cut off', () => {
  /** A server that answers 200 with JSON and stops mid-body; `written` resolves once the head and the start left. */
  async function stalledJson(): Promise<{ server: Awaited<ReturnType<typeof serve>>; written: Promise<void> }> {
    let wrote!: () => void;
    const written = new Promise<void>((resolve) => (wrote = resolve));
    const server = await serve((res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.write('{"id":"chatcmpl-1","choices":[{"message":{"content":"Hel', () => wrote());
    });
    return { server, written };
  }

  it('ends TIMEOUT, not MALFORMED_RESPONSE, when the body stops arriving for idleTimeoutMs', async () => {
    const { server } = await stalledJson();
    expect(failureOf(await collect(await model(server, { idleTimeoutMs: 150 })))).toMatchObject({ code: 'TIMEOUT' });
  });

  it('ends aborted, not MALFORMED_RESPONSE, when the caller aborts while the body is read', async () => {
    const { server, written } = await stalledJson();
    const controller = new AbortController();
    const chunks = collect(await model(server), request(controller.signal));
    await written;
    // The adapter reaches its pending read of the body in promise jobs alone once the bytes are in.
    for (let i = 0; i < 5; i++) await new Promise((resolve) => setImmediate(resolve));
    controller.abort();
    expect(await chunks).toEqual([{ type: 'finish', reason: 'aborted' }]);
  });
});

describe('openai model: stream shapes', () => {
  it('keeps apart a call whose name comes alone at index 0, without ids, after a whole call', async () => {
    const calls = (fragment: unknown) => event({ choices: [{ index: 0, delta: { tool_calls: [fragment] } }] });
    const server = await serve(
      sse(
        calls({ index: 0, function: { name: 'w', arguments: '{"city":"A"}' } }) +
          calls({ index: 0, function: { name: 't' } }) +
          calls({ index: 0, function: { arguments: '{"tz":"B"}' } }) +
          event({ choices: [{ index: 0, delta: {}, finish_reason: 'tool_calls' }] }) +
          DONE,
      ),
    );
    expect(await collect(await model(server))).toEqual([
      { type: 'tool-call', id: 'call_0', name: 'w', input: { city: 'A' } },
      { type: 'tool-call', id: 'call_1', name: 't', input: { tz: 'B' } },
      { type: 'finish', reason: 'tool-calls' },
    ]);
  });

  it('joins a name split across fragments and keeps one repeated on each fragment whole', async () => {
    const calls = (fragment: unknown) => event({ choices: [{ index: 0, delta: { tool_calls: [fragment] } }] });
    const server = await serve(
      sse(
        calls({ index: 0, id: 'c1', function: { name: 'get_wea', arguments: '' } }) +
          calls({ index: 0, function: { name: 'ther' } }) +
          calls({ index: 0, function: { arguments: '{"city":"A"}' } }) +
          calls({ index: 1, id: 'c2', function: { name: 'now', arguments: '' } }) +
          calls({ index: 1, function: { name: 'now', arguments: '{' } }) +
          calls({ index: 1, function: { name: 'now', arguments: '}' } }) +
          event({ choices: [{ index: 0, delta: {}, finish_reason: 'tool_calls' }] }) +
          DONE,
      ),
    );
    expect(await collect(await model(server))).toEqual([
      { type: 'tool-call', id: 'c1', name: 'get_weather', input: { city: 'A' } },
      { type: 'tool-call', id: 'c2', name: 'now', input: {} },
      { type: 'finish', reason: 'tool-calls' },
    ]);
  });

  it('counts no negative input when a server reports more cached tokens than prompt tokens', async () => {
    const usage = { prompt_tokens: 10, completion_tokens: 2, prompt_tokens_details: { cached_tokens: 12 } };
    const server = await serve(sse(event(delta('ok')) + event({ choices: [], usage }) + DONE));
    expect(await collect(await model(server))).toEqual([
      { type: 'text-delta', text: 'ok' },
      { type: 'usage', usage: { inputTokens: 0, outputTokens: 2, cacheReadTokens: 12 } },
      { type: 'finish', reason: 'stop' },
    ]);
  });

  it('bounds each event, not the stream: two events of 9 MiB each are read', async () => {
    const big = 'y'.repeat(9 * 1024 * 1024);
    const server = await serve((res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.end(event(delta(big)) + event(delta(big)) + DONE);
    });
    const chunks = await collect(await model(server));
    expect(chunks.map((chunk) => (chunk.type === 'text-delta' ? chunk.text.length : chunk.type))).toEqual([big.length, big.length, 'finish']);
    expect(finishOf(chunks)).toEqual({ type: 'finish', reason: 'stop' });
  });
});
