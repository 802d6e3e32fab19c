// The OpenAI-compatible adapter against a real local HTTP server replaying recorded-style SSE
// streams: delta mapping, finish/usage mapping, error codes, retries, abort and the wire request.
import { describe, expect, it, vi } from 'vitest';
import type { ModelChunk, ModelRequest } from 'subagent-host';
import { createModel } from 'subagent-host/internals';
import { ENV, KEY, cleanups, collect, finishOf, fixture, model, request, serve, sse, status, useServers, type Reply } from './openai-helpers.js';

useServers();

describe('openai model: streams', () => {
  it('streams text deltas, then usage from the trailing chunk, then stop', async () => {
    const server = await serve(sse(fixture('text-usage')));
    expect(await collect(await model(server))).toEqual([
      { type: 'text-delta', text: 'Hello' },
      { type: 'text-delta', text: ', wörld' },
      { type: 'text-delta', text: ' 👋' },
      { type: 'usage', usage: { inputTokens: 93, cacheReadTokens: 1024, outputTokens: 46, reasoningTokens: 0 } },
      { type: 'finish', reason: 'stop' },
    ]);
  });

  it('assembles parallel tool calls from fragments keyed by index', async () => {
    const server = await serve(sse(fixture('parallel-tool-calls')));
    expect(await collect(await model(server))).toEqual([
      { type: 'tool-call', id: 'call_DdmO9pD3xa9XTPNJ32zg2hcA', name: 'get_weather', input: { location: 'Paris' } },
      { type: 'tool-call', id: 'call_6s5DNwJmFhv0bD1aFqMjzTnR', name: 'get_time', input: { tz: 'Europe/Paris' } },
      { type: 'usage', usage: { inputTokens: 91, outputTokens: 52, reasoningTokens: 0 } },
      { type: 'finish', reason: 'tool-calls' },
    ]);
  });

  it('keeps parallel calls apart when the server sends each at index 0 with its own id', async () => {
    const chunk = (calls: unknown[], finish: string | null = null): string =>
      `data: ${JSON.stringify({ choices: [{ index: 0, delta: { tool_calls: calls }, finish_reason: finish }] })}\n\n`;
    const server = await serve(
      sse(
        chunk([{ index: 0, id: 'call_a', type: 'function', function: { name: 'read', arguments: '{"path":' } }]) +
          chunk([{ index: 0, function: { arguments: '"a"}' } }]) +
          chunk([{ index: 0, id: 'call_b', type: 'function', function: { name: 'read', arguments: '{"path":' } }]) +
          chunk([{ index: 0, function: { arguments: '"b"}' } }]) +
          chunk([], 'tool_calls') +
          'data: [DONE]\n\n',
      ),
    );
    expect(await collect(await model(server))).toEqual([
      { type: 'tool-call', id: 'call_a', name: 'read', input: { path: 'a' } },
      { type: 'tool-call', id: 'call_b', name: 'read', input: { path: 'b' } },
      { type: 'finish', reason: 'tool-calls' },
    ]);
  });

  it('gives {} for empty arguments and the raw text for invalid JSON or a JSON string', async () => {
    const chunk = (calls: unknown[], finish: string | null = null): string =>
      `data: ${JSON.stringify({ choices: [{ index: 0, delta: { tool_calls: calls }, finish_reason: finish }] })}\n\n`;
    const server = await serve(
      sse(
        chunk([{ index: 0, id: 'call_a', type: 'function', function: { name: 'now', arguments: '' } }]) +
          chunk([{ index: 1, id: 'call_b', type: 'function', function: { name: 'echo', arguments: '{"x": ' } }]) +
          chunk([{ index: 2, id: 'call_c', type: 'function', function: { name: 'echo', arguments: '"Paris"' } }]) +
          chunk([], 'tool_calls') +
          'data: [DONE]\n\n',
      ),
    );
    expect(await collect(await model(server))).toEqual([
      { type: 'tool-call', id: 'call_a', name: 'now', input: {} },
      { type: 'tool-call', id: 'call_b', name: 'echo', input: '{"x": ' },
      // A JSON string stays as sent, so the history replays it exactly.
      { type: 'tool-call', id: 'call_c', name: 'echo', input: '"Paris"' },
      { type: 'finish', reason: 'tool-calls' },
    ]);
  });

  it('maps DeepSeek reasoning_content, keep-alives, CRLF and cache-hit usage', async () => {
    const server = await serve(sse(fixture('deepseek-reasoning').replaceAll('\n', '\r\n')));
    expect(await collect(await model(server))).toEqual([
      { type: 'reasoning-delta', text: 'The user' },
      { type: 'reasoning-delta', text: ' says hi.' },
      { type: 'text-delta', text: 'Hi' },
      { type: 'text-delta', text: '!' },
      { type: 'usage', usage: { inputTokens: 12, cacheReadTokens: 64, outputTokens: 30, reasoningTokens: 22 } },
      { type: 'finish', reason: 'stop' },
    ]);
  });

  it('maps finish_reason length to max-tokens and drops the cut-off tool call', async () => {
    const server = await serve(sse(fixture('length')));
    expect(await collect(await model(server))).toEqual([
      { type: 'text-delta', text: 'Here is the start' },
      { type: 'usage', usage: { inputTokens: 20, outputTokens: 16 } },
      { type: 'finish', reason: 'max-tokens' },
    ]);
  });

  it('maps finish_reason content_filter to refusal', async () => {
    const server = await serve(sse(fixture('content-filter')));
    expect(await collect(await model(server))).toEqual([{ type: 'finish', reason: 'refusal' }]);
  });

  it('streams a structured-outputs refusal as text and ends refusal', async () => {
    const events = [
      { id: 'chatcmpl-r', choices: [{ index: 0, delta: { role: 'assistant', refusal: '' } }] },
      { id: 'chatcmpl-r', choices: [{ index: 0, delta: { refusal: 'I cannot help with that.' } }] },
      { id: 'chatcmpl-r', choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] },
    ];
    const server = await serve(sse(`${events.map((event) => `data: ${JSON.stringify(event)}\n\n`).join('')}data: [DONE]\n\n`));
    expect(await collect(await model(server))).toEqual([
      { type: 'text-delta', text: 'I cannot help with that.' },
      { type: 'finish', reason: 'refusal' },
    ]);
  });

  it('ends EMPTY_RESPONSE when a stop carries nothing', async () => {
    const stop = { choices: [{ index: 0, delta: { content: '' }, finish_reason: 'stop' }] };
    const empty = `data: ${JSON.stringify(stop)}\n\ndata: [DONE]\n\n`;
    const server = await serve(sse(empty));
    expect(finishOf(await collect(await model(server)))).toMatchObject({
      reason: 'error',
      failure: { code: 'EMPTY_RESPONSE' },
    });
  });

  it('ends STREAM_CLOSED when the connection drops before [DONE]', async () => {
    const text = fixture('text-usage');
    const server = await serve((res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(text.slice(0, text.indexOf('wörld')), () => res.socket?.destroy());
    });
    const chunks = await collect(await model(server));
    expect(chunks[0]).toEqual({ type: 'text-delta', text: 'Hello' });
    expect(finishOf(chunks)).toMatchObject({ reason: 'error', failure: { code: 'STREAM_CLOSED' } });
  });

  it('ends STREAM_CLOSED on a clean end of body without [DONE]', async () => {
    const text = fixture('text-usage');
    const server = await serve(sse(text.slice(0, text.indexOf('data: [DONE]'))));
    expect(finishOf(await collect(await model(server)))).toMatchObject({ failure: { code: 'STREAM_CLOSED' } });
  });

  it('ends MALFORMED_RESPONSE on an event that is not JSON', async () => {
    const cut = 'data: {"id":"chatcmpl-x","choices":[{"index":0,"delta":{"content":"Hel\n\n';
    const server = await serve(sse(`${cut}data: [DONE]\n\n`));
    expect(finishOf(await collect(await model(server)))).toMatchObject({
      reason: 'error',
      failure: { code: 'MALFORMED_RESPONSE' },
    });
  });

  it('skips an event whose data is empty (a bare `data:` line), as the SSE spec does', async () => {
    const server = await serve(sse(`data:\n\n${fixture('text-usage')}`));
    expect(finishOf(await collect(await model(server)))).toEqual({ type: 'finish', reason: 'stop' });
  });

  it('leaves no fragment of the key in the message about an event that is not JSON', async () => {
    // The key straddles the 80th character of the quoted payload.
    const payload = `${'x'.repeat(70)}${KEY} more`;
    const server = await serve(sse(`data: ${payload}\n\ndata: [DONE]\n\n`));
    const finish = finishOf(await collect(await model(server)));
    expect(finish).toMatchObject({ failure: { code: 'MALFORMED_RESPONSE' } });
    const message = (finish as { failure: { message: string } }).failure.message;
    for (let length = 4; length <= KEY.length; length++) expect(message).not.toContain(KEY.slice(0, length));
  });

  it.each([
    ['an HTML page', 'text/html', '<html><body>Welcome</body></html>'],
    ['NDJSON', 'application/x-ndjson', '{"choices":[]}\n'],
  ])('ends MALFORMED_RESPONSE naming the content type for a 200 that is %s, not an event stream', async (_what, type, body) => {
    const server = await serve((res) => {
      res.writeHead(200, { 'content-type': type });
      res.end(body);
    });
    expect(finishOf(await collect(await model(server)))).toMatchObject({ failure: { code: 'MALFORMED_RESPONSE', message: expect.stringContaining(type) } });
  });

  it('quotes and classifies the error of a 200 whose JSON body is an error', async () => {
    const server = await serve(status(200, '{"error":{"message":"Insufficient Balance","type":"unknown_error","code":"insufficient_quota"}}'));
    expect(finishOf(await collect(await model(server)))).toMatchObject({ failure: { code: 'QUOTA_EXCEEDED', message: expect.stringContaining('Insufficient Balance') } });
  });

  it('ends TIMEOUT when no byte arrives within idleTimeoutMs', async () => {
    const server = await serve((res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(': keep-alive\n\n');
    });
    const chunks = await collect(await model(server, { idleTimeoutMs: 150 }));
    expect(finishOf(chunks)).toMatchObject({ reason: 'error', failure: { code: 'TIMEOUT' } });
  });
});

