// Runs one delegated child wherever it was sent, over any ChildTransport: builds the agent from
// the task, streams its events as notices, answers control calls (cancel, input, tree-budget
// stops) and returns the raw outcome. Worker threads are one transport (workers/child.ts).
import { onAbort } from '../seam/abort.js';
import type { Tool } from '../seam/agent-types.js';
import type { BudgetStop } from '../seam/budget.js';
import type { ChildControlApi, ChildTaskResult, ChildTransport, HostToolSchema } from '../seam/child-protocol.js';
import { decodeOwned, type Encoded } from '../seam/codec.js';
import { takeEvents } from '../seam/event-texts.js';
import { SubagentError, describeError, isSubagentError } from '../seam/errors.js';
import type { SessionEvent } from '../seam/session-types.js';
import type { SubagentResult } from '../seam/types.js';
import { AgentRegistry, type AgentHandle } from './agent-registry.js';
import type { LocalAgent } from './agent.js';
import { assertTaskShape } from './child-task-shape.js';
import { budgetHooks, composeChildTools, descriptorHooks, readChildResult, treeCounter, type StructuredCapture } from './child-run.js';
import { LiveSessionStore } from './session-store.js';
import { ToolRegistry, tagToolHolder } from './tool-registry.js';

/**
 * A host tool as the child sees it: each call runs on the host. A cancelled child does not wait for
 * the answer (the host stops the call too, but a start waiting for a pool slot may take long to
 * answer): its turn ends at once instead of its thread being terminated after the grace.
 */
export function hostTool({ holder, ...schema }: HostToolSchema, transport: ChildTransport): Tool {
  const tool: Tool = {
    ...schema,
    execute: (input, ctx) => {
      const { signal } = ctx;
      const cancelled = () => SubagentError.cancelled(`the host tool call ${schema.name}`, signal.reason);
      // Not sent once cancelled: the host would refuse it anyway.
      if (signal.aborted) return Promise.reject(cancelled());
      const call = transport.callHost((host) => host.callTool(schema.name, input, ctx.callId));
      return new Promise((resolve, reject) => {
        const off = onAbort(signal, () => reject(cancelled()));
        call.then(
          ({ concludes, ...output }) => {
            off();
            // The host ran the tool: its concludeTurn() came back as `concludes`, and ends this turn.
            if (concludes) ctx.concludeTurn?.();
            resolve(output);
          },
          (error: unknown) => {
            off();
            reject(error);
          },
        );
      });
    },
  };
  return holder === undefined ? tool : tagToolHolder(tool, holder);
}

/** Sends a session's new events to the host, one notice per event-loop turn. */
export class EventStream {
  readonly #transport: ChildTransport;
  #batch: SessionEvent[] = [];
  #scheduled = false;

  constructor(transport: ChildTransport) {
    this.#transport = transport;
  }

