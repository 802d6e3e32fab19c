// The host's live sessions, and the writer that streams each session's appends to persistence in
// per-tick batches. `flush` is the durability barrier the rest of the library awaits.
import type { SessionStore } from '../seam/agent-types.js';
import type { SessionId } from '../seam/content.js';
import { SubagentError, describeError, isSubagentError } from '../seam/errors.js';
import type { SessionEvent, SessionHeader } from '../seam/session-types.js';
import { delay, RetryTimer } from './retry-timer.js';
import { SessionLog } from './session.js';
import { takesQueuedAppends, type SessionPersistence } from './session-persistence.js';

export interface Logger {
  warn(message: string, data?: unknown): void;
  debug?(message: string, data?: unknown): void;
}

/**
 * Reports a failure the host contained (nothing failed for it) to the host's logger, or, when the
 * host has none, as a `SubagentWarning` on the process: no such failure goes unsaid.
 */
export function warnContained(logger: Logger | undefined, message: string, data?: string): void {
  if (logger) logger.warn(message, data);
  else process.emitWarning(data === undefined ? message : `${message}: ${data}`, 'SubagentWarning');
}

interface Entry {
  session: SessionLog;
  unsubscribe: () => void;
  pending: SessionEvent[];
  /** The chain of writes for this session, in append order. */
  writes: Promise<void>;
  /** The events of the last link, while it waits for the commit before it. */
  waiting: SessionEvent[] | undefined;
  /** Appends go to the store as they come (it queues them; see QUEUED_APPENDS). */
  direct: boolean;
  /**
   * This session's first write failure not yet reported, or the last one reported and when: every
   * flush begun before that report rejects with it too (it waited for the same lost events).
   */
  failure: { error: unknown; reportedAt: number } | undefined;
  /** A new session not created in the store yet: the events its creation writes (later ones join them). */
  uncreated: SessionEvent[] | undefined;
  /** Why the store refused to create it for good: its events are not written anywhere. */
  refused: unknown;
  /** Settles (never rejects) once the store answered this new session's first creation attempt (its events not waited for). */
  creating: Promise<void> | undefined;
}

/** Codes of a creation the store refuses for good (the id is taken, the header bad, the store closed): not retried. */
const FINAL_REFUSALS = ['DUPLICATE_SESSION', 'INVALID_OPTIONS', 'CLOSED'] as const;

const noop = () => undefined;

/** A storage failure as the caller sees it (our stores throw SubagentErrors; another store may not). */
function unavailable(error: unknown): SubagentError {
  if (isSubagentError(error)) return error;
  return new SubagentError('PERSISTENCE_UNAVAILABLE', `writing sessions failed: ${describeError(error)}`, { cause: error });
}

/** Turns of the event loop a flush polls the store through before it waits for the next write handed to it. */
const POLLS = 32;

export class LiveSessionStore implements SessionStore {
  readonly #entries = new Map<SessionId, Entry>();
  readonly #persistence: SessionPersistence | undefined;
  readonly #logger: Logger | undefined;
  /** The store takes a session's appends while earlier ones are queued (see QUEUED_APPENDS). */
  readonly #queued: boolean;
  /** Orders flushes' starts and failure reports (see Entry.failure). */
  #clock = 0;
  /** Resolved when the next create or append is handed to the store (see flush). */
  #handing: { next: Promise<void>; resolve: () => void } | undefined;
  /** Told of each write refused as out of sequence (see onDiverged). */
  readonly #diverged = new Set<(id: SessionId, error: unknown) => void>();
  /** Sessions removed before their creation was stored (a passing failure): still written (see remove). */
  readonly #unwritten = new Set<Entry>();
  /** Tries their creations again, backing off from 50 ms to 5 s; close() flushes them itself. */
  readonly #retry = new RetryTimer(() => this.#writeUnwritten(), 50, 5000);

  constructor(options: { persistence?: SessionPersistence | undefined; logger?: Logger | undefined } = {}) {
    this.#persistence = options.persistence;
    this.#logger = options.logger;
    this.#queued = options.persistence !== undefined && takesQueuedAppends(options.persistence);
  }

