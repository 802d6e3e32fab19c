// The routes of the messages between the main thread and worker children. Each worker thread keeps
// one long-lived port to the main thread (its hub); every message on it names its run and lane, and a
// RunRouter on each side hands it to that run. No Comlink types here: the pool's declarations reach
// this file, and Comlink's need the DOM library, which a Node program's typecheck does not load.
import { receiveMessageOnPort, type MessagePort } from 'node:worker_threads';

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
  endpoint(lane: Lane): LaneEndpoint {
    return new LaneEndpoint(this, lane);
  }

  /** Stops routing to this run (its port stays open for other runs). */
  dispose(): void {
    this.#listeners = {};
    this.#onClose = [];
    this.#dispose();
  }
}

/** A Comlink endpoint over one lane of a route: methods on a prototype, no closures per run. */
export class LaneEndpoint {
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
