// The client side of one ACP connection to one agent process: initialize (with the protocol
// version check the SDK leaves to us), session/new, session/prompt with its updates routed to
// the run, session/cancel, and permission requests answered by policy. No fs, no terminal.
import type * as acp from '@agentclientprotocol/sdk';
import type { ContentBlock } from '../../seam/content.js';
import { SubagentError } from '../../seam/errors.js';
import { isRecord } from '../../seam/parse.js';
import { MAX_MESSAGE_BYTES } from './ndjson.js';
import type { AgentProcess } from './process.js';
import { loadAcpSdk, nodeAcpStream, type AcpSdk } from './sdk.js';

export type PermissionPolicy = 'reject' | 'allow';
export type SessionUpdateListener = (update: acp.SessionUpdate) => void;

/**
 * The answer to a permission request under `policy`: `allow` the first allow option, otherwise (or
 * with `reject`) a reject option, `reject_once` before `reject_always`; `cancelled` only when none
 * fits. ACP keeps `cancelled` for a cancelled turn: agents (codex-acp, claude-code-acp) end the turn on it.
 */
export function permissionOutcome(policy: PermissionPolicy, options: readonly acp.PermissionOption[]): acp.RequestPermissionResponse {
  const allow = policy === 'allow' ? options.find((option) => option.kind === 'allow_once' || option.kind === 'allow_always') : undefined;
  const chosen = allow ?? options.find((option) => option.kind === 'reject_once') ?? options.find((option) => option.kind === 'reject_always');
  return { outcome: chosen ? { outcome: 'selected', optionId: chosen.optionId } : { outcome: 'cancelled' } };
}

/** True when `error` is an error response from the peer (rather than a dead connection). */
export function isJsonRpcError(error: unknown): error is { code: number } {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'number' && Number.isSafeInteger(code);
}

/**
 * The agent answered an error for id null: JSON-RPC's answer to a line it could not parse
 * (`-32700`) or take for a message (`-32600`). Some message this client sent never reached it, so
 * a request in flight may never be answered: the connection closes with this error.
 */
export class UnreadableMessageError extends Error {
  override readonly name = 'UnreadableMessageError';

  constructor(readonly code: number) {
    super(`the ACP agent could not read a message this client sent: JSON-RPC error ${code} for id null`);
  }
}

/** The error code of a response for id null (see {@link UnreadableMessageError}); undefined for any other message. */
function nullIdErrorCode(message: object): number | undefined {
  const { id, method, error } = message as { id?: unknown; method?: unknown; error?: unknown };
  return id === null && method === undefined && isJsonRpcError(error) ? error.code : undefined;
}

/**
 * What a turn that failed because the agent sent a message over the wire's bound (the SDK's
 * `MessageTooLargeError`, which closes the connection) says; undefined for any other failure. The
 * agent usually exits once its output is closed, which must not hide why the turn ended.
 */
export function describeOversizeMessage(error: unknown): string | undefined {
  if (!(error instanceof Error) || error.name !== 'MessageTooLargeError') return undefined;
  const limit = (error as { maxMessageBytes?: unknown }).maxMessageBytes;
  const bound = typeof limit === 'number' ? `${limit} bytes` : 'the size limit';
  return `the ACP agent sent a message over ${bound} (one JSON-RPC line), so the connection was closed; have it send large output in smaller updates`;
}

/** The session/prompt request for `text`, with the widest request id the SDK gives. */
const promptRequest = (sessionId: string, text: readonly string[]) => ({
  jsonrpc: '2.0',
  id: Number.MAX_SAFE_INTEGER,
  method: 'session/prompt',
  params: { sessionId, prompt: text.map((value) => ({ type: 'text', text: value })) },
});

/** The most UTF-8 bytes JSON writes for one UTF-16 unit of a string (`\u001f`). */
const MAX_BYTES_PER_UNIT = 6;
const EMPTY_REQUEST_BYTES = JSON.stringify(promptRequest('', [])).length;
const BLOCK_BYTES = JSON.stringify(promptRequest('', [''])).length - EMPTY_REQUEST_BYTES + 1;

/**
 * Why the session/prompt message for `text` in `sessionId` cannot be sent, or undefined when it can.
 * The SDK's stream reads at most 32 MiB in one message and closes the connection on a larger one:
 * our agent does, as does any agent on the SDK's defaults. A prompt that large is past any model's
 * context, so it is refused for every agent rather than ending its process.
 */
