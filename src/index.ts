// Public entry of subagent-host: every export is named here explicitly. Engine parts (registries,
// codec, folds) live behind `subagent-host/internals` (internals.ts), which makes no semver promise.

// composition
export { createHost } from './host.js';
export type { Host, HostAgents, HostOptions, HostSessions, HostTools, LiveSession } from './host.js';

// service and providers
export { SubagentService } from './service/service.js';
export { inProcessProvider } from './providers/in-process.js';
export { spawnProvider, forkProvider } from './providers/worker/worker-provider.js';
export type { WorkerProviderOptions } from './providers/worker/worker-provider.js';
export { createWorkerPool } from './providers/worker/pool.js';
export type { WorkerPool, WorkerPoolOptions } from './providers/worker/pool.js';
export type { InProcessProviderOptions } from './providers/in-process.js';

// model-facing tools
export { subagentTool } from './tools/subagent-tool.js';
export type { SubagentToolConfig, SubagentToolHost } from './tools/subagent-tool.js';
export { controlTools } from './tools/control-tools.js';
export type { ControlToolsHost } from './tools/control-tools.js';
export { reportTool } from './tools/report-tool.js';
export type { ReportToolHost, ReportToolOptions } from './tools/report-tool.js';
export { acpProvider } from './providers/acp/provider.js';
export type { AcpProvider } from './providers/acp/provider.js';
export type { AcpProviderOptions } from './providers/acp/options.js';
export type { InheritEnv } from './providers/child-env.js';
export { serveAcp } from './providers/acp/server.js';
export { queueProvider, QUEUE_CAPABILITIES } from './providers/queue/provider.js';
export type { QueueProviderOptions } from './providers/queue/options.js';
export type { AcpServeHost, AcpServeIo, AcpServeOptions } from './providers/acp/server.js';

// seam
export { SubagentError, isSubagentError, SUBAGENT_ERROR_CODES } from './seam/errors.js';
export type { SubagentErrorCode } from './seam/errors.js';
export { assertSubagentMaxDepth, delegationDepthOf } from './seam/depth.js';
export { SUBAGENT_DESCRIPTOR_VERSION, DESCRIPTOR_EVENT, foldSubagentDescriptor, parseSubagentDescriptor } from './seam/descriptor.js';
export type { SubagentDescriptorData, SubagentToolFilter } from './seam/descriptor.js';
export type { SubagentIdentity, SubagentTiming } from './seam/projections.js';
export type { SubagentUsage } from './seam/usage.js';
export { BUDGET_EVENT } from './seam/budget.js';
export type { SubagentBudget, BudgetLimit, BudgetStop, TreeHeadroom } from './seam/budget.js';
export type {
  SubagentCapabilities,
  SubagentProvider,
  SubagentStartRequest,
  ResolvedSubagentStartRequest,
  ChildAgentOptions,
  SubagentRun,
  SubagentRunId,
  SubagentResult,
  SubagentStopReason,
  SubagentEvents,
  SubagentRunInfo,
  SubagentRunEndInfo,
  SubagentListEntry,
  SubagentDescendantListEntry,
  ContinuableCreateRequest,
  ContinuableCreateSpec,
  ContinuableResumeRequest,
  ContinuableStartSpec,
  ContinuableStart,
  SubagentFollowupOptions,
  SubagentInterruptAuthority,
  BudgetTreeLink,
} from './seam/types.js';
export { text, textOf } from './seam/content.js';
export type {
  ContentBlock,
  TextBlock,
  ReasoningBlock,
  ImageBlock,
  ToolCallBlock,
  ToolResultBlock,
  SessionId,
  MessageId,
  MessageSource,
} from './seam/content.js';
export type {
  SessionHeader,
  SessionEvent,
  SessionEventMap,
  CancelCause,
  TurnEndReason,
  FailureInfo,
  Usage,
  InboxTarget,
} from './seam/session-types.js';
export type {
  Agent,
  AgentOptions,
  Session,
  SessionStore,
  Tool,
  ToolContext,
  ToolOutput,
  ToolRestriction,
  JsonSchema,
  ModelSpec,
  ScriptedStep,
} from './seam/agent-types.js';

// runtime
export { checkedScriptedModel as scriptedModel } from './runtime/models/create.js';
export type { ScriptedModel } from './runtime/models/scripted.js';
export type {
  ModelAdapter,
  ModelAdapterFactory,
  ModelRequest,
  ModelMessage,
  ModelChunk,
  FinishReason,
  ToolSchema,
} from './runtime/models/types.js';
export type {
  SessionPersistence,
  StoredSession,
  CatalogHeader,
  CatalogRecord,
  ProjectionViews,
  StoredProjections,
} from './runtime/session-persistence.js';
export type { AgentHandle, AgentSetupScope, CreateAgentOptions, ResumeAgentOptions } from './runtime/agent-registry.js';
export type { LocalAgent } from './runtime/agent.js';
export type { AgentHooks } from './runtime/turn-context.js';
export type { Logger } from './runtime/session-store.js';

// persistence
export { memoryPersistence } from './persistence/memory.js';
export { sqlitePersistence } from './persistence/sqlite.js';
export type { SqlitePersistenceOptions } from './persistence/sqlite.js';
