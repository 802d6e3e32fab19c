// Worker entry (bundled into one CommonJS file, see scripts/bundle-worker.mjs): the worker-thread
// transport of the child runners (runtime/child-runner.ts; resident-runner.ts for a continuable
// child's stay), one child per piscina task. Notices and calls travel on the thread's hub port,
// cancellation and the input gate also in shared memory; the outcome returns encoded.
import { AsyncLocalStorage } from 'node:async_hooks';
import type { MessagePort } from 'node:worker_threads';
import { parentPort, threadId, workerData } from 'node:worker_threads';
import { encode } from '../src/seam/codec.js';
import type { ChildControlApi, ChildTransport, HostApi, ResidentControlApi } from '../src/seam/child-protocol.js';
import { runChild } from '../src/runtime/child-runner.js';
import { runResident } from '../src/runtime/resident-runner.js';
import { setImportGate } from '../src/runtime/module-import.js';
import { claimSlot, threadImportGate } from '../src/providers/worker/import-gate.js';
import { closeInput, escapeMessage, type ThreadLoadedNotice, type ThreadLeftoverNotice, type ThreadRetireNotice, type ThreadTaskResult, type ThreadTaskReturn, type WorkerTask, type WorkerThreadData } from '../src/providers/worker/thread-protocol.js';
import { RunRouter } from '../src/providers/worker/run-router.js';
import { GuardedRemote, exposeOn } from '../src/providers/worker/wire-channel.js';

// The hub: one long-lived port per thread, shared by every child the thread ever runs (a port per
// task would cost a MessageChannel and a transfer per child). The first task that offers a port
// while the thread has none gives it its hub; later offers are closed at once.
const router = new RunRouter();
let hub: MessagePort | undefined;

// Which child a piece of this thread's work belongs to: each child's task runs in its own async
// context, and so do the timers, promises and callbacks its code starts, however late they run.
// An error that escapes a child's code (a throw in a timer, an unhandled rejection) then ends that
// child alone, as `escaped`, and its siblings on the thread go on. The thread takes no new child
// and is ended once idle (see ThreadTaskReturn.retire), since the culprit's work may still be
// running in it. An error from work that belongs to no child fails the thread, as without this.
interface ChildScope {
  /** running, then done once its task has returned (what it left running is no longer its turn), or escaped. */
  state: 'running' | 'done' | 'escaped';
  /** Ends the child's task with the error that escaped its code. */
  escape(error: unknown): void;
}
const scopes = new AsyncLocalStorage<ChildScope>();
/** Child tasks on this thread now. */
let running = 0;
/** Set once a child's code let an error escape: the thread takes no new child. */
let retiring = false;
/** Whether the host heard of an error from a finished child's work. */
let leftoverSeen = false;
/** Whether the host was asked to end this thread (by a task's `retire` or a ThreadRetireNotice). */
let retireAsked = false;

process.on('uncaughtException', (error) => {
  const scope = scopes.getStore();
  // Thrown from a listener of this event, the error fails the thread as it would with no listener.
  if (!scope) throw error;
  retiring = true;
  if (scope.state === 'running') return scope.escape(error);
  // A child that escaped already failed; what its unwinding throws adds nothing.
  if (scope.state === 'escaped') return;
  // The host hears of the first such error (a warning), and is asked to end the thread once no
  // child runs here; a leftover timer that keeps throwing adds nothing.
  if (!leftoverSeen) parentPort?.postMessage({ leftoverThrew: escapeMessage(error), threadId } satisfies ThreadLeftoverNotice);
  leftoverSeen = true;
  if (running === 0) askToRetire();
});

// process.exit from work a finished child left running would end the thread under the children it
// runs now, failing them for it: it throws there instead, as that work's error (the host is warned and
// the thread retired once idle). A running child's call, or one from no child's work, ends the thread.
const exitThread = process.exit.bind(process);
process.exit = ((code?: number | string | null) => {
  if (scopes.getStore()?.state !== 'done') return exitThread(code);
  throw new Error(`process.exit(${code ?? ''}) was called by work a finished child left running`);
}) as typeof process.exit;

/** Asks the host, once, to end this retiring thread: it has no child task left. */
function askToRetire(): void {
  if (retireAsked) return;
  retireAsked = true;
  parentPort?.postMessage({ retireThread: threadId } satisfies ThreadRetireNotice);
}

/** `api` (methods only) with each method run in `scope`: a host call through the hub port starts work of that child. */
function inScope<T extends object>(api: T, scope: ChildScope): T {
  const methods = Object.entries(api as Record<string, (...args: unknown[]) => unknown>);
  return Object.fromEntries(methods.map(([name, method]) => [name, (...args: unknown[]) => scopes.run(scope, () => method.apply(api, args))])) as T;
}

// The loader that runs this bundle from V8's code cache supplies `import()` (see module-import.ts).
export { setModuleImporter } from '../src/runtime/module-import.js';

/** A no-op task: resolves once this thread has loaded its modules (see WorkerPool.warm). */
export function warm(): number {
  return threadId;
}

