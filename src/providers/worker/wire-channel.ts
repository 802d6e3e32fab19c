// The channels between the main thread and worker children. Each worker thread keeps one long-lived
// port to the main thread (its hub); every message on it names its run and lane, and a RunRouter on
// each side hands it to that run: Comlink calls each way (`host`: worker → main, `control`:
// main → worker) and one-way `notice`s (the child's events). Errors cross Comlink with their class,
// code and cause (the codec is installed as Comlink's `throw` handler), and a guard rejects pending
// calls with `CLOSED` when the run's port closes, since Comlink alone would wait forever.
import { receiveMessageOnPort, type MessagePort } from 'node:worker_threads';
import * as Comlink from 'comlink';
import { decode, encode, type Encoded } from '../../seam/codec.js';
import { SubagentError, describeError } from '../../seam/errors.js';

export type Lane = 'host' | 'control' | 'notice';

interface RoutedMessage {
  run: string;
  lane: Lane;
  data: unknown;
}

type Listener = (event: { data: unknown }) => void;

function isRouted(value: unknown): value is RoutedMessage {
  return typeof value === 'object' && value !== null && 'run' in value && 'lane' in value;
}

/** One run's view of the shared ports: its lanes, its port once known, and its close signal. */
export class RunRoute {
  readonly id: string;
  #port: MessagePort | undefined;
  // Plain arrays, replaced on change (a dispatch goes on over the array it started with): a lane
  // has one listener or none, and a route lives as long as its child, so no hash table per lane.
  #listeners: { [lane in Lane]?: readonly Listener[] } = {};
  #onClose: (() => void)[] = [];
  readonly #dispose: () => void;
  #closed = false;

  constructor(id: string, dispose: () => void) {
    this.id = id;
    this.#dispose = dispose;
  }

  /** The port this run's messages travel on (set by the first message, or by `bind`). */
  get port(): MessagePort | undefined {
    return this.#port;
  }

  bind(port: MessagePort): void {
    this.#port ??= port;
  }

  /** @internal Called by the router for each message of this run. */
  deliver(port: MessagePort, lane: Lane, data: unknown): void {
    this.#port ??= port;
    const listeners = this.#listeners[lane];
    if (listeners) for (const listener of listeners) listener({ data });
  }

