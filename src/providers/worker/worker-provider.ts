// The spawn and fork providers: each child runs inside a worker thread of the host's pool. Start
// posts the encoded task and resolves once a thread has taken it and the child's session is
// published; the run mirrors the child's log, relays host tool calls, and contains thread deaths.
import { once, settled } from '../../seam/once.js';
import { randomUUID } from 'node:crypto';
import { MessageChannel } from 'node:worker_threads';
import { decode, encode, stringify } from '../../seam/codec.js';
import { SubagentError } from '../../seam/errors.js';
import { finalAssistantOutput } from '../../seam/output.js';
import { usageOf } from '../../seam/usage.js';
import type { SessionEvent, SessionHeader } from '../../seam/session-types.js';
import type { ResolvedSubagentStartRequest, SubagentProvider, SubagentResult, SubagentRun } from '../../seam/types.js';
import { GuardedRemote, exposeOn } from '../../seam/wire-channel.js';
import type { ChildControlApi, ChildNotice, ChildTaskData, ChildTaskResult, HostApi, WorkerTask } from '../../seam/worker-protocol.js';
import { composeChildTools } from '../../runtime/child-run.js';
import type { SessionLog } from '../../runtime/session.js';
import { ALL_CAPABILITIES, localChildPlan } from '../local-child.js';
import { hostParts, type Host, type ProviderHost } from '../provider-host.js';
import { WorkerChildAgent } from './child-agent.js';
import type { WorkerPoolEngine } from './pool.js';
import type { Slot } from './admission.js';
import { closeTurnOfDeadThread, describeThreadFailure } from './thread-failure.js';

export interface WorkerProviderHost extends ProviderHost {
  readonly pool: WorkerPoolEngine;
}

export interface WorkerProviderOptions {
  /** @default 'spawn' / 'fork' */
  name?: string;
}

// The last encoded fork prefix of each parent session: sibling forks of one answer share it.
const seedCache = new WeakMap<object, { length: number; text: string }>();

function encodedSeed(parentSession: object, seed: readonly SessionEvent[]): string {
  if (seed.length === 0) return '';
  const cached = seedCache.get(parentSession);
  if (cached?.length === seed.length) return cached.text;
  const text = stringify(seed);
  seedCache.set(parentSession, { length: seed.length, text });
  return text;
}

/**
 * Runs a child task. While the router knows fewer ports than the pool has threads, the task offers
 * a new port (a thread without a hub adopts it, one with a hub closes it); a thread that has no hub
 * yet and got no port answers `needPort`, and the task is sent again with one.
 */
export async function runOnPool(pool: WorkerPoolEngine, task: Omit<WorkerTask, 'port'>): Promise<SubagentResult> {
  const router = pool.channels;
  for (let offer = router.ports < Math.max(1, pool.threads); ; offer = true) {
    let attempt: WorkerTask = task;
    if (offer) {
      const { port1, port2 } = new MessageChannel();
      router.listen(port1, { unref: true });
      attempt = { ...task, port: port2 };
    }
    // A port offered to a task that never ran stays with the router (unref'd) until the pool closes.
    const outcome = decode<ChildTaskResult>(await pool.run(attempt));
    if ('result' in outcome) return outcome.result;
  }
}

function cancelledStart(signal: AbortSignal): SubagentError {
  return SubagentError.cancelled('the start', signal.reason, 'before the child was published');
}

