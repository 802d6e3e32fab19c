// The model of a continuable spawn/fork child's host-side agent. The child itself lives in a pool
// thread (a resident stay) and keeps its history and tools there between turns; each host-side step
// is one turn of it. The host-side agent keeps the inbox, the epochs and the log that is persisted;
// the stay is a cache: it leaves when idle and a start needs its slot, and comes back from that log.
import type { HostToolSchema, ResidentHostApi, ResidentHostTools, ResidentMessage, ResidentTaskData } from '../../seam/child-protocol.js';
import { unlessAborted } from '../../seam/abort.js';
import { limitsOf, type AheadTrees } from '../../seam/budget.js';
import { encode } from '../../seam/codec.js';
import type { SessionId } from '../../seam/content.js';
import { DESCRIPTOR_EVENT, foldSubagentDescriptor } from '../../seam/descriptor.js';
import { eventTexts } from '../../seam/event-texts.js';
import { SubagentError, describeError, isSubagentError } from '../../seam/errors.js';
import { warnContained } from '../../runtime/session-store.js';
import { settled } from '../../seam/once.js';
import type { ModelAdapter, ModelChunk, ModelRequest } from '../../seam/model-types.js';
import type { CancelCause, SessionEvent, SessionEventMap } from '../../seam/session-types.js';
import type { Tool } from '../../seam/agent-types.js';
import type { LocalAgent } from '../../runtime/agent.js';
import { executeForChild, toolHolder, type ToolRegistry } from '../../runtime/tool-registry.js';
import { DEFAULT_MAX_STEPS_PER_TURN, openStep } from '../../runtime/turn.js';
import type { Slot } from './admission.js';
import { assertFitsThread, errorForThread, messageRuns, resultForThread } from './heap-fit.js';
import { ResidentThread, stayFailure } from './resident-thread.js';
import { TurnRelay } from './resident-turn.js';
import type { WorkerProviderHost } from './worker-run.js';

/** The messages of the host-side agent's current step: what the child's turn is for. */
function stepMessages(events: readonly SessionEvent[]): ResidentMessage[] {
  const messages: ResidentMessage[] = [];
  for (let i = events.length - 1; i >= 0 && events[i]!.type !== 'step/start'; i--) {
    if (events[i]!.type !== 'user/message') continue;
    const { id, content, source } = events[i]!.data as SessionEventMap['user/message'];
    messages.unshift({ id, content, source });
  }
  return messages;
}


/**
 * The log a stay starts from: everything before the host-side step it is built for, without inbox
 * bookkeeping (its inbox is the host's), and where the inherited prefix ends in it. The earlier
 * steps of that step's turn stay: they are turns the child already took (a stay built between two
 * steps of one turn, after its first stay yielded or died, sees them as the first stay did).
 */
function priorLog(events: readonly SessionEvent[], seedLength: number): { events: SessionEvent[]; seedLength: number } {
  const open = events.findLastIndex((event) => event.type === 'step/start');
  const kept = (open < 0 ? events : events.slice(0, open)).map((event, index) => ({ event, index })).filter(({ event }) => !event.type.startsWith('inbox/'));
  return {
    events: kept.map(({ event }, seq) => ({ ...event, seq })),
    seedLength: kept.filter(({ index }) => index < seedLength).length,
  };
}

/** Whether the log has a turn open: its latest turn event is a `turn/start`. */
function turnOpen(events: readonly SessionEvent[]): boolean {
  return events.findLast((event) => event.type === 'turn/start' || event.type === 'turn/end')?.type === 'turn/start';
}

/**
 * The child's own budget as its stay checks it: counted from its descriptor, over its whole log. Its
 * `turns` limit is left to the host-side agent's guard: in the stay each host-side step is a turn of
 * its own (a steer or report makes two of one turn), and a stay built mid-turn starts from that
 * turn's open `turn/start`, so the stay's count of turns is not the child's.
 */
function budgetOf(events: readonly SessionEvent[], seedLength: number, prior: { seedLength: number }): ResidentTaskData['budget'] {
  const own = events.slice(seedLength);
  const descriptor = foldSubagentDescriptor(own);
  if (descriptor?.budget === undefined) return undefined;
  const { turns: _turns, ...budget } = descriptor.budget;
  if (limitsOf(budget).length === 0) return undefined;
  const startedAt = own.find((event) => event.type === DESCRIPTOR_EVENT)!.time;
  return { budget, startedAt, seedLength: prior.seedLength };
}

function schemasOf(tools: readonly Tool[]): HostToolSchema[] {
  return tools.map((tool) => {
    const { name, description, parameters, concurrencySafe } = tool;
    const holder = toolHolder(tool);
    return { name, description, parameters, ...(concurrencySafe ? { concurrencySafe } : {}), ...(holder === undefined ? {} : { holder }) };
  });
}