describe('openai model: HTTP errors and retries', () => {
  it('maps 401 to AUTH without retrying and scrubs the echoed key', async () => {
    const body = JSON.stringify({
      error: {
        message: `Incorrect API key provided: ${KEY}. You can find your API key at https://platform.openai.com.`,
        type: 'invalid_request_error',
        code: 'invalid_api_key',
      },
    });
    const server = await serve(status(401, body));
    const finish = finishOf(await collect(await model(server)));
    expect(finish).toMatchObject({ reason: 'error', failure: { code: 'AUTH', status: 401 } });
    expect(JSON.stringify(finish)).not.toContain(KEY);
    expect(JSON.stringify(finish)).not.toContain(KEY.slice(0, 12));
    expect(server.received).toHaveLength(1);
  });

  it.each([
    [402, '{"error":{"message":"Insufficient Balance","type":"unknown_error"}}', 'QUOTA_EXCEEDED'],
    [429, '{"error":{"message":"You exceeded your current quota.","code":"insufficient_quota"}}', 'QUOTA_EXCEEDED'],
    [400, '{"error":{"message":"This model\'s maximum context length is 65536 tokens."}}', 'CONTEXT_WINDOW_EXCEEDED'],
    // llama.cpp's server, old and new wording; Ollama's; Groq's; Gemini's OpenAI-compatible endpoint.
    [400, '{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error"}}', 'CONTEXT_WINDOW_EXCEEDED'],
    [400, '{"error":{"code":400,"message":"request (4476 tokens) exceeds the available context size (4096 tokens)","type":"exceed_context_size_error","n_prompt_tokens":4476,"n_ctx":4096}}', 'CONTEXT_WINDOW_EXCEEDED'],
    [400, '{"error":{"message":"the input length exceeds the context length","type":"api_error"}}', 'CONTEXT_WINDOW_EXCEEDED'],
    [400, '{"error":{"message":"Please reduce the length of the messages or completion.","type":"invalid_request_error","code":"context_length_exceeded"}}', 'CONTEXT_WINDOW_EXCEEDED'],
    [400, '{"error":{"code":400,"message":"The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).","status":"INVALID_ARGUMENT"}}', 'CONTEXT_WINDOW_EXCEEDED'],
    // An output limit asked too large is the request's fault, not a conversation too long.
    [400, '{"error":{"message":"max_tokens (300000) exceeds the maximum number of tokens allowed for output (65536)."}}', 'INVALID_REQUEST'],
    [400, '{"error":{"message":"messages[2]: tool_call_id not found"}}', 'INVALID_REQUEST'],
    // Quota words count only where servers report quotas (402, 403, 429).
    [400, '{"error":{"message":"Insufficient tool messages following tool_calls message"}}', 'INVALID_REQUEST'],
    [413, 'request entity too large', 'INVALID_REQUEST'],
    [404, '{"error":{"message":"Not found"}}', 'HTTP_404'],
  ])('maps HTTP %i (%s) to %s', async (code, body, expected) => {
    const server = await serve(status(code, body));
    expect(finishOf(await collect(await model(server)))).toMatchObject({ failure: { code: expected, status: code } });
    expect(server.received).toHaveLength(1);
  });

  it('cuts a long server message before an emoji, never between its halves', async () => {
    const server = await serve(status(400, JSON.stringify({ error: { message: `${'x'.repeat(198)}😀 and more after the cut` } })));
    const finish = finishOf(await collect(await model(server)));
    const message = finish.type === 'finish' ? (finish.failure?.message ?? '') : '';
    expect(message).toMatch(/x{198}…$/);
    expect(message).not.toMatch(/\p{Cs}/u);
  });

  it('retries once after a 429 and then streams', async () => {
    const server = await serve(
      status(429, '{"error":{"message":"Rate limit reached"}}', { 'retry-after': '0' }),
      sse(fixture('text-usage')),
    );
    const chunks = await collect(await model(server));
    expect(finishOf(chunks)).toEqual({ type: 'finish', reason: 'stop' });
    expect(server.received).toHaveLength(2);
  });

  it('waits its usual delay before retrying a 429 whose Retry-After is empty (not a retry at once)', async () => {
    const server = await serve(status(429, '{"error":{"message":"Rate limit reached"}}', { 'retry-after': '' }), sse(fixture('text-usage')));
    const setTimer = vi.spyOn(globalThis, 'setTimeout');
    try {
      expect(finishOf(await collect(await model(server)))).toEqual({ type: 'finish', reason: 'stop' });
      expect(server.received).toHaveLength(2);
      expect(setTimer.mock.calls.some(([, ms]) => ms === 200)).toBe(true);
      expect(setTimer.mock.calls.some(([, ms]) => ms === 0)).toBe(false);
    } finally {
      setTimer.mockRestore();
    }
  });

  it('waits out a Retry-After given as an HTTP-date a second or two ahead; a date already past is its usual delay', async () => {
    // Written as the server answers: whole seconds, so the date is 1–2 s ahead when it is sent.
    let due = 0;
    let retriedAt = 0;
    const dated = (aheadMs: number): Reply => (res, req) => {
      const date = new Date(Date.now() + aheadMs).toUTCString();
      due = Date.parse(date);
      status(429, '{"error":{"message":"Rate limit reached"}}', { 'retry-after': date })(res, req);
    };
    const then: Reply = (res, req) => {
      retriedAt = Date.now();
      sse(fixture('text-usage'))(res, req);
    };
    const ahead = await serve(dated(2000), then);
    expect(finishOf(await collect(await model(ahead)))).toEqual({ type: 'finish', reason: 'stop' });
    expect(ahead.received).toHaveLength(2);
    // Not before the date (a timer may round a millisecond or two early), where the usual delay would retry after 200 ms.
    expect(retriedAt).toBeGreaterThanOrEqual(due - 20);
    const setTimer = vi.spyOn(globalThis, 'setTimeout');
    try {
      const past = await serve(dated(-60_000), sse(fixture('text-usage')));
      expect(finishOf(await collect(await model(past)))).toEqual({ type: 'finish', reason: 'stop' });
      expect(setTimer.mock.calls.some(([, ms]) => ms === 200)).toBe(true);
      expect(setTimer.mock.calls.some(([, ms]) => ms === 0)).toBe(false);
    } finally {
      setTimer.mockRestore();
    }
  });

  it('ends REDIRECT naming where a redirect points, without following it (that would drop the request body)', async () => {
    const server = await serve((res) => {
      res.writeHead(301, { location: 'https://api.example.test/v1/chat/completions' });
      res.end();
    });
    expect(finishOf(await collect(await model(server)))).toMatchObject({
      reason: 'error',
      failure: { code: 'REDIRECT', status: 301, message: expect.stringContaining('https://api.example.test/v1/chat/completions') },
    });
    expect(server.received).toHaveLength(1);
  });

  it('leaves no fragment of the key in the message about a redirect or a request id that quotes it', async () => {
    // The key straddles the 200th character of the redirect's target, where its quote is cut.
    const start = 'https://gateway.example.test/login?pad=';
    const location = `${start}${'x'.repeat(185 - start.length)}&token=${KEY}`;
    const server = await serve((res) => {
      res.writeHead(302, { location });
      res.end();
    }, status(401, '{"error":{"message":"no"}}', { 'x-request-id': `req-${KEY}` }));
    for (const code of ['REDIRECT', 'AUTH']) {
      const finish = finishOf(await collect(await model(server)));
      expect(finish).toMatchObject({ failure: { code } });
      const message = (finish as { failure: { message: string } }).failure.message;
      for (let length = 4; length <= KEY.length; length++) expect(message).not.toContain(KEY.slice(0, length));
    }
  });

  it('ends SERVER after exactly one retry of a 500', async () => {
    const server = await serve(status(500, '{"error":{"message":"internal error"}}'));
    const chunks = await collect(await model(server));
    expect(finishOf(chunks)).toMatchObject({ reason: 'error', failure: { code: 'SERVER', status: 500 } });
    expect(server.received).toHaveLength(2);
  });

  it.each([
    [503, 'Insufficient capacity'],
    [502, 'load balancer upstream error'],
  ])('retries a %i that mentions capacity or a balancer as a server failure', async (code, message) => {
    const server = await serve(status(code, JSON.stringify({ error: { message } })), sse(fixture('text-usage')));
    expect(finishOf(await collect(await model(server)))).toEqual({ type: 'finish', reason: 'stop' });
    expect(server.received).toHaveLength(2);
  });

  it('retries a request whose connection broke before any answer', async () => {
    const server = await serve((res) => res.socket?.destroy(), sse(fixture('text-usage')));
    expect(finishOf(await collect(await model(server, { maxRetries: 1 })))).toEqual({ type: 'finish', reason: 'stop' });
    expect(server.received).toHaveLength(2);
  });

  it.each([
    ['headers', (): void => undefined],
    ['body', ((res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write('data: {"choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n');
    }) satisfies Reply],
  ])('ends TIMEOUT without a retry when fetch\'s own %s timeout ends a request the server received', async (_which, reply) => {
    const server = await serve(reply);
    // What a user's global undici dispatcher (or Node's own, after 300 s) does: shorter here.
    interface Dispatcher {
      close(): Promise<void>;
    }
    const slot = globalThis as unknown as Record<symbol, Dispatcher>;
    const GLOBAL_DISPATCHER = Symbol.for('undici.globalDispatcher.1');
    // Node makes its fetch's dispatcher on first use: a fetch refused at once makes it exist.
    await fetch('http://127.0.0.1:1/').catch(() => undefined);
    const original = slot[GLOBAL_DISPATCHER]!;
    const Agent = original.constructor as new (options: { headersTimeout: number; bodyTimeout: number }) => Dispatcher;
    const short = new Agent({ headersTimeout: 100, bodyTimeout: 100 });
    slot[GLOBAL_DISPATCHER] = short;
    try {
      const finish = finishOf(await collect(await model(server, { idleTimeoutMs: 60_000 })));
      expect(finish).toMatchObject({ reason: 'error', failure: { code: 'TIMEOUT' } });
      expect(server.received).toHaveLength(1);
    } finally {
      slot[GLOBAL_DISPATCHER] = original;
      await short.close();
    }
  });

  it('ends NETWORK when nothing listens', async () => {
    const server = await serve(status(500, ''));
    await cleanups.pop()!(); // close it: the port now refuses connections
    const chunks = await collect(await model(server, { maxRetries: 0 }));
    expect(finishOf(chunks)).toMatchObject({ reason: 'error', failure: { code: 'NETWORK' } });
  });

  it('ends AUTH naming the variable when the key is missing, without a request', async () => {
    const server = await serve(sse(fixture('text-usage')));
    const finish = finishOf(await collect(await model(server, {}, { TEST_KEY_VAR: '' })));
    expect(finish).toMatchObject({ reason: 'error', failure: { code: 'AUTH' } });
    expect(JSON.stringify(finish)).toContain('TEST_KEY_VAR');
    expect(server.received).toHaveLength(0);
  });
});

