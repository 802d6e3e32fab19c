// Worker entry: one piscina task runs one child agent. The child's model, tool modules and loop
// live in this thread; host tools are called back on the main thread; the child's session events
// stream to the main thread in batches; the raw outcome is returned encoded.
import { threadId } from 'node:worker_threads';
import { decode, encode, type Encoded } from '../src/seam/codec.js';
import { describeError, isSubagentError } from '../src/seam/errors.js';
import type { SessionEvent } from '../src/seam/session-types.js';
import type { SubagentResult } from '../src/seam/types.js';
import { GuardedRemote, exposeOn } from '../src/seam/wire-channel.js';
import type { ChildControlApi, ChildTaskData, HostApi, HostToolSchema, WorkerTask } from '../src/seam/worker-protocol.js';
import { AgentRegistry, type AgentHandle } from '../src/runtime/agent-registry.js';
import type { LocalAgent } from '../src/runtime/agent.js';
import { composeChildTools, descriptorHooks, readChildResult, type StructuredCapture } from '../src/runtime/child-run.js';
import { LiveSessionStore } from '../src/runtime/session-store.js';
import { ToolRegistry } from '../src/runtime/tool-registry.js';
import type { Tool } from '../src/seam/agent-types.js';

function hostTool(schema: HostToolSchema, host: GuardedRemote<HostApi>): Tool {
  return {
    ...schema,
    execute: (input, ctx) => host.call((remote) => remote.callTool(schema.name, input, ctx.callId)),
  };
}

/** Streams a session's new events to the host, one message per event-loop turn. */
class EventStream {
  readonly #host: GuardedRemote<HostApi>;
  #batch: SessionEvent[] = [];
  #last: Promise<void> = Promise.resolve();

  constructor(host: GuardedRemote<HostApi>) {
    this.#host = host;
  }

  push(event: SessionEvent): void {
    if (this.#batch.push(event) === 1) setImmediate(() => void this.flush());
  }

  /** Sends what is pending; resolves once the host has taken every batch sent so far. */
  flush(): Promise<void> {
    const batch = this.#batch;
    if (batch.length > 0) {
      this.#batch = [];
      // A closed channel means the host is gone: nothing is left to deliver to, so no failure.
      const sent = this.#host.call((remote) => remote.appendEvents(batch)).catch(() => undefined);
      this.#last = this.#last.then(() => sent);
    }
    return this.#last;
  }
}

function failed(error: unknown): SubagentResult {
  const diagnostic = isSubagentError(error) ? `${error.code}: ${error.message}` : `the child failed: ${describeError(error)}`;
  return { output: [], diagnostic, stopReason: 'error' };
}

/** A no-op task: resolves once this thread has loaded its modules (see WorkerPool.warm). */
export function warm(): number {
  return threadId;
}

export default async function runChild(task: WorkerTask): Promise<Encoded> {
  const host = new GuardedRemote<HostApi>(task.hostPort);
  let agent: LocalAgent | undefined;
  let cancelled = false;
  const early: Parameters<ChildControlApi['deliver']>[] = [];
  const control: ChildControlApi = {
    cancel(cause) {
      cancelled = true;
      agent?.cancel(cause);
    },
    deliver(...args) {
      if (agent) agent.deliver(...args);
      else early.push(args);
    },
  };
  const stopServing = exposeOn(control, task.controlPort);
  let handle: AgentHandle | undefined;
  let unsubscribe = () => {};
  try {
    await host.call((remote) => remote.attach(threadId));
    if (Atomics.load(task.cancelFlag, 0) !== 0) return encode({ result: { output: [], stopReason: 'aborted' } });
    const data = decode<ChildTaskData>(task.data);
    const root = new ToolRegistry();
    if (data.hostTools.length > 0) root.register(...data.hostTools.map((schema) => hostTool(schema, host)));
    const agents = new AgentRegistry({ sessions: new LiveSessionStore(), tools: root });
    let capture: StructuredCapture | undefined;
    const stream = new EventStream(host);
    const { id, createdAt: _createdAt, seedLength: _seedLength, ...header } = data.header;
    handle = await agents.create({
      sessionId: id,
      header,
      seed: data.seed,
      agentOptions: data.agentOptions,
      setup: ({ tools }) => {
        capture = composeChildTools(tools, { outputSchema: data.outputSchema });
      },
      hooks: { ...descriptorHooks(() => handle!.agent.session, data.descriptor), beforeTool: () => stream.flush() },
      cancelFlag: task.cancelFlag,
    });
    agent = handle.agent;
    unsubscribe = agent.subscribe((event) => stream.push(event));
    cancelled ||= Atomics.load(task.cancelFlag, 0) !== 0;
    if (!cancelled) {
      agent.followup(data.prompt);
      for (const args of early.splice(0)) agent.deliver(...args);
    }
    await agent.whenIdle();
    cancelled ||= Atomics.load(task.cancelFlag, 0) !== 0;
    await stream.flush();
    const result = readChildResult(agent.session.events, { seedLength: data.seed.length, cancelled, capture });
    return encode({ result });
  } catch (error) {
    return encode({ result: failed(error) });
  } finally {
    unsubscribe();
    await handle?.dispose().catch(() => undefined);
    stopServing();
    host.close();
  }
}
