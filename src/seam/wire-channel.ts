// Comlink over a Node MessagePort, made safe: errors cross with their class, code and cause (the
// codec, installed as Comlink's `throw` handler), and a guard rejects every pending call with
// `CLOSED` when the port closes or the peer dies, since Comlink alone would wait forever.
import type { MessagePort } from 'node:worker_threads';
import * as Comlink from 'comlink';
import { decode, encode, type Encoded } from './codec.js';
import { SubagentError } from './errors.js';

type Listener = (event: { data: unknown }) => void;

/**
 * A Comlink endpoint over a Node MessagePort. Comlink's own node adapter cannot be imported by
 * a stable path under Node ESM, and this is all it does: `message` events as `{ data }`.
 */
export function portEndpoint(port: MessagePort): Comlink.Endpoint {
  const wrapped = new Map<Listener, (data: unknown) => void>();
  const endpoint = {
    postMessage: (message: unknown, transfer?: readonly unknown[]) => port.postMessage(message, transfer as never),
    addEventListener: (_type: string, listener: Listener) => {
      const handler = (data: unknown) => listener({ data });
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

/** One side of a control channel: the remote API plus the guard. */
export class GuardedRemote<T> {
  readonly remote: Comlink.Remote<T>;
  readonly #port: MessagePort;
  readonly #closed: Promise<never>;
  #reject!: (error: SubagentError) => void;
  #isClosed = false;

  constructor(port: MessagePort) {
    installErrorTransfer();
    this.#port = port;
    this.remote = Comlink.wrap<T>(portEndpoint(port));
    this.#closed = new Promise<never>((_resolve, reject) => {
      this.#reject = reject;
    });
    this.#closed.catch(() => undefined);
    port.once('close', () => this.close('the peer closed its end of the channel'));
  }

  get closed(): boolean {
    return this.#isClosed;
  }

  /** Runs a remote call; rejects `CLOSED` if the channel closes first (or already has). */
  call<R>(invoke: (remote: Comlink.Remote<T>) => Promise<R>): Promise<R> {
    if (this.#isClosed) return Promise.reject(new SubagentError('CLOSED', 'the channel to the child is closed'));
    return Promise.race([invoke(this.remote), this.#closed]);
  }

  /** Rejects every pending and later call with `CLOSED`, releases the proxy and closes the port. */
  close(why = 'the channel was closed'): void {
    if (this.#isClosed) return;
    this.#isClosed = true;
    this.#reject(new SubagentError('CLOSED', why));
    try {
      this.remote[Comlink.releaseProxy]();
    } catch {
      // Already released; nothing else to free.
    }
    this.#port.close();
  }
}

/** Serves `api` on `port`; returns the disposer that stops serving and closes the port. */
export function exposeOn(api: object, port: MessagePort): () => void {
  installErrorTransfer();
  const endpoint = portEndpoint(port);
  Comlink.expose(api, endpoint);
  return () => port.close();
}