/** The host-side agent's tools, in the two parts the stay offers around its tool modules' tools. */
type ToolLayers = ReturnType<ToolRegistry['layers']>;

function schemaLayers(tools: ToolLayers): ResidentHostTools {
  return { inherited: schemasOf(tools.inherited), own: schemasOf(tools.own) };
}

const sameTools = (a: readonly Tool[], b: readonly Tool[]) => a.length === b.length && a.every((tool, i) => tool === b[i]);

const aborted: ModelChunk = { type: 'finish', reason: 'aborted' };

/** How long closing a stay's own input waits for a thread that does not answer (one in a synchronous loop). */
const OWN_INPUT_CLOSE_BOUND_MS = 250;

/** How often a turn whose thread ended before it began there is sent to a stay built anew. */
const LOST_TURN_RETRIES = 3;

interface Stay {
  readonly thread: ResidentThread;
  readonly slot: Slot;
  /** The host tools the child was last given. */
  tools: ToolLayers;
  /** The running turn. */
  turn: TurnRelay | undefined;
  /** Asked to leave while a turn ran: it leaves once that turn is over. */
  leaveAfterTurn: boolean;
  /** Asked to leave (it yielded its slot, or the child was released): no turn may start in it. */
  leaving?: true;
  /** Its turn is over and it waits for the host-side turn to end before it offers its slot. */
  resting: boolean;
}

export class ResidentWorkerModel implements ModelAdapter {
  readonly #host: WorkerProviderHost;
  readonly #childId: SessionId;
  readonly #parentId: SessionId;
  /** The stay turns go to (a leaving one is no longer it). */
  #stay: Stay | undefined;
  /** Every stay whose task has not ended yet, leaving ones included. */
  readonly #live = new Set<Stay>();
  /** A stay being built. */
  #entering: Promise<unknown> = Promise.resolve();
  /** The previous turn, until it is over in the thread (a cancelled one may still wind down). */
  #previous: Promise<void> = Promise.resolve();
  #released = false;
  /** A stay of the child was built before (or it came back from its log): see ResidentTaskData.started. */
  #started: boolean;
  /** The tree budgets covering the child: each stay adds its spend to them and checks them in its thread. */
  readonly #trees: AheadTrees | undefined;

  constructor(host: WorkerProviderHost, childId: SessionId, parentId: SessionId, trees: AheadTrees | undefined, resumed: boolean) {
    this.#host = host;
    this.#started = resumed;
    this.#childId = childId;
    this.#parentId = parentId;
    this.#trees = trees?.trees.length ? trees : undefined;
  }

