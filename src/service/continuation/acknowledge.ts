// Acknowledging a message to a continuable child: the flush of the child's log, and what a failed
// flush does to the child. A message is accepted only once it is durable.
import type { MessageId, SessionId } from '../../seam/content.js';
import { SubagentError, isSubagentError } from '../../seam/errors.js';
import { settled } from '../../seam/once.js';
import type { LiveSessionStore } from '../../runtime/session-store.js';
import type { Activation } from './activation.js';

type Activations = ReadonlyMap<SessionId, Activation>;

/** Whether a start's prompt became durable, as its Activation's notices wait for it (see Activation.acknowledging). */
export interface StartAcknowledgement {
  readonly promise: Promise<boolean>;
  settle(durable: boolean): void;
}

export function startAcknowledgement(): StartAcknowledgement {
  let settle!: (durable: boolean) => void;
  const promise = new Promise<boolean>((resolve) => (settle = resolve));
  return { promise, settle };
}

/**
 * A start's prompt: not acknowledged, so not started, and the child already running goes (child-first).
 * Its parent hears of it only once it is acknowledged: the notice of an epoch that ended meanwhile waits,
 * and one of a start refused (another host's child may hold its id) is never sent.
 */
export async function acknowledgeStart(sessions: LiveSessionStore, activations: Activations, childId: SessionId, acknowledged: StartAcknowledgement): Promise<void> {
  const activation = activations.get(childId);
  try {
    await sessions.flush(childId);
  } catch (error) {
    // The start is refused: its child is not stored later either (see LiveSessionStore.remove).
    sessions.abandonCreation(childId);
    if (activation) await settled(activation.dispose());
    acknowledged.settle(false);
    // Another writer of the store (another host) created a child of this id meanwhile, past the start's checks.
    if (isSubagentError(error, 'DUPLICATE_SESSION')) throw new SubagentError('DUPLICATE_CHILD', `session ${childId} was created meanwhile by another writer of this store; reserve another child id`, { cause: error });
    throw error;
  }
  // Later epochs' notices go at once.
  if (activation?.acknowledging === acknowledged.promise) activation.acknowledging = undefined;
  acknowledged.settle(true);
}

/**
 * A follow-up `delivered` to the child: its id once its log is flushed. When the store lost a write
 * of the child's log (it refused it, rather than a lock delaying it), the stored log falls short of
 * the live one for good (each later append is refused as out of sequence), so the child's residency
 * ends there, as after a crash: the next message brings it back from what the store holds, which is
 * then also what its turns remember.
 */
export async function acknowledge(sessions: LiveSessionStore, activations: Activations, childId: SessionId, delivered: MessageId | Promise<MessageId>): Promise<MessageId> {
  const id = await delivered;
  try {
    await sessions.flush(childId);
  } catch (error) {
    const state = sessions.writeState(childId);
    const activation = activations.get(childId);
    // A lock held past the busy timeout loses nothing (the write is tried again): the child stays.
    if (activation && (state === 'failed' || state === 'refused')) {
      // Its turn on the refused message stops; input accepted before it and not taken yet stays
      // pending in the stored log. The teardown's own flush fails alike, and was reported here.
      await settled(activation.dispose({ keepInbox: true }));
    }
    throw error;
  }
  return id;
}

/**
 * Ends the residency of a child whose log the store refused to continue (another host resumed it and
 * went on with it): none of its later events could be stored, so it stops as after a crash, before
 * it takes more input here (that input stays pending in the stored log, for the host that holds it).
 */
export function endDivergedResidencies(sessions: LiveSessionStore, activations: Activations, warn: (message: string, error: unknown) => void): void {
  sessions.onDiverged((childId, error) => {
    const activation = activations.get(childId);
    if (activation === undefined || activation.disposal !== undefined) return;
    warn(`continuable child ${childId} stops here: the store refuses its events (another writer of the store went on with its log)`, error);
    activation.dispose({ keepInbox: true }).catch((failure: unknown) => warn(`stopping continuable child ${childId} failed`, failure));
  });
}
