// serveAcp: our agent served over ACP, driven by an SDK client over in-memory streams (and, for the
// stdio rules, through the real `subagent-host acp` command): initialize, session/new, streamed
// prompts, stop reasons, cancel, session/load and session/resume from a database, and protocol-level rejections.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough, Readable, Writable } from 'node:stream';
import * as acp from '@agentclientprotocol/sdk';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { createHost, inProcessProvider, serveAcp, sqlitePersistence, text, type AcpServeHost, type AcpServeOptions, type Host, type ScriptedStep, type Tool } from 'subagent-host';
import { CLI } from './acp-helpers.js';
import { deferred, recordingTool, storeOver, untilCancelled } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'acp-server-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const META = 'subagent-host/agentOptions';
const scripted = (...steps: ScriptedStep[]) => ({ _meta: { [META]: { model: { kind: 'scripted', steps } } } });

interface Client {
  agent: acp.ClientContext;
  updates: acp.SessionNotification[];
  /** Resolves at the next update. */
  nextUpdate(): Promise<void>;
  /** Ends the server's input and waits for serveAcp to return. */
  close(): Promise<void>;
}

const open: Client[] = [];

/** `onInput` sees each chunk the server's input receives. */
function connect(host: AcpServeHost, options?: AcpServeOptions, onInput?: (chunk: Buffer) => void): Client {
  const toServer = new PassThrough();
  if (onInput) toServer.on('data', onInput);
  const toClient = new PassThrough();
  const served = serveAcp(host, { input: toServer, output: toClient }, options);
  const updates: acp.SessionNotification[] = [];
  let waiting = deferred();
  const connection = acp
    .client({ name: 'test-client' })
    .onNotification(acp.methods.client.session.update, ({ params }) => {
      updates.push(params);
      waiting.resolve();
      waiting = deferred();
    })
    .connect(acp.ndJsonStream(Writable.toWeb(toServer) as WritableStream<Uint8Array>, Readable.toWeb(toClient) as ReadableStream<Uint8Array>));
  let closing: Promise<void> | undefined;
  const client: Client = {
    agent: connection.agent,
    updates,
    nextUpdate: () => waiting.promise,
    close: () =>
      (closing ??= (async () => {
        toServer.end();
        await served;
        connection.close();
      })()),
  };
  open.push(client);
  return client;
}

async function initialized(host: AcpServeHost, onInput?: (chunk: Buffer) => void): Promise<Client> {
  const client = connect(host, undefined, onInput);
  await client.agent.request(acp.methods.agent.initialize, { protocolVersion: acp.PROTOCOL_VERSION, clientCapabilities: {} });
  return client;
}

/** The text of the updates of one kind (message or thought chunks), in order. */
function texts(updates: acp.SessionNotification[], kind: 'agent_message_chunk' | 'user_message_chunk'): string[] {
  return updates.flatMap(({ update }) => (update.sessionUpdate === kind && update.content.type === 'text' ? [update.content.text] : []));
}