  /** @internal Called by the router when this run's port closed. */
  portClosed(): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const listener of this.#onClose) listener();
  }

  /** Posts one message on a lane. A run with no port yet (or a closed one) drops it. */
  post(lane: Lane, data: unknown, transfer?: readonly unknown[]): void {
    if (this.#closed) return;
    this.#port?.postMessage({ run: this.id, lane, data } satisfies RoutedMessage, transfer as never);
  }

  /** Calls `listener` with each message of `lane`; returns the unsubscriber. */
  on(lane: Lane, listener: (data: unknown) => void): () => void {
    const wrapped: Listener = ({ data }) => listener(data);
    this.addListener(lane, wrapped);
    return () => this.removeListener(lane, wrapped);
  }

  /** @internal For a lane's endpoint. */
  addListener(lane: Lane, listener: Listener): void {
    const listeners = this.#listeners[lane] ?? [];
    if (!listeners.includes(listener)) this.#listeners[lane] = [...listeners, listener];
  }

  /** @internal For a lane's endpoint. */
  removeListener(lane: Lane, listener: Listener): void {
    const listeners = this.#listeners[lane];
    if (listeners?.includes(listener)) this.#listeners[lane] = listeners.filter((other) => other !== listener);
  }

  /** Calls `listener` once when this run's port closes (the other thread died or shut down). */
  onClose(listener: () => void): void {
    if (this.#closed) listener();
    else this.#onClose.push(listener);
  }

  /** A Comlink endpoint for one lane of this run. */
  endpoint(lane: Lane): Comlink.Endpoint {
    return new LaneEndpoint(this, lane) as unknown as Comlink.Endpoint;
  }

  /** Stops routing to this run (its port stays open for other runs). */
  dispose(): void {
    this.#listeners = {};
    this.#onClose = [];
    this.#dispose();
  }
}

/** A Comlink endpoint over one lane of a route: methods on a prototype, no closures per run. */
class LaneEndpoint {
  readonly #route: RunRoute;
  readonly #lane: Lane;

  constructor(route: RunRoute, lane: Lane) {
    this.#route = route;
    this.#lane = lane;
  }

  postMessage(data: unknown, transfer?: readonly unknown[]): void {
    this.#route.post(this.#lane, data, transfer);
  }

  addEventListener(_type: string, listener: Listener): void {
    this.#route.addListener(this.#lane, listener);
  }

  removeEventListener(_type: string, listener: Listener): void {
    this.#route.removeListener(this.#lane, listener);
  }
}

/** Routes the messages arriving on any number of shared ports to their runs. */
export class RunRouter {
  readonly #runs = new Map<string, RunRoute>();
  readonly #ports = new Set<MessagePort>();

  /** Ports being listened to (hubs, and ports offered to threads that may adopt them). */
  get ports(): number {
    return this.#ports.size;
  }

  /** Routes the messages of `port` (idempotent). `unref`: the port alone does not keep the process up. */
  listen(port: MessagePort, options: { unref?: boolean } = {}): void {
    if (this.#ports.has(port)) return;
    this.#ports.add(port);
    port.on('message', (message: unknown) => this.#dispatch(port, message));
    port.once('close', () => {
      this.#ports.delete(port);
      for (const route of [...this.#runs.values()]) if (route.port === port) route.portClosed();
    });
    if (options.unref) port.unref();
  }

  #dispatch(port: MessagePort, message: unknown): void {
    if (isRouted(message)) this.#runs.get(message.run)?.deliver(port, message.lane, message.data);
  }

  /**
   * Delivers now every message already queued on the ports. A thread that died had posted its last
   * messages before it died, but its death may be reported first (ports and exit are not ordered).
   */
  drain(): void {
    for (const port of this.#ports) {
      for (let entry = receiveMessageOnPort(port); entry; entry = receiveMessageOnPort(port)) this.#dispatch(port, entry.message);
    }
  }

  /** Closes every port (the threads are gone or going). */
  close(): void {
    for (const port of [...this.#ports]) port.close();
    this.#ports.clear();
  }

  /** A new route for run `id`. */
  route(id: string): RunRoute {
    const route = new RunRoute(id, () => {
      if (this.#runs.get(id) === route) this.#runs.delete(id);
    });
    this.#runs.set(id, route);
    return route;
  }
}

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
    if (value instanceof Error && 'cause' in value) {
      try {
        return encodeWithDescribedCause(value);
      } catch {
        // An Error whose fields cannot be read: described below.
      }
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
  #rejectPending: ((error: SubagentError) => void) | undefined;
  #closed: Promise<never> | undefined;
  #isClosed = false;
  #why = 'the channel to the child is closed';

  constructor(endpoint: Comlink.Endpoint) {
    this.#endpoint = endpoint;
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
      this.#closed = new Promise<never>((_resolve, reject) => {
        this.#rejectPending = reject;
      });
      this.#closed.catch(() => undefined);
    }
    return Promise.race([invoke(this.#remote), this.#closed!]);
  }

  /** Rejects every pending and later call with `CLOSED`. */
  close(why = 'the channel was closed'): void {
    if (this.#isClosed) return;
    this.#isClosed = true;
    this.#why = why;
    // The error (and its stack) is only built when a call is waiting for it.
    this.#rejectPending?.(new SubagentError('CLOSED', why));
  }
}

/** Serves `api` on a Comlink endpoint (one lane of a run). */
export function exposeOn(api: object, endpoint: Comlink.Endpoint): void {
  installErrorTransfer();
  Comlink.expose(api, endpoint);
}
