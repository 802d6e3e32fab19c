// The worker pool behind the spawn and fork providers: piscina 5 over the compiled worker entry.
// One pool per host, kept warm; `close()` ends every thread.
import { availableParallelism } from 'node:os';
import type { MessagePort } from 'node:worker_threads';
import { Piscina } from 'piscina';
import { z } from 'zod';
import type { Encoded } from '../../seam/codec.js';
import { SubagentError } from '../../seam/errors.js';
import type { WorkerTask } from '../../seam/worker-protocol.js';
import { RunRouter } from '../../seam/wire-channel.js';
import { Admission } from './admission.js';

export interface WorkerPoolOptions {
  /** Threads kept warm. @default 1 */
  minThreads?: number;
  /**
   * Threads for children started by main-thread agents. A worker child waiting for its own
   * children lends them one slot, so the pool never runs more than
   * `maxThreads × (1 + maxNestingDepth)` threads.
   * @default max(4, 2 × availableParallelism())
   */
  maxThreads?: number;
  /** Children one thread runs at once; raise it for I/O-bound (model-bound) fleets. @default 1 */
  childrenPerThread?: number;
  /**
   * How many generations of worker children may nest below a worker child (a chain of
   * `1 + maxNestingDepth` worker children); a start past it rejects `DEPTH_EXCEEDED`. Bounds the
   * threads at `maxThreads × (1 + maxNestingDepth)`. @default 3
   */
  maxNestingDepth?: number;
  /** An idle thread above `minThreads` ends after this long. @default 30000 */
  idleTimeoutMs?: number;
  /** V8 heap limits of each thread. */
  resourceLimits?: { maxOldGenerationSizeMb?: number; maxYoungGenerationSizeMb?: number; stackSizeMb?: number };
  /** A child still running this long after cancel or dispose has its thread terminated. @default 2000 */
  cancelGraceMs?: number;
}

export interface WorkerPool {
  readonly options: Readonly<Required<Omit<WorkerPoolOptions, 'resourceLimits'>>> & Pick<WorkerPoolOptions, 'resourceLimits'>;
  /** Live threads. */
  readonly threads: number;
  /** @internal The threads' long-lived ports to this thread, shared by every child they run. */
  readonly channels: RunRouter;
  /** @internal Slots of child starts: a start holds one from before `run` until its task ends. */
  readonly admission: Admission;
  /** Runs one child task that holds a slot of `admission`; rejects if its thread dies. */
  run(task: WorkerTask): Promise<Encoded>;
  /** Resolves once `minThreads` threads have loaded the worker entry. */
  warm(): Promise<void>;
  /** Terminates the thread with that id (its tasks reject; the pool replaces it). */
  terminateThread(threadId: number): Promise<void>;
  /** Idempotent: ends every thread; queued and running tasks reject. */
  close(): Promise<void>;
}

const positiveInt = z.number().int().positive();
const optionsShape = z.strictObject({
  minThreads: z.number().int().min(0).optional(),
  maxThreads: positiveInt.optional(),
  childrenPerThread: positiveInt.optional(),
  maxNestingDepth: z.number().int().min(0).optional(),
  idleTimeoutMs: z.number().int().min(0).optional(),
  resourceLimits: z
    .strictObject({ maxOldGenerationSizeMb: positiveInt.optional(), maxYoungGenerationSizeMb: positiveInt.optional(), stackSizeMb: positiveInt.optional() })
    .optional(),
  cancelGraceMs: z.number().int().min(0).optional(),
});

const WORKER_ENTRY = new URL('../../../workers/child.js', import.meta.url).href;

/** Creates a worker pool; `INVALID_OPTIONS` names a bad option. */
export function createWorkerPool(options: WorkerPoolOptions = {}): WorkerPool {
  const parsed = optionsShape.safeParse(options);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new SubagentError('INVALID_OPTIONS', `options.pool.${issue?.path.join('.') || ''} ${issue?.message ?? 'is invalid'}`);
  }
  const resolved = {
    minThreads: options.minThreads ?? 1,
    maxThreads: options.maxThreads ?? Math.max(4, 2 * availableParallelism()),
    childrenPerThread: options.childrenPerThread ?? 1,
    maxNestingDepth: options.maxNestingDepth ?? 3,
    idleTimeoutMs: options.idleTimeoutMs ?? 30_000,
    cancelGraceMs: options.cancelGraceMs ?? 2000,
    ...(options.resourceLimits ? { resourceLimits: { ...options.resourceLimits } } : {}),
  };
  if (resolved.minThreads > resolved.maxThreads) {
    throw new SubagentError('INVALID_OPTIONS', `options.pool.minThreads (${resolved.minThreads}) must not exceed maxThreads (${resolved.maxThreads})`);
  }
  // Threads start on first use (or `warm()`), so a host that never delegates to a worker pays nothing.
  let instance: Piscina<WorkerTask, Encoded> | undefined;
  // piscina may run as many tasks as admission admits (root slots plus loans), so it never queues
  // one: its thread ceiling follows the loans in use, and without nesting it stays maxThreads.
  // piscina reads `options.maxThreads` at each spawn decision, which is what makes it adjustable.
  const ceiling = (loans: number) => resolved.maxThreads + Math.ceil(loans / resolved.childrenPerThread);
  const admission = new Admission(resolved.maxThreads * resolved.childrenPerThread, resolved.maxNestingDepth, (loans) => {
    if (instance) instance.options.maxThreads = ceiling(loans);
  });
  const piscina = (): Piscina<WorkerTask, Encoded> => {
    if (instance) return instance;
    instance = new Piscina<WorkerTask, Encoded>({
      filename: WORKER_ENTRY,
      minThreads: resolved.minThreads,
      maxThreads: ceiling(admission.loans),
      concurrentTasksPerWorker: resolved.childrenPerThread,
      idleTimeout: resolved.idleTimeoutMs,
      // The default ('sync') parks idle threads in Atomics.wait, freezing their timers and ports.
      atomics: 'disabled',
      // Workers must not inherit loaders such as tsx: the entry is compiled JavaScript.
      execArgv: [],
      ...(resolved.resourceLimits ? { resourceLimits: resolved.resourceLimits } : {}),
    });
    // A thread that dies rejects its tasks; the pool-level error is already reported through them.
    instance.on('error', () => undefined);
    return instance;
  };
  let closing: Promise<void> | undefined;
  let warming: Promise<void> | undefined;
  const channels = new RunRouter();
  return {
    channels,
    admission,
    options: Object.freeze(resolved),
    get threads() {
      return instance?.threads.length ?? 0;
    },
    run(task) {
      if (closing) return Promise.reject(new SubagentError('CLOSED', 'the worker pool is closed'));
      const transferList: MessagePort[] = task.port ? [task.port] : [];
      return piscina().run(task, { transferList });
    },
    warm() {
      if (closing) return Promise.resolve();
      const pool = piscina();
      const tasks = Array.from({ length: Math.max(1, resolved.minThreads) }, () => pool.run(undefined as never, { name: 'warm' }));
      const warmed = Promise.all(tasks).then(() => undefined);
      warming = warmed.catch(() => undefined);
      return warmed;
    },
    async terminateThread(threadId) {
      const worker = instance?.threads.find((thread) => thread.threadId === threadId);
      if (worker) await worker.terminate();
    },
    close() {
      // Terminating a thread while it is still loading its ES modules can abort the whole process
      // (a V8 fatal error seen on Node 20), so threads being warmed finish loading first.
      admission.close();
      closing ??= (async () => {
        await warming;
        await instance?.destroy();
        channels.close();
      })();
      return closing;
    },
  };
}
