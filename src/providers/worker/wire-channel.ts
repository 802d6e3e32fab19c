// The calls between the main thread and worker children, over the lanes of a run's route
// (run-router.ts): Comlink calls each way (`host`: worker → main, `control`: main → worker) beside
// the one-way `notice`s (the child's events). Errors cross Comlink with their class,
// code and cause (the codec is installed as Comlink's `throw` handler), and a guard rejects pending
// calls with `CLOSED` when the run's port closes, since Comlink alone would wait forever.
import * as Comlink from 'comlink';
import { decode, encode, type Encoded } from '../../seam/codec.js';
import { SubagentError, describeError } from '../../seam/errors.js';
import type { LaneEndpoint } from './run-router.js';

let installed = false;

/**
 * A thrown value, encoded. An error whose cause cannot be encoded (a function, a class instance
 * holding one) still crosses with its class, code and message: its cause is replaced by a
 * description, instead of the whole error becoming Comlink's "Unserializable return value".
 */
function encodeThrown(value: unknown): Encoded {
  try {
    const encoded = encode(value);
    // superjson leaves what it does not know (a function, a class instance holding one) in place,
    // where postMessage would refuse it: checked here, on the rare path of an error.
    structuredClone(encoded);
    return encoded;
  } catch {
    try {
      if (value instanceof Error && 'cause' in value) return encodeWithDescribedCause(value);
    } catch {
      // An Error whose fields cannot be read, or a revoked proxy (even `instanceof` throws): described below.
    }
    // A thrown Symbol, function or proxy, or an Error that cannot be read: its description crosses,
    // as a main-thread agent would word it (not Comlink's "Unserializable return value").
    return encode(new Error(describeError(value)));
  }
}

/** `value` with its cause (which could not cross) replaced by the cause's description. */
function encodeWithDescribedCause(value: Error): Encoded {
  let cause: string;
  try {
    cause = String(value.cause);
  } catch {
    cause = 'a cause that cannot be read';
  }
  const copy = value instanceof SubagentError ? new SubagentError(value.code, value.message, { cause }) : Object.assign(new Error(value.message, { cause }), { name: value.name, code: (value as { code?: unknown }).code });
  if (typeof value.stack === 'string') Object.defineProperty(copy, 'stack', { value: value.stack, writable: true, configurable: true, enumerable: false });
  const encoded = encode(copy);
  structuredClone(encoded);
  return encoded;
}

/** Makes Comlink carry thrown values through the codec (idempotent; once per thread). */
function installErrorTransfer(): void {
  if (installed) return;
  installed = true;
  const base = Comlink.transferHandlers.get('throw');
  if (!base) return;
  Comlink.transferHandlers.set('throw', {
    canHandle: (value: unknown): value is unknown => base.canHandle(value),
    serialize: (value: unknown) => [encodeThrown((value as { value: unknown }).value), []],
    deserialize: (serialized: unknown) => {
      throw decode(serialized as Encoded);
    },
  });
}

/** The calling side of one lane: the remote API, created on first use, plus the guard. */
export class GuardedRemote<T> {
  readonly #endpoint: Comlink.Endpoint;
  #remote: Comlink.Remote<T> | undefined;
  /**
   * The calls still out, each by its rejecter. Not a race against one "closed" promise: each call
   * would leave a reaction on it, holding its answer, for as long as the channel lives (a resident
   * child's channel lives for thousands of turns).
   */
  readonly #pending = new Set<(error: SubagentError) => void>();
  #isClosed = false;
  #why = 'the channel to the child is closed';

  constructor(endpoint: LaneEndpoint) {
    this.#endpoint = endpoint as unknown as Comlink.Endpoint;
  }

  get closed(): boolean {
    return this.#isClosed;
  }

  /** Runs a remote call; rejects `CLOSED` if the channel closes first (or already has). */
  call<R>(invoke: (remote: Comlink.Remote<T>) => Promise<R>): Promise<R> {
    if (this.#isClosed) return Promise.reject(new SubagentError('CLOSED', this.#why));
    if (!this.#remote) {
      installErrorTransfer();
      this.#remote = Comlink.wrap<T>(this.#endpoint);
    }
    const answer = invoke(this.#remote);
    return new Promise<R>((resolve, reject) => {
      this.#pending.add(reject);
      answer.then(resolve, reject).finally(() => this.#pending.delete(reject));
    });
  }

  /** Rejects every pending and later call with `CLOSED`. */
  close(why = 'the channel was closed'): void {
    if (this.#isClosed) return;
    this.#isClosed = true;
    this.#why = why;
    // The error (and its stack) is only built when a call is waiting for it.
    if (this.#pending.size === 0) return;
    const error = new SubagentError('CLOSED', why);
    for (const reject of this.#pending) reject(error);
    this.#pending.clear();
  }
}

/** Serves `api` on a Comlink endpoint (one lane of a run). */
export function exposeOn(api: object, endpoint: LaneEndpoint): void {
  installErrorTransfer();
  Comlink.expose(api, endpoint as unknown as Comlink.Endpoint);
}
