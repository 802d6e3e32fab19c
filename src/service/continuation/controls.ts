// The continuable operations that act on resident children without creating any: interrupt, a
// child's report to its parent, and the drains (scoped, per child, and the whole manager's) with the
// pending starts and follow-ups they wait for.
import type { Agent } from '../../seam/agent-types.js';
import { assertMessageContent, type ContentBlock, type MessageId, type SessionId } from '../../seam/content.js';
import { settledOneShot } from '../../seam/descriptor.js';
import { SubagentError, isSubagentError } from '../../seam/errors.js';
import { settled } from '../../seam/once.js';
import { assertKnownKeys, everyItem, isRecord, pickFields, readingInput } from '../../seam/parse.js';
import type { SubagentInterruptAuthority } from '../../seam/types.js';
import type { Activation } from './activation.js';
import { checkAborted, isExactLive, liveLineage } from './authority.js';
import type { ContinuationManager } from './manager.js';
import { reportMessage } from './notices.js';
import { assertDelivery, teardownError } from './validate.js';

/**
 * Whether the live `agent` is above `activation`: in the lineage it was materialized under, or in
 * its live lineage now (a parent disposed and resumed since is a new object of the same session).
 */
function isAncestor(m: ContinuationManager, activation: Activation, agent: Agent): boolean {
  return activation.ancestry.has(agent) || liveLineage(m.live, activation.agent).includes(agent);
}

/** Cancels the target's current turn; its inbox, the child and its descendants stay. */
export function interrupt(m: ContinuationManager, targetId: SessionId, given: SubagentInterruptAuthority): void {
  if (typeof targetId !== 'string') throw new SubagentError('INVALID_REQUEST', 'the interrupt target must be a session id string');
  if (given === null || typeof given !== 'object') throw new SubagentError('INVALID_REQUEST', "authority must be { kind: 'user', parentSessionId } or { kind: 'ancestor', agent }");
  // Read once: a getter that throws (or a revoked proxy) is the caller's bad input, typed.
  const authority = readingInput('the interrupt authority', 'INVALID_REQUEST', () => pickFields(given, ['kind', 'agent', 'parentSessionId'])) as SubagentInterruptAuthority;
  if (authority.kind === 'ancestor') {
    if (!isExactLive(m.live, authority.agent)) throw new SubagentError('UNAUTHORIZED', 'the interrupting agent is not a live agent of this host');
    if (authority.agent.id === targetId) throw new SubagentError('UNAUTHORIZED', 'an agent cannot interrupt itself');
  } else if (authority.kind !== 'user') {
    throw new SubagentError('INVALID_REQUEST', "authority.kind must be 'user' or 'ancestor'");
  } else if (typeof authority.parentSessionId !== 'string' || authority.parentSessionId === '') {
    // Checked whether or not the target is resident: a caller's mistake must not depend on timing.
    throw new SubagentError('INVALID_REQUEST', "a user authority must be { kind: 'user', parentSessionId: the child's parent session id }");
  }
  const activation = m.activations.get(targetId);
  if (!activation) return;
  if (authority.kind === 'user' ? activation.parentSession !== authority.parentSessionId : !isAncestor(m, activation, authority.agent)) {
    throw new SubagentError('UNAUTHORIZED', `only ${authority.kind === 'user' ? "the child's direct parent" : 'a live ancestor'} may interrupt ${targetId}`);
  }
  if (activation.disposal) return;
  activation.agent.cancel(authority.kind === 'user' ? { kind: 'user' } : { kind: 'parent' }, { keepInbox: true });
}

/** A resident child's report to its live direct parent; resolves once it is durable. */
export async function reportFrom(
  m: ContinuationManager,
  child: Agent,
  content: ContentBlock[],
  opts: { delivery: 'quiet' | 'next-step'; signal?: AbortSignal },
): Promise<MessageId> {
  opts = readingInput('reportFrom opts', 'INVALID_REQUEST', () => {
    assertKnownKeys('reportFrom opts', opts, ['delivery', 'signal'], 'INVALID_REQUEST');
    const { delivery, signal } = pickFields(opts, ['delivery', 'signal']);
    if (signal !== undefined && !(signal instanceof AbortSignal)) throw new SubagentError('INVALID_REQUEST', 'opts.signal must be an AbortSignal when given');
    return { delivery, signal } as typeof opts;
  });
  checkAborted(opts?.signal);
  assertDelivery(opts?.delivery);
  assertMessageContent(content);
  // Not a live agent of this host (a copy, a revoked proxy, an object whose id cannot be read): no resident child.
  if (!isExactLive(m.live, child)) throw new SubagentError('UNAUTHORIZED', 'only a resident continuable child may report');
  m.admission.check(child);
  const activation = m.activations.get(child.id);
  if (!activation || activation.agent !== child) throw new SubagentError('UNAUTHORIZED', 'only a resident continuable child may report');
  if (activation.disposal) throw new SubagentError('ACTIVATION_CLOSING', `child ${child.id} is shutting down`);
  const parent = m.live.get(activation.parentSession);
  if (!parent) throw new SubagentError('PARENT_UNAVAILABLE', `the parent ${activation.parentSession} of ${child.id} is not live`);
  const { content: framed, source } = reportMessage(child.id, content);
  // A continuable parent takes it as it takes a follow-up: one its transport cannot take is refused before it is in its log.
  m.activations.get(parent.id)?.admitInput(framed);
  let id: MessageId;
  try {
    // A one-shot parent whose result settled takes it as context only, as it does a settlement
    // notice: a turn woken there would run outside every result and budget.
    id = opts.delivery === 'next-step' && !settledOneShot(parent) ? parent.steer(framed, { source }) : parent.inject(framed, { source });
  } catch (error) {
    // A message its transport cannot take (a worker thread's bound) is the report's fault: the parent takes others.
    if (isSubagentError(error, 'INVALID_REQUEST')) throw error;
    throw new SubagentError('PARENT_UNAVAILABLE', `the parent of ${child.id} did not accept the report`, { cause: error });
  }
  // In flight for the reporting child from here on: close() and drains (its own included) wait for it.
  await m.track(m.deps.sessions.flush(parent.id), child.id);
  return id;
}

