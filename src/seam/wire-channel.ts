// One MessagePort per worker child carries three lanes: Comlink calls in each direction (`host`:
// worker → main, `control`: main → worker) and one-way `notice` messages (the child's events). Errors
// cross Comlink with their class, code and cause (the codec is installed as Comlink's `throw`
// handler), and a guard rejects pending calls with `CLOSED` when the port closes, since Comlink
// alone would wait forever.
import type { MessagePort } from 'node:worker_threads';
import * as Comlink from 'comlink';
import { decode, encode, type Encoded } from './codec.js';
import { SubagentError } from './errors.js';

export type Lane = 'host' | 'control' | 'notice';

interface LaneMessage {
  lane: Lane;
  data: unknown;
}

type Listener = (event: { data: unknown }) => void;

function isLaneMessage(value: unknown): value is LaneMessage {
  return typeof value === 'object' && value !== null && 'lane' in value;
}

/**
 * A Comlink endpoint for one lane of a Node MessagePort. (Comlink's own node adapter cannot be
 * imported by a stable path under Node ESM; this is all it does, plus the lane tag.)
 */
export function laneEndpoint(port: MessagePort, lane: Lane): Comlink.Endpoint {
  const wrapped = new Map<Listener, (message: unknown) => void>();
  const endpoint = {
    postMessage: (data: unknown, transfer?: readonly unknown[]) => port.postMessage({ lane, data } satisfies LaneMessage, transfer as never),
    addEventListener: (_type: string, listener: Listener) => {
      const handler = (message: unknown) => {
        if (isLaneMessage(message) && message.lane === lane) listener({ data: message.data });
      };
      wrapped.set(listener, handler);
      port.on('message', handler);
    },
    removeEventListener: (_type: string, listener: Listener) => {
      const handler = wrapped.get(listener);
      if (!handler) return;
      wrapped.delete(listener);
      port.off('message', handler);
    },
  };
  return endpoint as unknown as Comlink.Endpoint;
}

/** Sends a one-way message on the `notice` lane. */
export function postNotice(port: MessagePort, data: unknown): void {
  port.postMessage({ lane: 'notice', data } satisfies LaneMessage);
}

/** Calls `handler` with every `notice` message; returns the unsubscriber. */
export function onNotice(port: MessagePort, handler: (data: unknown) => void): () => void {
  const listener = (message: unknown) => {
    if (isLaneMessage(message) && message.lane === 'notice') handler(message.data);
  };
  port.on('message', listener);
  return () => port.off('message', listener);
}

let installed = false;

/** Makes Comlink carry thrown values through the codec (idempotent; once per thread). */
export function installErrorTransfer(): void {
  if (installed) return;
  installed = true;
  const base = Comlink.transferHandlers.get('throw');
  if (!base) return;
  Comlink.transferHandlers.set('throw', {
    canHandle: (value: unknown): value is unknown => base.canHandle(value),
    serialize: (value: unknown) => [encode((value as { value: unknown }).value), []],
    deserialize: (serialized: unknown) => {
      throw decode(serialized as Encoded);
    },
  });
}

/** The calling side of one lane: the remote API, created on first use, plus the guard. */
export class GuardedRemote<T> {
  readonly #port: MessagePort;
  readonly #lane: Lane;
  #remote: Comlink.Remote<T> | undefined;
  #rejectPending: ((error: SubagentError) => void) | undefined;
  #closed: Promise<never> | undefined;
  #isClosed = false;
  #why = 'the channel to the child is closed';

  constructor(port: MessagePort, lane: Lane) {
    this.#port = port;
    this.#lane = lane;
    port.once('close', () => this.close('the peer closed its end of the channel'));
  }

  get closed(): boolean {
    return this.#isClosed;
  }

  /** Runs a remote call; rejects `CLOSED` if the channel closes first (or already has). */
  call<R>(invoke: (remote: Comlink.Remote<T>) => Promise<R>): Promise<R> {
    if (this.#isClosed) return Promise.reject(new SubagentError('CLOSED', this.#why));
    if (!this.#remote) {
      installErrorTransfer();
      this.#remote = Comlink.wrap<T>(laneEndpoint(this.#port, this.#lane));
      this.#closed = new Promise<never>((_resolve, reject) => {
        this.#rejectPending = reject;
      });
      this.#closed.catch(() => undefined);
    }
    return Promise.race([invoke(this.#remote), this.#closed!]);
  }

  /** Rejects every pending and later call with `CLOSED` and releases the proxy (the port stays open). */
  close(why = 'the channel was closed'): void {
    if (this.#isClosed) return;
    this.#isClosed = true;
    this.#why = why;
    // The error (and its stack) is only built when a call is waiting for it.
    this.#rejectPending?.(new SubagentError('CLOSED', why));
    if (this.#remote) {
      try {
        this.#remote[Comlink.releaseProxy]();
      } catch {
        // Already released, or the port is gone: nothing else to free.
      }
    }
  }
}

/** Serves `api` on one lane of `port`. The port's owner closes the port. */
export function exposeOn(api: object, port: MessagePort, lane: Lane): void {
  installErrorTransfer();
  Comlink.expose(api, laneEndpoint(port, lane));
}
