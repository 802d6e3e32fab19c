// A queue worker's side of one child: the same worker-thread path as the spawn provider (encoded
// task, hub-port notices, cancel flag plus control call, grace termination), with the child's
// notices handed to a sink instead of a local mirror. Queue children have no host tools.
import type { Encoded } from '../../seam/codec.js';
import { SubagentError } from '../../seam/errors.js';
import type { SessionEvent } from '../../seam/session-types.js';
import type { SubagentResult } from '../../seam/types.js';
import { GuardedRemote, exposeOn } from '../../seam/wire-channel.js';
import type { ChildControlApi, ChildNotice, HostApi } from '../../seam/worker-protocol.js';
import type { WorkerPoolEngine } from '../worker/pool.js';
import { describeThreadFailure } from '../worker/thread-failure.js';
import { runOnPool } from '../worker/worker-provider.js';

export interface ChildSink {
  /** A thread took the child. */
  attach(threadId: number): void;
  /** The child's new session events, in order. */
  events(events: SessionEvent[]): void;
}

export interface PoolChild {
  /** Settles once every event went to the sink; never rejects. */
  readonly result: Promise<SubagentResult>;
  /** Asks the child to stop; past the pool's grace its thread is terminated. */
  cancel(): void;
}

const noHostTools: HostApi = {
  callTool(name) {
    return Promise.reject(new SubagentError('UNKNOWN_TOOL', `no tool named ${name} is available to this child (queue children have no host tools)`));
  },
};

/** Runs one encoded ChildTaskData on `pool`, streaming its notices to `sink`. */
export function runPoolChild(pool: WorkerPoolEngine, run: string, data: Encoded, sink: ChildSink): PoolChild {
  const cancelFlag = new Int32Array(new SharedArrayBuffer(4));
  const route = pool.channels.route(run);
  let threadId: number | undefined;
  let ended!: () => void;
  const endSeen = new Promise<void>((resolve) => (ended = resolve));
  route.on('notice', (raw) => {
    const notice = raw as ChildNotice;
    if (notice.type === 'events') sink.events(notice.events);
    else if (notice.type === 'attach') sink.attach((threadId = notice.threadId));
    else ended();
  });
  exposeOn(noHostTools, route.endpoint('host'));
  const control = new GuardedRemote<ChildControlApi>(route.endpoint('control'));
  route.onClose(() => {
    control.close('the child’s thread closed its channel');
    ended();
  });
  let cancelled = false;
  let killed = false;
  let finished = false;
  let killTimer: NodeJS.Timeout | undefined;
  const graceMs = pool.options.cancelGraceMs;
  const task = runOnPool(pool, { data, cancelFlag, run });
  const result = task
    .then(
      async (outcome) => {
        await endSeen;
        return outcome;
      },
      (error: unknown): SubagentResult => ({
        output: [],
        diagnostic: describeThreadFailure(error, killed, graceMs),
        stopReason: killed || cancelled ? 'aborted' : 'error',
      }),
    )
    .finally(() => {
      finished = true;
      clearTimeout(killTimer);
      control.close();
      route.dispose();
    });
  return {
    result,
    cancel() {
      if (cancelled || finished) return;
      cancelled = true;
      Atomics.store(cancelFlag, 0, 1);
      control.call((remote) => remote.cancel({ kind: 'parent' })).catch(() => undefined);
      // A child that ignores cancellation (a synchronous loop) loses its thread after the grace.
      killTimer = setTimeout(() => {
        killed = true;
        if (threadId !== undefined) void pool.terminateThread(threadId);
      }, graceMs);
    },
  };
}
