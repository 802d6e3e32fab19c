// A session as an ACP server serves it, and a restore of one in flight.
import type { Agent } from '../../seam/agent-types.js';

export interface Served {
  agent: Agent;
  /** The prompt in flight, if any. */
  active?: { cancelled: boolean } | undefined;
  /** Settles once the last prompt's handler is done with the agent (its turn stored, its answer made). */
  answered?: Promise<void>;
}

/** A restore in flight, for a load or resume in `cwd`; `refusedCwd` tells the refusal it met for that cwd. */
export interface Restoring {
  cwd: string;
  served: Promise<Served>;
  refusedCwd(error: unknown): boolean;
}
