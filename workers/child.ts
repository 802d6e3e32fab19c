// Worker entry (bundled into one CommonJS file, see scripts/bundle-worker.mjs): the worker-thread
// transport of the child runners (runtime/child-runner.ts; resident-runner.ts for a continuable
// child's stay), one child per piscina task. Notices and calls travel on the thread's hub port,
// cancellation and the input gate also in shared memory; the outcome returns encoded.
import type { MessagePort } from 'node:worker_threads';
import { parentPort, threadId, workerData } from 'node:worker_threads';
import { encode } from '../src/seam/codec.js';
import type { ChildTransport, HostApi } from '../src/seam/child-protocol.js';
import { runChild } from '../src/runtime/child-runner.js';
import { runResident } from '../src/runtime/resident-runner.js';
import { setImportGate } from '../src/runtime/module-import.js';
import { claimSlot, threadImportGate } from '../src/providers/worker/import-gate.js';
import { closeInput, type ThreadLoadedNotice, type ThreadTaskResult, type ThreadTaskReturn, type WorkerTask, type WorkerThreadData } from '../src/providers/worker/thread-protocol.js';
import { GuardedRemote, RunRouter, exposeOn } from '../src/providers/worker/wire-channel.js';

// The hub: one long-lived port per thread, shared by every child the thread ever runs (a port per
// task would cost a MessageChannel and a transfer per child). The first task that offers a port
// while the thread has none gives it its hub; later offers are closed at once.
const router = new RunRouter();
let hub: MessagePort | undefined;

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
  const transport: ChildTransport = {
    notify: (notice) => {
      if (notice.type === 'end') end = notice;
      else {
        notices++;
        route.post('notice', notice);
      }
    },
    callHost: (invoke) => host.call((remote) => invoke(remote as unknown as HostApi)),
    serve: (control) =>
      // A resident child takes its input in prompts; only a one-shot child counts deliveries.
      'prompt' in control ? exposeOn(control, route.endpoint('control')) : exposeOn(
        {
          ...control,
          deliver: (...args: Parameters<typeof control.deliver>) => {
            received++;
            const accepted = control.deliver(...args);
            caughtUp();
            return accepted;
          },
        },
        route.endpoint('control'),
      ),
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
  };
  // Sent before anything can fail: the host needs the thread id to terminate a runaway child.
  transport.notify({ type: 'attach', threadId });
  try {
    const run = task.resident ? runResident : runChild;
    const outcome = encode((await run(task.data, transport)) satisfies ThreadTaskResult);
    return end ? { ...outcome, end, notices } : outcome;
  } finally {
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