describe('openai model: abort', () => {
  it('ends aborted mid-stream and closes the connection', async () => {
    let closed!: () => void;
    const connectionClosed = new Promise<void>((resolve) => (closed = resolve));
    const server = await serve((res, req) => {
      req.socket.on('close', closed);
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(fixture('text-usage').split('\n\n').slice(0, 2).join('\n\n') + '\n\n');
    });
    const controller = new AbortController();
    const chunks: ModelChunk[] = [];
    for await (const chunk of (await model(server)).stream(request(controller.signal))) {
      chunks.push(chunk);
      if (chunk.type === 'text-delta') controller.abort();
    }
    expect(chunks).toEqual([
      { type: 'text-delta', text: 'Hello' },
      { type: 'finish', reason: 'aborted' },
    ]);
    await connectionClosed;
  });

  it('ends aborted while waiting to retry, and clears the wait', async () => {
    const controller = new AbortController();
    const server = await serve((res) => {
      res.writeHead(503, { 'content-type': 'application/json', 'retry-after': '2' });
      res.end('{"error":{"message":"overloaded"}}');
    });
    const setTimer = vi.spyOn(globalThis, 'setTimeout');
    const clearTimer = vi.spyOn(globalThis, 'clearTimeout');
    try {
      const collecting = collect(await model(server), request(controller.signal));
      // Aborted once the adapter is in its wait for the retry (the server asked for 2 s).
      await expect.poll(() => setTimer.mock.calls.findIndex(([, ms]) => ms === 2000), { timeout: 15_000 }).not.toBe(-1);
      const wait = setTimer.mock.results[setTimer.mock.calls.findIndex(([, ms]) => ms === 2000)]!.value as unknown;
      controller.abort();
      expect(await collecting).toEqual([{ type: 'finish', reason: 'aborted' }]);
      expect(server.received).toHaveLength(1);
      expect(clearTimer.mock.calls.some(([timer]) => timer === wait)).toBe(true);
    } finally {
      setTimer.mockRestore();
      clearTimer.mockRestore();
    }
  });
});

