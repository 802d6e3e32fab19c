// The ndjson wire under serveAcp, driven with raw bytes: lines split anywhere (inside a UTF-8
// character too), CRLF endings, the answers to lines that are not JSON-RPC messages, the bound on
// one line's length, and a burst of messages leaving in one write.
import { PassThrough } from 'node:stream';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { createHost, serveAcp, type Host } from 'subagent-host';

interface Wire {
  /** Writes raw bytes to the server. */
  send(bytes: string | Buffer): void;
  /** Resolves once serveAcp returned. */
  served: Promise<void>;
  /** The next `n` lines the server wrote, parsed. */
  lines(n: number): Promise<unknown[]>;
  /** How many writes the server made so far. */
  writes(): number;
  close(): Promise<void>;
}

const initialize = (id: number, name = 'client') =>
  `${JSON.stringify({ jsonrpc: '2.0', id, method: 'initialize', params: { protocolVersion: 1, clientCapabilities: {}, clientInfo: { name, version: '1' } } })}`;

describe('the ACP wire of serveAcp', () => {
  const hosts: Host[] = [];
  const wires: Wire[] = [];

  afterEach(async () => {
    await Promise.all(wires.splice(0).map((wire) => wire.close()));
    await Promise.all(hosts.splice(0).map((host) => host.close()));
  });

  async function open(): Promise<Wire> {
    const host = await createHost({ providers: false });
    hosts.push(host);
    const input = new PassThrough();
    const output = new PassThrough();
    const served = serveAcp(host, { input, output });
    let buffered = '';
    const parsed: unknown[] = [];
    let wake: (() => void) | undefined;
    let writes = 0;
    output.on('data', (chunk: Buffer) => {
      writes++;
      buffered += chunk.toString('utf8');
      let end: number;
      while ((end = buffered.indexOf('\n')) !== -1) {
        parsed.push(JSON.parse(buffered.slice(0, end)));
        buffered = buffered.slice(end + 1);
      }
      wake?.();
    });
    const wire: Wire = {
      send: (bytes) => void input.write(bytes),
      served,
      async lines(n) {
        while (parsed.length < n) await new Promise<void>((resolve) => (wake = resolve));
        return parsed.splice(0, n);
      },
      writes: () => writes,
      async close() {
        input.end();
        // A connection the server closed (a message too large) has already said why.
        await served.catch(() => undefined);
      },
    };
    wires.push(wire);
    return wire;
  }

  it('reads a message split across writes, even inside a UTF-8 character', async () => {
    const wire = await open();
    const bytes = Buffer.from(`${initialize(1, 'clïent')}\n`);
    const cut = bytes.indexOf(Buffer.from('ï')) + 1;
    wire.send(bytes.subarray(0, 5));
    wire.send(bytes.subarray(5, cut));
    wire.send(bytes.subarray(cut));
    expect(await wire.lines(1)).toEqual([expect.objectContaining({ id: 1, result: expect.objectContaining({ protocolVersion: 1 }) })]);
  });

  it('reads several messages from one write, with LF or CRLF endings, and skips blank lines', async () => {
    const wire = await open();
    wire.send(`${initialize(1)}\r\n\n${initialize(2)}\n`);
    expect((await wire.lines(2)).map((line) => (line as { id: number }).id)).toEqual([1, 2]);
  });

  it("writes a turn that never waits (its updates and its answer) in one write", async () => {
    const wire = await open();
    wire.send(`${initialize(1)}\n`);
    await wire.lines(1);
    const model = { kind: 'scripted', steps: [{ text: 'one two three' }] };
    wire.send(`${JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'session/new', params: { cwd: process.cwd(), mcpServers: [], _meta: { 'subagent-host/agentOptions': { model } } } })}\n`);
    const [created] = (await wire.lines(1)) as { result: { sessionId: string } }[];
    const before = wire.writes();
    wire.send(`${JSON.stringify({ jsonrpc: '2.0', id: 3, method: 'session/prompt', params: { sessionId: created!.result.sessionId, prompt: [{ type: 'text', text: 'hi' }] } })}\n`);
    const lines = (await wire.lines(4)) as { method?: string; id?: number; params?: { update: { content: { text: string } } }; result?: { stopReason: string } }[];
    expect(lines.slice(0, 3).map((line) => [line.method, line.params?.update.content.text])).toEqual([
      ['session/update', 'one '],
      ['session/update', 'two '],
      ['session/update', 'three'],
    ]);
    expect(lines[3]).toMatchObject({ id: 3, result: { stopReason: 'end_turn' } });
    expect(wire.writes() - before).toBe(1);
  });

  it('answers a line that is not JSON, a batch and a non-object, then keeps serving', async () => {
    const wire = await open();
    wire.send(`{"jsonrpc": "2.0", "id": 1,\n[${initialize(2)}]\n42\n${initialize(3)}\n`);
    const [notJson, batch, scalar, answer] = (await wire.lines(4)) as { id: number | null; error?: { code: number } }[];
    expect([notJson, batch, scalar].map((line) => [line!.id, line!.error?.code])).toEqual([
      [null, -32700],
      [null, -32600],
      [null, -32600],
    ]);
    expect(answer).toMatchObject({ id: 3, result: { protocolVersion: 1 } });
  });

  it('closes the connection on a line over 32 MiB instead of buffering it', async () => {
    const wire = await open();
    const piece = Buffer.alloc(1024 * 1024, 0x61);
    wire.send('{"jsonrpc":"2.0","id":1,"method":"');
    for (let i = 0; i < 33; i++) wire.send(piece);
    // serveAcp ends once the connection closed, though its input never ended, and says why.
    await expect(wire.served).rejects.toMatchObject({ code: 'INVALID_REQUEST', message: expect.stringContaining('over 33554432 bytes') });
  });
});

describe('the ACP line reader with a message taker', () => {
  it('keeps a message it could take behind one handed to the SDK earlier, also when both were buffered', async () => {
    const { loadAcpSdk } = await import('../dist/src/providers/acp/sdk.js');
    const { ndJsonNodeStream } = await import('../dist/src/providers/acp/ndjson.js');
    const sdk = await loadAcpSdk();
    const order: string[] = [];
    // Two reads buffered before anyone reads: the stream emits them one after the other in one tick.
    const input = new PassThrough();
    input.write('{"jsonrpc":"2.0","method":"first_for_the_sdk"}\n');
    input.write('{"jsonrpc":"2.0","method":"second_takeable"}\n');
    const stream = ndJsonNodeStream(sdk, new PassThrough(), input, 'first-at-once', (message: { method?: string }) => {
      if (message.method !== 'second_takeable') return false;
      order.push(`taken ${message.method}`);
      return true;
    });
    const reader = stream.readable.getReader();
    const read = (async () => {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return;
        order.push(`sdk ${(value as { method: string }).method}`);
      }
    })();
    await vi.waitFor(() => expect(order).toHaveLength(2), { timeout: 15_000 });
    expect(order).toEqual(['sdk first_for_the_sdk', 'sdk second_takeable']);
    input.end();
    await read;
  });
});
