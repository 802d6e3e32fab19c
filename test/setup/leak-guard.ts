// Per-file leak guard: fails a test file that leaves running what it started — worker threads, child
// processes, ref'd handles (servers, sockets, pipes, MessagePorts, timers) and open file descriptors
// (SQLite files, unref'd sockets) — once all its tests and hooks are done.
//
// The baseline is taken when this setup file is evaluated, before the test file is imported (every
// file runs in a fresh process: pool 'forks', isolated). The afterAll below is registered before the
// file's own hooks, so under vitest's stacked hook order it runs after all of them (and before
// coverage-flush's, which is registered earlier still). Teardown is allowed to finish: it polls until
// everything is back at the baseline, for up to LEAK_GUARD_WINDOW_MS.
//   LEAK_GUARD=report   report only (console.error), never fail;   LEAK_GUARD=off   do nothing
//   LEAK_GUARD_STACKS=1 also say where each leftover handle was created (async_hooks: slower)
import { createHook } from 'node:async_hooks';
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { createRequire, syncBuiltinESMExports } from 'node:module';
import { relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { isMainThread } from 'node:worker_threads';
import type * as WorkerThreads from 'node:worker_threads';
import { afterAll } from 'vitest';

const MODE = process.env['LEAK_GUARD'] ?? 'fail';
const WINDOW_MS = Number(process.env['LEAK_GUARD_WINDOW_MS'] ?? 5_000);
const POLL_MS = 25;
const STACKS = process.env['LEAK_GUARD_STACKS'] === '1';
const ROOT = process.cwd();
// Descendants and fds belong to the process: they say something about this file only when
// it has the process to itself (pool 'forks'), not in a worker thread of pool 'threads'.
const PROCESS_WIDE = process.platform === 'linux' && isMainThread;

type WorkerCtor = typeof WorkerThreads.Worker;
type WorkerInstance = InstanceType<WorkerCtor>;

/** Worker threads this thread started and that have not exited, with where they were started (one
 * map per process: without isolation this file is evaluated again for each test file). */
const shared = globalThis as { leakGuardWorkers?: Map<WorkerInstance, string> };
const patched = shared.leakGuardWorkers !== undefined;
const liveWorkers = (shared.leakGuardWorkers ??= new Map<WorkerInstance, string>());
/** Where async resources were created, by async id (LEAK_GUARD_STACKS=1 only). */
const origins = new Map<number, { stack: string; resource: WeakRef<object> }>();

function creationStack(): string {
  const limit = Error.stackTraceLimit;
  Error.stackTraceLimit = 40;
  const stack = new Error().stack ?? '';
  Error.stackTraceLimit = limit;
  return stack
    .split('\n')
    .slice(1)
    .map((line) => line.trim())
    .filter((line) => !/test\/setup\/leak-guard|node:internal|node_modules\/(@vitest|vitest|vite)\/|^at new Promise|^at (Array\.|AsyncResource\.runInAsyncScope)/.test(line))
    .slice(0, 6)
    .map((line) => line.replaceAll(`${ROOT}/`, '').replace('file://', ''))
    .join(' <- ');
}

if (MODE !== 'off' && !patched) {
  // Count worker threads by wrapping the constructor before the library loads (ESM importers see
  // the wrapper through syncBuiltinESMExports; piscina reads the property at each `new`).
  const require = createRequire(import.meta.url);
  const workerThreads = require('node:worker_threads') as typeof WorkerThreads;
  const Base: WorkerCtor = workerThreads.Worker;
  workerThreads.Worker = class extends Base {
    constructor(...args: ConstructorParameters<WorkerCtor>) {
      super(...args);
      liveWorkers.set(this, `${String(args[0]).replaceAll(`${ROOT}/`, '').slice(0, 120)}${STACKS ? ` from ${creationStack()}` : ''}`);
      this.once('exit', () => liveWorkers.delete(this));
    }
  };
  syncBuiltinESMExports();
}

if (MODE !== 'off') {
  if (STACKS) {
    const skip = new Set(['PROMISE', 'TickObject', 'Microtask', 'FILEHANDLE', 'FSREQCALLBACK', 'FSREQPROMISE', 'WRITEWRAP', 'SHUTDOWNWRAP', 'Immediate']);
    createHook({
      init(asyncId, type, _trigger, resource) {
        if (!skip.has(type)) origins.set(asyncId, { stack: creationStack(), resource: new WeakRef(resource) });
      },
      destroy(asyncId) {
        origins.delete(asyncId);
      },
    }).enable();
  }

  // libuv opens what its file operations use on first use: done before the baseline of open files.
  await readFile(fileURLToPath(import.meta.url));
}

interface Snapshot {
  resources: Map<string, number>;
  handles: Set<object>;
  processes: Map<number, string>;
  fds: Map<string, string>;
}

function tally(names: string[]): Map<string, number> {
  const counts = new Map<string, number>();
  for (const name of names) counts.set(name, (counts.get(name) ?? 0) + 1);
  return counts;
}

/** This process's descendants, pid → "state cmdline" (threads' children included). */
function descendants(): Map<number, string> {
  const found = new Map<number, string>();
  const queue = [process.pid];
  while (queue.length > 0) {
    const pid = queue.shift()!;
    let tasks: string[] = [];
    try {
      tasks = readdirSync(`/proc/${pid}/task`);
    } catch {
      continue; // gone meanwhile
    }
    for (const task of tasks) {
      let children = '';
      try {
        children = readFileSync(`/proc/${pid}/task/${task}/children`, 'utf8');
      } catch {
        continue;
      }
      for (const child of children.split(' ').filter(Boolean).map(Number)) {
        if (found.has(child)) continue;
        try {
          const stat = readFileSync(`/proc/${child}/stat`, 'utf8');
          const state = stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0];
          const cmd = readFileSync(`/proc/${child}/cmdline`, 'utf8').split('\0').join(' ').trim().replaceAll(`${ROOT}/`, '').slice(0, 160);
          found.set(child, `(${state}) ${cmd}`);
          queue.push(child);
        } catch {
          /* exited meanwhile */
        }
      }
    }
  }
  return found;
}

