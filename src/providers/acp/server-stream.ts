// How `serveAcp` hands `session/update`s to its client: a running turn's as they come (UpdateQueue),
// a session/load's replay one update at a time, waiting while the client is not reading (Replays).
import type * as acp from '@agentclientprotocol/sdk';
import { onAbort } from '../../seam/abort.js';
import type { SessionEvent } from '../../seam/session-types.js';
import type { AcpSdk } from './sdk.js';
import { historyUpdates } from './server-updates.js';

/**
 * Resolves once `settled` settles or `signal` aborts, whichever comes first. Every wait on one
 * signal (a connection's turns, as many as its sessions) shares its one listener (`onAbort`).
 */
function settledOrAborted(settled: Promise<unknown>, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    const stop = onAbort(signal, () => resolve());
    const done = () => {
      stop();
      resolve();
    };
    settled.then(done, done);
  });
}

/**
 * Sends updates of one session; `drain` resolves once all were written. The connection writes its
 * messages in the order they were sent, so each update is handed over at once and the last one's
 * write settles after all before it.
 */
export class UpdateQueue {
  #tail: Promise<void> = Promise.resolve();
  constructor(
    private readonly sdk: AcpSdk,
    private readonly client: acp.AgentContext,
    private readonly sessionId: string,
  ) {}

  send(update: acp.SessionUpdate): void {
    this.#tail = this.client.notify(this.sdk.methods.client.session.update, { sessionId: this.sessionId, update }).catch(() => undefined);
  }

  /** Resolves once all were written, or once `until` aborts (a client that reads no more). */
  drain(until: AbortSignal): Promise<void> {
    return settledOrAborted(this.#tail, until);
  }
}

/**
 * The session/load replays of one connection, one after another. Each update is made when the one
 * before it was written, and a write waits while the client is not reading (the wire's
 * backpressure): a client that sends loads and reads nothing costs the server one update, not a
 * copy of every log it asked for; one that reads late still gets each replay whole and in order.
 */
export class Replays {
  #tail: Promise<void> = Promise.resolve();
  constructor(private readonly sdk: AcpSdk) {}

  /**
   * Replays the session's `events` as they are now; resolves once all were written, or early when
   * `signal` aborts (the request was cancelled, or the connection closed) or a write fails.
   */
  replay(client: acp.AgentContext, sessionId: string, events: readonly SessionEvent[], signal: AbortSignal): Promise<void> {
    const snapshot = events.slice();
    const replayed = this.#tail.then(() => this.#send(client, sessionId, snapshot, signal));
    // The next replay starts once this load is answered: the SDK sends the answer in the promise
    // callbacks that follow the handler, so a turn of the event loop later, its updates come after it.
    // A replay that failed does not stop the ones after it.
    this.#tail = replayed.catch(() => undefined).then(() => new Promise<void>((resolve) => setImmediate(resolve)));
    return replayed;
  }

  async #send(client: acp.AgentContext, sessionId: string, events: readonly SessionEvent[], signal: AbortSignal): Promise<void> {
    for (const update of historyUpdates(events)) {
      if (signal.aborted) return;
      let written = false;
      const write = client.notify(this.sdk.methods.client.session.update, { sessionId, update }).then(() => void (written = true));
      // A write that waits for a client reading no more is not awaited once the signal aborts.
      await settledOrAborted(write, signal);
      if (!written) return;
    }
  }
}