  get(id: SessionId): SessionLog | undefined {
    return this.#entries.get(id)?.session;
  }

  /**
   * How live session `id` stands in the store: `whole` (every write went without a failure so far),
   * `failed` (a write failed: its stored log falls short of it), `refused` (its creation was refused
   * for good: the stored log of its id is another writer's); undefined when it is not live.
   */
  writeState(id: SessionId): 'whole' | 'failed' | 'refused' | undefined {
    const entry = this.#entries.get(id);
    if (entry === undefined) return undefined;
    if (entry.refused !== undefined) return 'refused';
    return entry.failure === undefined ? 'whole' : 'failed';
  }

  list(): SessionLog[] {
    return [...this.#entries.values()].map((entry) => entry.session);
  }

  has(id: SessionId): boolean {
    return this.#entries.has(id);
  }

  /**
   * Calls `listener` with live session `id` each time the store refuses a write of it as out of
   * sequence (`SEQ_MISMATCH`): another writer of the store went on with its log (another host
   * resumed it), or an earlier write was lost. No later event of it can be stored.
   */
  onDiverged(listener: (id: SessionId, error: unknown) => void): void {
    this.#diverged.add(listener);
  }

  /** Creates and publishes a new session (persisted header + seed). `DUPLICATE_SESSION` if live. */
  create(header: SessionHeader, seed: readonly SessionEvent[] = []): SessionLog {
    const session = SessionLog.create(header, seed);
    this.publish(session, { stored: false });
    return session;
  }

  /**
   * Publishes `session`. A new one (`stored: false`) has its header and current events written to
   * persistence; a restored one (`stored: true`) only has later appends written.
   */
  publish(session: SessionLog, options: { stored: boolean }): void {
    this.#assertFree(session.id);
    const entry = this.#track(session, !!options.stored);
    if (this.#persistence && !options.stored) {
      // Taken now: events appended after publication reach persistence through the subscription.
      entry.uncreated = session.events.slice();
      entry.writes = this.#guard(entry, this.#create(entry));
    }
  }

  /**
   * Resolves once the store answered the creation of new session `id` (also when it failed for a
   * passing reason: a later write retries it); rejects with the refusal when it refused it for good,
   * e.g. `DUPLICATE_SESSION` when another writer of the same store created that id meanwhile.
   */
  async created(id: SessionId): Promise<void> {
    const entry = this.#entries.get(id);
    await entry?.creating;
    if (entry?.refused !== undefined) throw unavailable(entry.refused);
  }

  /**
   * Creates the entry's session in the store with the events it holds so far. A creation that fails
   * for a passing reason (a lock held past the busy timeout) keeps them, and the next write or flush
   * tries again; one refused for good (a stored session holds the id) leaves the session unwritten.
   */
  async #create(entry: Entry): Promise<void> {
    const persistence = this.#persistence!;
    const creation = (async () => {
      try {
        this.#handed();
        await persistence.create(entry.session.header);
      } catch (error) {
        if (isSubagentError(error) && (FINAL_REFUSALS as readonly string[]).includes(error.code)) {
          // None of its events may go to a log it did not create (say another writer's session).
          entry.refused = error;
          entry.uncreated = undefined;
        }
        throw error;
      }
    })();
    // `created()` waits for the creation alone, not for the commit of the events that follow it.
    entry.creating ??= creation.then(
      () => undefined,
      () => undefined,
    );
    await creation;
    // Every write of an uncreated session goes through its creation: the failures of earlier
    // attempts were passing ones, and this one stores what they would have. None is lost to report.
    entry.failure = undefined;
    const events = entry.uncreated ?? [];
    entry.uncreated = undefined;
    if (events.length > 0) {
      this.#handed();
      await persistence.append(entry.session.id, events);
    }
  }

  #assertFree(id: SessionId): void {
    if (this.#entries.has(id)) throw new SubagentError('DUPLICATE_SESSION', `session ${id} is already live`);
  }