export function oversizePrompt(sessionId: string, text: readonly string[]): string | undefined {
  const bound = text.reduce((sum, value) => sum + BLOCK_BYTES + MAX_BYTES_PER_UNIT * value.length, EMPTY_REQUEST_BYTES + MAX_BYTES_PER_UNIT * sessionId.length);
  if (bound <= MAX_MESSAGE_BYTES) return undefined;
  const bytes = Buffer.byteLength(JSON.stringify(promptRequest(sessionId, text)));
  if (bytes <= MAX_MESSAGE_BYTES) return undefined;
  return `the prompt (${(bytes / 2 ** 20).toFixed(1)} MB as one ACP session/prompt message) is too large for an ACP agent: the ACP SDK reads at most ${MAX_MESSAGE_BYTES} bytes in one message and closes the connection on a larger one; send less`;
}

/** The text an ACP agent is sent of `content`: its non-empty text blocks (other blocks are not sent). */
export function promptTexts(content: readonly ContentBlock[]): string[] {
  return content.flatMap((block) => (block.type === 'text' && block.text !== '' ? [block.text] : []));
}

/** Throws `INVALID_REQUEST` when `problem` (what {@link oversizePrompt} or {@link oversizeSessionNew} says) is set. */
export function refuseOversize(problem: string | undefined): void {
  if (problem !== undefined) throw new SubagentError('INVALID_REQUEST', problem);
}

/**
 * Why the session/new message carrying `meta` (the delegator's route overrides: a model spec may be
 * long) cannot be sent, or undefined: the agent would close the connection on it, as on a prompt
 * over the bound (see {@link oversizePrompt}).
 */
export function oversizeSessionNew(cwd: string, meta: Record<string, unknown> | undefined): string | undefined {
  if (meta === undefined) return undefined;
  const request = { jsonrpc: '2.0', id: Number.MAX_SAFE_INTEGER, method: 'session/new', params: { cwd, mcpServers: [], _meta: meta } };
  const bytes = Buffer.byteLength(JSON.stringify(request));
  if (bytes <= MAX_MESSAGE_BYTES) return undefined;
  return `the agent options (${(bytes / 2 ** 20).toFixed(1)} MB as one ACP session/new message with the model spec) are too large for an ACP agent: the ACP SDK reads at most ${MAX_MESSAGE_BYTES} bytes in one message and closes the connection on a larger one; give a shorter model spec`;
}

/** An error code word (`MODEL_AUTH`): what a peer's `data.code` may add to a description, no free text. */
const CODE_WORD = /^[A-Z][A-Z0-9_]{0,63}$/;

/**
 * A short, secret-free description of a failed ACP call (never the peer's message text). A peer that
 * puts a bare code word in the error's `data.code` (ours does: `{ code: 'MODEL_AUTH' }`) has it named.
 */
export function describeAcpFailure(error: unknown): string {
  if ((error instanceof SubagentError && error.code === 'CONTRACT_VIOLATION') || error instanceof UnreadableMessageError) return error.message;
  if (!isJsonRpcError(error)) return 'the connection closed';
  const data = (error as { data?: unknown }).data;
  const word = typeof data === 'object' && data !== null ? (data as { code?: unknown }).code : undefined;
  return typeof word === 'string' && CODE_WORD.test(word) ? `JSON-RPC error ${error.code}, ${word}` : `JSON-RPC error ${error.code}`;
}

/**
 * The params of a `session/update` as they arrive. The SDK's client app routes every such
 * notification through its session router first, which parses it with the ACP schema and drops it
 * when that fails; parsing it again for this handler would only double the cost of each update.
 */
const VALIDATED_BY_ROUTER: acp.ParamsParser<acp.SessionNotification> = { parse: (params) => params as acp.SessionNotification };

const hasKeys = (value: object, keys: readonly string[]) => {
  const own = Object.keys(value);
  return own.length === keys.length && keys.every((key) => Object.hasOwn(value, key));
};
const TEXT_CHUNKS = new Set(['agent_message_chunk', 'agent_thought_chunk', 'user_message_chunk']);

/** The update kinds the SDK's schema knows (a record, so the compiler checks the list against the SDK). */
const KNOWN_UPDATES: Readonly<Record<acp.SessionUpdate['sessionUpdate'], true>> = {
  user_message_chunk: true,
  agent_message_chunk: true,
  agent_thought_chunk: true,
  tool_call: true,
  tool_call_update: true,
  plan: true,
  available_commands_update: true,
  current_mode_update: true,
  config_option_update: true,
  session_info_update: true,
  usage_update: true,
  notice: true,
  compaction_update: true,
  compaction_summary_chunk: true,
};

/**
 * True for a `session/update` of a kind the SDK does not know (a newer agent's): its schema would
 * drop it too, but print every such message to the host's stderr on the way.
 */
function unknownUpdate(message: object): boolean {
  const { method, params } = message as { method?: unknown; params?: unknown };
  if (method !== 'session/update' || !isRecord(params) || !isRecord(params['update'])) return false;
  const kind = params['update']['sessionUpdate'];
  return typeof kind === 'string' && !Object.hasOwn(KNOWN_UPDATES, kind);
}

