// The plan of a local child (in-process or worker): its header lineage, inherited seed and
// agent options, derived from the resolved request and its parent.
import { resolveChildDepth } from '../seam/depth.js';
import type { ResolvedSubagentStartRequest } from '../seam/types.js';
import { childPersona } from '../runtime/child-run.js';
import { completedTurnPrefix } from '../runtime/session.js';

export const ALL_CAPABILITIES = Object.freeze({ outputSchema: true, depthLimit: true, toolFilter: true, persona: true, budget: true });

/** The header, options and seed of a local child of `request.parent`. */
export function localChildPlan(request: ResolvedSubagentStartRequest, fork: boolean) {
  const { parent } = request;
  const delegationDepth = resolveChildDepth(parent, request.maxDepth);
  const seed = fork ? completedTurnPrefix(parent.session.events) : [];
  const model = request.agentOptions?.model ?? parent.options.model;
  const persona = childPersona(request.persona, request.outputSchema !== undefined);
  return {
    seed,
    header: {
      ...(parent.session.header.cwd === undefined ? {} : { cwd: parent.session.header.cwd }),
      parentSession: parent.id,
      origin: 'subagent' as const,
      delegationDepth,
    },
    agentOptions: {
      // The parent's route (model, token budget) is inherited unless the request overrides it.
      ...(parent.options.maxTokens === undefined ? {} : { maxTokens: parent.options.maxTokens }),
      ...request.agentOptions,
      ...(model === undefined ? {} : { model }),
      ...(persona === undefined ? {} : { persona }),
      subagentDepth: delegationDepth,
    },
  };
}

