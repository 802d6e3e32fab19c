// The job lock of one attempt a queue worker runs, renewed by that attempt. BullMQ renews a lock by
// job id: a run its host restarted onto a worker while an earlier attempt of it was still stopping
// there would lose that renewal once the earlier one ended (the lock lapses, the job is failed as
// stalled, and the child goes on running where no cancel finds it).
import type { Job } from 'bullmq';

/** The job lock of one attempt a worker runs. */
export interface HeldLock {
  /** Set once a renewal found the lock gone. */
  lost: boolean;
  /** The attempt's child, once it has one: stopped when the lock is found gone. */
  child: { cancel(): void } | undefined;
  /** Stops renewing. */
  release(): void;
}

/**
 * Renews the lock of `job`'s attempt every half lock duration until released. A lock found gone
 * (Redis lost it, or the job was taken back as stalled or restarted) means the host no longer counts
 * on this attempt, so its child would only hold a slot: it is stopped, and the attempt sends its host
 * no end (the host learns from the queue what became of the job) unless the child completed anyway.
 */
export function holdLock(job: Job, token: string | undefined, lockDurationMs: number, log?: (line: string) => void): HeldLock {
  let renewing = false;
  const lock: HeldLock = { lost: false, child: undefined, release: () => clearInterval(timer) };
  const timer = setInterval(() => {
    if (renewing || lock.lost || token === undefined) return;
    renewing = true;
    job
      .extendLock(token, lockDurationMs)
      .then(
        (kept) => {
          if (kept === 1 || lock.lost) return;
          lock.lost = true;
          log?.(`job ${job.id ?? '?'} lost its lock: stopping its child`);
          lock.child?.cancel();
        },
        // Redis unreachable: the command waits for the reconnection, or the worker is closing.
        () => undefined,
      )
      .finally(() => (renewing = false));
  }, Math.max(50, Math.floor(lockDurationMs / 2)));
  // Only a running attempt needs it, and that keeps the process alive on its own.
  timer.unref();
  return lock;
}