/**
 * How long the connection outlives its agent process: what it wrote before exiting is read first.
 * Its stdout may stay open longer (a process it started inherited it), which must not keep a
 * prompt waiting for an answer that cannot come.
 */
const EXIT_DRAIN_MS = 250;

/**
 * The update of a `session/update` for `sessionId` that carries one text chunk and nothing else
 * (the bulk of a streamed answer); undefined for any other message. Such an update passes the
 * ACP schema unchanged (no key to strip, no default to fill), so it is handed on as it is.
 */
function plainTextChunk(message: Record<string, unknown>, sessionId: string): acp.SessionUpdate | undefined {
  if (message['jsonrpc'] !== '2.0' || message['method'] !== 'session/update' || !hasKeys(message, ['jsonrpc', 'method', 'params'])) return undefined;
  const params = message['params'];
  if (!isRecord(params) || params['sessionId'] !== sessionId || !hasKeys(params, ['sessionId', 'update'])) return undefined;
  const update = params['update'];
  if (!isRecord(update) || !TEXT_CHUNKS.has(update['sessionUpdate'] as string) || !hasKeys(update, ['sessionUpdate', 'content'])) return undefined;
  const content = update['content'];
  if (!isRecord(content) || content['type'] !== 'text' || typeof content['text'] !== 'string' || !hasKeys(content, ['type', 'text'])) return undefined;
  return update as unknown as acp.SessionUpdate;
}

/** One client connection to one agent process, serving one session. */
export class AcpClient {
  readonly #sdk: AcpSdk;
  readonly #connection: acp.ClientConnection;
  #sessionId: string | undefined;
  #loadSession = false;
  #listener: SessionUpdateListener | undefined;
  /** session/cancel was sent for the prompt in flight: its permission requests are answered `cancelled`. */
  #cancelled = false;
  /** How many of this client's requests wait for their answer. */
  #asking = 0;