async function startWorkerChild(host: WorkerProviderHost, request: ResolvedSubagentStartRequest, fork: boolean): Promise<SubagentRun> {
  const { signal } = request;
  if (signal.aborted) throw cancelledStart(signal);
  const plan = localChildPlan(request, fork);
  // The host tools this child may call: filtered here, before any child exists, and again per call.
  const scope = host.tools.scope();
  composeChildTools(scope, { toolFilter: request.toolFilter });
  const allowed = scope.list();
  const allowedNames = new Set(allowed.map((tool) => tool.name));
  const header: SessionHeader = {
    ...plan.header,
    id: randomUUID(),
    createdAt: Date.now(),
    ...(plan.seed.length > 0 ? { seedLength: plan.seed.length } : {}),
  };
  const data: ChildTaskData = {
    header,
    seed: encodedSeed(request.parent.session, plan.seed),
    prompt: request.prompt,
    agentOptions: { ...plan.agentOptions, model: plan.agentOptions.model ?? host.agents.defaultModel },
    descriptor: request.descriptor,
    hostTools: allowed.map(({ name, description, parameters, concurrencySafe }) => ({
      name,
      description,
      parameters,
      ...(concurrencySafe ? { concurrencySafe } : {}),
    })),
    ...(request.outputSchema ? { outputSchema: request.outputSchema } : {}),
  };
  // The process stays up until the child has settled (a start waiting for a slot included): its
  // notices arrive on unref'd ports.
  const releaseHold = host.pool.hold();
  // Waits for a slot before any channel exists: a start cancelled or refused here leaves nothing.
  let slot: Slot;
  try {
    slot = await host.pool.admission.acquire({
      child: header.id,
      parent: request.parent.id,
      parentOf: (id) => host.sessions.get(id)?.header.parentSession,
      signal,
    });
  } catch (error) {
    releaseHold();
    throw error;
  }
  // The slot is free again before `result` can settle, so a parent never resumes while its child still counts.
  const cancelFlag = new Int32Array(new SharedArrayBuffer(4));
  const route = host.pool.channels.route(header.id);
  let mirror: SessionLog | undefined;
  const child: { agent?: WorkerChildAgent } = {};
  let onAttach: (threadId: number) => void = () => undefined;
  let ended!: () => void;
  // The worker's last notice: once it is in, every event of the child has been mirrored.
  const endSeen = new Promise<void>((resolve) => (ended = resolve));
  route.on('notice', (raw) => {
    const notice = raw as ChildNotice;
    if (notice.type === 'events') mirror?.mirror(notice.events);
    else if (notice.type === 'attach') onAttach(notice.threadId);
    else ended();
  });
  const hostApi: HostApi = {
    async callTool(name, input, callId) {
      if (!allowedNames.has(name) || !child.agent) {
        throw new SubagentError('UNKNOWN_TOOL', `no tool named ${name} is available to this child`);
      }
      // While the call is out (a `subagent` call above all) the child only waits: its slot is lent to its children.
      const done = slot.wait();
      try {
        return await host.tools.execute(name, input, { agent: child.agent, callId, signal });
      } finally {
        done();
      }
    },
  };
  exposeOn(hostApi, route.endpoint('host'));
  const control = new GuardedRemote<ChildControlApi>(route.endpoint('control'));
  route.onClose(() => {
    control.close('the child’s thread closed its channel');
    ended();
  });
  const release = () => {
    control.close();
    route.dispose();
  };
  const task = runOnPool(host.pool, { data: encode(data), cancelFlag, run: header.id }).finally(() => slot.release());

  // A start waits for a free slot: it resolves once a thread has taken the task.
  let threadId: number;
  try {
    threadId = await new Promise<number>((resolve, reject) => {
      const abort = () => reject(cancelledStart(signal));
      signal.addEventListener('abort', abort, { once: true });
      onAttach = (id) => {
        signal.removeEventListener('abort', abort);
        if (signal.aborted) return abort();
        mirror = host.sessions.create(header, plan.seed);
        resolve(id);
      };
      // Errors are built only when they are the outcome: most tasks end long after their attach.
      task.then(
        // The task's value may overtake the port's notices: only after `end` is a missing attach real.
        () => endSeen.then(() => {
          if (!mirror) reject(new SubagentError('START_FAILED', 'the worker finished the task before the child started'));
        }),
        (error: unknown) => {
          // The thread may have attached the child just before it died.
          host.pool.channels.drain();
          if (!mirror) reject(new SubagentError('START_FAILED', describeThreadFailure(error, false, 0), { cause: error }));
        },
      );
    });
  } catch (error) {
    Atomics.store(cancelFlag, 0, 1);
    release();
    releaseHold();
    task.catch(() => undefined);
    throw error;
  }
  const session = mirror!;
  let taskEnded = false;
  task.then(
    () => (taskEnded = true),
    () => (taskEnded = true),
  );
  let cancelled = false;
  let finished = false;
  let killed = false;
  let killTimer: NodeJS.Timeout | undefined;
  const graceMs = host.pool.options.cancelGraceMs;
  const cancel = () => {
    if (cancelled || finished) return;
    cancelled = true;
    Atomics.store(cancelFlag, 0, 1);
    control.call((remote) => remote.cancel({ kind: 'parent' })).catch(() => undefined);
    // A child that ignores cancellation (a synchronous loop) loses its thread after the grace, unless
    // its task ended meanwhile: by then the thread may run another child.
    killTimer = setTimeout(() => {
      void host.pool.terminateThread(threadId, () => !taskEnded && (killed = true));
    }, graceMs);
  };
  signal.addEventListener('abort', cancel, { once: true });
  if (signal.aborted) cancel();
  // A tree budget spans threads: the host accounts for the tree and tells the child when it is spent.
  const unwatch = request.budgetTree?.onStop((stop) => void control.call((remote) => remote.budgetStop(stop)).catch(() => undefined));
  const result: Promise<SubagentResult> = task
    .then(
      async (outcome) => {
        await endSeen;
        return outcome;
      },
      (error: unknown): SubagentResult => {
        // The thread may have sent its last notices just before it died: take them first.
        host.pool.channels.drain();
        const diagnostic = describeThreadFailure(error, killed, graceMs);
        const aborted = killed || cancelled;
        closeTurnOfDeadThread(session, plan.seed.length, aborted ? { kind: 'aborted', cause: { kind: 'parent' } } : { kind: 'error', error: { code: 'THREAD_FAILED', message: diagnostic } });
        return { output: finalAssistantOutput(session.events.slice(plan.seed.length)), diagnostic, stopReason: aborted ? 'aborted' : 'error', usage: usageOf(session.events.slice(plan.seed.length)) };
      },
    )
    .finally(() => {
      unwatch?.();
      finished = true;
      clearTimeout(killTimer);
      signal.removeEventListener('abort', cancel);
      release();
      releaseHold();
    });
  const agent = new WorkerChildAgent(session, data.agentOptions, {
    deliver: (target, id, content, wake) => void control.call((remote) => remote.deliver(target, id, content, wake)).catch(() => undefined),
    cancel,
    settled: result,
    get open() {
      return !finished;
    },
  });
  child.agent = agent;
  return {
    id: header.id,
    localAgent: agent,
    result,
    cancel,
    dispose: once(async () => {
      if (!finished) cancel();
      await settled(result);
      await host.sessions.remove(header.id);
    }),
  };
}

function workerProvider(host: WorkerProviderHost, fork: boolean, name: string): SubagentProvider {
  return {
    name,
    capabilities: ALL_CAPABILITIES,
    inheritsParentContext: fork,
    start: (request) => startWorkerChild(host, request, fork),
  };
}

/** Fresh children, each in a worker thread of the host's pool. */
export function spawnProvider(host: Host, opts: WorkerProviderOptions = {}): SubagentProvider {
  return workerProvider(hostParts(host), false, opts.name ?? 'spawn');
}

/** Children seeded with the parent's completed turns, each in a worker thread. */
export function forkProvider(host: Host, opts: WorkerProviderOptions = {}): SubagentProvider {
  return workerProvider(hostParts(host), true, opts.name ?? 'fork');
}