function openFds(): Map<string, string> {
  const fds = new Map<string, string>();
  for (const fd of readdirSync('/proc/self/fd')) {
    try {
      const target = readlinkSync(`/proc/self/fd/${fd}`);
      if (target !== `/proc/${process.pid}/fd`) fds.set(fd, target);
    } catch {
      /* the directory listing's own fd, or closed meanwhile */
    }
  }
  return fds;
}

function snapshot(): Snapshot {
  return {
    resources: tally(process.getActiveResourcesInfo()),
    handles: new Set((process as unknown as { _getActiveHandles(): object[] })._getActiveHandles()),
    processes: PROCESS_WIDE ? descendants() : new Map(),
    fds: PROCESS_WIDE ? openFds() : new Map(),
  };
}

function describeHandle(handle: object): string {
  const h = handle as { constructor?: { name?: string }; _handle?: object; listening?: boolean; address?: () => unknown; pid?: number; spawnargs?: string[]; remoteAddress?: string; remotePort?: number };
  let text = h.constructor?.name ?? 'handle';
  try {
    if (typeof h.pid === 'number' && Array.isArray(h.spawnargs)) text += ` pid ${h.pid}: ${h.spawnargs.join(' ').replaceAll(`${ROOT}/`, '').slice(0, 160)}`;
    else if (h.listening !== undefined && typeof h.address === 'function') text += ` listening on ${JSON.stringify(h.address())}`;
    else if (h.remoteAddress !== undefined) text += ` to ${h.remoteAddress}:${h.remotePort}`;
  } catch {
    /* best effort */
  }
  if (STACKS) {
    const inner = h._handle ?? handle;
    for (const origin of origins.values()) {
      const resource = origin.resource.deref();
      if (resource === inner || resource === handle) return `${text}, created at ${origin.stack}`;
    }
  }
  return text;
}

/** What is running now that was not at the baseline; empty when nothing is. */
function leftovers(base: Snapshot): string[] {
  const now = snapshot();
  const out: string[] = [];
  const extra = [...now.resources].map(([type, n]) => [type, n - (base.resources.get(type) ?? 0)] as const).filter(([, n]) => n > 0);
  if (extra.length > 0) out.push(`active resources: ${extra.map(([type, n]) => `${type} ×${n}`).join(', ')}`);
  for (const handle of now.handles) if (!base.handles.has(handle)) out.push(`handle: ${describeHandle(handle)}`);
  for (const where of liveWorkers.values()) out.push(`worker thread: ${where}`);
  for (const [pid, what] of now.processes) if (!base.processes.has(pid)) out.push(`child process ${pid} ${what}`);
  for (const [fd, target] of now.fds) if (base.fds.get(fd) !== target) out.push(`fd ${fd} -> ${target.replaceAll(`${ROOT}/`, '')}`);
  return out;
}

if (MODE !== 'off') {
  const baseline = snapshot();

  afterAll(
    // vitest 4 reads the first parameter as fixtures (it must be a pattern); the file is the second.
    async ({}, suite) => {
      const started = Date.now();
      let left = leftovers(baseline);
      while (left.length > 0 && Date.now() - started < WINDOW_MS) {
        await new Promise((resolve) => setTimeout(resolve, POLL_MS));
        left = leftovers(baseline);
      }
      if (left.length === 0) return;
      const file = relative(ROOT, (suite as { filepath?: string }).filepath ?? suite.file?.filepath ?? '?');
      const message = `leak guard: ${file} left these running ${Date.now() - started} ms after its last hook:\n  ${left.join('\n  ')}`;
      // After a failed test, leftovers are expected and would only bury the real failure.
      const failed = suite.tasks.some((task) => task.result?.state === 'fail');
      if (MODE === 'report' || failed) console.error(message);
      else throw new Error(message);
    },
    WINDOW_MS + 5_000,
  );
}