  private constructor(sdk: AcpSdk, proc: AgentProcess, permission: PermissionPolicy) {
    this.#sdk = sdk;
    this.#connection = sdk
      .client({ name: 'subagent-host' })
      .onNotification(sdk.methods.client.session.update, VALIDATED_BY_ROUTER, ({ params }) => {
        if (params.sessionId === this.#sessionId) this.#listener?.(params.update);
      })
      .onRequest(sdk.methods.client.session.requestPermission, ({ params }) => (this.#cancelled ? { outcome: { outcome: 'cancelled' } } : permissionOutcome(permission, params.options)))
      .connect(nodeAcpStream(sdk, proc.stdin, proc.stdout, 'client', (message) => this.#textChunk(message), {
        arrived: (message) => this.#unreadable(message) || unknownUpdate(message),
        sent: () => undefined,
      }));
    void proc.ended.then(() => {
      if (this.signal.aborted) return;
      const timer = setTimeout(() => this.#connection.close(), EXIT_DRAIN_MS);
      this.signal.addEventListener('abort', () => clearTimeout(timer), { once: true });
    });
  }

  /**
   * A text chunk of this session's prompt goes straight to the listener: the SDK's route (its
   * schema check of every update) cost about a tenth of a prompt round trip. Anything else, and
   * anything while the SDK still has messages to handle or once the connection closed, takes the
   * SDK's route (which drops what arrives after the close).
   */
  #textChunk(message: object): boolean {
    const listener = this.#listener;
    const sessionId = this.#sessionId;
    if (listener === undefined || sessionId === undefined || this.#connection.signal.aborted) return false;
    const update = plainTextChunk(message as Record<string, unknown>, sessionId);
    if (update === undefined) return false;
    try {
      listener(update);
    } catch (error) {
      // As on the SDK's route, where a failing handler closes the connection.
      this.#connection.close(error);
    }
    return true;
  }

  /**
   * Closes the connection when the agent says it could not read a message while a request waits:
   * that request may be the one lost, and would wait forever. With none waiting (the agent refused
   * our answer to a line of its own, say) nothing is lost that anyone waits for. Either way the
   * SDK never sees it: an answer for no request is one it prints to the host's stderr.
   */
  #unreadable(message: object): boolean {
    const code = nullIdErrorCode(message);
    if (code === undefined) return false;
    if (this.#asking > 0) this.#connection.close(new UnreadableMessageError(code));
    return true;
  }

  /** `request`, counted while it waits for its answer. */
  async #ask<T>(request: Promise<T>): Promise<T> {
    this.#asking++;
    try {
      return await request;
    } finally {
      this.#asking--;
    }
  }

  /** Connects to `proc` over its stdin/stdout (the SDK is loaded on first use). */
  static async connect(proc: AgentProcess, permission: PermissionPolicy): Promise<AcpClient> {
    return new AcpClient(await loadAcpSdk(), proc, permission);
  }

  /** Aborted once the connection closed (the agent's stdout ended, or `close()`). */
  get signal(): AbortSignal {
    return this.#connection.signal;
  }

  /** Whether the agent's `initialize` answer advertised `session/load` (`agentCapabilities.loadSession`). */
  get canLoadSession(): boolean {
    return this.#loadSession;
  }

  /** Sends `initialize`; throws `START_FAILED` unless the agent speaks our protocol version. */
  async initialize(): Promise<void> {
    const sdk = this.#sdk;
    const response: unknown = await this.#ask(this.#connection.agent.request(sdk.methods.agent.initialize, {
      protocolVersion: sdk.PROTOCOL_VERSION,
      clientCapabilities: { fs: { readTextFile: false, writeTextFile: false }, terminal: false },
      clientInfo: { name: 'subagent-host', version: '0' },
    }));
    // The SDK does not check answers.
    if (!isRecord(response)) throw new SubagentError('START_FAILED', 'the ACP agent answered initialize with no result object');
    if (response['protocolVersion'] !== sdk.PROTOCOL_VERSION) {
      const version = Number.isSafeInteger(response['protocolVersion']) ? String(response['protocolVersion']) : 'unknown';
      throw new SubagentError('START_FAILED', `the ACP agent speaks protocol version ${version}; this client speaks ${sdk.PROTOCOL_VERSION}`);
    }
    const capabilities = response['agentCapabilities'];
    this.#loadSession = isRecord(capabilities) && capabilities['loadSession'] === true;
  }

  /** Opens the one session this connection serves; `meta` travels as the request's `_meta`. */
  async newSession(cwd: string, meta?: Record<string, unknown>): Promise<string> {
    const params: acp.NewSessionRequest = { cwd, mcpServers: [], ...(meta === undefined ? {} : { _meta: meta }) };
    const response: unknown = await this.#ask(this.#connection.agent.request(this.#sdk.methods.agent.session.new, params));
    const sessionId = isRecord(response) ? response['sessionId'] : undefined;
    if (typeof sessionId !== 'string' || sessionId === '') {
      throw new SubagentError('START_FAILED', 'the ACP agent answered session/new without a session id');
    }
    this.#sessionId = sessionId;
    return sessionId;
  }

  /** Why `text` cannot be prompted in this connection's session, or undefined (see {@link oversizePrompt}). */
  oversizePrompt(text: readonly string[]): string | undefined {
    return oversizePrompt(this.#sessionId ?? '', text);
  }

  /** Restores a session the agent stored (`session/load`); the history it replays is not listened to. */
  async loadSession(sessionId: string, cwd: string): Promise<void> {
    await this.#ask(this.#connection.agent.request(this.#sdk.methods.agent.session.load, { sessionId, cwd, mcpServers: [] }));
    this.#sessionId = sessionId;
  }

  /** Sends the prompt; `onUpdate` sees this session's updates until the returned promise settles. */
  async prompt(text: string[], onUpdate: SessionUpdateListener): Promise<acp.PromptResponse> {
    const sessionId = this.#sessionId;
    if (sessionId === undefined) throw new SubagentError('CONTRACT_VIOLATION', 'prompt before session/new');
    this.#listener = onUpdate;
    this.#cancelled = false;
    try {
      // The SDK does not check answers: a reply without a stop reason is the agent's contract fault.
      const response: unknown = await this.#ask(
        this.#connection.agent.request(this.#sdk.methods.agent.session.prompt, {
          sessionId,
          prompt: text.map((value) => ({ type: 'text', text: value })),
        }),
      );
      if (response === null || typeof response !== 'object' || typeof (response as { stopReason?: unknown }).stopReason !== 'string') {
        throw new SubagentError('CONTRACT_VIOLATION', 'the ACP agent answered session/prompt without a stopReason');
      }
      return response as acp.PromptResponse;
    } finally {
      // A cancelled prompt the agent answers late must not stop the updates of the prompt sent after it.
      if (this.#listener === onUpdate) this.#listener = undefined;
    }
  }

  /** Fire-and-forget `session/cancel`; the agent should end the turn `cancelled`. */
  cancel(): void {
    const sessionId = this.#sessionId;
    if (sessionId === undefined || this.signal.aborted) return;
    this.#cancelled = true;
    this.#connection.agent.notify(this.#sdk.methods.agent.session.cancel, { sessionId }).catch(() => undefined);
  }

  /** Stops listening; pending requests reject. The process is the caller's to reap. */
  close(): void {
    this.#listener = undefined;
    this.#connection.close();
  }
}
