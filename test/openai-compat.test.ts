// The OpenAI-compatible adapter against what compatible servers and proxies really send besides the
// reference stream: invented finish reasons, errors inside the stream, tool calls without index or id,
// SSE framing variants, error bodies of every shape, long retry-after, no body, bad configuration.
import { describe, expect, it } from 'vitest';
import type { ModelChunk } from 'subagent-host';
import { createModel } from 'subagent-host/internals';
import { KEY, collect, finishOf, model, request, serve, sse, status, useServers, type Reply } from './openai-helpers.js';

useServers();

const event = (chunk: unknown): string => `data: ${JSON.stringify(chunk)}\n\n`;
const delta = (content: string): unknown => ({ choices: [{ index: 0, delta: { content } }] });
const DONE = 'data: [DONE]\n\n';

describe('openai model: stream shapes of compatible servers', () => {
  it('ends with an error named after a finish_reason the server invented', async () => {
    const finish = { choices: [{ index: 0, delta: {}, finish_reason: 'insufficient_system_resource' }] };
    const server = await serve(sse(event(delta('Partial')) + event(finish) + DONE));
    const chunks = await collect(await model(server));
    expect(chunks[0]).toEqual({ type: 'text-delta', text: 'Partial' });
    expect(finishOf(chunks)).toEqual({
      type: 'finish',
      reason: 'error',
      failure: { code: 'INSUFFICIENT_SYSTEM_RESOURCE', message: "the model stopped with finish_reason 'insufficient_system_resource'" },
    });
  });

  it('bounds and scrubs the code and message made from an invented finish_reason that echoes the key', async () => {
    const finish = { choices: [{ index: 0, delta: {}, finish_reason: `rejected ${KEY} ${'x'.repeat(5000)}` }] };
    const server = await serve(sse(event(delta('Partial')) + event(finish) + DONE));
    const failure = (finishOf(await collect(await model(server))) as Extract<ModelChunk, { type: 'finish' }>).failure!;
    expect(failure.code).toBe(`REJECTED_REDACTED_${'X'.repeat(64 - 18)}`);
    expect(failure.message).toMatch(/^the model stopped with finish_reason 'rejected \[redacted\] x+…'$/);
    expect(failure.message.length).toBeLessThan(300);
    expect(JSON.stringify(failure).toLowerCase()).not.toContain(KEY.slice(3, 14).toLowerCase());
  });

  it.each([
    [{ message: 'Overloaded', type: 'server_error' }, 'SERVER', 'the server reported an error mid-stream: Overloaded (type server_error)'],
    [{ message: 'Provider returned error', code: 502 }, 'SERVER', 'the server reported an error mid-stream: Provider returned error (code 502)'],
    [{ message: 'You exceeded your current quota' }, 'QUOTA_EXCEEDED', 'quota exhausted mid-stream: You exceeded your current quota'],
    ['maximum context length exceeded', 'CONTEXT_WINDOW_EXCEEDED', 'context window exceeded mid-stream: maximum context length exceeded'],
    [{ code: 400, message: 'the request exceeds the available context size, try increasing it', type: 'exceed_context_size_error' }, 'CONTEXT_WINDOW_EXCEEDED', 'context window exceeded mid-stream: the request exceeds the available context size, try increasing it (type exceed_context_size_error, code 400)'],
  ])('ends with the error object %j sent inside the stream as %s', async (error, code, message) => {
    const server = await serve(sse(event(delta('Hel')) + event({ error }) + event(delta('lo')) + DONE));
    const chunks = await collect(await model(server));
    expect(chunks).toEqual([
      { type: 'text-delta', text: 'Hel' },
      { type: 'finish', reason: 'error', failure: { code, message } },
    ]);
  });

  it.each([
    ['an error object', '{"message":"model overloaded","type":"overloaded_error","code":"overloaded"}', 'model overloaded (type overloaded_error, code overloaded)'],
    ['a wrapped error', '{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}', 'Overloaded (type overloaded_error)'],
    ['plain text', 'upstream timed out', 'upstream timed out'],
  ])('ends SERVER quoting an `event: error` whose data is %s', async (_what, data, detail) => {
    const server = await serve(sse(`${event(delta('Hel'))}event: error\ndata: ${data}\n\n`));
    expect(await collect(await model(server))).toEqual([
      { type: 'text-delta', text: 'Hel' },
      { type: 'finish', reason: 'error', failure: { code: 'SERVER', message: `the server reported an error mid-stream: ${detail}` } },
    ]);
  });

  it('cuts a long error type between characters, never inside a surrogate pair', async () => {
    const type = `${'t'.repeat(94)}\u{1F600}tail`;
    const server = await serve(sse(event(delta('Hel')) + event({ error: { message: 'Overloaded', type } }) + DONE));
    const failure = (finishOf(await collect(await model(server))) as Extract<ModelChunk, { type: 'finish' }>).failure!;
    expect(failure.message).toContain(`(type ${'t'.repeat(94)})`);
  });

  it('keeps the answer and reads usage counts of the wrong type as absent', async () => {
    const usage = { prompt_tokens: '12', completion_tokens: 3, prompt_tokens_details: [], completion_tokens_details: { reasoning_tokens: -1 } };
    const server = await serve(sse(event(delta('ok')) + event({ choices: [{ index: 0, delta: {}, finish_reason: 'stop' }], usage }) + DONE));
    expect(await collect(await model(server))).toEqual([
      { type: 'text-delta', text: 'ok' },
      { type: 'usage', usage: { inputTokens: 0, outputTokens: 3 } },
      { type: 'finish', reason: 'stop' },
    ]);
  });

  it('ends MALFORMED_RESPONSE naming the field of a JSON event of the wrong shape', async () => {
    const server = await serve(sse(event({ choices: 'none' }) + DONE));
    const finish = finishOf(await collect(await model(server)));
    expect(finish).toMatchObject({ reason: 'error', failure: { code: 'MALFORMED_RESPONSE' } });
    expect(JSON.stringify(finish)).toContain('unexpected chunk shape at chunk.choices');
  });

  it('assembles tool calls from fragments without index, with the id repeated, omitted or never sent', async () => {
    const calls = (...fragments: unknown[]) => event({ choices: [{ index: 0, delta: { tool_calls: fragments } }] });
    const server = await serve(
      sse(
        calls({ function: { name: 'now', arguments: '' } }) +
          calls({ id: 'call_b', function: { name: 'lookup', arguments: '{"q":' } }) +
          calls({ id: 'call_b', function: { arguments: '"x",' } }) +
          calls({ function: { arguments: '"n":2}' } }) +
          event({ choices: [{ index: 0, delta: {}, finish_reason: 'tool_calls' }] }) +
          DONE,
      ),
    );
    expect(await collect(await model(server))).toEqual([
      { type: 'tool-call', id: 'call_0', name: 'now', input: {} },
      { type: 'tool-call', id: 'call_b', name: 'lookup', input: { q: 'x', n: 2 } },
      { type: 'finish', reason: 'tool-calls' },
    ]);
  });

  it.each(['eos', 'eos_token', 'end', 'end_turn', 'stop_sequence'])('takes finish_reason %s (servers other than OpenAI) as an answer that ended', async (reason) => {
    const server = await serve(sse(event(delta('The answer is 42.')) + event({ choices: [{ index: 0, delta: {}, finish_reason: reason }] }) + DONE));
    expect(await collect(await model(server))).toEqual([
      { type: 'text-delta', text: 'The answer is 42.' },
      { type: 'finish', reason: 'stop' },
    ]);
  });

  it('takes tool-call arguments sent as a JSON object', async () => {
    const server = await serve(
      sse(
        event({ choices: [{ index: 0, delta: { tool_calls: [{ index: 0, id: 'c1', function: { name: 'get_weather', arguments: { city: 'Paris' } } }] } }] }) +
          event({ choices: [{ index: 0, delta: {}, finish_reason: 'tool_calls' }] }) +
          DONE,
      ),
    );
    expect(await collect(await model(server))).toEqual([
      { type: 'tool-call', id: 'c1', name: 'get_weather', input: { city: 'Paris' } },
      { type: 'finish', reason: 'tool-calls' },
    ]);
  });

  it.each([
    ['all at index 0', () => ({ index: 0 })],
    ['without index', () => ({})],
  ])('parts parallel calls sent without ids %s at each new name after whole arguments', async (_name, where) => {
    const calls = (...fragments: unknown[]) => event({ choices: [{ index: 0, delta: { tool_calls: fragments } }] });
    const server = await serve(
      sse(
        calls({ ...where(), function: { name: 'w', arguments: '{"city":' } }) +
          calls({ ...where(), function: { arguments: '"A"}' } }) +
          // A repeat of the name alone, or with blank text (as some servers end a call), adds nothing.
          calls({ ...where(), function: { name: 'w', arguments: '' } }) +
          calls({ ...where(), function: { name: 'w', arguments: '\n' } }) +
          calls({ ...where(), function: { name: 't', arguments: '{"tz":"B"}' } }) +
          calls({ ...where(), function: { name: 'w', arguments: '{"city":"C"}' } }) +
          event({ choices: [{ index: 0, delta: {}, finish_reason: 'tool_calls' }] }) +
          DONE,
      ),
    );
    expect(await collect(await model(server))).toEqual([
      { type: 'tool-call', id: 'call_0', name: 'w', input: { city: 'A' } },
      { type: 'tool-call', id: 'call_1', name: 't', input: { tz: 'B' } },
      { type: 'tool-call', id: 'call_2', name: 'w', input: { city: 'C' } },
      { type: 'finish', reason: 'tool-calls' },
    ]);
  });

  it('takes choice 0 only, partial usage, and a stream without finish_reason as a stop', async () => {
    const choices = { choices: [{ index: 1, delta: { content: 'other' } }, { index: 0, delta: { content: 'mine' } }] };
    const server = await serve(sse(event(choices) + event({ choices: [], usage: { prompt_tokens: 7 } }) + DONE));
    expect(await collect(await model(server))).toEqual([
      { type: 'text-delta', text: 'mine' },
      { type: 'usage', usage: { inputTokens: 7, outputTokens: 0 } },
      { type: 'finish', reason: 'stop' },
    ]);
  });

  it('reads SSE fields it does not use, data without a space, multi-line data and a last event without a blank line', async () => {
    const text =
      `event: message\nid: 1\nretry: 500\ndata:${JSON.stringify(delta('a'))}\n\n` +
      'data: {"choices":[{"index":0,\ndata: "delta":{"content":"b"}}]}\ndata\n\n' +
      'data: [DONE]';
    const server = await serve(sse(text));
    expect(await collect(await model(server))).toEqual([
      { type: 'text-delta', text: 'a' },
      { type: 'text-delta', text: 'b' },
      { type: 'finish', reason: 'stop' },
    ]);
  });

  it('joins a multi-line event whose CRLF is split between two reads', async () => {
    let sawA!: () => void;
    const seen = new Promise<void>((resolve) => (sawA = resolve));
    const server = await serve((res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      // One small write arrives as one read: this one ends between the CR and the LF of a line end.
      res.write(`data: ${JSON.stringify(delta('a'))}\r\n\r\ndata: {"choices":[{"index":0,\r`);
      void seen.then(() => res.end('\ndata: "delta":{"content":"b"}}]}\r\n\r\ndata: [DONE]\r\n\r\n'));
    });
    const chunks: ModelChunk[] = [];
    for await (const chunk of (await model(server)).stream(request())) {
      chunks.push(chunk);
      if (chunk.type === 'text-delta' && chunk.text === 'a') sawA();
    }
    expect(chunks).toEqual([
      { type: 'text-delta', text: 'a' },
      { type: 'text-delta', text: 'b' },
      { type: 'finish', reason: 'stop' },
    ]);
  });
});

