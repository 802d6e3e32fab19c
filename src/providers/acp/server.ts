// serveAcp: our agent as an ACP agent over a pair of streams (stdio by default). session/new creates
// a top-level agent, session/prompt runs one turn and streams it as updates, session/cancel ends
// the turn `cancelled`, session/load replays a persisted session and session/resume restores one
// without replay, session/close frees one (its stored log stays). Nothing but protocol on output.
import type * as acp from '@agentclientprotocol/sdk';
import type { Agent, AgentOptions } from '../../seam/agent-types.js';
import { SubagentError, describeError, isSubagentError } from '../../seam/errors.js';
import type { SessionEvent, TurnEndReason } from '../../seam/session-types.js';
import type { SessionLog } from '../../runtime/session.js';
import { AGENT_OPTIONS_META, loadAcpSdk, nodeAcpStream, type AcpSdk } from './sdk.js';
import { usageOf } from '../../seam/usage.js';
import { TurnStreamer, UnsupportedPromptBlock, acpStopReason, cwdProblem, holdsInputImages, promptContent, sameCwd, scopeProblem } from './server-updates.js';
import { CLIENT_FAULTS, SESSION_OPTIONS_EVENT, assertServeArguments, initializeAnswer, routeOptions, type AcpServeHost, type AcpServeIo, type AcpServeOptions } from './server-options.js';
import { Replays, UpdateQueue } from './server-stream.js';
import { Arrivals, dispatchedAs } from './arrivals.js';
import { letGo, serveBy, servedByAny, unlessFreed } from './shared-agents.js';
import type { Observe } from './ndjson.js';
import type { Restoring, Served } from './served.js';

export type { AcpServeHost, AcpServeIo, AcpServeOptions } from './server-options.js';

/** A promise and its resolve (Node 20 has no Promise.withResolvers). */
function settleable(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((settle) => (resolve = settle));
  return { promise, resolve };
}

class AcpServer {
  readonly #sdk: AcpSdk;
  readonly #host: AcpServeHost;
  readonly #sessions = new Map<string, Served>();
  /** Restores in flight: a second load or resume of the same session waits for the first. */
  readonly #restoring = new Map<string, Restoring>();
  /** Closes in flight: a load or resume of a session being closed waits until it is gone. */
  readonly #closing = new Map<string, Promise<void>>();
  /** What arrived in which order: a cancel or close applies to the prompts before it, and more. */
  readonly #arrivals: Arrivals;
  readonly #images: boolean;
  readonly #replays: Replays;
  /** The client went away: no session is served any more. */
  #ended = false;
  /** Aborts once the client's input ended: no prompt runs and no replay is sent any more. */
  readonly #inputGone = new AbortController();
  /** The requests being handled, settled or not. */
  readonly #handling = new Set<Promise<unknown>>();
  /** Settles once the connection closed: an answer not written by then never will be. */
  readonly #over = settleable();

  constructor(sdk: AcpSdk, host: AcpServeHost, images: boolean) {
    this.#sdk = sdk;
    this.#host = host;
    this.#images = images;
    this.#replays = new Replays(sdk);
    this.#arrivals = new Arrivals(sdk.methods.agent.session, (sessionId) => this.#cancel(sessionId));
  }

