// Admission of worker-child starts into the pool's slots, in front of piscina (which therefore never
// queues). A child that only waits on the main thread lends one slot to its own children, so every
// waiting subtree can progress and threads stay within maxThreads × (1 + maxNestingDepth).
import { SubagentError } from '../../seam/errors.js';

/** One admitted child's claim on the pool, held until its task has left its thread. */
export interface Slot {
  /**
   * Marks the child as waiting on the main thread (a host tool call in flight) until the returned
   * function runs; calls nest. While it waits, its children may run on its loan.
   */
  wait(): () => void;
  /** Idempotent: the child's task has left its thread. */
  release(): void;
  /**
   * Marks a resident child as idle: when a start finds no free slot, `yieldSlot` is called (once)
   * and the child must leave its thread, which releases the slot. `busy()` withdraws the offer.
   */
  idle(yieldSlot: () => void): void;
  busy(): void;
}

export interface AdmissionRequest {
  /** Session id of the child that will hold the slot. */
  readonly child: string;
  /** Session id of the start's parent. */
  readonly parent: string;
  /** A session's parent id: finds the nearest worker-child ancestor through thread-less ones (in-process children). */
  readonly parentOf: (sessionId: string) => string | undefined;
  readonly signal: AbortSignal;
  /**
   * A resident (continuable) child: its nesting level is remembered between its stays, until
   * `forget`, so children started below it while it holds no thread still count it.
   */
  readonly resident?: boolean;
  /** Called once when the start has to queue for a slot (none is free for it now). */
  readonly onWait?: () => void;
}

/**
 * A lineage node of the admission: an admitted child, on a root slot (`on` undefined) or on the
 * loan of the holder `on`. Each holder lends at most one slot at a time (`borrower`), which keeps
 * every chain of loans within one root slot and at most 1 + maxNestingDepth long. A resident
 * (continuable) child between turns is `idle`: it yields its slot when `#pump` finds none free, so
 * lingering children never block a start, and one that only waits for its children holds none.
 */
interface Holder {
  readonly id: string;
  /** Worker-child ancestors of this child: 0 for a child of the main thread's agents. */
  readonly level: number;
  on: Holder | undefined;
  borrower: Holder | undefined;
  /** Host tool calls in flight; above 0 the child only waits, so its loan is open. */
  waits: number;
  released: boolean;
  /** Set while a resident child is idle: asks it to leave its thread. */
  onYield: (() => void) | undefined;
  /** Asked to leave; its release is on its way. */
  yielding: boolean;
}

interface Pending {
  readonly request: AdmissionRequest;
  readonly lender: Holder | undefined;
  readonly level: number;
  readonly resolve: (slot: Slot) => void;
  readonly reject: (error: SubagentError) => void;
  readonly onAbort: () => void;
}

// Lineage walks stop here: a cycle in stored headers must not hang a start.
const MAX_LINEAGE_STEPS = 1024;

/** The nesting level of a worker child whose nearest worker-child ancestor holding a slot is `lender`. */
function levelUnder(lender: Holder | undefined): number {
  return lender ? lender.level + 1 : 0;
}

export class Admission {
  readonly #maxNestingDepth: number;
  readonly #onLoansChanged: (loans: number) => void;
  readonly #holders = new Map<string, Holder>();
  /** Nesting levels of resident children, kept while they hold no thread (see AdmissionRequest.resident). */
  readonly #residentLevels = new Map<string, number>();
  #free: number;
  #loans = 0;
  /** Holders asked to yield whose slots are not released yet. */
  #yielding = 0;
  #queue: Pending[] = [];
  #closed = false;

  /** `onLoansChanged` hears how many children run on loans, so the pool can size itself to them. */
  constructor(rootSlots: number, maxNestingDepth: number, onLoansChanged: (loans: number) => void = () => undefined) {
    this.#free = rootSlots;
    this.#maxNestingDepth = maxNestingDepth;
    this.#onLoansChanged = onLoansChanged;
  }

  /** Children running on a loan now (each beyond the root slots). */
  get loans(): number {
    return this.#loans;
  }