describe('openai model: events too long for a chat completion', () => {
  /** Writes `text` in 16 KiB writes, as many reads as a slow link delivers, waiting out back-pressure. */
  function slowly(text: string): Reply {
    return (res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const bytes = Buffer.from(text, 'utf8');
      let at = 0;
      const write = (): void => {
        while (at < bytes.length) {
          const part = bytes.subarray(at, (at += 16_384));
          if (!res.write(part)) return void res.once('drain', write);
        }
        res.end();
      };
      write();
    };
  }

  it('reads an event of 12 MiB that arrives in hundreds of reads, characters split between them', async () => {
    // Each read used to rescan the whole unfinished line: quadratic, a minute of blocked event loop.
    const content = 'é'.repeat(6 * 1024 * 1024);
    const server = await serve(slowly(event(delta(content)) + DONE));
    const chunks = await collect(await model(server));
    expect(chunks.map((chunk) => (chunk.type === 'text-delta' ? chunk.text.length : chunk))).toEqual([content.length, { type: 'finish', reason: 'stop' }]);
    expect(chunks[0]).toEqual({ type: 'text-delta', text: content });
  });

  it('ends MALFORMED_RESPONSE and closes the connection when one line grows past 16 MiB without ending', async () => {
    let closed!: () => void;
    const connectionClosed = new Promise<void>((resolve) => (closed = resolve));
    const server = await serve((res, req) => {
      req.socket.on('close', closed);
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(event(delta('Hi')) + 'data: {"choices":[{"index":0,"delta":{"content":"');
      // An endless line: every read resets the idle timer, so only a bound on the event ends it.
      const block = 'x'.repeat(65_536);
      const write = (): void => {
        while (!res.destroyed && res.write(block));
        if (!res.destroyed) res.once('drain', write);
      };
      write();
    });
    const chunks = await collect(await model(server));
    expect(chunks[0]).toEqual({ type: 'text-delta', text: 'Hi' });
    expect(finishOf(chunks)).toMatchObject({ reason: 'error', failure: { code: 'MALFORMED_RESPONSE', message: expect.stringContaining('exceeds 16 MiB') } });
    await connectionClosed;
  });
});

