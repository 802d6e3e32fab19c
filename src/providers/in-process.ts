// The in-process provider: a real child Agent in this thread. It is the baseline the worker
// providers are measured against, and handy in tests of the service. `fork: true` seeds the child
// with the parent's completed turns.
import { once, settled } from '../seam/once.js';
import { SubagentError } from '../seam/errors.js';
import type { ResolvedSubagentStartRequest, SubagentProvider, SubagentRun } from '../seam/types.js';
import { budgetHooks, composeChildTools, descriptorHooks, inheritedTools, readChildResult, type StructuredCapture } from '../runtime/child-run.js';
import { ALL_CAPABILITIES, localChildPlan } from './local-child.js';
import { completedTurnPrefix } from '../runtime/session.js';
import type { AgentHandle } from '../runtime/agent-registry.js';
import { factoryOptions, hostParts, type Host, type ProviderHost } from './provider-host.js';
import { recordUnrunTurn } from './worker/thread-failure.js';
import { DESCRIPTOR_EVENT } from '../seam/descriptor.js';

export interface InProcessProviderOptions {
  /** @default 'in-process' (or 'in-process-fork' with `fork`) */
  name?: string;
  /** Seed each child with the parent's completed turns. @default false */
  fork?: boolean;
}

async function startLocal(host: ProviderHost, request: ResolvedSubagentStartRequest, fork: boolean): Promise<SubagentRun> {
  const { signal } = request;
  if (signal.aborted) throw SubagentError.cancelled('the start', signal.reason, 'before the child was published');
  const plan = localChildPlan(request, fork);
  const startedAt = Date.now();
  let capture: StructuredCapture | undefined;
  const handle: AgentHandle = await host.agents.create({
    header: plan.header,
    seed: plan.seed,
    agentOptions: plan.agentOptions,
    tools: inheritedTools(host.tools, request.toolFilter),
    setup: ({ tools }) => {
      capture = composeChildTools(tools, { outputSchema: request.outputSchema });
    },
    hooks: {
      ...descriptorHooks(() => handle.agent.session, request.descriptor),
      ...budgetHooks(() => handle.agent.session, {
        budget: request.budget,
        startedAt,
        seedLength: plan.seed.length,
        treeStop: request.budgetTree && (() => request.budgetTree?.stop()),
      }),
    },
    signal,
  });
  const child = handle.agent;
  const published = handle;
  let cancelled = false;
  const cancel = () => {
    if (cancelled) return;
    cancelled = true;
    child.cancel({ kind: 'parent' });
  };
  // Abort that lands after publication is not a failed start: the run settles `aborted`.
  signal.addEventListener('abort', cancel, { once: true });
  if (signal.aborted) cancel();
  else child.followup(request.prompt);
  const result = (async () => {
    try {
      await child.whenIdle();
      // Cancelled before its first turn began (a close or dispose right after the start), the
      // child logged its prompt and its discard only: the turn it never ran is recorded, with what
      // was delegated, so its log is listed as what it is (a child that ended), never as corrupt.
      const reason = cancelled ? { kind: 'aborted' as const, cause: { kind: 'parent' as const } } : { kind: 'error' as const, error: { code: 'NOT_STARTED', message: 'the child ended before its first turn' } };
      recordUnrunTurn(child.session, plan.seed.length, reason, () => [{ type: DESCRIPTOR_EVENT, data: structuredClone(request.descriptor) }]);
      return readChildResult(child.session.events, { seedLength: plan.seed.length, cancelled, capture });
    } finally {
      signal.removeEventListener('abort', cancel);
    }
  })();
  return {
    id: child.id,
    localAgent: child,
    result,
    cancel,
    dispose: once(async () => {
      if (child.status === 'running') cancel();
      await published.dispose();
      await settled(result);
    }),
  };
}

/** A provider whose children run as agents in this thread. */
export function inProcessProvider(owner: Host, opts: InProcessProviderOptions = {}): SubagentProvider {
  const host = hostParts(owner);
  const options = factoryOptions(opts, 'inProcessProvider', ['name', 'fork']);
  const fork = options.fork ?? false;
  return {
    name: options.name ?? (fork ? 'in-process-fork' : 'in-process'),
    capabilities: ALL_CAPABILITIES,
    inheritsParentContext: fork,
    start: (request) => startLocal(host, request, fork),
    // A continuable fork child starts from the parent's completed turns, like a one-shot fork.
    prepareContinuable: ({ parent }) => Promise.resolve({ seed: fork ? completedTurnPrefix(parent.session.events) : [] }),
  };
}