  /**
   * Resolves with a slot once one is free: the parent's loan (when the nearest worker-child
   * ancestor waits and has not lent it) or a root slot, first come first served. Rejects
   * `DEPTH_EXCEEDED` past the nesting limit, `CANCELLED` on abort, `CLOSED` once closed.
   */
  acquire(request: AdmissionRequest): Promise<Slot> {
    if (this.#closed) return Promise.reject(SubagentError.closed('the worker pool'));
    if (request.signal.aborted) return Promise.reject(cancelled(request.signal));
    const { lender, level } = this.#lineage(request);
    if (level > this.#maxNestingDepth) return Promise.reject(this.#tooDeep(level));
    // Nobody waits and a slot is free: granted now, with no abort listener to add and remove.
    if (this.#queue.length === 0 && (loanable(lender) || this.#free > 0)) {
      return new Promise<Slot>((resolve) => this.#grant(request, level, loanable(lender) ? lender : undefined, resolve));
    }
    return new Promise<Slot>((resolve, reject) => {
      const pending: Pending = {
        request,
        lender,
        level,
        resolve,
        reject,
        onAbort: () => {
          if (!this.#queue.includes(pending)) return;
          this.#queue = this.#queue.filter((other) => other !== pending);
          reject(cancelled(request.signal));
        },
      };
      request.signal.addEventListener('abort', pending.onAbort, { once: true });
      this.#queue.push(pending);
      this.#pump();
      if (this.#queue.includes(pending)) {
        try {
          request.onWait?.();
        } catch {
          // Only a listener of the caller's failed: the start waits on, as it would without one.
        }
      }
    });
  }

  /** Idempotent: starts still waiting reject `CLOSED`; admitted ones keep their slots until released. */
  close(): void {
    this.#closed = true;
    for (const pending of this.#queue.splice(0)) {
      pending.request.signal.removeEventListener('abort', pending.onAbort);
      pending.reject(SubagentError.closedWhile('the worker pool', 'this start waited for a slot'));
    }
  }

  /**
   * `DEPTH_EXCEEDED` when a worker child of `request.parent` would be nested past the limit now
   * (checked by a continuable start before its child exists; each of its turns checks again).
   */
  checkNesting(request: Pick<AdmissionRequest, 'parent' | 'parentOf'>): void {
    const { level } = this.#lineage(request);
    if (level > this.#maxNestingDepth) throw this.#tooDeep(level);
  }

  /** A resident child left residence for good: its level is no longer kept. */
  forget(child: string): void {
    this.#residentLevels.delete(child);
  }

  #tooDeep(level: number): SubagentError {
    return new SubagentError(
      'DEPTH_EXCEEDED',
      `a worker child here would be nested ${level} generations below a worker child, above pool.maxNestingDepth ${this.#maxNestingDepth}; delegate less deeply or raise pool.maxNestingDepth (threads stay within maxThreads × (1 + maxNestingDepth))`,
    );
  }

  /**
   * The lender of a start (its nearest worker-child ancestor holding a slot) and its nesting level,
   * from its nearest worker-child ancestor: a holder, or a resident child between stays (which
   * lends nothing, but is a generation all the same).
   */
  #lineage(request: Pick<AdmissionRequest, 'parent' | 'parentOf'>): { lender: Holder | undefined; level: number } {
    let level: number | undefined;
    let id: string | undefined = request.parent;
    for (let step = 0; id !== undefined && step < MAX_LINEAGE_STEPS; step++) {
      const holder = this.#holders.get(id);
      if (holder) return { lender: holder, level: level ?? levelUnder(holder) };
      const resident = this.#residentLevels.get(id);
      if (level === undefined && resident !== undefined) level = resident + 1;
      id = request.parentOf(id);
    }
    return { lender: undefined, level: level ?? 0 };
  }

  /** Grants every waiting start that can run now, in arrival order. */
  #pump(): void {
    if (this.#queue.length === 0) return;
    const waiting: Pending[] = [];
    for (const pending of this.#queue) {
      const lender = pending.lender;
      // A loan first: it is usable only by this subtree, while a root slot could serve anyone.
      const on = loanable(lender) ? lender : undefined;
      if (on || this.#free > 0) {
        pending.request.signal.removeEventListener('abort', pending.onAbort);
        this.#grant(pending.request, pending.level, on, pending.resolve);
      } else waiting.push(pending);
    }
    this.#queue = waiting;
    this.#askYields(waiting.length);
  }

  /** Asks idle resident children to leave their threads, one per start still waiting. */
  #askYields(waiting: number): void {
    let need = waiting - this.#yielding;
    for (const holder of this.#holders.values()) {
      if (need <= 0) return;
      const onYield = holder.onYield;
      if (!onYield || holder.yielding) continue;
      holder.onYield = undefined;
      holder.yielding = true;
      this.#yielding++;
      need--;
      queueMicrotask(onYield);
    }
  }

  #grant(request: AdmissionRequest, level: number, lender: Holder | undefined, resolve: (slot: Slot) => void): void {
    const holder: Holder = {
      id: request.child, level, on: lender, borrower: undefined, waits: 0, released: false, onYield: undefined, yielding: false,
    };
    if (lender) {
      lender.borrower = holder;
      this.#setLoans(this.#loans + 1);
    } else {
      this.#free--;
    }
    this.#holders.set(holder.id, holder);
    if (request.resident === true) this.#residentLevels.set(holder.id, level);
    resolve({
      wait: () => this.#wait(holder),
      release: () => this.#release(holder),
      idle: (yieldSlot) => {
        if (holder.released || holder.yielding) return;
        holder.onYield = yieldSlot;
        if (this.#queue.length > 0) this.#askYields(this.#queue.length);
      },
      busy: () => {
        holder.onYield = undefined;
      },
    });
  }

  #wait(holder: Holder): () => void {
    holder.waits++;
    this.#pump();
    let done = false;
    return () => {
      if (done) return;
      done = true;
      holder.waits--;
    };
  }

  #release(holder: Holder): void {
    if (holder.released) return;
    holder.released = true;
    holder.onYield = undefined;
    if (holder.yielding) this.#yielding--;
    if (this.#holders.get(holder.id) === holder) this.#holders.delete(holder.id);
    const { on, borrower } = holder;
    if (borrower) {
      // A child still running on this holder's loan (its parent stopped waiting for it) takes over
      // this holder's own slot: the slot stays counted once and the chain within its root slot.
      borrower.on = on;
      if (on) on.borrower = borrower;
    } else if (on) {
      on.borrower = undefined;
    } else {
      this.#free++;
    }
    if (on || borrower) this.#setLoans(this.#loans - 1);
    this.#pump();
  }

  #setLoans(loans: number): void {
    this.#loans = loans;
    this.#onLoansChanged(loans);
  }
}

/** Whether `lender` can lend its slot now: it waits on a host call and has not lent it yet. */
function loanable(lender: Holder | undefined): lender is Holder {
  return lender !== undefined && !lender.released && lender.waits > 0 && !lender.borrower;
}

function cancelled(signal: AbortSignal): SubagentError {
  return SubagentError.cancelled('the start', signal.reason, 'while it waited for a worker slot');
}