describe('serveAcp', () => {
  const hosts: Host[] = [];
  async function newHost(options: Parameters<typeof createHost>[0] = {}): Promise<Host> {
    const host = await createHost({ providers: false, ...options });
    hosts.push(host);
    return host;
  }

  afterEach(async () => {
    await Promise.all(open.splice(0).map((client) => client.close()));
    await Promise.all(hosts.splice(0).map((host) => host.close()));
  });

  async function session(client: Client, extra: Record<string, unknown> = {}): Promise<string> {
    const { sessionId } = await client.agent.request(acp.methods.agent.session.new, { cwd: dir, mcpServers: [], ...extra });
    return sessionId;
  }

  function prompt(client: Client, sessionId: string, value: string) {
    return client.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: 'text', text: value }] });
  }

  /** Prompts 'go', and once the answer streams, closes the session: the close succeeds, the prompt is answered cancelled. */
  async function closeWhileAnswering(client: Client, sessionId: string): Promise<void> {
    const first = client.nextUpdate();
    const answer = prompt(client, sessionId, 'go');
    await first;
    await expect(client.agent.request(acp.methods.agent.session.close, { sessionId })).resolves.toEqual({});
    await expect(answer).resolves.toMatchObject({ stopReason: 'cancelled' });
  }

  /** A session an earlier server stored in `db`, prompted once ('first'), with that server gone. */
  async function storedSession(db: string): Promise<string> {
    const first = await newHost({ persistence: { sqlite: db } });
    const earlier = await initialized(first);
    const sessionId = await session(earlier);
    await prompt(earlier, sessionId, 'first');
    await earlier.close();
    await first.close();
    return sessionId;
  }

  it('answers initialize with protocol v1 and loadSession when the host has persistence', async () => {
    const host = await newHost();
    const client = connect(host);
    const response = await client.agent.request(acp.methods.agent.initialize, { protocolVersion: acp.PROTOCOL_VERSION, clientCapabilities: {} });
    expect(response).toMatchObject({ protocolVersion: 1, agentCapabilities: { loadSession: true, sessionCapabilities: { resume: {} } } });
  });

  it('advertises images unless served text-only, which refuses an image before storing anything', async () => {
    const host = await newHost();
    const advertised = await connect(host).agent.request(acp.methods.agent.initialize, { protocolVersion: acp.PROTOCOL_VERSION, clientCapabilities: {} });
    expect(advertised.agentCapabilities?.promptCapabilities?.image).toBe(true);
    const client = connect(host, { images: false });
    const textOnly = await client.agent.request(acp.methods.agent.initialize, { protocolVersion: acp.PROTOCOL_VERSION, clientCapabilities: {} });
    expect(textOnly.agentCapabilities?.promptCapabilities?.image).toBe(false);
    const sessionId = await session(client);
    const image = { type: 'image' as const, mimeType: 'image/png', data: 'iVBORw0KGgo=' };
    const refused = client.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: 'text', text: 'look' }, image] });
    await expect(refused).rejects.toMatchObject({ code: -32602, message: expect.stringContaining('takes no images') });
    expect(host.agents.get(sessionId)!.session.events.filter((e) => e.type === 'inbox/accepted')).toStrictEqual([]);
    await expect(prompt(client, sessionId, 'text then')).resolves.toMatchObject({ stopReason: 'end_turn' });
    await expect(serveAcp(host, undefined, { images: 'no' } as unknown as AcpServeOptions)).rejects.toMatchObject({ code: 'INVALID_OPTIONS' });
  });

  it('does not offer loadSession without persistence', async () => {
    const host = await newHost();
    const client = connect({ agents: host.agents, sessions: host.sessions, subagents: host.subagents, persistence: undefined, createAgent: (options) => host.createAgent(options) });
    const response = await client.agent.request(acp.methods.agent.initialize, { protocolVersion: acp.PROTOCOL_VERSION, clientCapabilities: {} });
    expect(response.agentCapabilities?.loadSession).toBe(false);
    expect(response.agentCapabilities?.sessionCapabilities?.resume).toBeUndefined();
    expect(response.agentCapabilities?.sessionCapabilities?.close).toStrictEqual({});
    await expect(client.agent.request(acp.methods.agent.session.resume, { sessionId: 'x', cwd: dir })).rejects.toMatchObject({ code: -32601 });
  });

  it('creates a top-level agent per session/new, in the requested cwd', async () => {
    const host = await newHost();
    const client = await initialized(host);
    const sessionId = await session(client);
    expect(host.agents.get(sessionId)?.session.header.cwd).toBe(dir);
  });

  it('streams the turn as agent_message_chunk updates before answering end_turn', async () => {
    const host = await newHost();
    const client = await initialized(host);
    const sessionId = await session(client);
    await expect(prompt(client, sessionId, 'hi there')).resolves.toEqual({ stopReason: 'end_turn', usage: { inputTokens: 2, outputTokens: 4, totalTokens: 6 } });
    expect(texts(client.updates, 'agent_message_chunk')).toEqual(['echo: ', 'hi ', 'there']);
    expect(client.updates.every((n) => n.sessionId === sessionId)).toBe(true);
  });

  it('reports tool calls as tool_call then tool_call_update', async () => {
    const probe = recordingTool('probe');
    const host = await newHost({ tools: [probe] });
    const client = await initialized(host);
    const sessionId = await session(client, scripted({ toolCalls: [{ name: 'probe', input: { value: 'v' } }] }, { text: 'done' }));
    await expect(prompt(client, sessionId, 'use the tool')).resolves.toEqual({ stopReason: 'end_turn', usage: expect.any(Object) });
    expect(client.updates.map((n) => n.update.sessionUpdate)).toEqual(['tool_call', 'tool_call_update', 'agent_message_chunk']);
    expect(client.updates[0]?.update).toMatchObject({ title: 'probe', status: 'in_progress', rawInput: { value: 'v' } });
    expect(client.updates[1]?.update).toMatchObject({ status: 'completed', content: [{ type: 'content', content: { type: 'text', text: 'probe ok' } }] });
    expect(probe.calls).toEqual([{ value: 'v' }]);
  });

  it.each([
    ['max-tokens', 'max_tokens'],
    ['refusal', 'refusal'],
  ] as const)('maps a %s turn to stop reason %s', async (finish, stopReason) => {
    const host = await newHost();
    const client = await initialized(host);
    const sessionId = await session(client, scripted({ finish, text: 'partial' }));
    await expect(prompt(client, sessionId, 'go')).resolves.toEqual({ stopReason, usage: expect.any(Object) });
    expect(texts(client.updates, 'agent_message_chunk')).toEqual(['partial']);
  });

  it('fails the prompt request with an internal error when the turn fails', async () => {
    const host = await newHost();
    const client = await initialized(host);
    const sessionId = await session(client, scripted({ finish: 'error' }));
    await expect(prompt(client, sessionId, 'go')).rejects.toMatchObject({ code: -32603 });
  });

  it('answers max_turn_requests when the turn needs more model calls than maxStepsPerTurn', async () => {
    const host = await newHost({ tools: [recordingTool('probe')] });
    const client = await initialized(host);
    const calls = { toolCalls: [{ name: 'probe', input: { value: 'v' } }] };
    const sessionId = await session(client, { _meta: { [META]: { maxStepsPerTurn: 1, model: { kind: 'scripted', steps: [calls, { text: 'never' }] } } } });
    await expect(prompt(client, sessionId, 'go')).resolves.toMatchObject({ stopReason: 'max_turn_requests' });
  });

  it('refuses a model module that does not load as invalid params, with its error code', async () => {
    const host = await newHost();
    const client = await initialized(host);
    const missing = { _meta: { [META]: { model: { kind: 'module', specifier: join(dir, 'no-such-model.mjs') } } } };
    await expect(session(client, missing)).rejects.toMatchObject({ code: -32602, data: { code: 'INVALID_MODEL_SPEC' } });
  });

  it('ends the turn cancelled on session/cancel, answering the session’s token totals with what the cancelled turn spent', async () => {
    const waiting = untilCancelled();
    const host = await newHost({ tools: [waiting.tool] });
    const client = await initialized(host);
    const sessionId = await session(client, scripted({ text: 'first', usage: { inputTokens: 7, outputTokens: 3 } }, { toolCalls: [{ name: 'until_cancelled', input: {} }], usage: { inputTokens: 500, outputTokens: 5 } }));
    await expect(prompt(client, sessionId, 'one')).resolves.toEqual({ stopReason: 'end_turn', usage: { inputTokens: 7, outputTokens: 3, totalTokens: 10 } });
    const answer = prompt(client, sessionId, 'go');
    await waiting.entered;
    await client.agent.notify(acp.methods.agent.session.cancel, { sessionId });
    await expect(answer).resolves.toEqual({ stopReason: 'cancelled', usage: { inputTokens: 507, outputTokens: 8, totalTokens: 515 } });
    expect(host.agents.get(sessionId)?.status).toBe('idle');
  });

  it('ends the turn cancelled when the client cancels the prompt request itself ($/cancel_request), and runs the next prompt', async () => {
    const waiting = untilCancelled();
    const host = await newHost({ tools: [waiting.tool] });
    const client = await initialized(host);
    const sessionId = await session(client, scripted({ toolCalls: [{ name: 'until_cancelled', input: {} }] }));
    const cancel = new AbortController();
    const answer = client.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: 'text', text: 'go' }] }, { cancellationSignal: cancel.signal });
    await waiting.entered;
    cancel.abort();
    await expect(answer).resolves.toMatchObject({ stopReason: 'cancelled' });
    await expect(prompt(client, sessionId, 'next')).resolves.toMatchObject({ stopReason: 'end_turn' });
  });

  it('refuses a second prompt while one runs', async () => {
    const host = await newHost();
    const client = await initialized(host);
    const sessionId = await session(client, scripted({ finish: 'hang', text: 'waiting' }));
    const first = client.nextUpdate();
    const running = prompt(client, sessionId, 'one');
    await first;
    await expect(prompt(client, sessionId, 'two')).rejects.toMatchObject({ code: -32600 });
    await client.agent.notify(acp.methods.agent.session.cancel, { sessionId });
    await expect(running).resolves.toMatchObject({ stopReason: 'cancelled' });
  });

  it('loads a session persisted by an earlier server, replays it, and continues it', async () => {
    const db = join(dir, 'load.db');
    const sessionId = await storedSession(db);

    const second = await newHost({ persistence: { sqlite: db } });
    const client = await initialized(second);
    await expect(client.agent.request(acp.methods.agent.session.load, { sessionId, cwd: dir, mcpServers: [] })).resolves.toEqual({});
    expect(client.updates.map((n) => n.update.sessionUpdate)).toEqual(['user_message_chunk', 'agent_message_chunk']);
    expect(texts(client.updates, 'agent_message_chunk')).toEqual(['echo: first']);
    await expect(prompt(client, sessionId, 'second')).resolves.toEqual({ stopReason: 'end_turn', usage: expect.any(Object) });
    expect(texts(client.updates, 'agent_message_chunk').slice(1).join('')).toBe('echo: second');
  });

  it('restores one stored session for loads and a resume that arrive together: each answers, one agent serves them', async () => {
    const db = join(dir, 'together.db');
    const sessionId = await storedSession(db);

    // Loading the session waits until all three requests are in: they overlap for certain.
    const stored = sqlitePersistence(db);
    const gate = deferred<void>();
    let restores = 0;
    // Once the server's input has the third, the turn of the event loop after it has taken each
    // up to where it waits for the one load (only resolved promises lie on that path).
    const countRestores = (chunk: Buffer) => {
      restores += chunk.toString('utf8').match(/"method":"session\/(?:load|resume)"/g)?.length ?? 0;
      if (restores === 3) setImmediate(() => gate.resolve());
    };
    let loads = 0;
    const slowLoad = storeOver(stored, {
      load: async (id) => {
        loads += 1;
        await gate.promise;
        return stored.load(id);
      },
    });
    const second = await newHost({ persistence: slowLoad });
    const client = await initialized(second, countRestores);
    const params = { sessionId, cwd: dir, mcpServers: [] };
    await expect(
      Promise.all([
        client.agent.request(acp.methods.agent.session.load, params),
        client.agent.request(acp.methods.agent.session.resume, params),
        client.agent.request(acp.methods.agent.session.load, params),
      ]),
    ).resolves.toEqual([{}, {}, {}]);
    expect(loads).toBe(1);
    await expect(prompt(client, sessionId, 'second')).resolves.toMatchObject({ stopReason: 'end_turn' });
    await second.close();
    await stored.close();
  });

  it('answers session/load and session/resume of an empty or unknown session id as not found, naming the session as ACP asks', async () => {
    const host = await newHost({ persistence: { sqlite: join(dir, 'empty-id.db') } });
    const client = await initialized(host);
    for (const sessionId of ['', 'no-such-session']) {
      const params = { sessionId, cwd: dir, mcpServers: [] };
      await expect(client.agent.request(acp.methods.agent.session.load, params)).rejects.toMatchObject({ code: -32002, data: { sessionId } });
      await expect(client.agent.request(acp.methods.agent.session.resume, params)).rejects.toMatchObject({ code: -32002, data: { sessionId } });
    }
  });

  it('refuses to load or resume a session in a cwd other than its own (stored or live), serving nothing for it, and loads it in its own', async () => {
    const db = join(dir, 'other-cwd.db');
    const sessionId = await storedSession(db);
    const second = await newHost({ persistence: { sqlite: db } });
    const client = await initialized(second);
    const elsewhere = join(dir, 'elsewhere');
    await expect(client.agent.request(acp.methods.agent.session.load, { sessionId, cwd: elsewhere, mcpServers: [] })).rejects.toMatchObject({ code: -32602, message: expect.stringContaining('cwd') });
    await expect(client.agent.request(acp.methods.agent.session.resume, { sessionId, cwd: elsewhere })).rejects.toMatchObject({ code: -32602 });
    expect(second.agents.list()).toStrictEqual([]);
    await expect(prompt(client, sessionId, 'there?')).rejects.toMatchObject({ code: -32002 });
    await expect(client.agent.request(acp.methods.agent.session.resume, { sessionId, cwd: `${dir}/` })).resolves.toEqual({});
    const other = await initialized(second);
    await expect(other.agent.request(acp.methods.agent.session.load, { sessionId, cwd: elsewhere, mcpServers: [] })).rejects.toMatchObject({ code: -32602 });
    await expect(prompt(other, sessionId, 'there?')).rejects.toMatchObject({ code: -32002 });
  });

  it('serves a resume in the session’s own cwd sent together with a load in another cwd: only the other is refused', async () => {
    const db = join(dir, 'joined-cwd.db');
    const sessionId = await storedSession(db);
    const second = await newHost({ persistence: { sqlite: db } });
    const client = await initialized(second);
    const elsewhere = client.agent.request(acp.methods.agent.session.load, { sessionId, cwd: join(dir, 'elsewhere'), mcpServers: [] });
    const own = client.agent.request(acp.methods.agent.session.resume, { sessionId, cwd: dir });
    await expect(elsewhere).rejects.toMatchObject({ code: -32602, message: expect.stringContaining('cwd') });
    await expect(own).resolves.toEqual({});
    await expect(prompt(client, sessionId, 'there?')).resolves.toMatchObject({ stopReason: 'end_turn' });
  });

  it('resumes a session persisted by an earlier server without replaying it, and continues it', async () => {
    const db = join(dir, 'resume.db');
    const sessionId = await storedSession(db);

    const second = await newHost({ persistence: { sqlite: db } });
    const client = await initialized(second);
    await expect(client.agent.request(acp.methods.agent.session.resume, { sessionId: 'no-such-session', cwd: dir })).rejects.toMatchObject({ code: -32002 });
    await expect(client.agent.request(acp.methods.agent.session.resume, { sessionId, cwd: dir })).resolves.toEqual({});
    expect(client.updates).toEqual([]);
    await expect(prompt(client, sessionId, 'second')).resolves.toMatchObject({ stopReason: 'end_turn' });
    expect(texts(client.updates, 'agent_message_chunk').join('')).toBe('echo: second');
    const users = second.sessions.get(sessionId)!.events.filter((event) => event.type === 'user/message');
    expect(users.map((event) => (event.data as { content: { text: string }[] }).content[0]!.text)).toEqual(['first', 'second']);
  });

  it('runs nothing on session/load of a session whose writer died with input it had accepted: the next prompt takes it, and a cancel ends that', async () => {
    // What a writer that crashed right after accepting a message leaves: the input, no turn that took it.
    const db = join(dir, 'pending-input.db');
    const store = sqlitePersistence(db);
    const sessionId = 'crashed-writer';
    await store.create({ id: sessionId, createdAt: Date.now(), cwd: dir });
    const accepted = { id: 'left-over', target: 'next-turn', content: [text('left over')], source: { kind: 'user' } };
    await store.append(sessionId, [{ seq: 0, time: Date.now(), type: 'inbox/accepted', data: accepted }]);
    await store.close();

    // The first model call hangs, whichever turn makes it; later ones echo.
    const host = await newHost({ persistence: { sqlite: db }, model: { kind: 'scripted', steps: [{ finish: 'hang', text: 'hanging' }] } });
    const client = await initialized(host);
    await expect(client.agent.request(acp.methods.agent.session.load, { sessionId, cwd: dir, mcpServers: [] })).resolves.toEqual({});
    // No turn runs that the client did not prompt (it could neither see nor cancel it).
    expect(host.agents.get(sessionId)!.status).toBe('idle');
    const first = client.nextUpdate();
    const answer = prompt(client, sessionId, 'next');
    await first;
    expect(texts(client.updates, 'agent_message_chunk')).toEqual(['hanging']);
    await client.agent.notify(acp.methods.agent.session.cancel, { sessionId });
    await expect(answer).resolves.toMatchObject({ stopReason: 'cancelled' });
    await expect(prompt(client, sessionId, 'again')).resolves.toMatchObject({ stopReason: 'end_turn' });
    expect(texts(client.updates, 'agent_message_chunk').slice(1).join('')).toBe('echo: again');
  });

  it('sends the images a tool returned in its tool_call_update, live and on session/load', async () => {
    const image = { type: 'image' as const, mimeType: 'image/png', data: 'iVBORw0KGgo=' };
    const snap = { name: 'snap', description: 'takes a screenshot', parameters: { type: 'object' }, execute: async () => ({ content: [text('shot'), image] }) };
    const db = join(dir, 'tool-images.db');
    const first = await newHost({ persistence: { sqlite: db }, tools: [snap] });
    const earlier = await initialized(first);
    const sessionId = await session(earlier, scripted({ toolCalls: [{ name: 'snap', input: {} }] }, { text: 'done' }));
    await expect(prompt(earlier, sessionId, 'look')).resolves.toMatchObject({ stopReason: 'end_turn' });
    const expected = { status: 'completed', content: [{ type: 'content', content: { type: 'text', text: 'shot' } }, { type: 'content', content: image }] };
    expect(earlier.updates.find((notification) => notification.update.sessionUpdate === 'tool_call_update')?.update).toMatchObject(expected);
    await earlier.close();
    await first.close();

    const second = await newHost({ persistence: { sqlite: db }, tools: [snap] });
    const client = await initialized(second);
    await client.agent.request(acp.methods.agent.session.load, { sessionId, cwd: dir, mcpServers: [] });
    expect(client.updates.find((notification) => notification.update.sessionUpdate === 'tool_call_update')?.update).toMatchObject(expected);
  });

  it('takes image and resource-link blocks, answers max_tokens and refusal, and replays the image on session/load', async () => {
    const db = join(dir, 'blocks.db');
    const first = await newHost({ persistence: { sqlite: db } });
    const earlier = await initialized(first);
    const sessionId = await session(earlier, scripted({ text: 'cut off', finish: 'max-tokens' }, { finish: 'refusal' }));
    const image = { type: 'image' as const, mimeType: 'image/png', data: 'iVBORw0KGgo=' };
    const link = { type: 'resource_link' as const, name: 'notes', uri: 'file:///tmp/notes.md' };
    const blocks = { sessionId, prompt: [{ type: 'text' as const, text: 'look' }, image, link] };
    await expect(earlier.agent.request(acp.methods.agent.session.prompt, blocks)).resolves.toMatchObject({ stopReason: 'max_tokens' });
    await expect(prompt(earlier, sessionId, 'again')).resolves.toMatchObject({ stopReason: 'refusal' });
    await earlier.close();
    await first.close();

    const second = await newHost({ persistence: { sqlite: db } });
    const client = await initialized(second);
    await client.agent.request(acp.methods.agent.session.load, { sessionId, cwd: dir, mcpServers: [] });
    expect(client.updates.map((notification) => notification.update)).toEqual([
      { sessionUpdate: 'user_message_chunk', content: { type: 'text', text: 'look' } },
      { sessionUpdate: 'user_message_chunk', content: image },
      { sessionUpdate: 'user_message_chunk', content: { type: 'text', text: '[resource notes: file:///tmp/notes.md]' } },
      { sessionUpdate: 'agent_message_chunk', content: { type: 'text', text: 'cut off' } },
      { sessionUpdate: 'user_message_chunk', content: { type: 'text', text: 'again' } },
    ]);
  });

  it('streams reasoning and tool traffic as thought and tool updates, each once and none empty, and replays them on session/load', async () => {
    const db = join(dir, 'thinking.db');
    const first = await newHost({ persistence: { sqlite: db } });
    const earlier = await initialized(first);
    const model = { kind: 'module', specifier: new URL('./fixtures/echo-model.mjs', import.meta.url).href, export: 'createThinkingModel' };
    const sessionId = await session(earlier, { _meta: { [META]: { model } } });
    await expect(prompt(earlier, sessionId, 'go')).resolves.toMatchObject({ stopReason: 'end_turn' });
    const live = earlier.updates.map((notification) => notification.update);
    await earlier.close();
    await first.close();
    const second = await newHost({ persistence: { sqlite: db } });
    const client = await initialized(second);
    await client.agent.request(acp.methods.agent.session.load, { sessionId, cwd: dir, mcpServers: [] });
    const call = { sessionUpdate: 'tool_call', toolCallId: 'call_1', title: 'clock', kind: 'other', status: 'in_progress', rawInput: {} };
    const result = { sessionUpdate: 'tool_call_update', toolCallId: 'call_1', status: 'failed', content: [{ type: 'content', content: { type: 'text', text: 'Error: no tool named clock is available to this agent' } }] };
    const thought = { sessionUpdate: 'agent_thought_chunk', content: { type: 'text', text: 'thinking' } };
    const answer = { sessionUpdate: 'agent_message_chunk', content: { type: 'text', text: 'done' } };
    expect(live).toEqual([thought, call, result, answer]);
    expect(client.updates.map((notification) => notification.update)).toEqual([
      { sessionUpdate: 'user_message_chunk', content: { type: 'text', text: 'go' } },
      thought,
      call,
      result,
      answer,
    ]);
  });

  it.each([
    ['a relative cwd', { cwd: 'relative', mcpServers: [] }, 'cwd must be an absolute path'],
    ['a cwd holding a NUL byte', { cwd: `${dir}\0x`, mcpServers: [] }, 'cwd must not contain a NUL byte'],
    ['MCP servers', { cwd: dir, mcpServers: [{ name: 'x', command: 'x', args: [], env: [] }] }, 'mcpServers: this agent connects to no MCP servers'],
    ['additional directories', { cwd: dir, mcpServers: [], additionalDirectories: [dir] }, 'additionalDirectories: this agent works in cwd only'],
    ['an invalid model in _meta', { cwd: dir, mcpServers: [], _meta: { [META]: { model: { kind: 'nope' } } } }, 'model is not a valid model spec'],
  ])('rejects session/new with %s as invalid params, saying why', async (_name, params, why) => {
    const host = await newHost();
    const client = await initialized(host);
    await expect(client.agent.request(acp.methods.agent.session.new, params as acp.NewSessionRequest)).rejects.toMatchObject({ code: -32602, message: expect.stringContaining(why) });
    expect(host.agents.list()).toStrictEqual([]);
    const load = client.agent.request(acp.methods.agent.session.load, { ...(params as acp.NewSessionRequest), sessionId: 'any' });
    if (!('_meta' in params)) await expect(load).rejects.toMatchObject({ code: -32602, message: expect.stringContaining(why) });
  });

  it('refuses to load or resume, text-only, a session holding an image a prompt sent (its every turn would fail), and loads one without', async () => {
    const db = join(dir, 'text-only-load.db');
    const first = await newHost({ persistence: { sqlite: db } });
    const earlier = await initialized(first);
    const withImage = await session(earlier);
    const image = { type: 'image' as const, mimeType: 'image/png', data: 'iVBORw0KGgo=' };
    await earlier.agent.request(acp.methods.agent.session.prompt, { sessionId: withImage, prompt: [{ type: 'text', text: 'look' }, image] });
    const textOnly = await session(earlier);
    await prompt(earlier, textOnly, 'words');
    await earlier.close();
    await first.close();

    const second = await newHost({ persistence: { sqlite: db } });
    const client = connect(second, { images: false });
    await client.agent.request(acp.methods.agent.initialize, { protocolVersion: acp.PROTOCOL_VERSION, clientCapabilities: {} });
    const refused = { code: -32602, message: expect.stringContaining('takes no images') };
    await expect(client.agent.request(acp.methods.agent.session.load, { sessionId: withImage, cwd: dir, mcpServers: [] })).rejects.toMatchObject(refused);
    await expect(client.agent.request(acp.methods.agent.session.resume, { sessionId: withImage, cwd: dir })).rejects.toMatchObject(refused);
    expect(second.agents.get(withImage)).toBeUndefined();
    await expect(prompt(client, withImage, 'again')).rejects.toMatchObject({ code: -32002 });
    await expect(client.agent.request(acp.methods.agent.session.load, { sessionId: textOnly, cwd: dir, mcpServers: [] })).resolves.toEqual({});
    await expect(prompt(client, textOnly, 'more')).resolves.toMatchObject({ stopReason: 'end_turn' });
  });

  it('rejects a prompt for an unknown session and an audio prompt', async () => {
    const host = await newHost();
    const client = await initialized(host);
    await expect(prompt(client, 'no-such-session', 'x')).rejects.toMatchObject({ code: -32002 });
    const sessionId = await session(client);
    const audio = { sessionId, prompt: [{ type: 'audio' as const, mimeType: 'audio/wav', data: 'AAAA' }] };
    await expect(client.agent.request(acp.methods.agent.session.prompt, audio)).rejects.toMatchObject({ code: -32602 });
  });

  it.each([
    ['data that is not base64', { mimeType: 'image/png', data: 'not base64!!' }],
    ['no data', { mimeType: 'image/png', data: '' }],
    ['a type that is no image type', { mimeType: 'text/html', data: 'aGVsbG8=' }],
  ])('refuses an image with %s as invalid params before anything is stored, and runs the next prompt', async (_name, image) => {
    const host = await newHost();
    const client = await initialized(host);
    const sessionId = await session(client);
    const refused = client.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: 'text', text: 'look' }, { type: 'image', ...image }] });
    await expect(refused).rejects.toMatchObject({ code: -32602, message: expect.stringContaining('an image block needs') });
    expect(host.agents.get(sessionId)!.session.events.filter((event) => event.type === 'inbox/accepted')).toStrictEqual([]);
    await expect(prompt(client, sessionId, 'x')).resolves.toMatchObject({ stopReason: 'end_turn' });
  });

  it('rejects a prompt of blank text blocks alone as empty, storing nothing, and runs the next', async () => {
    const host = await newHost();
    const client = await initialized(host);
    const sessionId = await session(client);
    for (const blank of [[{ type: 'text' as const, text: '' }], [{ type: 'text' as const, text: ' \n' }, { type: 'text' as const, text: '' }]]) {
      await expect(client.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: blank })).rejects.toMatchObject({ code: -32602, message: expect.stringContaining('empty') });
    }
    expect(host.agents.get(sessionId)!.session.events.filter((event) => event.type === 'user/message')).toHaveLength(0);
    await expect(prompt(client, sessionId, 'x')).resolves.toMatchObject({ stopReason: 'end_turn' });
  });

  it('replays on session/load a prompt of more blocks than a call may spread (200 000), each block once', async () => {
    const host = await newHost();
    const client = await initialized(host);
    const sessionId = await session(client, scripted({ text: 'ok' }));
    const blocks = Array.from({ length: 200_000 }, (_, i) => ({ type: 'text' as const, text: `b${i}` }));
    await expect(client.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: blocks })).resolves.toMatchObject({ stopReason: 'end_turn' });
    client.updates.length = 0;
    await expect(client.agent.request(acp.methods.agent.session.load, { sessionId, cwd: dir, mcpServers: [] })).resolves.toEqual({});
    const replayed = texts(client.updates, 'user_message_chunk');
    expect(replayed).toHaveLength(200_000);
    expect([replayed[0], replayed.at(-1)]).toStrictEqual(['b0', 'b199999']);
    expect(texts(client.updates, 'agent_message_chunk')).toStrictEqual(['ok']);
  }, 60_000);

  it('frees a session on session/close: its prompt is answered cancelled, its continuable children released, and session/load brings it back', async () => {
    const host = await newHost({ persistence: { sqlite: join(dir, 'close.db') } });
    host.subagents.registerProvider(inProcessProvider(host));
    const client = await initialized(host);
    const sessionId = await session(client, scripted({ finish: 'hang', text: 'waiting' }));
    const { childId } = await host.subagents.startContinuable({
      provider: 'in-process',
      label: 'helper',
      request: { prompt: [text('help')], parent: host.agents.get(sessionId)!, agentOptions: { model: { kind: 'scripted', steps: [{ finish: 'hang' }] } } },
    });
    await closeWhileAnswering(client, sessionId);
    expect(host.agents.get(sessionId)).toBeUndefined();
    expect(host.sessions.get(sessionId)).toBeUndefined();
    expect(host.sessions.get(childId)).toBeUndefined();
    expect((await host.persistence!.load(childId))?.events.at(-1)).toMatchObject({ type: 'turn/end', data: { reason: { kind: 'aborted' } } });
    await expect(prompt(client, sessionId, 'again')).rejects.toMatchObject({ code: -32002 });
    await expect(client.agent.request(acp.methods.agent.session.load, { sessionId, cwd: dir, mcpServers: [] })).resolves.toEqual({});
    expect(texts(client.updates, 'user_message_chunk')).toContain('go');
    expect(host.agents.get(sessionId)?.status).toBe('idle');
  });

  it('refuses to load or resume a live subagent child on its own (its parent’s session runs it): closing its id succeeds and the child stays its parent’s', async () => {
    const host = await newHost({ persistence: { sqlite: join(dir, 'live-child.db') } });
    host.subagents.registerProvider(inProcessProvider(host));
    const client = await initialized(host);
    const sessionId = await session(client);
    const parent = host.agents.get(sessionId)!;
    const { childId } = await host.subagents.startContinuable({ provider: 'in-process', label: 'helper', request: { prompt: [text('help')], parent } });
    await expect(client.agent.request(acp.methods.agent.session.load, { sessionId: childId, cwd: dir, mcpServers: [] })).rejects.toMatchObject({ code: -32602, message: expect.stringContaining('subagent') });
    await expect(client.agent.request(acp.methods.agent.session.resume, { sessionId: childId, cwd: dir })).rejects.toMatchObject({ code: -32602 });
    await expect(prompt(client, childId, 'hello child')).rejects.toMatchObject({ code: -32002 });
    await expect(client.agent.request(acp.methods.agent.session.close, { sessionId: childId })).resolves.toEqual({});
    expect(host.agents.get(childId)).toBeDefined();
    await expect(client.agent.request(acp.methods.agent.session.close, { sessionId })).resolves.toEqual({});
    expect(host.agents.list()).toStrictEqual([]);
  });

  it('answers session/close and the prompt it cancels while the model ignores the cancel, once the host stops waiting for it', async () => {
    const host = await newHost({ abandonGraceMs: 50 });
    const client = await initialized(host);
    const model = { kind: 'module', specifier: new URL('./fixtures/echo-model.mjs', import.meta.url).href, export: 'createDeafModel' };
    const sessionId = await session(client, { _meta: { [META]: { model } } });
    await closeWhileAnswering(client, sessionId);
    expect(host.agents.get(sessionId)).toBeUndefined();
  });

  it('serves a session/load sent right after session/close with the session restored afresh, not the agent being closed', async () => {
    const host = await newHost({ persistence: { sqlite: join(dir, 'close-load.db') } });
    const client = await initialized(host);
    const sessionId = await session(client);
    await prompt(client, sessionId, 'first');
    const closing = host.agents.get(sessionId)!;
    const closed = client.agent.request(acp.methods.agent.session.close, { sessionId });
    const loaded = client.agent.request(acp.methods.agent.session.load, { sessionId, cwd: dir, mcpServers: [] });
    await expect(Promise.all([closed, loaded])).resolves.toEqual([{}, {}]);
    const live = host.agents.get(sessionId);
    expect(live).toBeDefined();
    expect(live).not.toBe(closing);
    await expect(prompt(client, sessionId, 'second')).resolves.toMatchObject({ stopReason: 'end_turn' });
  });

  describe('messages that arrive in one write', () => {
    /** serveAcp over raw lines: `send` writes its messages in one write; `answer(id)` resolves with the response to `id`. */
    function rawClient(host: AcpServeHost) {
      const toServer = new PassThrough();
      const toClient = new PassThrough();
      const served = serveAcp(host, { input: toServer, output: toClient });
      const answers = new Map<number, unknown>();
      /** Request ids in the order their answers arrived. */
      const order: unknown[] = [];
      /** What arrived, in order: `answer ID` for a response, `update TEXT` for a message chunk. */
      const wire: string[] = [];
      let arrived = deferred();
      let buffered = '';
      toClient.setEncoding('utf8').on('data', (chunk: string) => {
        buffered += chunk;
        const lines = buffered.split('\n');
        buffered = lines.pop()!;
        for (const line of lines) {
          const message = JSON.parse(line) as { id?: number; method?: string; params?: { update?: { content?: { text?: unknown } } } };
          if (message.id !== undefined && message.method === undefined) {
            answers.set(message.id, message);
            order.push(message.id);
            wire.push(`answer ${message.id}`);
          }
          const chunk = message.params?.update?.content?.text;
          if (message.method === 'session/update' && typeof chunk === 'string') wire.push(`update ${chunk}`);
        }
        arrived.resolve();
      });
      return {
        order,
        wire,
        send: (...messages: object[]) => void toServer.write(messages.map((m) => `${JSON.stringify({ jsonrpc: '2.0', ...m })}\n`).join('')),
        async answer(id: number): Promise<{ result?: Record<string, unknown>; error?: { code: number } }> {
          while (!answers.has(id)) {
            await arrived.promise;
            arrived = deferred();
          }
          return answers.get(id) as { result?: Record<string, unknown>; error?: { code: number } };
        },
        async end(): Promise<void> {
          toServer.end();
          await served;
        },
      };
    }

    async function opened(host: AcpServeHost) {
      const raw = rawClient(host);
      raw.send({ id: 1, method: 'initialize', params: { protocolVersion: acp.PROTOCOL_VERSION, clientCapabilities: {} } });
      await raw.answer(1);
      raw.send({ id: 2, method: 'session/new', params: { cwd: dir, mcpServers: [] } });
      const sessionId = (await raw.answer(2)).result!['sessionId'] as string;
      raw.send({ id: 3, method: 'session/prompt', params: { sessionId, prompt: [{ type: 'text', text: 'zero' }] } });
      expect((await raw.answer(3)).result).toMatchObject({ stopReason: 'end_turn' });
      return { raw, sessionId };
    }

    const says = (sessionId: string, id: number, value: string) => ({ id, method: 'session/prompt', params: { sessionId, prompt: [{ type: 'text', text: value }] } });

    it('takes the requests sent with initialize before its answer: a session/new, a load and a prompt are served, not refused as uninitialized', async () => {
      const db = join(dir, 'one-write-initialize.db');
      const initialize = (id: number) => ({ id, method: 'initialize', params: { protocolVersion: acp.PROTOCOL_VERSION, clientCapabilities: {} } });
      // Its input ends right after: what it sent is still answered.
      const first = rawClient(await newHost({ persistence: { sqlite: db } }));
      first.send(initialize(1), { id: 2, method: 'session/new', params: { cwd: dir, mcpServers: [] } });
      await first.end();
      const created = await first.answer(2);
      expect(created.result).toMatchObject({ sessionId: expect.any(String) });
      expect(first.order).toStrictEqual([1, 2]);
      const sessionId = created.result!['sessionId'] as string;
      // Another server of the same database: a client that reconnects sends it all at once.
      const second = rawClient(await newHost({ persistence: { sqlite: db } }));
      second.send(initialize(1), { id: 2, method: 'session/load', params: { sessionId, cwd: dir, mcpServers: [] } }, says(sessionId, 3, 'one'), initialize(4));
      expect([(await second.answer(1)).result, (await second.answer(2)).result, (await second.answer(3)).result, (await second.answer(4)).result]).toMatchObject([
        { protocolVersion: acp.PROTOCOL_VERSION },
        {},
        { stopReason: 'end_turn' },
        { protocolVersion: acp.PROTOCOL_VERSION },
      ]);
      await second.end();
      // An initialize the SDK refuses (bad params) leaves the requests after it uninitialized, as if sent one by one.
      const third = rawClient(await newHost());
      third.send({ id: 1, method: 'initialize', params: {} }, { id: 2, method: 'session/new', params: { cwd: dir, mcpServers: [] } });
      expect([(await third.answer(1)).error, (await third.answer(2)).error]).toMatchObject([{ code: -32602 }, { code: -32600, message: expect.stringContaining('initialized') }]);
      expect(third.order).toStrictEqual([1, 2]);
      await third.end();
    });

    it('applies a cancel sent just before a prompt to nothing: the prompt runs', async () => {
      const { raw, sessionId } = await opened(await newHost());
      raw.send({ method: 'session/cancel', params: { sessionId } }, says(sessionId, 4, 'one'));
      expect((await raw.answer(4)).result).toMatchObject({ stopReason: 'end_turn' });
      await raw.end();
    });

    it('cancels a prompt sent just before the cancel', async () => {
      const host = await newHost({ model: { kind: 'scripted', steps: [{ text: 'zero' }, { finish: 'hang' }] } });
      const { raw, sessionId } = await opened(host);
      raw.send(says(sessionId, 4, 'one'), { method: 'session/cancel', params: { sessionId } });
      expect((await raw.answer(4)).result).toStrictEqual({ stopReason: 'cancelled' });
      await raw.end();
    });

    it('runs a prompt sent just after a cancel of the running one, once that turn is answered cancelled', async () => {
      const host = await newHost({ model: { kind: 'scripted', steps: [{ text: 'zero' }, { finish: 'hang' }, { text: 'two' }, { finish: 'hang' }, { text: 'four' }, { text: 'five' }, { finish: 'hang' }] } });
      const { raw, sessionId } = await opened(host);
      const agent = host.agents.get(sessionId)!;
      const running = async (id: number, value: string) => {
        const started = deferred();
        const unsubscribe = agent.subscribe((event) => event.type === 'step/start' && started.resolve());
        raw.send(says(sessionId, id, value));
        await started.promise.finally(unsubscribe);
      };
      // What a client does when its user stops the turn and sends another prompt: one write, or two.
      await running(4, 'one');
      raw.send({ method: 'session/cancel', params: { sessionId } }, says(sessionId, 5, 'two'));
      expect([(await raw.answer(4)).result, (await raw.answer(5)).result]).toMatchObject([{ stopReason: 'cancelled' }, { stopReason: 'end_turn' }]);
      // The new turn streams after the answer to the one it stopped (before the fix its text came first, in the same write).
      expect(raw.wire.slice(raw.wire.indexOf('answer 4'))).toStrictEqual(['answer 4', 'update two', 'answer 5']);
      await running(6, 'three');
      raw.send({ method: 'session/cancel', params: { sessionId } });
      raw.send(says(sessionId, 7, 'four'));
      expect([(await raw.answer(6)).result, (await raw.answer(7)).result]).toMatchObject([{ stopReason: 'cancelled' }, { stopReason: 'end_turn' }]);
      expect(raw.order).toStrictEqual([1, 2, 3, 4, 5, 6, 7]);
      // A prompt sent while one runs, with no cancel, is still refused.
      raw.send(says(sessionId, 8, 'five'), says(sessionId, 9, 'six'));
      expect([(await raw.answer(8)).result, (await raw.answer(9)).error]).toMatchObject([{ stopReason: 'end_turn' }, { code: -32600 }]);
      // One that waits for the cancelled turn is cancelled by a close sent after it, as the turn is.
      await running(10, 'seven');
      raw.send({ method: 'session/cancel', params: { sessionId } }, says(sessionId, 11, 'eight'), { id: 12, method: 'session/close', params: { sessionId } });
      expect([(await raw.answer(10)).result, (await raw.answer(11)).result, (await raw.answer(12)).result]).toMatchObject([{ stopReason: 'cancelled' }, { stopReason: 'cancelled' }, {}]);
      await raw.end();
    });

    it('answers the prompts sent before its input ended to a client that reads its output slowly', async () => {
      const host = await newHost({ model: { kind: 'scripted', steps: [{ text: 'word '.repeat(5_000) }] } });
      const toServer = new PassThrough();
      // Read nothing until the input ended and the turn ran: its 5,000 updates (about 1 MB) back the output up.
      const toClient = new PassThrough();
      let finished = false;
      const served = serveAcp(host, { input: toServer, output: toClient }).finally(() => (finished = true));
      const lines = [
        { id: 1, method: 'initialize', params: { protocolVersion: acp.PROTOCOL_VERSION, clientCapabilities: {} } },
        { id: 2, method: 'session/new', params: { cwd: dir, mcpServers: [] } },
      ];
      toServer.write(lines.map((m) => `${JSON.stringify({ jsonrpc: '2.0', ...m })}\n`).join(''));
      let text = '';
      const readAll = (): void => {
        for (let chunk = toClient.read() as Buffer | null; chunk !== null; chunk = toClient.read() as Buffer | null) text += chunk.toString();
      };
      while (!text.includes('"id":2')) {
        await new Promise((resolve) => setTimeout(resolve, 5));
        readAll();
      }
      const sessionId = (JSON.parse(text.trim().split('\n').at(-1)!) as { result: { sessionId: string } }).result.sessionId;
      toServer.end(`${JSON.stringify({ jsonrpc: '2.0', ...says(sessionId, 3, 'go') })}\n`);
      await new Promise((resolve) => setTimeout(resolve, 300));
      // The connection ends without waiting for this reader (one that reads nothing holds nothing up);
      // the answer is written once what is ahead of it was read (before the fix it was dropped).
      const answered = () => text.split('\n').some((line) => line.includes('"id":3'));
      while (!finished || !answered()) {
        readAll();
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      await served;
      const answers = text.trim().split('\n').map((line) => JSON.parse(line) as { id?: number; result?: unknown }).filter((message) => message.id === 3);
      expect(answers).toMatchObject([{ result: { stopReason: 'end_turn' } }]);
    });

    it('refuses a prompt sent just after a close of its session as for a closed session', async () => {
      const { raw, sessionId } = await opened(await newHost());
      raw.send({ id: 4, method: 'session/close', params: { sessionId } }, says(sessionId, 5, 'one'));
      expect((await raw.answer(4)).result).toStrictEqual({});
      expect((await raw.answer(5)).error).toMatchObject({ code: -32002 });
      await raw.end();
    });

    it('answers a load sent just after a close once the close is done, and serves the session it restored', async () => {
      const host = await newHost({ persistence: { sqlite: join(dir, 'one-write-close-load.db') } });
      const { raw, sessionId } = await opened(host);
      const closing = host.agents.get(sessionId)!;
      raw.send({ id: 4, method: 'session/close', params: { sessionId } }, { id: 5, method: 'session/load', params: { sessionId, cwd: dir, mcpServers: [] } });
      expect([(await raw.answer(4)).result, (await raw.answer(5)).result]).toStrictEqual([{}, {}]);
      expect(host.agents.get(sessionId)).not.toBe(closing);
      raw.send(says(sessionId, 6, 'two'));
      expect((await raw.answer(6)).result).toMatchObject({ stopReason: 'end_turn' });
      // Two closes, then a load: the load waits for both.
      const reloaded = host.agents.get(sessionId)!;
      raw.send({ id: 7, method: 'session/close', params: { sessionId } }, { id: 8, method: 'session/close', params: { sessionId } }, { id: 9, method: 'session/load', params: { sessionId, cwd: dir, mcpServers: [] } });
      expect([(await raw.answer(7)).result, (await raw.answer(8)).result, (await raw.answer(9)).result]).toStrictEqual([{}, {}, {}]);
      expect(host.agents.get(sessionId)).not.toBe(reloaded);
      raw.send(says(sessionId, 10, 'three'));
      expect((await raw.answer(10)).result).toMatchObject({ stopReason: 'end_turn' });
      await raw.end();
    });

    // The SDK answers these -32600 without handing them to a handler: they must not act on arrival either.
    it('lets a cancel or close the SDK refuses (no "jsonrpc", an object id) change nothing', async () => {
      const host = await newHost({ persistence: { sqlite: join(dir, 'one-write-refused.db') } });
      const { raw, sessionId } = await opened(host);
      raw.send(says(sessionId, 4, 'one'), { jsonrpc: undefined, method: 'session/cancel', params: { sessionId } });
      expect((await raw.answer(4)).result).toMatchObject({ stopReason: 'end_turn' });
      raw.send(
        { jsonrpc: undefined, id: 5, method: 'session/close', params: { sessionId } },
        { id: { not: 'an id' }, method: 'session/close', params: { sessionId } },
        says(sessionId, 6, 'two'),
      );
      expect((await raw.answer(6)).result).toMatchObject({ stopReason: 'end_turn' });
      raw.send({ id: 7, method: 'session/load', params: { sessionId, cwd: dir, mcpServers: [] } });
      expect((await raw.answer(7)).result).toStrictEqual({});
      expect(host.agents.get(sessionId)).toBeDefined();
      await raw.end();
    });

    // ACP has session/cancel a notification and session/close a request: sent the other way, the SDK
    // answers the cancel -32601 and drops the close; what it refuses must not act on arrival either.
    it('lets a session/cancel sent as a request (answered -32601) or a session/close sent as a notification change nothing', async () => {
      const { raw, sessionId } = await opened(await newHost());
      raw.send(says(sessionId, 4, 'one'), { id: 5, method: 'session/cancel', params: { sessionId } });
      expect((await raw.answer(5)).error).toMatchObject({ code: -32601 });
      expect((await raw.answer(4)).result).toMatchObject({ stopReason: 'end_turn' });
      raw.send(says(sessionId, 6, 'two'), { method: 'session/close', params: { sessionId } });
      expect((await raw.answer(6)).result).toMatchObject({ stopReason: 'end_turn' });
      raw.send(says(sessionId, 7, 'three'));
      expect((await raw.answer(7)).result).toMatchObject({ stopReason: 'end_turn' });
      await raw.end();
    });

    it('serves a prompt sent just after a close then a load of its session with the session the load restored', async () => {
      const host = await newHost({ persistence: { sqlite: join(dir, 'one-write-close-load-prompt.db') } });
      const { raw, sessionId } = await opened(host);
      const load = (id: number) => ({ id, method: 'session/load', params: { sessionId, cwd: dir, mcpServers: [] } });
      raw.send({ id: 4, method: 'session/close', params: { sessionId } }, load(5), says(sessionId, 6, 'one'));
      expect([(await raw.answer(4)).result, (await raw.answer(5)).result]).toStrictEqual([{}, {}]);
      expect((await raw.answer(6)).result).toMatchObject({ stopReason: 'end_turn' });
      // Stored only (closed): a load, then a prompt, in one write.
      raw.send({ id: 7, method: 'session/close', params: { sessionId } });
      expect((await raw.answer(7)).result).toStrictEqual({});
      raw.send(load(8), says(sessionId, 9, 'two'));
      expect((await raw.answer(8)).result).toStrictEqual({});
      expect((await raw.answer(9)).result).toMatchObject({ stopReason: 'end_turn' });
      expect(raw.order.indexOf(8) < raw.order.indexOf(9)).toBe(true);
      await raw.end();
    });

    it('answers a load sent just before a close first, then closes the session: its later prompts are refused', async () => {
      const host = await newHost({ persistence: { sqlite: join(dir, 'one-write-load-close.db') } });
      const { raw, sessionId } = await opened(host);
      const load = (id: number) => ({ id, method: 'session/load', params: { sessionId, cwd: dir, mcpServers: [] } });
      const resume = (id: number) => ({ id, method: 'session/resume', params: { sessionId, cwd: dir, mcpServers: [] } });
      const close = (id: number) => ({ id, method: 'session/close', params: { sessionId } });
      // Served live when they arrive.
      raw.send(load(4), close(5), says(sessionId, 6, 'one'));
      expect([(await raw.answer(4)).result, (await raw.answer(5)).result, (await raw.answer(6)).error]).toMatchObject([{}, {}, { code: -32002 }]);
      expect(host.agents.get(sessionId)).toBeUndefined();
      // Stored only: the close waits until the session is restored, then closes it.
      raw.send(resume(7), load(8), close(9), says(sessionId, 10, 'two'));
      expect([(await raw.answer(7)).result, (await raw.answer(8)).result, (await raw.answer(9)).result]).toStrictEqual([{}, {}, {}]);
      expect((await raw.answer(10)).error).toMatchObject({ code: -32002 });
      expect(host.agents.get(sessionId)).toBeUndefined();
      // Each close answered after the loads and resumes sent before it (the refused prompts come at once).
      const at = (id: number) => raw.order.indexOf(id);
      expect([at(4) < at(5), at(7) < at(9), at(8) < at(9)]).toStrictEqual([true, true, true]);
      // A load the SDK refuses (bad params) before any handler sees it holds no close back.
      raw.send({ id: 11, method: 'session/load', params: { sessionId } }, close(12));
      expect([(await raw.answer(11)).error, (await raw.answer(12)).result]).toMatchObject([{ code: -32602 }, {}]);
      // Interleaved: each waits only for what was sent before it (no two wait for each other).
      raw.send(load(13), close(14), load(15), close(16), says(sessionId, 17, 'three'));
      expect([(await raw.answer(13)).result, (await raw.answer(14)).result, (await raw.answer(15)).result, (await raw.answer(16)).result]).toStrictEqual([{}, {}, {}, {}]);
      expect((await raw.answer(17)).error).toMatchObject({ code: -32002 });
      expect([at(13) < at(14), at(14) < at(15), at(15) < at(16)]).toStrictEqual([true, true, true]);
      expect(host.agents.get(sessionId)).toBeUndefined();
      await raw.end();
    });
  });

  it('closes a session without persistence too (advertised): it is gone for good', async () => {
    const host = await newHost();
    const client = await initialized(host);
    const sessionId = await session(client);
    await expect(prompt(client, sessionId, 'hello')).resolves.toMatchObject({ stopReason: 'end_turn' });
    await expect(client.agent.request(acp.methods.agent.session.close, { sessionId })).resolves.toEqual({});
    expect(host.agents.list()).toStrictEqual([]);
    await expect(prompt(client, sessionId, 'again')).rejects.toMatchObject({ code: -32002 });
  });

  it('rejects INVALID_REQUEST when a message is too large to read (the connection ends), not as if the client had finished', async () => {
    const host = await newHost();
    const input = new PassThrough();
    const served = serveAcp(host, { input, output: new PassThrough() });
    input.write(Buffer.alloc(32 * 1024 * 1024 + 1, 'x'));
    await expect(served).rejects.toMatchObject({ code: 'INVALID_REQUEST', message: expect.stringContaining('33554432 bytes') });
  });

  it('frees the sessions its client left open once its input ends, as session/close does: a host serving one client after another holds none of theirs, and a later client loads them', async () => {
    const host = await newHost({ persistence: { sqlite: join(dir, 'one-after-another.db') } });
    const earlier = await initialized(host);
    const sessionId = await session(earlier);
    await prompt(earlier, sessionId, 'first');
    await session(earlier);
    await earlier.close();
    expect(host.agents.list()).toStrictEqual([]);

    const later = await initialized(host);
    await expect(later.agent.request(acp.methods.agent.session.load, { sessionId, cwd: dir, mcpServers: [] })).resolves.toEqual({});
    expect(texts(later.updates, 'agent_message_chunk')).toEqual(['echo: first']);
    await expect(prompt(later, sessionId, 'second')).resolves.toMatchObject({ stopReason: 'end_turn' });
    await later.close();
    expect(host.agents.list()).toStrictEqual([]);
  });

  it('keeps a session two clients serve for the one still there, when the other closes it or goes away', async () => {
    const host = await newHost();
    const first = await initialized(host);
    const sessionId = await session(first);
    const second = await initialized(host);
    await expect(second.agent.request(acp.methods.agent.session.load, { sessionId, cwd: dir, mcpServers: [] })).resolves.toEqual({});
    await expect(second.agent.request(acp.methods.agent.session.close, { sessionId })).resolves.toEqual({});
    await expect(prompt(first, sessionId, 'still here')).resolves.toMatchObject({ stopReason: 'end_turn' });
    await expect(second.agent.request(acp.methods.agent.session.resume, { sessionId, cwd: dir })).resolves.toEqual({});
    await second.close();
    await expect(prompt(first, sessionId, 'and still')).resolves.toMatchObject({ stopReason: 'end_turn' });
    expect(texts(first.updates, 'agent_message_chunk').join('')).toBe('echo: still hereecho: and still');
    await first.close();
    expect(host.agents.list()).toStrictEqual([]);
  });

  it('serves a session another client loaded while this one was still closing it: the close does not free it under that client', async () => {
    // A continuable child whose call ignores its cancel holds the first client's close in its drain.
    const cancelled = deferred();
    const gate = deferred();
    const deaf: Tool = {
      name: 'deaf',
      description: 'waits for the test, whatever its signal says',
      parameters: { type: 'object', properties: {}, additionalProperties: false },
      async execute(_input, ctx) {
        ctx.signal.addEventListener('abort', () => cancelled.resolve(), { once: true });
        await gate.promise;
        return 'released';
      },
    };
    const host = await newHost({ persistence: { sqlite: join(dir, 'closing-load.db') }, tools: [deaf], abandonGraceMs: 600_000 });
    host.subagents.registerProvider(inProcessProvider(host));
    const first = await initialized(host);
    const sessionId = await session(first);
    const agent = host.agents.get(sessionId)!;
    await host.subagents.startContinuable({ provider: 'in-process', label: 'held', request: { prompt: [text('go')], parent: agent, agentOptions: { model: { kind: 'scripted', steps: [{ toolCalls: [{ name: 'deaf', input: {} }] }, { text: 'done' }] } } } });
    const closing = first.agent.request(acp.methods.agent.session.close, { sessionId });
    // The close is draining the session's children: it decided no other client serves the session.
    await cancelled.promise;
    const second = await initialized(host);
    const loading = second.agent.request(acp.methods.agent.session.load, { sessionId, cwd: dir, mcpServers: [] });
    // Answered after the load was taken up (requests are handled in the order they arrive).
    await session(second);
    gate.resolve();
    await expect(closing).resolves.toEqual({});
    await expect(loading).resolves.toEqual({});
    await expect(prompt(second, sessionId, 'still here')).resolves.toMatchObject({ stopReason: 'end_turn' });
    expect(texts(second.updates, 'agent_message_chunk').join('')).toContain('echo: still here');
  });

  it('returns when its input ends, cancelling the turn still running', async () => {
    const host = await newHost();
    const client = await initialized(host);
    const sessionId = await session(client, scripted({ finish: 'hang', text: 'waiting' }));
    const first = client.nextUpdate();
    void prompt(client, sessionId, 'go').catch(() => undefined);
    await first;
    await client.close();
    // Its session is freed, its log stored.
    expect(host.agents.get(sessionId)).toBeUndefined();
    const events = (await host.persistence!.load(sessionId))!.events;
    expect(events.at(-1)).toMatchObject({ type: 'turn/end', data: { reason: { kind: 'aborted' } } });
  });

  it('answers the requests its client sent before its input ended: a running prompt cancelled, a session/new with its session', async () => {
    const waiting = untilCancelled();
    const host = await newHost({ tools: [waiting.tool] });
    const input = new PassThrough();
    const output = new PassThrough();
    let written = '';
    output.on('data', (chunk: Buffer) => void (written += chunk.toString()));
    const served = serveAcp(host, { input, output });
    const answers = new Map<number, { result?: { sessionId?: string; stopReason?: string }; error?: unknown }>();
    let arrived = deferred();
    output.on('data', () => {
      for (const line of written.split('\n').slice(0, -1)) {
        const message = JSON.parse(line) as { id?: number; result?: { sessionId?: string; stopReason?: string } };
        if (message.id !== undefined) answers.set(message.id, message);
      }
      arrived.resolve();
      arrived = deferred();
    });
    const send = (message: object) => void input.write(`${JSON.stringify({ jsonrpc: '2.0', ...message })}\n`);
    const answer = async (id: number) => {
      while (!answers.has(id)) await arrived.promise;
      return answers.get(id)!;
    };
    send({ id: 1, method: 'initialize', params: { protocolVersion: acp.PROTOCOL_VERSION, clientCapabilities: {} } });
    await answer(1);
    send({ id: 2, method: 'session/new', params: { cwd: dir, mcpServers: [], ...scripted({ toolCalls: [{ name: 'until_cancelled', input: {} }] }) } });
    const sessionId = (await answer(2)).result!.sessionId!;
    send({ id: 3, method: 'session/prompt', params: { sessionId, prompt: [{ type: 'text', text: 'go' }] } });
    await waiting.entered;
    send({ id: 4, method: 'session/new', params: { cwd: dir, mcpServers: [] } });
    input.end();
    await served;
    expect(answers.get(3)).toMatchObject({ result: { stopReason: 'cancelled' } });
    expect(answers.get(4)).toMatchObject({ result: { sessionId: expect.any(String) } });
    expect(host.agents.list()).toStrictEqual([]);
  });

  describe('a client that reads its output late', () => {
    /**
     * serveAcp writing to an output nobody reads until `read()`: its first write's callback is held
     * meanwhile, so what the server writes stays buffered in `output.writableLength`.
     */
    function lateReader(host: AcpServeHost) {
      type Message = { id?: number; method?: string; params?: acp.SessionNotification; result?: unknown; error?: { code: number } };
      const input = new PassThrough();
      const messages: Message[] = [];
      let held: (() => void) | undefined;
      let buffered = '';
      let wrote = deferred();
      const output = new Writable({
        write(_chunk: Buffer, _encoding, callback) {
          if (held) callback();
          else held = () => callback();
        },
      });
      // What the server hands its output, read or not.
      const write = output.write.bind(output);
      output.write = ((chunk: string | Buffer, ...rest: []) => {
        const lines = (buffered + chunk.toString()).split('\n');
        buffered = lines.pop()!;
        for (const line of lines) messages.push(JSON.parse(line) as Message);
        wrote.resolve();
        wrote = deferred();
        return write(chunk, ...rest);
      }) as typeof output.write;
      const served = serveAcp(host, { input, output });
      return {
        output,
        messages,
        send: (message: object) => void input.write(`${JSON.stringify({ jsonrpc: '2.0', ...message })}\n`),
        /** Writes `lines` as they are; false once the server's input holds more than it read (it stopped reading). */
        write: (lines: string) => input.write(lines),
        /** Resolves once the server wrote a message that `done` holds for. */
        async written(done: (message: Message) => boolean): Promise<void> {
          while (!messages.some(done)) await wrote.promise;
        },
        read: () => held?.(),
        async end(): Promise<void> {
          input.end();
          await served;
        },
      };
    }

    /** A live session whose log replays as 2 001 updates of about 2 MB: 2 000 prompt blocks and the answer. */
    async function bigSession(host: Host): Promise<string> {
      const client = await initialized(host);
      const sessionId = await session(client, scripted({ text: 'ok' }));
      const blocks = Array.from({ length: 2000 }, (_, i) => ({ type: 'text' as const, text: `${i}:${'x'.repeat(1000)}` }));
      await expect(client.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: blocks })).resolves.toMatchObject({ stopReason: 'end_turn' });
      return sessionId;
    }

    it('buffers a bounded part of session/load replays while the client reads nothing, then sends each replay whole and in order', async () => {
      const host = await newHost();
      const sessionId = await bigSession(host);
      const late = lateReader(host);
      late.send({ id: 1, method: 'initialize', params: { protocolVersion: acp.PROTOCOL_VERSION, clientCapabilities: {} } });
      await late.written((message) => message.id === 1);
      for (const id of [2, 3, 4]) late.send({ id, method: 'session/load', params: { sessionId, cwd: dir, mcpServers: [] } });
      await late.written((message) => message.method === 'session/update');
      // Three replays are ~6 MB: the server stops at the output's backpressure instead of buffering them.
      expect(late.output.writableLength).toBeLessThan(256 * 1024);

      late.read();
      for (const id of [2, 3, 4]) await late.written((message) => message.id === id);
      // Each load is answered after its whole replay (the loads may be served in any order).
      const after = late.messages.slice(1);
      const answers = after.flatMap((message, index) => (message.id === undefined ? [] : [{ id: message.id, index }]));
      expect(answers.map(({ id }) => id).sort()).toStrictEqual([2, 3, 4]);
      expect(answers.map(({ index }) => index)).toStrictEqual([2001, 4003, 6005]);
      const replayed = after.filter((message) => message.method === 'session/update').map(({ params }) => params!.update);
      const one = [...Array.from({ length: 2000 }, (_, i) => `${i}:${'x'.repeat(1000)}`), 'ok'];
      expect(replayed.map((update) => ((update.sessionUpdate === 'user_message_chunk' || update.sessionUpdate === 'agent_message_chunk') && update.content.type === 'text' ? update.content.text : update.sessionUpdate))).toStrictEqual([...one, ...one, ...one]);
      await late.end();
    });

    /** A session (initialize id 1, session/new id 2) whose turn (prompt id 3) streams 1 MiB the client has not read. */
    async function streamingUnread(host: Host): Promise<{ late: ReturnType<typeof lateReader>; sessionId: string }> {
      const late = lateReader(host);
      late.send({ id: 1, method: 'initialize', params: { protocolVersion: acp.PROTOCOL_VERSION, clientCapabilities: {} } });
      await late.written((message) => message.id === 1);
      late.send({ id: 2, method: 'session/new', params: { cwd: dir, mcpServers: [], ...scripted({ text: 'x'.repeat(1024 * 1024) }) } });
      await late.written((message) => message.id === 2);
      const sessionId = (late.messages.find((message) => message.id === 2)!.result as { sessionId: string }).sessionId;
      late.send({ id: 3, method: 'session/prompt', params: { sessionId, prompt: [{ type: 'text', text: 'go' }] } });
      await late.written((message) => message.method === 'session/update');
      return { late, sessionId };
    }

    it('stops reading while the client reads none of the answers it is owed, then answers each request in order once it reads', async () => {
      const host = await newHost();
      const late = lateReader(host);
      late.send({ id: 1, method: 'initialize', params: { protocolVersion: acp.PROTOCOL_VERSION, clientCapabilities: {} } });
      await late.written((message) => message.id === 1);
      // A hundred requests a write, each answered with an error: refused (an object id, -32600) or of no method (-32601).
      const requests = (write: number) =>
        Array.from({ length: 100 }, (_, index) => {
          const id = 100 + write * 100 + index;
          return `${JSON.stringify(index % 2 === 0 ? { jsonrpc: '2.0', id, method: 'no/such' } : { jsonrpc: '2.0', id: { id }, method: 'initialize' })}\n`;
        }).join('');
      // While it reads, the server takes each write at once; it holds one back once it stopped reading.
      let writes = 0;
      while (writes < 100 && late.write(requests(writes))) {
        writes += 1;
        await new Promise((resolve) => setImmediate(resolve));
      }
      expect(writes).toBeLessThan(100);
      expect(late.output.writableLength).toBeLessThan(256 * 1024);
      late.send({ id: 2, method: 'initialize', params: { protocolVersion: acp.PROTOCOL_VERSION, clientCapabilities: {} } });

      late.read();
      await late.written((message) => message.id === 2);
      const answers = late.messages.slice(1);
      const sent = (writes + 1) * 100;
      expect(answers.length).toBe(sent + 1);
      expect(answers.filter((message) => message.error?.code === -32600).length).toBe(sent / 2);
      const unknown = answers.filter((message) => message.error?.code === -32601).map((message) => message.id);
      expect(unknown).toStrictEqual(Array.from({ length: sent / 2 }, (_, index) => 100 + index * 2));
      expect(answers.at(-1)).toMatchObject({ id: 2, result: { protocolVersion: acp.PROTOCOL_VERSION } });
      await late.end();
    });

    it('returns once its input ends while the client reads none of a turn it streamed, and frees the session', async () => {
      const host = await newHost();
      const { late } = await streamingUnread(host);
      await late.end();
      expect(host.agents.list()).toStrictEqual([]);
    });

    it('prints no listener-leak warning while a dozen turns wait for the client to read their updates', async () => {
      const warnings: Error[] = [];
      const onWarning = (warning: Error) => void warnings.push(warning);
      process.on('warning', onWarning);
      try {
        const host = await newHost();
        const late = lateReader(host);
        late.send({ id: 1, method: 'initialize', params: { protocolVersion: acp.PROTOCOL_VERSION, clientCapabilities: {} } });
        await late.written((message) => message.id === 1);
        const ids = Array.from({ length: 12 }, (_, index) => 2 + index);
        for (const id of ids) late.send({ id, method: 'session/new', params: { cwd: dir, mcpServers: [], ...scripted({ text: 'x'.repeat(64 * 1024) }) } });
        await late.written((message) => message.id === ids.at(-1));
        const sessionIds = ids.map((id) => (late.messages.find((message) => message.id === id)!.result as { sessionId: string }).sessionId);
        const ended = sessionIds.map((sessionId) => {
          const turnEnd = deferred();
          const unsubscribe = host.agents.get(sessionId)!.subscribe((event) => event.type === 'turn/end' && turnEnd.resolve());
          return turnEnd.promise.finally(unsubscribe);
        });
        sessionIds.forEach((sessionId, index) => late.send({ id: 100 + index, method: 'session/prompt', params: { sessionId, prompt: [{ type: 'text', text: 'go' }] } }));
        // Every turn ended, its answer waiting for its updates to be read.
        await Promise.all(ended);
        late.read();
        await late.written((message) => message.id === 100 + sessionIds.length - 1);
        await late.end();
        expect(warnings.map(String)).toStrictEqual([]);
      } finally {
        process.off('warning', onWarning);
      }
    });

    it('returns once its input ends after an initialize sent again while the client reads none of a turn it streamed', async () => {
      const host = await newHost();
      const { late, sessionId } = await streamingUnread(host);
      // Its answer waits behind the turn's updates the client does not read: what follows it must not.
      late.send({ id: 4, method: 'initialize', params: { protocolVersion: acp.PROTOCOL_VERSION, clientCapabilities: {} } });
      late.send({ method: 'session/cancel', params: { sessionId } });
      await late.end();
      expect(host.agents.list()).toStrictEqual([]);
    });

    it('stops a session/load replay the client cancels with $/cancel_request and answers it cancelled; the next load replays whole', async () => {
      const host = await newHost();
      const sessionId = await bigSession(host);
      const late = lateReader(host);
      late.send({ id: 1, method: 'initialize', params: { protocolVersion: acp.PROTOCOL_VERSION, clientCapabilities: {} } });
      await late.written((message) => message.id === 1);
      late.send({ id: 2, method: 'session/load', params: { sessionId, cwd: dir, mcpServers: [] } });
      await late.written((message) => message.method === 'session/update');
      late.send({ method: '$/cancel_request', params: { requestId: 2 } });
      // The server reads the cancel while its replay waits for the client to read.
      await new Promise((resolve) => setImmediate(resolve));
      late.read();
      await late.written((message) => message.id === 2);
      expect(late.messages.find((message) => message.id === 2)).toMatchObject({ error: { code: -32800 } });
      const updates = () => late.messages.filter((message) => message.method === 'session/update').length;
      const cut = updates();
      expect(cut).toBeLessThan(2001);

      late.send({ id: 3, method: 'session/load', params: { sessionId, cwd: dir, mcpServers: [] } });
      await late.written((message) => message.id === 3);
      expect(late.messages.find((message) => message.id === 3)).toMatchObject({ result: {} });
      expect(updates() - cut).toBe(2001);
      await late.end();
    });
  });
});