describe('openai model: HTTP failures of compatible servers', () => {
  it.each([
    [503, '{"message":"upstream overloaded"}', 'the server failed (HTTP 503): upstream overloaded'],
    [500, '{"error":"boom"}', 'the server failed (HTTP 500): boom'],
    [502, '<html>\n  <body>Bad   gateway</body>\n</html>', 'the server failed (HTTP 502): <html> <body>Bad gateway</body> </html>'],
  ])('quotes the message of an HTTP %i body %j on one line', async (code, body, message) => {
    const server = await serve(status(code, body));
    expect(finishOf(await collect(await model(server, { maxRetries: 0 })))).toEqual({
      type: 'finish',
      reason: 'error',
      failure: { code: 'SERVER', message, status: code },
    });
  });

  it('cuts a long server message to 200 characters', async () => {
    const server = await serve(status(400, JSON.stringify({ error: { message: `bad request ${'x'.repeat(500)}` } })));
    const finish = finishOf(await collect(await model(server)));
    const { message } = (finish as { failure: { message: string } }).failure;
    expect(message.startsWith('the server rejected the request (HTTP 400): bad request xxx')).toBe(true);
    expect(message.endsWith('x…')).toBe(true);
    expect(message.length).toBe('the server rejected the request (HTTP 400): '.length + 200);
  });

  it('names the request id of an HTTP failure and adds nothing for an empty body', async () => {
    const server = await serve(status(404, '', { 'x-request-id': 'req_42' }));
    expect(finishOf(await collect(await model(server)))).toEqual({
      type: 'finish',
      reason: 'error',
      failure: { code: 'HTTP_404', message: 'unexpected response; check baseURL and model (HTTP 404, request req_42)', status: 404 },
    });
  });

  it('classifies an error body that breaks off mid-way', async () => {
    const server = await serve((res) => {
      res.writeHead(503, { 'content-type': 'application/json' });
      res.write('{"error":{"message":"overlo', () => res.socket?.destroy());
    });
    const finish = finishOf(await collect(await model(server, { maxRetries: 0 })));
    expect(finish).toMatchObject({ reason: 'error', failure: { code: 'SERVER', status: 503 } });
    expect(JSON.stringify(finish)).toContain('the server failed (HTTP 503)');
  });

  it('retries after its own short delay when retry-after asks for an hour', async () => {
    const server = await serve(status(429, '{"error":{"message":"Rate limit reached"}}', { 'retry-after': '3600' }), sse(event(delta('ok')) + DONE));
    expect(await collect(await model(server))).toEqual([
      { type: 'text-delta', text: 'ok' },
      { type: 'finish', reason: 'stop' },
    ]);
    expect(server.received).toHaveLength(2);
  });

  it.each<[string, Reply, string]>([
    ['one JSON document', status(200, '{"choices":[]}'), 'got application/json'],
    ['204 without a body', (res) => res.writeHead(204).end(), 'got no body'],
  ])('ends MALFORMED_RESPONSE when a proxy answers %s instead of a stream', async (_name, reply, got) => {
    const server = await serve(reply);
    const finish = finishOf(await collect(await model(server)));
    expect(finish).toMatchObject({ reason: 'error', failure: { code: 'MALFORMED_RESPONSE' } });
    expect(JSON.stringify(finish)).toContain(`${got}; does it support stream: true?`);
  });
});

