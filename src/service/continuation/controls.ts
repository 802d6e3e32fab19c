// The continuable operations that act on resident children without creating any: interrupt, a
// child's report to its parent, and the drains (scoped, per child, and the whole manager's).
import type { Agent } from '../../seam/agent-types.js';
import { assertMessageContent, type ContentBlock, type MessageId, type SessionId } from '../../seam/content.js';
import { SubagentError } from '../../seam/errors.js';
import type { SubagentInterruptAuthority } from '../../seam/types.js';
import type { Activation } from './activation.js';
import { checkAborted, isExactLive, liveLineage } from './authority.js';
import type { ContinuationManager } from './manager.js';
import { reportMessage } from './notices.js';
import { assertDelivery, teardownError } from './validate.js';

/** Cancels the target's current turn; its inbox, the child and its descendants stay. */
export function interrupt(m: ContinuationManager, targetId: SessionId, authority: SubagentInterruptAuthority): void {
  if (authority === null || typeof authority !== 'object') throw new SubagentError('INVALID_REQUEST', "authority must be { kind: 'user', parentSessionId } or { kind: 'ancestor', agent }");
  if (authority.kind === 'ancestor') {
    if (!isExactLive(m.deps.agents, authority.agent)) throw new SubagentError('UNAUTHORIZED', 'the interrupting agent is not a live agent of this host');
    if (authority.agent.id === targetId) throw new SubagentError('UNAUTHORIZED', 'an agent cannot interrupt itself');
  } else if (authority.kind !== 'user') {
    throw new SubagentError('INVALID_REQUEST', "authority.kind must be 'user' or 'ancestor'");
  }
  const activation = m.activations.get(targetId);
  if (!activation) return;
  if (authority.kind === 'user' ? activation.parentSession !== authority.parentSessionId : !activation.ancestry.has(authority.agent)) {
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
  checkAborted(opts?.signal);
  assertDelivery(opts?.delivery);
  assertMessageContent(content);
  m.admission.check(child);
  const activation = child ? m.activations.get(child.id) : undefined;
  if (!activation || activation.agent !== child) throw new SubagentError('UNAUTHORIZED', 'only a resident continuable child may report');
  if (activation.disposal) throw new SubagentError('ACTIVATION_CLOSING', `child ${child.id} is shutting down`);
  const parent = m.deps.agents.get(activation.parentSession);
  if (!parent) throw new SubagentError('PARENT_UNAVAILABLE', `the parent ${activation.parentSession} of ${child.id} is not live`);
  const { content: framed, source } = reportMessage(child.id, content);
  let id: MessageId;
  try {
    id = opts.delivery === 'next-step' ? parent.steer(framed, { source }) : parent.inject(framed, { source });
  } catch (error) {
    throw new SubagentError('PARENT_UNAVAILABLE', `the parent of ${child.id} did not accept the report`, { cause: error });
  }
  await m.deps.sessions.flush(parent.id);
  return id;
}

async function disposeAll(targets: Activation[]): Promise<void> {
  const error = teardownError(await Promise.allSettled(targets.map((target) => target.dispose())));
  if (error) throw error;
}

/** Releases the named direct children of `parent` (and their descendants), child-first. */
export function drainChildren(m: ContinuationManager, parent: Agent, childIds: SessionId[]): Promise<void> {
  if (!isExactLive(m.deps.agents, parent)) return Promise.reject(new SubagentError('UNAUTHORIZED', 'drainContinuableChildren needs the live parent agent'));
  if (!Array.isArray(childIds)) return Promise.reject(new SubagentError('INVALID_REQUEST', 'childIds must be an array of session ids'));
  const targets = [...new Set(childIds)].flatMap((id) => m.activations.get(id) ?? []);
  for (const target of targets) {
    if (target.parentSession !== parent.id || !target.ancestry.has(parent)) {
      return Promise.reject(new SubagentError('UNAUTHORIZED', `${target.childId} is not a child of ${parent.id}`));
    }
  }
  return disposeAll(targets);
}

/** Closes admission below each live parent and releases every continuable descendant. */
export async function drainDescendants(m: ContinuationManager, parents: Agent[]): Promise<void> {
  if (!Array.isArray(parents)) throw new SubagentError('INVALID_REQUEST', 'parents must be an array of agents');
  const roots = parents.filter((parent) => isExactLive(m.deps.agents, parent));
  const targets = new Set<Activation>();
  for (const root of roots) {
    const below = [...m.activations.values()].filter((a) => a.agent !== root && a.ancestry.has(root));
    m.admission.closeBelow(root, below.flatMap((a) => liveLineage(m.deps.agents, a.agent)));
    for (const target of below) targets.add(target);
  }
  if (roots.length === 0) return;
  const disposing = disposeAll([...targets]);
  await Promise.allSettled([...m.materializing]);
  // Creations that were in flight rolled back; anything they left resident below a root goes too.
  const late = [...m.activations.values()].filter((a) => !targets.has(a) && roots.some((root) => a.agent !== root && a.ancestry.has(root)));
  await Promise.all([disposing, disposeAll(late)]);
}

/** Host shutdown: admission closes for good and every resident child is released, child-first. */
export async function drainAll(m: ContinuationManager): Promise<void> {
  m.admission.closeAll();
  m.shutdown();
  await Promise.allSettled([...m.materializing]);
  const roots = [...m.activations.values()].filter((a) => !m.activations.has(a.parentSession));
  await disposeAll(roots);
}