describe('openai model: wire request', () => {
  it('sends the exact chat-completions body and headers', async () => {
    const server = await serve(sse(fixture('text-usage')));
    const adapter = await createModel(
      {
        kind: 'openai',
        baseURL: `${server.baseURL}/`,
        model: 'deepseek-chat',
        apiKeyEnv: 'TEST_KEY_VAR',
        headers: { 'X-Title': 'tests' },
      },
      ENV,
    );
    const req: ModelRequest = {
      system: 'You are terse.',
      messages: [
        // Two text blocks (a notice's sentence and a child's message, say): lines apart, not run together.
        { role: 'user', content: [{ type: 'text', text: 'Weather in Paris?' }, { type: 'text', text: 'In Celsius.' }] },
        {
          role: 'assistant',
          content: [
            { type: 'reasoning', text: 'Need the tool.' },
            { type: 'tool_call', id: 'call_1', name: 'get_weather', input: { location: 'Paris' } },
            { type: 'tool_call', id: 'call_2', name: 'lookup', input: '{broken' },
            { type: 'tool_call', id: 'call_3', name: 'screenshot', input: {} },
          ],
        },
        {
          role: 'user',
          content: [
            { type: 'tool_result', callId: 'call_1', content: [{ type: 'text', text: '18°C' }] },
            { type: 'tool_result', callId: 'call_2', content: [], isError: true },
            { type: 'tool_result', callId: 'call_3', content: [{ type: 'image', mimeType: 'image/jpeg', data: '/9j/' }] },
            { type: 'text', text: 'And this?' },
            { type: 'image', mimeType: 'image/png', data: 'iVBORw0KGgo=' },
          ],
        },
        { role: 'assistant', content: [{ type: 'text', text: 'A PNG header.' }] },
      ],
      tools: [{ name: 'get_weather', description: 'Current weather', parameters: { type: 'object' } }],
      maxTokens: 256,
      signal: new AbortController().signal,
    };
    await collect(adapter, req);
    const [sent] = server.received;
    expect(sent?.url).toBe('/v1/chat/completions');
    expect(sent?.headers).toMatchObject({
      authorization: `Bearer ${KEY}`,
      'content-type': 'application/json',
      'user-agent': 'subagent-host',
      'x-title': 'tests',
    });
    expect(sent?.body).not.toContain('null');
    expect(JSON.parse(sent?.body ?? '')).toStrictEqual({
      model: 'deepseek-chat',
      messages: [
        { role: 'system', content: 'You are terse.' },
        { role: 'user', content: 'Weather in Paris?\nIn Celsius.' },
        {
          role: 'assistant',
          content: '',
          tool_calls: [
            { id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"location":"Paris"}' } },
            { id: 'call_2', type: 'function', function: { name: 'lookup', arguments: '{broken' } },
            { id: 'call_3', type: 'function', function: { name: 'screenshot', arguments: '{}' } },
          ],
          reasoning_content: 'Need the tool.',
        },
        { role: 'tool', tool_call_id: 'call_1', content: '18°C' },
        { role: 'tool', tool_call_id: 'call_2', content: '(no output)' },
        // A tool message is text only: the image a tool returned follows in the user message.
        { role: 'tool', tool_call_id: 'call_3', content: '(images: in the next message)' },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'Images returned by tool call call_3:' },
            { type: 'image_url', image_url: { url: 'data:image/jpeg;base64,/9j/' } },
            { type: 'text', text: 'And this?' },
            { type: 'image_url', image_url: { url: 'data:image/png;base64,iVBORw0KGgo=' } },
          ],
        },
        { role: 'assistant', content: 'A PNG header.' },
      ],
      stream: true,
      stream_options: { include_usage: true },
      tools: [
        {
          type: 'function',
          function: { name: 'get_weather', description: 'Current weather', parameters: { type: 'object' } },
        },
      ],
      max_tokens: 256,
    });
  });

  it('sends a lone surrogate as U+FFFD, which strict servers (DeepSeek, OpenAI) accept, keeping pairs and escaped text', async () => {
    const server = await serve(sse(fixture('text-usage')));
    const adapter = await model(server);
    const req: ModelRequest = {
      system: 'sys \uD800',
      messages: [
        { role: 'user', content: [{ type: 'text', text: 'cut 😀 \uD83D' }] },
        { role: 'assistant', content: [{ type: 'tool_call', id: 'c1', name: 'note', input: { text: 'x\uDE00', '\\ud800': 'typed \\ud800' } }] },
        { role: 'user', content: [{ type: 'tool_result', callId: 'c1', content: [{ type: 'text', text: 'half \uDC00' }] }] },
      ],
      tools: [],
      signal: new AbortController().signal,
    };
    expect(finishOf(await collect(adapter, req))).toStrictEqual({ type: 'finish', reason: 'stop' });
    const body = JSON.parse(server.received[0]?.body ?? '') as { messages: { content: string; tool_calls?: { function: { arguments: string } }[] }[] };
    const [system, user, assistant, tool] = body.messages;
    expect([system?.content, user?.content, tool?.content]).toStrictEqual(['sys \uFFFD', 'cut 😀 \uFFFD', 'half \uFFFD']);
    // The arguments are JSON text too: parsed, they hold no lone surrogate either.
    const args = assistant?.tool_calls?.[0]?.function.arguments ?? '';
    expect(JSON.parse(args)).toStrictEqual({ text: 'x\uFFFD', '\\ud800': 'typed \\ud800' });
    expect(args).not.toMatch(/(?<!\\)(\\\\)*\\ud[89a-f]/);
  });
});