describe('openai model: configuration and cancellation', () => {
  it('reads the key from OPENAI_API_KEY when apiKeyEnv is not set', async () => {
    const server = await serve(sse(event(delta('ok')) + DONE));
    const adapter = await createModel({ kind: 'openai', baseURL: server.baseURL, model: 'gpt-test' }, { OPENAI_API_KEY: 'sk-default' });
    expect(finishOf(await collect(adapter))).toEqual({ type: 'finish', reason: 'stop' });
    expect(server.received[0]?.headers.authorization).toBe('Bearer sk-default');
  });

  it('refuses a spec it could never send when it arrives, without echoing header values', async () => {
    const server = await serve(sse(event(delta('ok')) + DONE));
    const refusals = [
      { headers: { 'x-title': `a\n${KEY}` } },
      { headers: { 'bad name': 'x' } },
      { baseURL: server.baseURL.replace('http://', `http://user:${KEY}@`) },
      { baseURL: `${server.baseURL}#part` },
      { idleTimeoutMs: 2 ** 31 },
      // Node's fetch ends a request after 300 s without data: a longer timeout could not be kept.
      { idleTimeoutMs: 300_001 },
    ];
    for (const extra of refusals) {
      const error = await model(server, extra).catch((caught: unknown) => caught);
      expect(error).toMatchObject({ code: 'INVALID_MODEL_SPEC' });
      expect(JSON.stringify(error) + String((error as Error).message)).not.toContain(KEY);
    }
    expect(server.received).toHaveLength(0);
  });

  it('keeps the query of a base URL after the path it appends', async () => {
    const server = await serve(sse(event(delta('ok')) + DONE));
    expect(finishOf(await collect(await model(server, { baseURL: `${server.baseURL}/?api-version=2024-10-21` })))).toEqual({ type: 'finish', reason: 'stop' });
    expect(server.received[0]?.url).toBe('/v1/chat/completions?api-version=2024-10-21');
  });

  it('ends aborted without a request when the signal is already aborted', async () => {
    const server = await serve(sse(event(delta('ok')) + DONE));
    const controller = new AbortController();
    controller.abort();
    expect(await collect(await model(server), request(controller.signal))).toEqual([{ type: 'finish', reason: 'aborted' }]);
    expect(server.received).toHaveLength(0);
  });

  it('ends aborted and closes the connection when cancelled while waiting for the next byte', async () => {
    let closed!: () => void;
    const connectionClosed = new Promise<void>((resolve) => (closed = resolve));
    const server = await serve((res, req) => {
      req.socket.on('close', closed);
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(event(delta('Hello')));
    });
    const controller = new AbortController();
    const stream = (await model(server)).stream(request(controller.signal))[Symbol.asyncIterator]();
    expect((await stream.next()).value).toEqual({ type: 'text-delta', text: 'Hello' });
    const next = stream.next();
    // The adapter reaches its pending read in promise jobs alone: by the next macrotask it waits there.
    await new Promise((resolve) => setImmediate(resolve));
    controller.abort();
    expect((await next).value).toEqual({ type: 'finish', reason: 'aborted' });
    expect((await stream.next()).done).toBe(true);
    await connectionClosed;
  });
});