  #track(session: SessionLog, stored: boolean): Entry {
    const entry: Entry = {
      session,
      pending: [],
      writes: Promise.resolve(),
      unsubscribe: () => undefined,
      waiting: undefined,
      direct: false,
      failure: undefined,
      uncreated: undefined,
      refused: undefined,
      creating: undefined,
    };
    if (this.#persistence) {
      entry.unsubscribe = session.subscribe((event) => {
        if (entry.pending.push(event) === 1) queueMicrotask(() => this.#drain(entry));
      });
      // A new session's appends wait for its creation; a stored one's go straight to a queuing store.
      entry.direct = stored && this.#queued;
    }
    this.#entries.set(session.id, entry);
    return entry;
  }

  /** Writes the entry's pending events; `retry` also retries a creation that failed, with or without any. */
  #drain(entry: Entry, retry = false): void {
    const batch = entry.pending.splice(0);
    if (!this.#persistence || (batch.length === 0 && !(retry && entry.uncreated !== undefined && !entry.waiting))) return;
    const persistence = this.#persistence;
    const id = entry.session.id;
    if (entry.direct) {
      // The store queues it behind the earlier appends: the next flush commits them together.
      this.#handed();
      entry.writes = Promise.all([entry.writes, this.#guard(entry, persistence.append(id, batch))]).then(noop);
      return;
    }
    // Events that come while a link waits for the commit before it join that link: one append each commit.
    if (entry.waiting) {
      for (const event of batch) entry.waiting.push(event);
      return;
    }
    entry.waiting = batch;
    entry.writes = this.#guard(
      entry,
      entry.writes.then(() => {
        entry.waiting = undefined;
        // Refused for good: these events have no log of their own, and the next flush says so.
        if (entry.refused !== undefined) {
          if (batch.length > 0) this.#fail(entry, entry.refused);
          return;
        }
        if (entry.uncreated !== undefined) {
          // Its creation failed for a passing reason: these events wait with its first ones, and it is tried again.
          for (const event of batch) entry.uncreated.push(event);
          return this.#create(entry);
        }
        this.#handed();
        const write = persistence.append(id, batch);
        // Nothing waits behind this link: a queuing store keeps later appends behind it.
        entry.direct = this.#queued;
        return write;
      }),
    );
  }

  #guard(entry: Entry, write: Promise<void>): Promise<void> {
    return write.catch((error: unknown) => {
      this.#fail(entry, error);
      this.#logger?.warn('session persistence write failed', describeError(error));
    });
  }

