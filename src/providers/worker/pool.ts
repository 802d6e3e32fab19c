// The worker pool behind the spawn and fork providers: piscina 5 over the bundled CommonJS worker
// entry. One pool per host, kept warm; `close()` ends every thread. No thread is terminated while it
// loads modules (that aborts the process on Node 20), and work in flight keeps the process alive.
import { availableParallelism } from 'node:os';
import type { MessagePort } from 'node:worker_threads';
import { Piscina } from 'piscina';
import { z } from 'zod';
import type { Encoded } from '../../seam/codec.js';
import { SubagentError } from '../../seam/errors.js';
import { warnContained, type Logger } from '../../runtime/session-store.js';
import { isThreadLeftoverNotice, isThreadRetireNotice, type WorkerTask, type WorkerThreadData } from './thread-protocol.js';
import { RunRouter } from './run-router.js';
import { Admission } from './admission.js';
import { leastBusyBalancer, type Candidate } from './balancer.js';
import { EntryWatch } from './entry-watch.js';
import { ImportFence, MIN_PARK_WAIT_MS, createGateBuffer } from './import-gate.js';
import { KeepAlive } from './keep-alive.js';
import { ThreadTracker } from './thread-tracker.js';
import { MAX_TIMER_MS, parseOrThrow, readingInput } from '../../seam/parse.js';

export interface WorkerPoolOptions {
  /** Threads kept warm. @default 1 */
  minThreads?: number;
  /**
   * Threads for children started by main-thread agents. A worker child waiting for its own
   * children lends them one slot, so the pool never runs more than
   * `maxThreads × (1 + maxNestingDepth)` threads (plus, for a while, up to `maxThreads` threads
   * retiring after an error escaped a child's code, and threads being terminated whose tasks ended
   * meanwhile: each lets a new thread take its free slots until it has exited).
   * At most 1024. @default max(4, 2 × availableParallelism())
   */
  maxThreads?: number;
  /** Children one thread runs at once; raise it for I/O-bound (model-bound) fleets. @default 1 */
  childrenPerThread?: number;
  /**
   * How many generations of worker children may nest below a worker child (a chain of
   * `1 + maxNestingDepth` worker children); a start past it rejects `DEPTH_EXCEEDED`. Bounds the
   * threads at `maxThreads × (1 + maxNestingDepth)`. At most 32. @default 3
   */
  maxNestingDepth?: number;
  /** An idle thread above `minThreads` ends after this long (ms, at most 2147483647). @default 30000 */
  idleTimeoutMs?: number;
  /**
   * V8 heap limits of each thread. `maxYoungGenerationSizeMb` is at most 48 and 48 unless set
   * (Node 24's own default, 192, lets a thread that runs out of memory abort the process).
   */
  resourceLimits?: { maxOldGenerationSizeMb?: number; maxYoungGenerationSizeMb?: number; stackSizeMb?: number };
  /** A child still running this long (ms, at most 2147483647) after cancel or dispose has its thread terminated. @default 2000 */
  cancelGraceMs?: number;
}

/** The pool as users see it: its settings, its live threads, warm-up and shutdown. */
export interface WorkerPool {
  readonly options: Readonly<Required<Omit<WorkerPoolOptions, 'resourceLimits'>>> & Pick<WorkerPoolOptions, 'resourceLimits'>;
  /** Live threads. */
  readonly threads: number;
  /** Resolves once `minThreads` threads have loaded the worker entry. */
  warm(): Promise<void>;
  /** Idempotent: ends every thread; queued and running tasks reject. */
  close(): Promise<void>;
}

/** What the worker provider drives: ports, slots and tasks of the pool's threads. */
export interface WorkerPoolEngine extends WorkerPool {
  /** The threads' long-lived ports to this thread, shared by every child they run. */
  readonly channels: RunRouter;
  /** Slots of child starts: a start holds one from before `run` until its task ends. */
  readonly admission: Admission;
  /** Keeps the process alive until the returned release is called. */
  hold(): () => void;
  /**
   * Runs one child task that holds a slot of `admission`; rejects if its thread dies. With a
   * `token`, `giveUp(token)` may end the thread it went to.
   */
  run(task: WorkerTask, token?: object): Promise<Encoded>;
  /**
   * The task run with `token` was cancelled before any thread took it: while `stillWanted()`, its
   * thread, once every task there is such a one, is terminated (a thread that takes none of its
   * tasks no longer runs its event loop); the pool replaces it, and its tasks are sent again.
   */
  giveUp(token: object, stillWanted: () => boolean): void;
  /**
   * Terminates the thread with that id once it is not loading modules, if `stillWanted()` (asked
   * right before) agrees. Its tasks reject; the pool replaces it.
   */
  terminateThread(threadId: number, stillWanted?: () => boolean): Promise<void>;
  /** The thread with that id gets no new task (it retires, see thread-protocol.ts). */
  avoidThread(threadId: number): void;
  /** Ends a retiring thread that has no child task left; the pool replaces it. Idempotent. */
  retireThread(threadId: number): void;
}