  app(): acp.AgentApp {
    const { methods } = this.#sdk;
    return this.#sdk
      .agent({ name: 'subagent-host' })
      .onRequest(methods.agent.initialize, () => initializeAnswer(this.#sdk.PROTOCOL_VERSION, this.#host.persistence !== undefined, this.#images))
      .onRequest(methods.agent.session.new, ({ params }) => this.#guard(() => this.#newSession(params)))
      .onRequest(methods.agent.session.load, ({ params, client, requestId, signal }) => this.#guard(() => this.#load(params, client, requestId, signal)))
      .onRequest(methods.agent.session.resume, ({ params, requestId }) => this.#guard(() => this.#resume(params, requestId)))
      .onRequest(methods.agent.session.prompt, ({ params, client, requestId, signal }) => this.#guard(() => this.#prompt(params, client, requestId, signal)))
      .onRequest(methods.agent.session.close, ({ params, requestId }) => this.#guard(() => this.#close(params.sessionId, requestId)))
      // Done on arrival (Arrivals): here it would find the prompts of messages sent after it.
      .onNotification(methods.agent.session.cancel, () => undefined);
  }

  /** What the connection reports of each message in and out (see Arrivals), and the end of its input. */
  get observer(): Observe {
    return {
      arrived: (message) => this.#arrivals.arrived(message),
      sent: (message) => this.#arrivals.sent(message),
      inputEnded: () => this.#inputEnded(),
      // The SDK refuses any other request until it answered an initialize.
      answerFirst: (message) => dispatchedAs(message) === 'request' && (message as { method?: unknown }).method === this.#sdk.methods.agent.initialize,
    };
  }

  /**
   * The client's input ended: the requests it sent before are answered before the connection
   * closes (its output may still be read), its running prompts cancelled and its replays cut.
   */
  async #inputEnded(): Promise<void> {
    // The SDK takes up what arrived with the end in the promise callbacks that follow it.
    await new Promise((resolve) => setImmediate(resolve));
    this.#inputGone.abort();
    for (const sessionId of this.#sessions.keys()) this.#cancel(sessionId);
    while (this.#handling.size > 0) await Promise.all(this.#handling);
    // The SDK writes an answer in the promise callbacks after its handler settled.
    await new Promise((resolve) => setImmediate(resolve));
  }

  /** Runs a handler (counted until it settles), turning our errors into JSON-RPC errors that carry the code, not the text. */
  #guard<T>(handler: () => Promise<T>): Promise<T> {
    const answer = this.#answer(handler);
    const settled: Promise<unknown> = answer.then(
      () => this.#handling.delete(settled),
      () => this.#handling.delete(settled),
    );
    this.#handling.add(settled);
    return answer;
  }

  async #answer<T>(handler: () => Promise<T>): Promise<T> {
    const { RequestError } = this.#sdk;
    try {
      return await handler();
    } catch (error) {
      if (error instanceof RequestError) throw error;
      if (error instanceof UnsupportedPromptBlock) throw RequestError.invalidParams(undefined, error.message);
      if (isSubagentError(error, 'UNKNOWN_SESSION')) throw RequestError.resourceNotFound();
      if (isSubagentError(error) && CLIENT_FAULTS.has(error.code)) throw RequestError.invalidParams({ code: error.code }, error.message);
      if (isSubagentError(error)) throw RequestError.internalError({ code: error.code }, error.message);
      throw RequestError.internalError(undefined, describeError(error));
    }
  }

  #checkScope(params: Parameters<typeof scopeProblem>[0]): void {
    const problem = scopeProblem(params);
    if (problem !== undefined) throw this.#sdk.RequestError.invalidParams(undefined, problem);
  }

  /** The delegator's route overrides from `_meta`, validated like any boundary input. */
  #agentOptions(meta: acp.NewSessionRequest['_meta']): AgentOptions {
    const options = routeOptions(meta?.[AGENT_OPTIONS_META] ?? {});
    if (typeof options === 'string') throw this.#sdk.RequestError.invalidParams(undefined, options);
    return options;
  }

  async #newSession(params: acp.NewSessionRequest): Promise<acp.NewSessionResponse> {
    this.#checkScope(params);
    const agentOptions = this.#agentOptions(params._meta);
    const agent = await this.#host.createAgent({ header: { cwd: params.cwd }, agentOptions });
    // Kept in the log: a later session/load (in another process, too) serves it with the same route.
    // (The host's agents are local: their session is the append-only log itself.)
    if (Object.keys(agentOptions).length > 0) (agent.session as SessionLog).append(SESSION_OPTIONS_EVENT, { agentOptions });
    await this.#serve(agent);
    return { sessionId: agent.id };
  }

  /** The served session `params` names, restored from persistence when it is not live. */
  async #restore(params: acp.LoadSessionRequest | acp.ResumeSessionRequest, method: string, requestId: unknown): Promise<Served> {
    if (!this.#host.persistence) throw this.#sdk.RequestError.methodNotFound(method);
    this.#checkScope(params);
    const { sessionId } = params;
    // No session has an empty id: like any id not stored, it is not found.
    if (sessionId === '') throw this.#sdk.RequestError.sessionNotFound(sessionId);
    await this.#arrivals.restoreMayRun(requestId);
    await this.#closing.get(sessionId)?.catch(() => undefined);
    for (;;) {
      const served = this.#sessions.get(sessionId);
      if (served) return this.#inCwd(served, params.cwd);
      const restoring = this.#restoring.get(sessionId) ?? this.#restoreOnce(sessionId, params.cwd);
      try {
        // A load or resume that joined another's restore asked for its own cwd.
        return this.#inCwd(await restoring.served, params.cwd);
      } catch (error) {
        // The one it joined was refused for that one's cwd, not this one's: this one restores it anew.
        if (!restoring.refusedCwd(error) || sameCwd(restoring.cwd, params.cwd)) throw error;
      }
    }
  }

  /** Restores `sessionId` for a load or resume in `cwd` (the session served, or refused for it). */
  #restoreOnce(sessionId: string, cwd: string): Restoring {
    let refused: unknown;
    const served = (async () => {
      // One another connection is freeing is not served as it goes: the session is restored afresh.
      const live = await unlessFreed(this.#host.agents.get(sessionId), () => this.#host.agents.get(sessionId));
      // A subagent child its parent's run or continuation holds is run by that session: a client
      // prompting it would race its parent, and a close could not free it. (A subagent's session a
      // load brought back from storage is top-level, and served while a connection serves it.)
      if (live?.session.header.origin === 'subagent' && !servedByAny(live)) {
        throw this.#sdk.RequestError.invalidParams(undefined, `session ${sessionId} is a subagent's, run by its parent's session; it is not served on its own`);
      }
      const agent = live ?? (await this.#resumeStored(sessionId));
      const images = !this.#images && holdsInputImages(agent.session.events);
      const problem = images ? 'this session holds images and this agent takes no images (it is served text-only)' : cwdProblem(agent, cwd);
      if (problem === undefined) return this.#serve(agent);
      if (!live) await this.#host.agents.dispose(agent.id);
      const refusal = this.#sdk.RequestError.invalidParams(undefined, problem);
      if (!images) refused = refusal;
      throw refusal;
    })().finally(() => this.#restoring.delete(sessionId));
    const restoring = { cwd, served, refusedCwd: (error: unknown) => error === refused };
    this.#restoring.set(sessionId, restoring);
    return restoring;
  }

  /** `served`, when its session works in `cwd`; -32602 otherwise. */
  #inCwd(served: Served, cwd: string): Served {
    const problem = cwdProblem(served.agent, cwd);
    if (problem !== undefined) throw this.#sdk.RequestError.invalidParams(undefined, problem);
    return served;
  }

  /** A stored session as a live agent, with the route overrides it was created with (read in the same load). */
  async #resumeStored(sessionId: string): Promise<Agent> {
    const agentOptionsFrom = (events: readonly SessionEvent[]): AgentOptions | undefined => {
      const kept = events.findLast((event) => event.type === SESSION_OPTIONS_EVENT)?.data as { agentOptions?: unknown } | undefined;
      if (kept?.agentOptions === undefined) return undefined;
      try {
        return this.#agentOptions({ [AGENT_OPTIONS_META]: kept.agentOptions });
      } catch {
        // A stored route this server cannot use any more: the session is served with its defaults.
        return undefined;
      }
    };
    try {
      // Input a dead writer left unrun waits for the next prompt: run now, the client could not see or cancel it.
      return (await this.#host.agents.resume({ sessionId, agentOptionsFrom, wake: false })).agent;
    } catch (error) {
      // Not found as ACP has it: -32002 naming the session (`data.sessionId`), as for a prompt.
      if (isSubagentError(error, 'UNKNOWN_SESSION')) throw this.#sdk.RequestError.sessionNotFound(sessionId);
      throw error;
    }
  }

  async #resume(params: acp.ResumeSessionRequest, requestId: unknown): Promise<acp.ResumeSessionResponse> {
    await this.#restore(params, this.#sdk.methods.agent.session.resume, requestId);
    return {};
  }

  async #load(params: acp.LoadSessionRequest, client: acp.AgentContext, requestId: unknown, signal: AbortSignal): Promise<acp.LoadSessionResponse> {
    const served = await this.#restore(params, this.#sdk.methods.agent.session.load, requestId);
    await this.#replays.replay(client, params.sessionId, served.agent.session.events, AbortSignal.any([signal, this.#inputGone.signal]));
    // A replay cut short by the client's $/cancel_request is answered as cancelled, not as loaded.
    signal.throwIfAborted();
    if (this.#inputGone.signal.aborted) throw this.#sdk.RequestError.internalError(undefined, 'the client’s input ended before the session was replayed');
    return {};
  }

  /** Serves `agent` from now on; once the client went away (close() ran), lets it go instead. */
  async #serve(agent: Agent): Promise<Served> {
    const served = { agent };
    this.#sessions.set(agent.id, served);
    serveBy(agent, this);
    if (!this.#ended) return served;
    await this.#release(served);
    throw this.#sdk.RequestError.internalError(undefined, 'the connection closed');
  }

  #served(sessionId: string): Served {
    const served = this.#sessions.get(sessionId);
    if (!served) throw this.#sdk.RequestError.sessionNotFound(sessionId);
    return served;
  }

  /** `signal` aborts on the client's $/cancel_request of this prompt (or as the connection closes): the turn ends `cancelled`, as on session/cancel. */
  async #prompt(params: acp.PromptRequest, client: acp.AgentContext, requestId: unknown, signal: AbortSignal): Promise<acp.PromptResponse> {
    // Sent after a load or resume of its session: runs on the session that brought back.
    const restored = this.#arrivals.promptMayRun(requestId);
    if (restored) await restored;
    // Sent after a cancel of the running prompt (a client stopping a turn to send the next): runs once that turn is answered, unless cancelled (or closed) meanwhile.
    const previous = this.#sessions.get(params.sessionId);
    const waited = previous?.active?.cancelled === true;
    if (waited) await previous.answered;
    const arrived = this.#arrivals.takePrompt(requestId);
    // Sent after a close of its session: that session is gone for it.
    if (arrived?.closed) throw this.#sdk.RequestError.sessionNotFound(params.sessionId);
    if (waited && arrived?.cancelled) return { stopReason: 'cancelled' };
    const served = this.#served(params.sessionId);
    const { agent } = served;
    if (served.active || agent.status === 'running') {
      throw this.#sdk.RequestError.invalidRequest(undefined, 'a prompt is already running in this session');
    }
    const content = promptContent(params.prompt, this.#images);
    // Blocks of blank text alone are an empty prompt too: the turn would have nothing to answer.
    if (content.every((block) => block.type === 'text' && block.text.trim() === '')) {
      throw this.#sdk.RequestError.invalidParams(undefined, 'the prompt is empty');
    }
    // Cancelled (or its session closed) before its turn could start: it ends at once.
    // (Or the client's input ended meanwhile: it runs no new turn.)
    if (arrived?.cancelled || signal.aborted || this.#inputGone.signal.aborted) return { stopReason: 'cancelled' };
    const active = { cancelled: false };
    served.active = active;
    const cancel = () => void (served.active === active && this.#cancel(params.sessionId));
    signal.addEventListener('abort', cancel, { once: true });
    const answer = this.#run(agent, served, active, content, client, params.sessionId);
    // Once the SDK wrote the answer (after the handler settled): a prompt waiting for it streams after it, not before.
    const written = Promise.race([this.#arrivals.answerWritten(requestId), this.#over.promise]);
    served.answered = answer.then(() => written, () => written);
    return answer.finally(() => signal.removeEventListener('abort', cancel));
  }

  async #run(agent: Agent, served: Served, active: { cancelled: boolean }, content: ReturnType<typeof promptContent>, client: acp.AgentContext, sessionId: string): Promise<acp.PromptResponse> {
    const updates = new UpdateQueue(this.#sdk, client, sessionId);
    const streamer = new TurnStreamer((update) => updates.send(update));
    let end: TurnEndReason | undefined;
    const unsubscribe = agent.subscribe((event) => {
      streamer.push(event);
      if (event.type === 'turn/end') end = (event.data as { reason: TurnEndReason }).reason;
    });
    try {
      agent.followup(content);
      await agent.whenIdle();
    } finally {
      unsubscribe();
      served.active = undefined;
    }
    // A client whose input ended may read no more: its answer does not wait for the updates to leave.
    await updates.drain(this.#inputGone.signal);
    // Answered once the turn is stored: a client told `end_turn` may count on `session/load` having
    // it, and a store that refused it (another process wrote the session) fails the prompt.
    await this.#host.sessions.flush(agent.id);
    const stopReason = active.cancelled ? 'cancelled' : acpStopReason(end);
    if (stopReason) {
      // ACP's unstable `usage`: the session's token totals, for clients that account for them (a
      // cancelled turn's too: what it spent before it stopped was spent all the same).
      const { inputTokens, outputTokens, totalTokens } = usageOf(agent.session.events, { everything: true });
      const response: acp.PromptResponse & { usage: { inputTokens: number; outputTokens: number; totalTokens: number } } = {
        stopReason,
        usage: { inputTokens, outputTokens, totalTokens },
      };
      return response;
    }
    const code = end?.kind === 'error' ? end.error.code : 'unknown';
    throw this.#sdk.RequestError.internalError({ code }, `turn failed (${code})`);
  }

  #cancel(sessionId: string): void {
    const served = this.#sessions.get(sessionId);
    if (!served?.active) return;
    served.active.cancelled = true;
    served.agent.cancel({ kind: 'user' });
  }

  /**
   * session/close: cancels the session's prompt and waits for its answer, releases its continuable
   * children, then disposes its agent (its stored log stays: session/load brings it back). A session
   * not served (unknown, or closed already) is closed: ACP asks that this succeed.
   */
  async #close(sessionId: string, requestId: unknown): Promise<acp.CloseSessionResponse> {
    // After the loads and resumes sent before it; then registered at once: a load or resume that
    // arrives while this runs waits, then restores afresh.
    await this.#arrivals.closeMayRun(requestId);
    let closing = this.#closing.get(sessionId);
    if (!closing) {
      closing = this.#closeServed(sessionId).finally(() => this.#closing.delete(sessionId));
      this.#closing.set(sessionId, closing);
    }
    try {
      await closing;
    } finally {
      this.#arrivals.closed(requestId);
    }
    return {};
  }

  async #closeServed(sessionId: string): Promise<void> {
    await this.#restoring.get(sessionId)?.served.catch(() => undefined);
    const served = this.#sessions.get(sessionId);
    // ACP: closing a session that does not exist or is no longer active succeeds.
    if (!served) return;
    this.#cancel(sessionId);
    await this.#release(served);
  }

  /** Stops serving `served`; frees its agent (children released, agent disposed) unless another connection serves it. */
  async #release(served: Served): Promise<void> {
    this.#sessions.delete(served.agent.id);
    await served.answered;
    await letGo(served.agent, this, async () => {
      await this.#host.subagents.drainContinuableDescendants([served.agent]);
      await this.#host.agents.dispose(served.agent.id);
    });
  }

  /** The client went away: the sessions it left open (and those being restored) are closed as by session/close. */
  async close(): Promise<void> {
    this.#ended = true;
    this.#over.resolve();
    await Promise.allSettled([...this.#restoring.values()].map((restoring) => restoring.served));
    await Promise.allSettled([...this.#sessions.keys()].map((sessionId) => this.#closeServed(sessionId)));
  }
}

/**
 * Serves the host's agent over ACP on `io` (stdio by default) until the input ends. Logs never go
 * to `output`: it carries protocol only. A message too large to read ends the connection (as the
 * SDK's own stream does): then it rejects `INVALID_REQUEST`, not as if the client had finished.
 */
export async function serveAcp(host: AcpServeHost, io?: AcpServeIo, options?: AcpServeOptions): Promise<void> {
  assertServeArguments(host, io, options);
  const sdk = await loadAcpSdk();
  const server = new AcpServer(sdk, host, options?.images ?? true);
  const connection = server.app().connect(nodeAcpStream(sdk, io?.output ?? process.stdout, io?.input ?? process.stdin, 'agent', undefined, server.observer));
  await connection.closed;
  await server.close();
  const reason: unknown = connection.signal.reason;
  if (reason instanceof sdk.MessageTooLargeError) {
    throw new SubagentError('INVALID_REQUEST', `serveAcp: the client sent a message over ${reason.maxMessageBytes} bytes; the connection was closed`, { cause: reason });
  }
}
