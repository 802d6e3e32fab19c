// Worker entry (bundled into one CommonJS file): one piscina task runs one child agent. The child's
// model, tool modules and loop live in this thread; host tools are called back on the main thread;
// the child's session events stream to the main thread as one-way notices on the thread's hub
// port; the raw outcome is returned encoded.
import type { MessagePort } from 'node:worker_threads';
import { parentPort, threadId, workerData } from 'node:worker_threads';
import type { Tool } from '../src/seam/agent-types.js';
import { decode, encode, parse, type Encoded } from '../src/seam/codec.js';
import { describeError, isSubagentError } from '../src/seam/errors.js';
import type { SessionEvent } from '../src/seam/session-types.js';
import type { SubagentResult } from '../src/seam/types.js';
import { GuardedRemote, RunRouter, exposeOn, type RunRoute } from '../src/seam/wire-channel.js';
import type { ChildControlApi, ChildNotice, ChildTaskData, HostApi, HostToolSchema, ThreadLoadedNotice, WorkerTask, WorkerThreadData } from '../src/seam/worker-protocol.js';
import { AgentRegistry, type AgentHandle } from '../src/runtime/agent-registry.js';
import type { LocalAgent } from '../src/runtime/agent.js';
import { budgetHooks, composeChildTools, descriptorHooks, readChildResult, type StructuredCapture } from '../src/runtime/child-run.js';
import type { BudgetStop } from '../src/seam/budget.js';
import { LiveSessionStore } from '../src/runtime/session-store.js';
import { ToolRegistry } from '../src/runtime/tool-registry.js';
import { setImportGate } from '../src/runtime/module-import.js';
import { claimSlot, threadImportGate } from '../src/providers/worker/import-gate.js';

function notify(route: RunRoute, notice: ChildNotice): void {
  route.post('notice', notice);
}

// This thread's long-lived port to the main thread, adopted from the first task that offers one.
const router = new RunRouter();
let hub: MessagePort | undefined;

function hostTool(schema: HostToolSchema, host: GuardedRemote<HostApi>): Tool {
  return {
    ...schema,
    execute: (input, ctx) => host.call((remote) => remote.callTool(schema.name, input, ctx.callId)),
  };
}

/** Sends a session's new events to the host, one message per event-loop turn. */
class EventStream {
  readonly #route: RunRoute;
  #batch: SessionEvent[] = [];
  #scheduled = false;

  constructor(route: RunRoute) {
    this.#route = route;
  }

  push(event: SessionEvent): void {
    this.#batch.push(event);
    if (this.#scheduled) return;
    this.#scheduled = true;
    setImmediate(() => this.flush());
  }

  /** Sends what is pending now. Ports keep order, so the host sees events in append order. */
  flush(): void {
    this.#scheduled = false;
    if (this.#batch.length === 0) return;
    notify(this.#route, { type: 'events', events: this.#batch });
    this.#batch = [];
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
  const { cancelFlag } = task;
  if (task.port) {
    if (hub) task.port.close();
    else router.listen((hub = task.port), { unref: true });
  }
  if (!hub) return encode({ needPort: true });
  const route = router.route(task.run);
  route.bind(hub);
  const host = new GuardedRemote<HostApi>(route.endpoint('host'));
  route.onClose(() => host.close('the host closed this thread’s channel'));
  const stream = new EventStream(route);
  let agent: LocalAgent | undefined;
  let cancelled = false;
  const early: Parameters<ChildControlApi['deliver']>[] = [];
  // Budgets: the child's own is checked here; a tree budget's stop arrives from the host.
  let treeStop: BudgetStop | undefined;
  const control: ChildControlApi = {
    budgetStop(stop) {
      treeStop ??= stop;
    },
    cancel(cause) {
      cancelled = true;
      agent?.cancel(cause);
    },
    deliver(...args) {
      if (agent) agent.deliver(...args);
      else early.push(args);
    },
  };
  exposeOn(control, route.endpoint('control'));
  notify(route, { type: 'attach', threadId });
  let handle: AgentHandle | undefined;
  let unsubscribe = () => {};
  try {
    if (Atomics.load(cancelFlag, 0) !== 0) return encode({ result: { output: [], stopReason: 'aborted' } });
    const data = decode<ChildTaskData>(task.data);
    const seed = data.seed === '' ? [] : parse<SessionEvent[]>(data.seed);
    const root = new ToolRegistry();
    if (data.hostTools.length > 0) root.register(...data.hostTools.map((schema) => hostTool(schema, host)));
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
        }),
      },
      cancelFlag,
    });
    agent = handle.agent;
    unsubscribe = agent.subscribe((event) => stream.push(event));
    cancelled ||= Atomics.load(cancelFlag, 0) !== 0;
    if (!cancelled) {
      agent.followup(data.prompt);
      for (const args of early.splice(0)) agent.deliver(...args);
    }
    await agent.whenIdle();
    cancelled ||= Atomics.load(cancelFlag, 0) !== 0;
    const result = readChildResult(agent.session.events, { seedLength: seed.length, cancelled, capture });
    return encode({ result });
  } catch (error) {
    return encode({ result: failed(error) });
  } finally {
    unsubscribe();
    await handle?.dispose().catch(() => undefined);
    stream.flush();
    notify(route, { type: 'end' });
    host.close();
    route.dispose();
  }
}

// Last top-level steps: tool and model modules are imported through the pool's gate, and the pool
// learns that this thread has loaded its entry (until now, terminating it was not safe).
const { importGate } = (workerData ?? {}) as Partial<WorkerThreadData>;
if (importGate) {
  const slot = claimSlot(importGate, threadId);
  setImportGate(threadImportGate(importGate, slot));
  parentPort?.postMessage({ threadLoaded: threadId, slot } satisfies ThreadLoadedNotice);
}