export default async function runThreadChild(task: WorkerTask): Promise<ThreadTaskReturn> {
  if (task.port) {
    if (hub) task.port.close();
    // unref: an idle thread's hub must not keep the worker (and so the host process) alive.
    else router.listen((hub = task.port), { unref: true });
  }
  // The host offered no port because it counted enough hubs, but this thread has none (a new
  // thread): it asks again, and the host resends the task with a port.
  if (!hub) return encode({ type: 'need-port' } satisfies ThreadTaskResult);
  // The child goes to another thread (the host stops sending this one any).
  if (retiring) return encode({ type: 'retired', threadId } satisfies ThreadTaskResult);
  const route = router.route(task.run);
  route.bind(hub);
  const host = new GuardedRemote<HostApi>(route.endpoint('host'));
  route.onClose(() => host.close('the host closed this thread’s channel'));
  const { cancelFlag, inputGate } = task;
  // Deliveries that reached this thread, against the host's count in the input gate.
  let received = 0;
  let caughtUp = () => {};
  // The end notice returns with the task (see ThreadTaskReturn); the others go out on the hub, counted.
  let end: ThreadTaskReturn['end'];
  let notices = 0;
  let served: Partial<ChildControlApi & ResidentControlApi> | undefined;
  let settleEscaped!: (result: ThreadTaskResult) => void;
  const escaped = new Promise<ThreadTaskResult>((resolve) => (settleEscaped = resolve));
  const scope: ChildScope = {
    state: 'running',
    escape(error) {
      scope.state = 'escaped';
      settleEscaped({ type: 'escaped', message: escapeMessage(error), threadId });
      // What it left running stops at its next step; the thread's retirement ends the rest. (Should
      // these throw, the error leaves this listener and fails the thread, as it did before.)
      Atomics.store(cancelFlag, 0, 1);
      served?.cancel?.({ kind: 'parent' });
      served?.leave?.();
    },
  };
  const transport: ChildTransport = {
    notify: (notice) => {
      if (notice.type === 'end') end = notice;
      else {
        notices++;
        route.post('notice', notice);
      }
    },
    callHost: (invoke) => host.call((remote) => invoke(remote as unknown as HostApi)),
    serve: (control) => {
      served = control;
      // A resident child takes its input in prompts; only a one-shot child counts deliveries.
      const api =
        'prompt' in control
          ? control
          : {
              ...control,
              deliver: (...args: Parameters<typeof control.deliver>) => {
                received++;
                const accepted = control.deliver(...args);
                caughtUp();
                return accepted;
              },
            };
      exposeOn(inScope(api, scope), route.endpoint('control'));
    },
    closeInput() {
      const sent = closeInput(inputGate);
      if (received >= sent) return Promise.resolve();
      // The rest is on the hub port already (the host posts right after counting); a lost port ends the wait.
      // Reached only when input closes while a host message is in flight: a cross-thread race.
      return new Promise((resolve) => {
        caughtUp = () => received >= sent && resolve();
        route.onClose(resolve);
      });
    },
    cancelRequested: () => Atomics.load(cancelFlag, 0) !== 0,
    cancelFlag,
    ...(task.trees ? { trees: task.trees } : {}),
    ...(task.ahead ? { ahead: task.ahead } : {}),
  };
  // Sent before anything can fail: the host needs the thread id to terminate a runaway child.
  transport.notify({ type: 'attach', threadId });
  running++;
  try {
    const run = task.resident ? runResident : runChild;
    const work = scopes.run(scope, () => run(task.data, transport));
    const result = await Promise.race([work, escaped]);
    if (result.type === 'escaped') {
      work.catch(() => undefined);
      return { ...encode(result), ...retirement() };
    }
    const outcome = encode(result satisfies ThreadTaskResult);
    return { ...(end ? { ...outcome, end, notices } : outcome), ...retirement() };
  } finally {
    if (scope.state === 'running') scope.state = 'done';
    running--;
    // A last task that rejects carries no `retire`: the thread asks to be ended on its own.
    if (retiring && running === 0) askToRetire();
    host.close();
    route.dispose();
  }
}

/**
 * Asks the host to end this thread on the value of its last child task, when it retires: a
 * separate notice could overtake that value, and the termination then lose it.
 */
function retirement(): Pick<ThreadTaskReturn, 'retire'> {
  if (!retiring || running !== 1 || retireAsked) return {};
  retireAsked = true;
  return { retire: threadId };
}

// Last top-level steps: tool and model modules are imported through the pool's gate, and the pool
// learns that this thread has loaded its entry (until now, terminating it was not safe).
const { importGate } = (workerData ?? {}) as Partial<WorkerThreadData>;
if (importGate) {
  const slot = claimSlot(importGate, threadId);
  const gate = threadImportGate(importGate, slot);
  // A module is loaded once per thread for every child that uses it: what its top-level code starts
  // (timers, sockets, shared promises) belongs to no child, not to the first one that imported it.
  setImportGate((load) => scopes.exit(() => gate(load)));
  parentPort?.postMessage({ threadLoaded: threadId, slot } satisfies ThreadLoadedNotice);
}