  #agent(): LocalAgent {
    const agent = this.#host.agents.get(this.#childId);
    if (!agent) throw new SubagentError('CLOSED', `continuable child ${this.#childId} is not live`);
    return agent;
  }

  async *stream(request: ModelRequest): AsyncGenerator<ModelChunk> {
    const { signal } = request;
    let agent: LocalAgent;
    let stay: Stay;
    let runs: ResidentMessage[][];
    try {
      agent = this.#agent();
      const messages = stepMessages(agent.session.events);
      // A step with no input gives the child nothing to take a turn for.
      if (messages.length === 0) return yield { type: 'finish', reason: 'stop' };
      // A stay holds the child's log, and may have filled its thread: what it is sent at once is bounded as for a running child.
      runs = messageRuns(messages, this.#host.pool.options.resourceLimits?.maxOldGenerationSizeMb);
      await this.#previous;
      if (signal.aborted) return yield aborted;
      // A cancel that lands from now on still reaches the child: its turn starts, and is cancelled.
      const entered = await this.#stayFor(agent, signal);
      if (!entered) return yield aborted;
      stay = entered;
    } catch (error) {
      if (signal.aborted) return yield aborted;
      return yield { type: 'finish', reason: 'error', failure: isSubagentError(error) ? { code: error.code, message: error.message } : { code: 'START_FAILED', message: describeError(error) } };
    }
    // A budget stop inside the child's turn stops the host-side turn the same way (its input is discarded).
    const at = openStep(agent.session.events) ?? { turn: 0, step: 1 };
    const relay = new TurnRelay(signal, agent.session, at, (cause) => agent.cancel(cause));
    // The child's turn is this host-side step and those after it: it may use what this turn has left.
    const steps = (agent.options.maxStepsPerTurn ?? DEFAULT_MAX_STEPS_PER_TURN) - at.step + 1;
    stay.turn = relay;
    stay.slot.busy();
    this.#previous = relay.ended;
    // Only a turn still running is cancelled: a cancel's grace must not end an idle stay's thread.
    const cancel = () => {
      if (stay.turn === relay) stay.thread.cancelTurn((signal.reason as CancelCause | undefined) ?? { kind: 'parent' });
    };
    void relay.ended.then(() => {
      stay.thread.turnEnded();
      stay.turn = undefined;
      signal.removeEventListener('abort', cancel);
      this.#rest(agent, stay);
    });
    signal.addEventListener('abort', cancel, { once: true });
    for (let lost = 0; ; ) {
      const tools = agent.tools.layers();
      const changed = !sameTools(tools.inherited, stay.tools.inherited) || !sameTools(tools.own, stay.tools.own);
      stay.tools = tools;
      for (const run of runs.slice(0, -1)) stay.thread.stage(run);
      const tail = stay.thread.prompt(runs.at(-1)!, changed ? schemaLayers(tools) : undefined, steps);
      // A cancel that landed before the listener was added still reaches the turn: it follows the prompt.
      if (signal.aborted) cancel();
      try {
        relay.events(await tail);
        // Answered without the turn's end: the child was cancelled before its turn started there.
        if (!relay.finished) relay.lost('the child did not start the turn');
      } catch (error) {
        // A stay that ended says why through its outcome, once every notice of it is in.
        const outcome = stay.thread.closed ? await stay.thread.ended : undefined;
        // Its thread ended before it began the turn (it died between turns, before the pool said
        // so): the turn never ran, and goes to a stay built anew; a few times at most, should
        // threads keep dying under it.
        if (outcome && !relay.began && !relay.finished && !signal.aborted && ++lost <= LOST_TURN_RETRIES) {
          stay.turn = undefined;
          const next = await this.#stayFor(agent, signal).catch((reason: unknown) => {
            relay.lost(describeError(reason));
            return undefined;
          });
          if (next) {
            stay = next;
            stay.turn = relay;
            stay.slot.busy();
            continue;
          }
        }
        relay.lost(outcome ? stayFailure(outcome) : describeError(error));
      }
      break;
    }
    // The host calls the child left out get the grace a one-shot child's result gives them.
    yield* relay.chunks(this.#host.abandonGraceMs, this.#host.agents.closing);
  }

  /**
   * The stay a turn goes to: the resting one, or one built anew; `undefined` if the turn was
   * cancelled while a stay that was leaving made it wait.
   */
  async #stayFor(agent: LocalAgent, signal: AbortSignal): Promise<Stay | undefined> {
    for (;;) {
      const entering = this.#enter(agent, signal);
      this.#entering = settled(entering);
      const stay = await entering;
      // The resting stay was asked to yield its slot (a start wanted it) while this turn came to
      // it: it is leaving, and the turn goes to a stay built anew. (A stay whose thread failed
      // unseen is not left: the turn's prompt meets that failure, see `stream`.)
      if (stay.leaving === undefined || this.#released) return stay;
      if (signal.aborted) return undefined;
    }
  }

  /** The child's stay, resident already or built now from the host-side log (in any thread). */
  async #enter(agent: LocalAgent, signal: AbortSignal): Promise<Stay> {
    if (this.#released) throw new SubagentError('CLOSED', `continuable child ${this.#childId} has left residence`);
    if (this.#stay && !this.#stay.thread.over) return this.#stay;
    const { pool, sessions } = this.#host;
    const tools = agent.tools.layers();
    const { events, header } = agent.session;
    const prior = priorLog(events, header.seedLength ?? 0);
    const budget = budgetOf(events, header.seedLength ?? 0, prior);
    const data: ResidentTaskData = {
      header,
      events: eventTexts(prior.events),
      agentOptions: { ...agent.options, model: agent.options.model ?? this.#host.agents.defaultModel },
      hostTools: schemaLayers(tools),
      ...(budget ? { budget } : {}),
      ...(this.#started ? { started: true as const } : {}),
    };
    // A log no thread can hold would only run it out of memory, or abort the whole process.
    // (Not held to the bound of a thread that may already run a child, as a fork's seed is: its log
    // holds what it was sent and answered, and a stay refused for an event of it could never come
    // back. A log with one event of more than about 16 MB, brought into a thread shared with a child
    // at its heap limit, can still abort the process: see the README.)
    // Its options and tool schemas cross with the log (the model spec twice: in them and in the log's descriptor).
    // Measured only under a heap limit: without one, nothing is stringified on the way to a thread.
    const heapLimitMb = pool.options.resourceLimits?.maxOldGenerationSizeMb;
    if (heapLimitMb !== undefined) {
      const rest = JSON.stringify({ ...data, events: [] });
      assertFitsThread(`the log of continuable child ${this.#childId} with its model spec and tool schemas`, [...data.events, rest], heapLimitMb, 'start a fresh child', { code: 'START_FAILED' });
    }
    const task = encode(data);
    const slot = await pool.admission.acquire({
      child: this.#childId,
      parent: this.#parentId,
      parentOf: (id) => sessions.get(id)?.header.parentSession,
      signal,
      resident: true,
    });
    // The stay's turn, as the thread's calls and notices find it (the stay is built below).
    const current: { stay?: Stay } = {};
    const host: ResidentHostApi = {
      callTool: async (name, input, callId) => {
        const turn = current.stay?.turn;
        if (!turn) throw new SubagentError('UNKNOWN_TOOL', `no tool named ${name} is available to this child between turns`);
        // A call still in flight when the turn was cancelled never starts.
        if (turn.callSignal.aborted) throw SubagentError.cancelled(`the ${name} call`, turn.callSignal.reason, 'before it reached the host');
        // While the call is out (a `subagent` call above all) the child only waits: its slot is lent to its children.
        const done = slot.wait();
        try {
          const result = await turn.call(() => executeForChild(agent.tools, name, input, { agent, callId, signal: turn.callSignal }));
          return resultForThread(name, result, pool.options.resourceLimits?.maxOldGenerationSizeMb);
        } catch (error) {
          throw errorForThread(name, error, pool.options.resourceLimits?.maxOldGenerationSizeMb);
        } finally {
          done();
        }
      },
      // The host-side agent keeps the child's inbox: it logs the input and runs it like any other.
      acceptOwn: async (target, id, content, wake, source) => {
        if (target !== 'next-turn' && target !== 'next-step') throw new SubagentError('INVALID_REQUEST', `unknown inbox target ${String(target)}`);
        agent.deliver(target, id, content, wake, source);
      },
    };
    let thread: ResidentThread;
    try {
      thread = new ResidentThread(pool, task, host, (events) => current.stay?.turn?.events(events), () => slot.release(), this.#trees);
    } catch (error) {
      slot.release();
      throw error;
    }
    const stay: Stay = { thread, slot, tools, turn: undefined, leaveAfterTurn: false, resting: false };
    current.stay = stay;
    this.#stay = stay;
    this.#live.add(stay);
    void thread.ended.then((outcome) => {
      this.#live.delete(stay);
      if (this.#stay === stay) this.#stay = undefined;
      // A turn its thread had not begun yet is run again by `stream` in a stay built anew.
      if (stay.turn?.began) stay.turn.lost(stayFailure(outcome));
      else if (!stay.turn && outcome.type === 'thread-failed' && !outcome.aborted && !this.#released) {
        // No turn to end: the child comes back from its log at its next message, as after any leave.
        warnContained(this.#host.logger, `continuable child ${this.#childId} lost its stay between turns (${outcome.diagnostic}); its next message brings it back from its log`);
      }
    });
    try {
      await unlessAborted(thread.ready, signal, () => SubagentError.cancelled('the turn', signal.reason, 'while the child was being built in its thread'));
    } catch (error) {
      // Cancelled while the stay is being built (e.g. a tool module that never finishes loading): it goes.
      if (signal.aborted) this.#leave(stay);
      throw error;
    }
    this.#started = true;
    return stay;
  }

  /**
   * A stay whose turn is over: it leaves if asked to (or released), else it may yield its slot once
   * the host-side turn is over too. Until then that turn may still give the child a step (a steer, a
   * report that came meanwhile), and the child is not idle: a start must not take its thread.
   */
  #rest(agent: LocalAgent, stay: Stay): void {
    if (stay.leaveAfterTurn || this.#released) return this.#leave(stay);
    if (this.#stay !== stay || stay.resting) return;
    const offer = () => {
      stay.resting = false;
      if (this.#stay === stay && !stay.turn) stay.slot.idle(() => this.#leave(stay));
    };
    if (!turnOpen(agent.session.events)) return offer();
    stay.resting = true;
    const off = agent.subscribe((event) => {
      if (event.type !== 'turn/end') return;
      off();
      offer();
    });
  }

  /** Ends a stay (idle, or once its turn is over); the child comes back from its log when needed. */
  #leave(stay: Stay): void {
    if (this.#stay === stay) this.#stay = undefined;
    stay.leaving = true;
    if (stay.turn) {
      stay.leaveAfterTurn = true;
      return;
    }
    void stay.thread.leave();
  }

  /**
   * The child is leaving residence: input its code adds to itself in its thread is refused from now
   * on, and what it added before reaches the host-side agent first (see ContinuableCreateSpec.quiesce).
   */
  async closeOwnInput(): Promise<void> {
    const bound = Math.min(this.#host.pool.options.cancelGraceMs, OWN_INPUT_CLOSE_BOUND_MS);
    await Promise.all([...this.#live].map((stay) => stay.thread.closeOwnInput(bound)));
  }

  /** The child left residence for good (its Activation ended): its stay ends with it. */
  async release(): Promise<void> {
    this.#released = true;
    this.#host.pool.admission.forget(this.#childId);
    await this.#entering;
    await this.#previous;
    const live = [...this.#live];
    for (const stay of live) this.#leave(stay);
    await Promise.all(live.map((stay) => stay.thread.ended));
  }
}
