// The provider's part of a cold resume: a child whose descriptor holds provider data (a worker
// child's residence, a remote session) needs its provider to come back before its agent is built.
import type { Agent } from '../../seam/agent-types.js';
import type { ContentBlock, SessionId } from '../../seam/content.js';
import { SubagentError, describeError, isSubagentError } from '../../seam/errors.js';
import type { SessionEvent } from '../../seam/session-types.js';
import type { ContinuableCreateSpec, SubagentProvider } from '../../seam/types.js';
import { usageOf } from '../../seam/usage.js';
import type { TreeAdmission } from '../budget-ledger.js';
import { admitInput, ownSpec } from './validate.js';

/** What the provider part needs of the continuation manager. */
export interface ResumeHost {
  getProvider(name: string): SubagentProvider | undefined;
  /** Aborted at host shutdown. */
  readonly shutdownSignal: AbortSignal;
  warn(message: string, error: unknown): void;
  releasePrepared(prepared: Pick<ContinuableCreateSpec, 'release'>, childId: SessionId): Promise<void>;
}

export interface ResumeProviderRequest {
  descriptor: { provider: string; providerData?: Record<string, unknown> };
  /** The child's own stored events (what its usage so far is counted from). */
  own: readonly SessionEvent[];
  childId: SessionId;
  parent: Agent;
  /** The message that brings the child back: refused here, before its agent is built, when its transport cannot take it. */
  content: readonly ContentBlock[];
  /** The follow-up's signal. */
  signal: AbortSignal | undefined;
  /** The resume's own signal (see Creations.run): also aborted by a drain above the child. */
  resuming: AbortSignal;
  /** Its admission under the trees that cover it (made before this part). */
  budgetTree: TreeAdmission | undefined;
}

/** The provider's part of a cold resume (only children whose descriptor holds provider data need one). */
export async function resumeProvider(host: ResumeHost, request: ResumeProviderRequest): Promise<ContinuableCreateSpec> {
  const { descriptor, childId, signal, resuming, budgetTree } = request;
  const { providerData } = descriptor;
  if (providerData === undefined) return {};
  const provider = host.getProvider(descriptor.provider);
  if (!provider?.resumeContinuable) {
    throw new SubagentError('NOT_RESUMABLE', `child ${childId} needs provider ${descriptor.provider} to come back; register it on this host`);
  }
  // `resuming` aborts with the follow-up's signal, at shutdown and on a drain: drains wait for this resume, so it must be able to end.
  const shutdown = host.shutdownSignal;
  let resumed: unknown;
  try {
    resumed = await provider.resumeContinuable({ sessionId: childId, parent: request.parent, signal: resuming, providerData, usage: usageOf(request.own), ...(budgetTree ? { budgetTree: budgetTree.link } : {}) });
  } catch (error) {
    if (shutdown.aborted && !signal?.aborted) throw SubagentError.closedWhile('the host', `child ${childId} was resuming`);
    if (resuming.aborted && !signal?.aborted) throw resuming.reason;
    // The caller gave up meanwhile: exactly its abort reason, as before acceptance anywhere else (the child stays resumable).
    if (signal?.aborted) throw signal.reason;
    host.warn(`continuable child ${childId} could not be resumed by provider ${descriptor.provider}`, error);
    if (isSubagentError(error)) throw error;
    throw new SubagentError('NOT_RESUMABLE', `child ${childId} could not be resumed: ${describeError(error)}`, { cause: error });
  }
  const ready = ownSpec(descriptor.provider, 'resumeContinuable', resumed);
  try {
    // A message the child could not take is refused before it comes back: its log stays as it was.
    admitInput(ready, descriptor.provider, request.content);
  } catch (error) {
    await host.releasePrepared(ready, childId);
    throw error;
  }
  return ready;
}