const positiveInt = z.number().int().positive();
// Node 24 aborts the whole process (V8 "GC during deserialization") when a thread starts with an
// old generation of 2 MB or less; 3 MB fails that thread alone, on Node 20 and 24 alike.
const MIN_OLD_GENERATION_MB = 3;
// When a thread reaches its heap limit, Node gives the collection under way 16 MB of leeway and
// ends the thread; a collection that needs more makes V8 abort the whole process instead. With a
// young generation over 48 MB (semi-spaces over 16 MB) it can: a thread filling its heap with
// small arrays aborted the process with young 50–192 MB and old 48–512 MB, never with 48 MB.
// 48 MB is Node 20's default for a thread; Node 24's is 192 MB, which aborted the host on such a
// child every time. So every thread of a pool gets at most 48 MB.
const MAX_YOUNG_GENERATION_MB = 48;
const MAX_THREADS = 1024;
const MAX_NESTING_DEPTH = 32;
const MAX_STACK_MB = 1024;
// A timer longer than 2^31-1 ms fires at once (Node clamps it to 1 ms).
const timerMs = z.number().int().min(0).max(MAX_TIMER_MS, `must be at most ${MAX_TIMER_MS} ms (a longer timer fires at once)`);
// A whole number from 0 (`-0` is refused, as a maxDepth of -0 is).
const count = () =>
  z
    .number()
    .int()
    .min(0)
    .refine((value) => !Object.is(value, -0), 'must be a whole number ≥ 0, not -0');
const optionsShape = z.strictObject({
  minThreads: count().optional(),
  // Bounds that keep the shared gate buffer (a slot per thread and nesting level) a sane size.
  maxThreads: positiveInt.max(MAX_THREADS).optional(),
  childrenPerThread: positiveInt.optional(),
  maxNestingDepth: count().max(MAX_NESTING_DEPTH).optional(),
  idleTimeoutMs: timerMs.optional(),
  resourceLimits: z
    .strictObject({
      maxOldGenerationSizeMb: z
        .number()
        .int()
        .min(MIN_OLD_GENERATION_MB, `must be at least ${MIN_OLD_GENERATION_MB} (less aborts the whole process on Node 24); a thread needs about 16 to run a child`)
        .optional(),
      maxYoungGenerationSizeMb: positiveInt
        .max(
          MAX_YOUNG_GENERATION_MB,
          `must be at most ${MAX_YOUNG_GENERATION_MB}: with a larger young generation, a thread that runs out of memory aborts the whole process`,
        )
        .optional(),
      stackSizeMb: positiveInt.max(MAX_STACK_MB).optional(),
    })
    .optional(),
  cancelGraceMs: timerMs.optional(),
});

// One CommonJS file (esbuild, `npm run build`): piscina loads it with `require`, so no ES module
// graph is instantiated while a thread starts, and start-up is shorter.
const WORKER_ENTRY = new URL('../../../workers/child.cjs', import.meta.url).href;

/** The limits each thread gets: the user's, with a young generation of 48 MB unless they set one. */
function threadLimits(limits: WorkerPoolOptions['resourceLimits'] = {}): NonNullable<WorkerPoolOptions['resourceLimits']> {
  return { ...limits, maxYoungGenerationSizeMb: limits.maxYoungGenerationSizeMb ?? MAX_YOUNG_GENERATION_MB };
}

/** Creates a worker pool; `INVALID_OPTIONS` names a bad option. */
export function createWorkerPool(options: WorkerPoolOptions = {}): WorkerPool {
  return openWorkerPool(options);
}