  push(event: SessionEvent): void {
    this.#batch.push(event);
    if (this.#scheduled) return;
    this.#scheduled = true;
    setImmediate(() => this.flush());
  }

  /** Sends what is pending now. Notices keep order, so the host sees events in append order. */
  flush(): void {
    if (this.#batch.length === 0) return;
    this.#transport.notify({ type: 'events', events: this.take() });
  }

  /** What is pending now, for the last notice to carry (one message fewer per child). */
  take(): SessionEvent[] {
    this.#scheduled = false;
    const batch = this.#batch;
    this.#batch = [];
    return batch;
  }
}

type Delivery = Parameters<ChildControlApi['deliver']>;

/**
 * The child's input door. Input that arrives before the agent exists waits here; once the child
 * has returned its outcome the door is shut and input is refused (`CLOSED`), never dropped.
 */
class InputDoor {
  #agent: LocalAgent | undefined;
  #shut: string | undefined;
  readonly #early: { args: Delivery; resolve: () => void; reject: (error: unknown) => void }[] = [];

  deliver(args: Delivery): Promise<void> {
    if (this.#shut !== undefined) return Promise.reject(new SubagentError('CLOSED', this.#shut));
    if (this.#agent) {
      this.#agent.deliver(...args);
      return Promise.resolve();
    }
    return new Promise((resolve, reject) => this.#early.push({ args, resolve, reject }));
  }

  /** The agent exists: input waiting for it goes in, in arrival order. */
  open(agent: LocalAgent): void {
    this.#agent = agent;
    for (const { args, resolve, reject } of this.#early.splice(0)) {
      try {
        agent.deliver(...args);
        resolve();
      } catch (error) {
        reject(error);
      }
    }
  }

  shut(why: string): void {
    this.#shut ??= why;
    for (const { reject } of this.#early.splice(0)) reject(new SubagentError('CLOSED', why));
  }
}

function failed(error: unknown): SubagentResult {
  const diagnostic = isSubagentError(error) ? `${error.code}: ${error.message}` : `the child failed: ${describeError(error)}`;
  return { output: [], diagnostic, stopReason: 'error' };
}

const outcome = (result: SubagentResult): ChildTaskResult => ({ type: 'result', result });

/** The outcome of a child that failed: its result, and the typed error that stopped it (see ChildTaskResult.failure). */
export function failedOutcome(error: unknown): ChildTaskResult {
  const result = failed(error);
  return isSubagentError(error) ? { type: 'result', result, failure: { code: error.code, message: error.message } } : outcome(result);
}

/** Runs the child of `task` (an encoded ChildTaskData) to its end; never rejects. */
export async function runChild(task: Encoded, transport: ChildTransport): Promise<ChildTaskResult> {
  const stream = new EventStream(transport);
  const door = new InputDoor();
  let agent: LocalAgent | undefined;
  let cancelled = false;
  // Budgets: the child's own is checked here, and so are the trees it shares with the host (their
  // spend, its own included); a tree budget's stop also arrives from the host.
  let treeStop: BudgetStop | undefined;
  transport.serve({
    budgetStop(stop) {
      treeStop ??= stop;
    },
    cancel(cause) {
      cancelled = true;
      agent?.cancel(cause);
    },
    deliver: (...args) => door.deliver(args),
  });
  let handle: AgentHandle | undefined;
  let unsubscribe = () => {};
  try {
    if (transport.cancelRequested()) return outcome({ output: [], stopReason: 'aborted' });
    const data = decodeOwned<unknown>(task);
    assertTaskShape(data);
    treeStop ??= data.treeStop;
    // Parsed here and nowhere else, one text at a time, each dropped as its event is made: frozen, the
    // events are the child's log as they are, not copied into it (see seam/event-texts.ts).
    const seed = takeEvents(data.seed);
    const root = new ToolRegistry();
    if (data.hostTools.length > 0) root.register(...data.hostTools.map((schema) => hostTool(schema, transport)));
    const agents = new AgentRegistry({ sessions: new LiveSessionStore(), tools: root });
    let capture: StructuredCapture | undefined;
    const { id, createdAt: _createdAt, seedLength: _seedLength, ...header } = data.header;
    handle = await agents.create({
      sessionId: id,
      header,
      seed,
      agentOptions: data.agentOptions,
      setup: ({ tools }) => {
        capture = composeChildTools(tools, { outputSchema: data.outputSchema });
      },
      // Before each tool body the log so far goes out: a tool that never returns leaves it visible.
      hooks: {
        ...descriptorHooks(() => handle!.agent.session, data.descriptor),
        beforeTool: async () => stream.flush(),
        ...budgetHooks(() => handle!.agent.session, {
          budget: data.descriptor.budget,
          startedAt: data.header.createdAt,
          seedLength: seed.length,
          treeStop: () => treeStop,
          trees: transport.trees,
        }),
      },
      ...(transport.cancelFlag ? { cancelFlag: transport.cancelFlag } : {}),
    });
    agent = handle.agent;
    const session = agent.session;
    const count = transport.trees && treeCounter(transport.trees, seed.length);
    unsubscribe = agent.subscribe(
      count
        ? (event) => {
            count(session.events);
            stream.push(event);
          }
        : (event) => stream.push(event),
    );
    cancelled ||= transport.cancelRequested();
    // Input that came before the agent existed goes in now, after the prompt; a child cancelled
    // before it started refuses it (its run reports the refusal) instead of starting a turn for it.
    if (cancelled) door.shut(`child ${id} was cancelled before it started`);
    else {
      agent.followup(data.prompt);
      door.open(agent);
    }
    await agent.whenIdle();
    // The host stops taking input before the child stops listening: whatever it sent first lands
    // here first and may wake the agent for another turn.
    await transport.closeInput();
    await agent.whenIdle();
    door.shut(`child ${id} has finished; it no longer takes input`);
    cancelled ||= transport.cancelRequested();
    return outcome(readChildResult(agent.session.events, { seedLength: seed.length, cancelled, capture }));
  } catch (error) {
    return failedOutcome(error);
  } finally {
    // Input the host sends from now on is refused at its source; input already on its way is refused
    // here, and waited for: the host settles the run once each message it sent was answered.
    const inputClosed = transport.closeInput();
    door.shut('the child ended before it could take this input');
    await inputClosed;
    unsubscribe();
    await handle?.dispose().catch(() => undefined);
    transport.notify({ type: 'end', events: stream.take() });
  }
}
