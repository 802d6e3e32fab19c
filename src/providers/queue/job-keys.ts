// What a host writes to Redis of one queued child besides its replies: the stops a worker obeys (a
// cancel, a spent tree budget's stop: a key for a worker that takes the job later or missed the
// message, and a message for the one running it), and the job's removal, which waits for the
// worker holding the job to let go of it.
import { setTimeout as delay } from 'node:timers/promises';
import type { BudgetStop } from '../../seam/budget.js';
import { stringify } from '../../seam/codec.js';
import type { QueueConnection } from './connection.js';
import { budgetChannel, budgetKey, cancelChannel, cancelKey } from './protocol.js';

/** How long a stop's key outlives its writing: a worker taking the job later still finds it. */
export const STOP_KEY_TTL_MS = 3_600_000;

/**
 * How long past its lock duration a job may still be held once its run has settled: a worker that
 * sent its child's end finishes the job at once, and one whose child was stopped within its cancel
 * grace; a worker that stopped answering holds it until its lock lapses.
 */
export const RELEASE_MARGIN_MS = 5000;

/** Sets the cancel key, then sends the cancel message. */
export async function publishCancel(connection: QueueConnection, id: string): Promise<void> {
  const { client, options } = connection;
  await client.set(cancelKey(options.queue, id), '1', 'PX', STOP_KEY_TTL_MS);
  await client.publish(cancelChannel(options.queue), id);
}

/** Sets the budget stop's key, then sends the message that tells the worker running the child to read it. */
export async function publishBudgetStop(connection: QueueConnection, id: string, stop: BudgetStop): Promise<void> {
  const { client, options } = connection;
  await client.set(budgetKey(options.queue, id), stringify(stop), 'PX', STOP_KEY_TTL_MS);
  await client.publish(budgetChannel(options.queue), id);
}

/**
 * Removes the child's job once no worker holds it; true once it is gone. BullMQ removes no job
 * whose lock is set (it answers 0), and a run can settle while its worker still holds the job: its
 * end reaches the host before the worker has finished the job, or the host gave up on the child.
 * Asked again after 1 ms, then at doubling intervals up to 50 ms, until the job is gone (BullMQ
 * answers 1 for a job already gone too), for at most the lock duration and `RELEASE_MARGIN_MS`;
 * false if a worker still holds it then, or once the connection closed or Redis went silent.
 */
export async function removeWhenFree(connection: QueueConnection, id: string): Promise<boolean> {
  const { queue, options } = connection;
  const until = performance.now() + options.lockDurationMs + RELEASE_MARGIN_MS;
  // A worker finishing the job lets go of it within milliseconds: asked again soon, then less often.
  const longest = Math.min(50, Math.max(5, Math.floor(options.lockDurationMs / 20)));
  for (let pause = 1; ; pause = Math.min(longest, 2 * pause)) {
    if ((await queue.remove(id)) === 1) return true;
    if (connection.closed || connection.silent || performance.now() >= until) return false;
    await delay(pause);
  }
}

/**
 * Removes what Redis holds of a disposed child: its job once no worker holds it, then its stop keys.
 * A worker still holding the job once its run settled (it has yet to finish the job, or the host gave
 * up on the child) is told to stop the child first; the host's logger is told of a job a worker still
 * held at the end of that wait, which leaves the queue when that worker finishes it.
 */
export async function removeChild(connection: QueueConnection, id: string): Promise<void> {
  const { client, queue, options } = connection;
  try {
    if ((await queue.remove(id)) === 1) return;
    await publishCancel(connection, id);
    if ((await removeWhenFree(connection, id)) || connection.closed || connection.silent) return;
    connection.warn(`queue provider ${options.name}: child ${id} was disposed while a queue worker still held its job; the job leaves the queue when that worker finishes it`);
  } finally {
    await client.del(cancelKey(options.queue, id), budgetKey(options.queue, id));
  }
}