/** `createWorkerPool` with the engine side the providers drive. */
export function openWorkerPool(options: WorkerPoolOptions = {}, logger?: Logger): WorkerPoolEngine {
  // Read once, into the copy the pool keeps: a getter of the caller's object is not asked again.
  const given = readingInput('options.pool', 'INVALID_OPTIONS', () => parseOrThrow(optionsShape, options, 'INVALID_OPTIONS', 'options.pool'));
  const resolved = {
    minThreads: given.minThreads ?? 1,
    maxThreads: given.maxThreads ?? Math.max(4, 2 * availableParallelism()),
    childrenPerThread: given.childrenPerThread ?? 1,
    maxNestingDepth: given.maxNestingDepth ?? 3,
    idleTimeoutMs: given.idleTimeoutMs ?? 30_000,
    cancelGraceMs: given.cancelGraceMs ?? 2000,
    resourceLimits: threadLimits(given.resourceLimits as WorkerPoolOptions['resourceLimits']),
  };
  if (resolved.minThreads > resolved.maxThreads) {
    throw new SubagentError('INVALID_OPTIONS', `options.pool.minThreads (${resolved.minThreads}) must not exceed maxThreads (${resolved.maxThreads})`);
  }
  const alive = new KeepAlive();
  // Admission may grow the pool past maxThreads (loans to waiting parents): room for the hard cap.
  const gateBuffer = createGateBuffer(resolved.maxThreads * (1 + resolved.maxNestingDepth));
  const fence = new ImportFence(gateBuffer);
  const tracker = new ThreadTracker((slot) => fence.free(slot));
  // Threads being terminated: they take no new task.
  const doomed = new Set<number>();
  // Threads that take no new task because a child's code let an error escape in them.
  const avoided = new Set<number>();
  const retired = new Set<number>();
  // The thread each task run with a token is on (piscina's live view of it) until its run settles:
  // a task a thread never takes (work a finished child left running wedged it) can only be reached
  // through it. With what says whether each task given up on still is.
  const placed = new Map<object, Candidate>();
  const givenUp = new WeakMap<object, () => boolean>();
  /** Whether every task on `worker`'s thread was given up on, and still is. */
  const abandoned = (worker: Candidate, id: number): boolean => {
    if (worker.id !== id) return false;
    const there = [...placed].filter(([, other]) => other.id === id);
    return there.length === worker.currentUsage && there.every(([token]) => givenUp.get(token)?.() === true);
  };
  const onPlaced = (task: object, worker: Candidate) => {
    const token = (task as Record<symbol, unknown>)[Piscina.queueOptionsSymbol];
    if (typeof token === 'object' && token !== null) placed.set(token, worker);
  };
  // Threads start on first use (or `warm()`), so a host that never delegates to a worker pays nothing.
  let instance: Piscina<WorkerTask, Encoded> | undefined;
  let watch: EntryWatch | undefined;
  // piscina may run as many tasks as admission admits (root slots plus loans), so it never queues
  // one: its thread ceiling follows the loans in use, and without nesting it stays maxThreads.
  // A retiring thread's free slots are no use to anyone, so each (up to maxThreads of them) lifts
  // the ceiling by one thread until it exits; the import gate has room for that many more. So does
  // a thread being terminated: its task may end meanwhile and free its slot, and piscina, which
  // never hands it that slot's next task, queues the task without a thread of its own and starts
  // none for it when the thread exits (it only keeps minThreads), so the task would wait forever.
  // piscina reads `options.maxThreads` at each spawn decision, which is what makes it adjustable.
  const ceiling = () => {
    const ending = [...doomed].filter((id) => !avoided.has(id)).length;
    return resolved.maxThreads + Math.ceil(admission.loans / resolved.childrenPerThread) + Math.min(avoided.size, resolved.maxThreads) + ending;
  };
  const resize = () => {
    if (instance) instance.options.maxThreads = ceiling();
  };
  const admission = new Admission(resolved.maxThreads * resolved.childrenPerThread, resolved.maxNestingDepth, resize);
  const piscina = (): Piscina<WorkerTask, Encoded> => {
    if (instance) return instance;
    instance = new Piscina<WorkerTask, Encoded>({
      filename: WORKER_ENTRY,
      minThreads: resolved.minThreads,
      maxThreads: ceiling(),
      concurrentTasksPerWorker: resolved.childrenPerThread,
      loadBalancer: leastBusyBalancer(resolved.childrenPerThread, doomed, avoided, onPlaced),
      idleTimeout: resolved.idleTimeoutMs,
      // The default ('sync') parks idle threads in Atomics.wait, freezing their timers and ports.
      atomics: 'disabled',
      // Workers must not inherit loaders such as tsx: the entry is compiled JavaScript.
      execArgv: [],
      workerData: { importGate: gateBuffer } satisfies WorkerThreadData,
      resourceLimits: resolved.resourceLimits,
    });
    // A thread that dies rejects its tasks; the pool-level error is already reported through them.
    instance.on('error', () => undefined);
    instance.on('message', (message: unknown) => {
      if (isThreadRetireNotice(message)) return engine.retireThread(message.retireThread);
      if (!isThreadLeftoverNotice(message)) return tracker.onMessage(message, instance?.threads ?? []);
      warnContained(
        logger,
        `work a finished worker child left running threw in thread ${message.threadId}: ${message.leftoverThrew.split('\n', 1)[0]}; no child was failed, and the thread is replaced once idle`,
      );
      engine.avoidThread(message.threadId);
    });
    // A piscina that cannot load the entry is dropped (it has no thread left, so this terminates
    // nothing): its waiting tasks reject through `watch`, and the next task starts a fresh one.
    const pool = instance;
    watch = new EntryWatch(pool as Piscina<never, unknown>, () => {
      if (instance === pool) instance = undefined;
      const destroyed = pool.destroy().catch(() => undefined);
      terminations.add(destroyed);
      void destroyed.then(() => terminations.delete(destroyed));
    });
    return instance;
  };
  /** `work` on the current piscina, or its START_FAILED once it cannot load the entry. */
  const unlessEntryFails = <T>(work: Promise<T>): Promise<T> => alive.during(watch ? watch.guard(work) : work);
  let closing: Promise<void> | undefined;
  const terminations = new Set<Promise<void>>();
  const channels = new RunRouter();
  const findThread = (threadId: number) => instance?.threads.find((thread) => thread.threadId === threadId);
  const engine: WorkerPoolEngine = {
    channels,
    admission,
    options: Object.freeze(resolved),
    get threads() {
      return instance?.threads.length ?? 0;
    },
    hold: () => alive.hold(),
    run(task, token) {
      if (closing) return Promise.reject(SubagentError.closed('the worker pool'));
      const transferList: MessagePort[] = task.port ? [task.port] : [];
      // piscina shows a task's queue options to the balancer; a symbol key never crosses to the thread.
      const posted = token ? { ...task, [Piscina.queueOptionsSymbol]: token } : task;
      const work = piscina().run(posted, { transferList });
      if (token) {
        // Forgotten before the caller hears of the task's end, so before it may be sent again.
        const forget = () => void placed.delete(token);
        work.then(forget, forget);
      }
      return unlessEntryFails(work);
    },
    giveUp(token, stillWanted) {
      givenUp.set(token, stillWanted);
      const worker = placed.get(token);
      if (!worker || !findThread(worker.id)) return;
      const id = worker.id;
      const wedged = () => abandoned(worker, id);
      if (wedged()) void engine.terminateThread(id, wedged);
    },
    warm() {
      if (closing) return Promise.reject(SubagentError.closed('the worker pool', 'warm a pool before closing it'));
      const pool = piscina();
      const tasks = Array.from({ length: Math.max(1, resolved.minThreads) }, () => pool.run(undefined as never, { name: 'warm' }));
      return unlessEntryFails(Promise.all(tasks).then(() => undefined));
    },
    terminateThread(threadId, stillWanted = () => true) {
      if (closing) return closing;
      const termination = alive.during(
        (async () => {
          // The thread may have exited, or not yet reported its slot, meanwhile: thread timing.
          const thread = findThread(threadId);
          if (!thread) return;
          await tracker.settle([thread]);
          const slot = tracker.slotOf(thread);
          if (slot === undefined) return;
          // Decided once: with an import in flight the thread is asked to end itself (see
          // import-gate.ts), as the import may never finish; otherwise it is terminated here.
          let wanted: boolean | undefined;
          const want = () => {
            wanted ??= thread.threadId !== -1 && stillWanted();
            if (wanted && !doomed.has(threadId)) {
              doomed.add(threadId);
              resize();
            }
            return wanted;
          };
          const lower = await fence.fence(slot, want, resolved.cancelGraceMs);
          try {
            if (!want() || thread.threadId === -1) return;
            await thread.terminate();
          } finally {
            if (doomed.delete(threadId)) resize();
            lower();
          }
        })(),
      );
      terminations.add(termination);
      const forget = () => void terminations.delete(termination);
      termination.then(forget, forget);
      return termination;
    },
    avoidThread(threadId) {
      const thread = findThread(threadId);
      if (!thread || avoided.has(threadId)) return;
      avoided.add(threadId);
      resize();
      thread.once('exit', () => {
        avoided.delete(threadId);
        retired.delete(threadId);
        resize();
      });
    },
    retireThread(threadId) {
      if (!findThread(threadId) || retired.has(threadId)) return;
      engine.avoidThread(threadId);
      retired.add(threadId);
      void engine.terminateThread(threadId);
    },
    close() {
      admission.close();
      closing ??= alive.during(
        (async () => {
          fence.close();
          await Promise.allSettled(terminations);
          if (instance) {
            const pool = instance;
            // Threads keep appearing while tasks queue or die; destroy only when none loads and no
            // import runs, in the same tick as the last check. A thread asked to end itself that
            // has not within the grace (it does not return to its event loop) is terminated too.
            const deadline = performance.now() + Math.max(resolved.cancelGraceMs, MIN_PARK_WAIT_MS);
            for (;;) {
              await tracker.settle(pool.threads);
              const drained = await fence.drain(deadline);
              if (drained && !fence.drained) continue;
              if (!pool.threads.some((thread) => tracker.loading(thread))) break;
            }
            await pool.destroy();
          }
          channels.close();
        })(),
      );
      return closing;
    },
  };
  return engine;
}
