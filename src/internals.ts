// `subagent-host/internals`: the engine parts behind the public root, for tests, benchmarks and
// code that extends the engine. Unstable: names and shapes here may change in any release.

// the host's parts, as providers drive them
export { hostParts } from './providers/provider-host.js';
export type { ProviderHost } from './providers/provider-host.js';
export type { WorkerPoolEngine } from './providers/worker/pool.js';
export { PROTOCOL_VERSION as QUEUE_PROTOCOL_VERSION } from './providers/queue/protocol.js';

// runtime
export { AgentRegistry } from './runtime/agent-registry.js';
export { ToolRegistry } from './runtime/tool-registry.js';
export { LiveSessionStore } from './runtime/session-store.js';
export { SessionLog, completedTurnPrefix } from './runtime/session.js';
export { STRUCTURED_OUTPUT_TOOL } from './runtime/child-run.js';
export { createModel } from './runtime/models/create.js';
export { scriptedUsage } from './runtime/models/scripted.js';

// seam: codec, folds and projections
export { encode, decode, stringify, parse } from './seam/codec.js';
export type { Encoded } from './seam/codec.js';
export {
  AssistantOutputFold,
  finalAssistantOutput,
  limitDiagnostic,
  DIAGNOSTIC_LIMIT_BYTES,
  DIAGNOSTIC_TRUNCATION_MARKER,
} from './seam/output.js';
export { snapshotSubagentDescriptor } from './seam/descriptor.js';
export type { SubagentDescriptorInput } from './seam/descriptor.js';
export { subagentIdentity, subagentTiming } from './seam/projections.js';
export type { SessionProjection, SubagentIdentityState, SubagentTimingState } from './seam/projections.js';
export { subagentUsage, usageOf, addUsage, emptyUsage } from './seam/usage.js';
export type { SubagentUsageState } from './seam/usage.js';
export { parseBudget, describeBudgetStop } from './seam/budget.js';
export { NO_START_CAPABILITIES } from './seam/types.js';
export { parseOrThrow, describeIssue } from './seam/parse.js';
export { onStartWaits } from './seam/start-wait.js';
