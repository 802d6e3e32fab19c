// Lifecycle events of the service. Run events are scoped to the delegating parent; every listener
// is called inside a containment wrapper, except provider-added, whose throw rolls back a registration.
import type { SessionId } from '../seam/content.js';
import { SubagentError, describeError, printable } from '../seam/errors.js';
import { isRecord, isThenable, readingInput } from '../seam/parse.js';
import type { SubagentEvents } from '../seam/types.js';
import type { Logger } from '../runtime/session-store.js';

type EventName = keyof SubagentEvents;

const EVENT_NAMES: readonly string[] = ['subagent/provider-added', 'subagent/provider-removed', 'subagent/start', 'subagent/end'] satisfies EventName[];
type Listener<E extends EventName> = (payload: SubagentEvents[E]) => unknown;

interface Registration {
  event: EventName;
  listener: Listener<EventName>;
  parent: SessionId | undefined;
}

/** One event on its way: the listeners it has still to reach. */
interface Delivery {
  event: EventName;
  payload: SubagentEvents[EventName];
  pending: Registration[];
  /** Index in `pending` of the next listener to call (no shift: one event may have thousands). */
  next: number;
  strict: boolean;
  failure: { error: unknown } | undefined;
}

export class SubagentEventBus {
  readonly #registrations = new Set<Registration>();
  /** Events being delivered, oldest first (an emit by a listener is nested in its event's delivery). */
  readonly #deliveries: Delivery[] = [];
  readonly #logger: Logger | undefined;

  constructor(logger?: Logger) {
    this.#logger = logger;
  }

  /** Number of registered listeners (for leak checks). */
  get size(): number {
    return this.#registrations.size;
  }

  /** `INVALID_REQUEST` for an unknown event, a listener that is not a function or a bad `opts.parent`. */
  on<E extends EventName>(event: E, listener: Listener<E>, opts?: { parent?: SessionId }): () => void {
    if (!EVENT_NAMES.includes(event)) throw new SubagentError('INVALID_REQUEST', `on(): unknown event ${printable(event)} (events: ${EVENT_NAMES.join(', ')})`);
    if (typeof listener !== 'function') throw new SubagentError('INVALID_REQUEST', `on('${event}'): the listener must be a function`);
    // Read once; a getter or proxy trap that throws is INVALID_REQUEST too.
    const parent = readingInput(`on('${event}') opts`, 'INVALID_REQUEST', () => {
      // A misspelt key (`parnet`) would leave a listener meant for one parent hearing every parent's runs.
      const badKeys = isRecord(opts) && Object.keys(opts).some((key) => key !== 'parent');
      const given: unknown = isRecord(opts) ? opts['parent'] : undefined;
      if (opts !== undefined && (!isRecord(opts) || badKeys || (given !== undefined && (typeof given !== 'string' || given === '')))) {
        throw new SubagentError('INVALID_REQUEST', `on('${event}'): opts must be { parent?: a session id }`);
      }
      return given as SessionId | undefined;
    });
    const registration: Registration = { event, listener: listener as Listener<EventName>, parent };
    this.#registrations.add(registration);
    return () => {
      this.#registrations.delete(registration);
    };
  }

  #listeners(event: EventName, parent: SessionId | undefined): Registration[] {
    // A copy: listeners may subscribe or unsubscribe while the event is being delivered.
    return [...this.#registrations].filter((r) => r.event === event && (r.parent === undefined || r.parent === parent));
  }

  /**
   * Plain emit: the first synchronous throw propagates to the caller (provider-added rolls back
   * on it). A later rejection can no longer undo anything, so it is logged like a contained one.
   */
  emitStrict<E extends EventName>(event: E, payload: SubagentEvents[E]): void {
    this.#deliver({ event, payload, pending: this.#listeners(event, undefined), next: 0, strict: true, failure: undefined });
  }

  /** Contained emit: each throw or rejection is logged as one warning and the others still run. */
  emit<E extends EventName>(event: E, payload: SubagentEvents[E], parent?: SessionId): void {
    this.#deliver({ event, payload, pending: this.#listeners(event, parent), next: 0, strict: false, failure: undefined });
  }

  /**
   * Delivers `delivery` once every event emitted before it has reached its remaining listeners: an
   * emit made by a listener (a provider registered again as the old one is removed) reaches the
   * listeners after it only after the event being delivered, so each listener hears them in order.
   * It stays synchronous, so a strict emit still throws to its caller.
   */
  #deliver(delivery: Delivery): void {
    this.#deliveries.push(delivery);
    try {
      while (delivery.next < delivery.pending.length) {
        const current = this.#deliveries.find((d) => d.next < d.pending.length)!;
        const registration = current.pending[current.next++]!;
        // Unsubscribed by a listener before it this time: not called.
        if (this.#registrations.has(registration)) this.#call(current, registration);
      }
    } finally {
      this.#deliveries.splice(this.#deliveries.indexOf(delivery), 1);
    }
    if (delivery.failure) throw delivery.failure.error;
  }

  #call(delivery: Delivery, registration: Registration): void {
    try {
      const returned = registration.listener(delivery.payload);
      if (isThenable(returned)) returned.then(undefined, (error: unknown) => this.#warn(delivery.event, error));
    } catch (error) {
      if (!delivery.strict) return this.#warn(delivery.event, error);
      // The first throw of a strict emit ends its delivery and goes to its caller.
      delivery.failure = { error };
      delivery.pending.length = 0;
    }
  }

  #warn(event: EventName, error: unknown): void {
    try {
      this.#logger?.warn(`${event} listener failed: ${describeError(error)}`);
    } catch {
      // A logger that throws must not turn a contained listener failure into the caller's.
    }
  }
}