async function disposeAll(targets: Activation[]): Promise<void> {
  const error = teardownError(await Promise.allSettled(targets.map((target) => target.dispose())));
  if (error) throw error;
}

/** `disposeAll(targets)` for a caller that awaits it later: its failure is not unhandled meanwhile. */
function disposingAll(targets: Activation[]): Promise<void> {
  const disposing = disposeAll(targets);
  disposing.catch(() => undefined);
  return disposing;
}

/**
 * Releases the named direct children of `parent` (and their descendants), child-first. A message
 * on its way to one of them (a cold resume in flight) lands first: the child it brings back goes too.
 */
export async function drainChildren(m: ContinuationManager, parent: Agent, childIds: SessionId[]): Promise<void> {
  if (!isExactLive(m.live, parent)) throw new SubagentError('UNAUTHORIZED', 'drainContinuableChildren needs the live parent agent');
  const ids = readingInput('childIds', 'INVALID_REQUEST', () => {
    if (!Array.isArray(childIds) || !childIds.every((id) => typeof id === 'string')) throw new SubagentError('INVALID_REQUEST', 'childIds must be an array of session ids');
    return [...new Set(childIds)];
  });
  const ours = (target: Activation) => target.parentSession === parent.id && isAncestor(m, target, parent);
  const targets = ids.flatMap((id) => m.activations.get(id) ?? []);
  const stranger = targets.find((target) => !ours(target));
  if (stranger) throw new SubagentError('UNAUTHORIZED', `${stranger.childId} is not a child of ${parent.id}`);
  const disposing = disposingAll(targets);
  await Promise.all(ids.map((id) => m.quiet(id)));
  const late = ids.flatMap((id) => m.activations.get(id) ?? []).filter((target) => !targets.includes(target) && ours(target));
  await Promise.all([disposing, disposeAll(late)]);
}

/** `agent` and its live ancestors up to, not including, `root`: what a drain rooted there closes (never what is above it). */
function lineageBelow(m: ContinuationManager, agent: Agent, root: Agent): Agent[] {
  const lineage = liveLineage(m.live, agent);
  const at = lineage.indexOf(root);
  return at < 0 ? [agent] : lineage.slice(0, at);
}

/**
 * Starts and follow-ups from their call until they settle, for close() and the caller's drains to wait for those made
 * before them (a call waits for its child's lock first, so `inFlight` may not hold it yet). A drain inside a teardown
 * does not wait for them: such a call may be waiting for that very teardown (a child being disposed).
 */
export class PendingCalls {
  readonly #pending = new Set<Promise<void>>();

  add<T>(call: Promise<T>): Promise<T> {
    const done = settled(call);
    this.#pending.add(done);
    void done.then(() => this.#pending.delete(done));
    return call;
  }

  /** The calls pending now. */
  now(): Promise<void>[] {
    return [...this.#pending];
  }
}

/** Closes admission below each live parent and releases every continuable descendant, after `calls` (see PendingCalls). */
export async function drainDescendants(m: ContinuationManager, parents: Agent[], calls: Promise<void>[] = []): Promise<void> {
  const roots = readingInput('parents', 'INVALID_REQUEST', () => {
    if (!Array.isArray(parents)) throw new SubagentError('INVALID_REQUEST', 'parents must be an array of agents');
    if (!everyItem(parents, (parent) => isRecord(parent) && typeof parent['id'] === 'string')) throw new SubagentError('INVALID_REQUEST', 'parents must be an array of agents, and an item is no Agent');
    return parents.filter((parent) => isExactLive(m.live, parent));
  });
  const targets = new Set<Activation>();
  for (const root of roots) {
    const below = [...m.activations.values()].filter((a) => a.agent !== root && isAncestor(m, a, root));
    m.admission.closeBelow(root, below.flatMap((a) => lineageBelow(m, a.agent, root)));
    for (const target of below) targets.add(target);
  }
  // Nothing resident below and nothing in flight (creations, cold resumes, acknowledgements): admission
  // is closed, and there is nothing to wait for (every disposed child comes here).
  if (roots.length === 0 || (targets.size === 0 && m.inFlight.size === 0 && calls.length === 0)) return;
  const disposing = disposingAll([...targets]);
  // Creations below a root stop now, rather than at the admission check they may never reach.
  m.creations.drain((parent) => m.admission.refusal(parent));
  await Promise.all([...m.inFlight.keys(), ...calls]);
  // Creations that were in flight rolled back; anything they left resident below a root goes too.
  const late = [...m.activations.values()].filter((a) => !targets.has(a) && roots.some((root) => a.agent !== root && isAncestor(m, a, root)));
  await Promise.all([disposing, disposeAll(late)]);
}

/** Host shutdown: admission closes for good and every resident child is released, child-first, after `calls`. */
export async function drainAll(m: ContinuationManager, calls: Promise<void>[] = []): Promise<void> {
  m.admission.closeAll();
  m.shutdown();
  await Promise.all([...m.inFlight.keys(), ...calls]);
  const roots = [...m.activations.values()].filter((a) => !m.activations.has(a.parentSession));
  await disposeAll(roots);
}