describe('subagent-host acp', () => {
  function runCli(args: string[], input = ''): Promise<{ code: number | null; stdout: string; stderr: string }> {
    const child = spawn(process.execPath, [CLI, 'acp', ...args], { stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => void (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => void (stderr += chunk.toString()));
    child.stdin.end(input);
    return new Promise((resolve) => child.once('close', (code) => resolve({ code, stdout, stderr })));
  }

  it('writes only protocol messages to stdout and exits when stdin ends', async () => {
    const initialize = { jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: 1, clientCapabilities: {} } };
    const { code, stdout } = await runCli([], `${JSON.stringify(initialize)}\n`);
    expect(code).toBe(0);
    const messages = stdout.trim().split('\n').map((line) => JSON.parse(line) as { id: number; result?: { protocolVersion: number } });
    expect(messages.map((m) => [m.id, m.result?.protocolVersion])).toEqual([[1, 1]]);
  });

  it('answers session/close of a session it does not serve with success, as ACP asks (the SDK client would hide a -32002)', async () => {
    const child = spawn(process.execPath, [CLI, 'acp'], { stdio: ['pipe', 'pipe', 'inherit'] });
    const lines: string[] = [];
    let buffered = '';
    let arrived = deferred();
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
      buffered += chunk;
      const parts = buffered.split('\n');
      buffered = parts.pop()!;
      lines.push(...parts);
      arrived.resolve();
    });
    const exited = new Promise((resolve) => child.once('close', resolve));
    async function ask(message: { id: number; method: string; params: unknown }): Promise<unknown> {
      child.stdin.write(`${JSON.stringify({ jsonrpc: '2.0', ...message })}\n`);
      for (;;) {
        const answer = lines.map((line) => JSON.parse(line) as { id?: number }).find((m) => m.id === message.id);
        if (answer) return answer;
        const gone = await Promise.race([arrived.promise.then(() => false), exited.then(() => true)]);
        if (gone) throw new Error(`acp exited without answering ${message.method}: ${lines.join('\n')}`);
        arrived = deferred();
      }
    }
    await ask({ id: 1, method: 'initialize', params: { protocolVersion: 1, clientCapabilities: {} } });
    await expect(ask({ id: 2, method: 'session/close', params: { sessionId: 'never-was' } })).resolves.toStrictEqual({ jsonrpc: '2.0', id: 2, result: {} });
    child.stdin.end();
    await expect(exited).resolves.toBe(0);
  });

  it('rejects a bad --model on stderr as a usage error (exit code 2) and nothing on stdout', async () => {
    const { code, stdout, stderr } = await runCli(['--model', '{"kind":"nope"}']);
    expect([code, stdout, stderr.length > 0]).toEqual([2, '', true]);
  });
});
