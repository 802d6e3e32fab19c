// A queue worker's side of one child: the same worker-thread path as the spawn provider (a
// ThreadChild: encoded task, hub-port notices, cancel flag plus control call, grace termination),
// with the child's notices handed to a sink instead of a local mirror. Queue children have no host
// tools and take no input.
import type { Encoded } from '../../seam/codec.js';
import { SubagentError } from '../../seam/errors.js';
import type { HostApi } from '../../seam/child-protocol.js';
import type { SubagentResult } from '../../seam/types.js';
import type { WorkerPool } from '../worker/pool.js';
import { ThreadChild, type ChildSink } from '../worker/thread-child.js';

export type { ChildSink } from '../worker/thread-child.js';

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
  closeInput: () => Promise.resolve(),
};

/** Runs one encoded ChildTaskData on `pool`, streaming its notices to `sink`. */
export function runPoolChild(pool: WorkerPool, run: string, data: Encoded, sink: ChildSink): PoolChild {
  const child = new ThreadChild(pool, run, data, noHostTools, sink);
  const result = child.outcome
    .then((outcome): SubagentResult => (outcome.type === 'result' ? outcome.result : { output: [], diagnostic: outcome.diagnostic, stopReason: outcome.aborted ? 'aborted' : 'error' }))
    .finally(() => child.release());
  return { result, cancel: () => child.cancel() };
}
