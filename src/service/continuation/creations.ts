// Creations and cold resumes of continuable children in flight, each abortable by its caller's
// signal, at host shutdown, and by a drain above it. Drains and `close()` wait for them, and one may
// wait on something that never ends (a tool module whose top-level await never settles).
import { abortReason, onAbort } from '../../seam/abort.js';
import type { Agent } from '../../seam/agent-types.js';
import { SubagentError, isSubagentError } from '../../seam/errors.js';
import { readingInput } from '../../seam/parse.js';

export class Creations {
  readonly #shutdown = new AbortController();
  /** Each creation's own controller, and the parent it creates under. */
  readonly #inFlight = new Map<AbortController, Agent>();

  /** Aborted at host shutdown. */
  get shutdownSignal(): AbortSignal {
    return this.#shutdown.signal;
  }

  /** Host shutdown: every creation in flight, and provider work of cold resumes, gives up. */
  shutdown(): void {
    this.#shutdown.abort(SubagentError.closed('the host'));
  }

  /** A drain closed admission: each creation whose parent `refused` names (with its `DRAINING`) stops with it. */
  drain(refused: (parent: Agent) => SubagentError | undefined): void {
    for (const [controller, parent] of this.#inFlight) {
      const error = refused(parent);
      if (error) controller.abort(error);
    }
  }

  /**
   * `work` under `parent`, given a signal that aborts with `signal`, at shutdown and on a drain. A
   * creation the caller's signal stopped rejects with exactly its abort reason; one the shutdown
   * stopped, `CLOSED` saying `while_`; one a drain stopped, `DRAINING`.
   */
  async run<T>(parent: Agent, signal: AbortSignal | undefined, while_: string, work: (signal: AbortSignal) => Promise<T>): Promise<T> {
    const combined = new AbortController();
    const shutdown = this.#shutdown.signal;
    /** The source that aborted `combined` first (none for a drain). */
    let stoppedBy: AbortSignal | undefined;
    const stop = (source: AbortSignal, reason: unknown): void => {
      if (!combined.signal.aborted) stoppedBy = source;
      combined.abort(reason);
    };
    // A caller's signal that cannot be read or watched (a getter or addEventListener that throws) is bad input.
    const unwatch = (signal ? [signal, shutdown] : [shutdown]).map((source) => readingInput('the signal', 'INVALID_REQUEST', () => {
      if (source.aborted) stop(source, abortReason(source));
      return onAbort(source, (reason) => stop(source, reason));
    }));
    this.#inFlight.set(combined, parent);
    try {
      return await work(combined.signal);
    } catch (error) {
      // What `work` gave up with (its CANCELLED) is the combined signal's: the reason of what stopped it first.
      if (combined.signal.aborted && isSubagentError(error, 'CANCELLED')) {
        if ((signal === undefined || stoppedBy !== signal) && shutdown.aborted) throw SubagentError.closedWhile('the host', while_);
        throw combined.signal.reason;
      }
      throw error;
    } finally {
      this.#inFlight.delete(combined);
      // Both watches go: a caller's long-lived signal must not collect one per creation.
      for (const stop of unwatch) stop();
    }
  }
}