  /** Records a write failure of `entry`, unless one not yet reported is recorded. */
  #fail(entry: Entry, error: unknown): void {
    if (entry.failure === undefined || entry.failure.reportedAt !== Infinity) entry.failure = { error, reportedAt: Infinity };
    if (!isSubagentError(error, 'SEQ_MISMATCH')) return;
    for (const listener of this.#diverged) {
      try {
        listener(entry.session.id, error);
      } catch (failure) {
        // Contained: a listener's throw must not break this session's later writes.
        this.#logger?.warn('a listener of refused writes failed', describeError(failure));
      }
    }
  }

  /**
   * Resolves once every event appended so far (to `id`, or to every live session) is durable.
   * Rejects with the first write failure of those sessions not reported before this flush began
   * (flushes under way together all report it; a session's failure is its own: flushing another
   * session does not report it).
   */
  async flush(id?: SessionId, { report = true }: { report?: boolean } = {}): Promise<void> {
    const began = ++this.#clock;
    const entries = id === undefined ? [...this.#entries.values(), ...this.#unwritten] : [this.#entries.get(id)].filter((e) => e !== undefined);
    for (const entry of entries) this.#drain(entry, true);
    // Each link of a session's write chain is queued only once the previous one committed; commit
    // each as soon as it is queued instead of waiting out the write-behind interval per link.
    const chains = Promise.all(entries.map((entry) => entry.writes));
    let written = false;
    void chains.then(() => (written = true));
    let backoff: ReturnType<typeof delay> | undefined;
    try {
      for (let polls = 0; !written; polls++) {
        backoff?.clear();
        // Flushed again at each turn of the event loop for a while (the next link of a chain comes
        // soon), then only once another write is handed to the store: a store whose append is slow
        // (or never settles) is waited for, not polled for ever (a hung store spun a core and filled
        // the heap, each poll keeping a reaction on `chains`).
        // Past the polls, a timer backing off to a second wakes it too: a store may queue an append
        // only after an await of its own, and no later write may come to hand it a flush.
        backoff = polls < POLLS ? undefined : delay(Math.min(1000, 2 ** (polls - POLLS)));
        const next = backoff ? Promise.race([this.#nextHanded(), backoff.wait]) : new Promise((resolve) => setImmediate(resolve));
        await this.#persistence?.flush();
        await Promise.race([chains, next]);
      }
      // A queuing store resolved each append once durable; any other may resolve one on queueing it.
      if (!this.#queued) await this.#persistence?.flush();
    } catch (error) {
      throw unavailable(error);
    } finally {
      backoff?.clear();
    }
    if (id === undefined) this.#settleUnwritten();
    const failure = entries.find((entry) => entry.failure !== undefined && entry.failure.reportedAt > began)?.failure;
    if (failure) {
      // A flush that does not report (a read's) leaves the failure to the flushes that do.
      if (report && failure.reportedAt === Infinity) failure.reportedAt = ++this.#clock;
      throw unavailable(failure.error);
    }
  }

  #handed(): void {
    const handing = this.#handing;
    this.#handing = undefined;
    handing?.resolve();
  }

  #nextHanded(): Promise<void> {
    if (this.#handing === undefined) {
      let resolve = noop as () => void;
      const next = new Promise<void>((settle) => (resolve = settle));
      this.#handing = { next, resolve };
    }
    return this.#handing.next;
  }

  /**
   * Flushes `id`, then drops it from the live store (it stays in persistence). A session whose
   * creation has not been stored yet for a passing reason (another connection held the write lock
   * past the busy timeout, the disk was full) is not dropped with its only copy: it leaves the live
   * store, its creation and events are tried again in the background (backing off from 50 ms to 5 s)
   * and by every flush of all sessions (`close()` too) until the store took or refused them.
   */
  async remove(id: SessionId): Promise<void> {
    const entry = this.#entries.get(id);
    if (!entry) return;
    try {
      await this.flush(id);
    } finally {
      entry.unsubscribe();
      this.#entries.delete(id);
      if (entry.uncreated !== undefined) {
        this.#unwritten.add(entry);
        this.#retry.arm();
      }
    }
  }

  /**
   * Gives up the creation of live session `id` when the store has not taken it yet (a start refused
   * because it could not be made durable leaves no stored session): none of its events is written,
   * and its later flushes reject.
   */
  abandonCreation(id: SessionId): void {
    const entry = this.#entries.get(id);
    if (entry?.uncreated === undefined) return;
    entry.uncreated = undefined;
    entry.refused = new SubagentError('CLOSED', `session ${id} was given up before the store created it`);
  }

  /** Tries the creations of removed sessions again; true while some are left. */
  async #writeUnwritten(): Promise<boolean> {
    for (const entry of this.#unwritten) this.#drain(entry, true);
    // #guard keeps each chain from rejecting: a failure is the entry's to report.
    await Promise.all([...this.#unwritten].map((entry) => entry.writes));
    this.#settleUnwritten();
    return this.#unwritten.size > 0;
  }

  /** Forgets the removed sessions whose creation the store took or refused for good. */
  #settleUnwritten(): void {
    for (const entry of this.#unwritten) if (entry.uncreated === undefined) this.#unwritten.delete(entry);
    if (this.#unwritten.size === 0) this.stopRetries();
  }

  /** Ends the background tries of removed sessions' creations (the host closes its store next). */
  stopRetries(): void {
    this.#retry.stop();
  }
}
