// The model-facing `subagent` tool: one tool bound to one provider. It exists exactly while its
// provider is registered, words itself after the provider's kind, and always disposes its run.
import { z } from 'zod';
import { onAbort } from '../seam/abort.js';
import type { Tool, ToolRestriction } from '../seam/agent-types.js';
import { textOf, type ContentBlock, type SessionId } from '../seam/content.js';
import { parseBudget, type SubagentBudget } from '../seam/budget.js';
import { assertSubagentMaxDepth } from '../seam/depth.js';
import { SubagentError, describeError, isSubagentError } from '../seam/errors.js';
import { warnContained, type Logger } from '../runtime/session-store.js';
import type { ChildAgentOptions, SubagentProvider, SubagentResult, SubagentStartRequest } from '../seam/types.js';
import { assertModelSpec } from '../runtime/models/create.js';
import type { HostTools } from '../providers/provider-host.js';
import type { SubagentService } from '../service/service.js';
import { CONFIGURED_BUDGET_REQUESTS } from '../service/budget-ledger.js';
import { agentOptionsShape } from '../service/start-request.js';
import { backgroundTasks, type TaskStart } from './background-tasks.js';
import { onStartWaits } from '../seam/start-wait.js';
import { foregroundFailure, promptWording, toolDescription } from './subagent-wording.js';
import { parseOrThrow } from '../seam/parse.js';
import { toolFilterSchema } from '../seam/tool-filter.js';
import { assertToolHost } from './tool-host.js';

export interface SubagentToolConfig {
  /** Name of the registered provider the tool delegates to. */
  provider: string;
  /** @default 'subagent' */
  toolName?: string;
  agentOptions?: ChildAgentOptions;
  persona?: string;
  toolFilter?: ToolRestriction;
  /** Absolute depth cap sent with each start; `'provider-managed'` sends none. @default 3 when the provider has depthLimit */
  maxDepth?: number | 'provider-managed';
  /** `'continuable'` children stay addressable after their turn (see controlTools). @default 'one-shot' */
  mode?: 'one-shot' | 'continuable';
  /** One-shot only: answer `started task <id>` at once and notify the parent when the run settles. @default false */
  background?: boolean;
  /** Sent with every start: limits for each child (or, `scope: 'tree'`, each child's subtree); a continuable child's counts all its turns. */
  budget?: SubagentBudget;
}

/** What the tool needs of a host. */
export interface SubagentToolHost {
  readonly subagents: SubagentService;
  readonly tools: HostTools;
  /** Where failures of background tasks are reported (a host's `createHost({ logger })`); without one, `SubagentWarning`s. */
  readonly logger?: Logger | undefined;
}

const DEFAULT_MAX_DEPTH = 3;

/** Per service, the provider and tool name of each installed tool (`provider\0name`). */
const installed = new WeakMap<SubagentService, Set<string>>();


const configShape = z.strictObject({
  provider: z.string().min(1),
  toolName: z.string().regex(/^[A-Za-z0-9_-]{1,64}$/).optional(),
  agentOptions: agentOptionsShape.optional(),
  persona: z.string().optional(),
  toolFilter: toolFilterSchema().optional(),
  maxDepth: z.union([z.number(), z.literal('provider-managed')]).optional(),
  mode: z.enum(['one-shot', 'continuable']).optional(),
  background: z.boolean().optional(),
  budget: z.unknown().optional(),
});

function validateConfig(config: SubagentToolConfig): void {
  parseOrThrow(configShape, config, 'INVALID_OPTIONS', 'subagentTool config');
  if (typeof config.maxDepth === 'number') {
    try {
      assertSubagentMaxDepth(config.maxDepth);
    } catch (error) {
      throw new SubagentError('INVALID_OPTIONS', `subagentTool config.maxDepth must be a non-negative safe integer or 'provider-managed'`, { cause: error });
    }
  }
  if (config.agentOptions?.model !== undefined) assertModelSpec(config.agentOptions.model);
  if (config.budget !== undefined) {
    try {
      parseBudget(config.budget, 'subagentTool config.budget');
    } catch (error) {
      throw new SubagentError('INVALID_OPTIONS', (error as Error).message, { cause: error });
    }
  }
  if (config.mode === 'continuable' && config.background === true) {
    throw new SubagentError('INVALID_OPTIONS', 'subagentTool config.background applies to one-shot children; continuable children always run in the background');
  }
}

/** The cap a start carries under this config and provider, or undefined to send none. */
function depthCap(config: SubagentToolConfig, provider: SubagentProvider): number | undefined {
  if (config.maxDepth === 'provider-managed') return undefined;
  if (typeof config.maxDepth === 'number') {
    if (!provider.capabilities.depthLimit) {
      throw new SubagentError(
        'UNSUPPORTED_CAPABILITY',
        `provider ${provider.name} has no depthLimit capability, so subagentTool cannot send maxDepth ${config.maxDepth}; use maxDepth: 'provider-managed'`,
      );
    }
    return config.maxDepth;
  }
  return provider.capabilities.depthLimit ? DEFAULT_MAX_DEPTH : undefined;
}

function render(result: SubagentResult): string {
  if (result.structured !== undefined) return JSON.stringify(result.structured);
  return textOf(result.output);
}

/** `UNSUPPORTED_CAPABILITY` for a field of the config the provider cannot take: each call would fail with it. */
function assertCapabilities(config: SubagentToolConfig, provider: SubagentProvider): void {
  for (const [field, capability] of [['persona', 'persona'], ['toolFilter', 'toolFilter'], ['budget', 'budget']] as const) {
    if (config[field] !== undefined && !provider.capabilities[capability]) {
      throw new SubagentError(
        'UNSUPPORTED_CAPABILITY',
        `provider ${provider.name} has no ${capability} capability, so subagentTool cannot send config.${field}; drop it or use a provider with that capability`,
      );
    }
  }
  if (config.mode === 'continuable' && typeof provider.prepareContinuable !== 'function') {
    throw new SubagentError('UNSUPPORTED_CAPABILITY', `provider ${provider.name} cannot run continuable children, so subagentTool cannot use mode 'continuable' with it; use in-process, spawn, fork or acp`);
  }
}

function buildTool(host: SubagentToolHost, config: SubagentToolConfig, provider: SubagentProvider, name: string): Tool {
  assertCapabilities(config, provider);
  const maxDepth = depthCap(config, provider);
  return {
    name,
    description: toolDescription(provider.inheritsParentContext, config.mode === 'continuable' ? 'continuable' : config.background === true ? 'background' : 'foreground'),
    concurrencySafe: true,
    parameters: {
      type: 'object',
      properties: {
        description: { type: 'string', description: 'A short (3-5 word) label of the task, for display; not blank.' },
        prompt: { type: 'string', description: promptWording(provider.inheritsParentContext) },
      },
      required: ['description', 'prompt'],
      additionalProperties: false,
    },
    async execute(input, ctx) {
      const { description, prompt } = input as { description: string; prompt: string };
      // Checked here, not by a schema `pattern` (servers that turn schemas into grammars, such as
      // llama.cpp's, refuse the whole request for one): children are listed by their description,
      // and a blank prompt would only spend a child's model call on nothing.
      if (description.trim() === '') throw new SubagentError('INVALID_TOOL_INPUT', 'subagent input.description must not be blank: give the task a short label');
      if (prompt.trim() === '') throw new SubagentError('INVALID_TOOL_INPUT', 'subagent input.prompt must not be blank: give the whole task');
      const shared = {
        prompt: [{ type: 'text', text: prompt }] as ContentBlock[],
        parent: ctx.agent,
        ...(config.agentOptions ? { agentOptions: config.agentOptions } : {}),
        ...(config.persona !== undefined ? { persona: config.persona } : {}),
        ...(config.toolFilter ? { toolFilter: config.toolFilter } : {}),
        ...(maxDepth !== undefined ? { maxDepth } : {}),
        ...(config.budget ? { budget: config.budget } : {}),
      };
      // Each request the tool sends carries the config's budget, not one the model asked for.
      const configured = <T extends object>(request: T): T => (config.budget && CONFIGURED_BUDGET_REQUESTS.add(request), request);
      if (config.mode === 'continuable') {
        const { childId } = await host.subagents.startContinuable({ provider: provider.name, label: description, request: configured(shared), signal: ctx.signal });
        return `started subagent ${childId}`;
      }
      if (config.background === true) {
        // The call answers once the child is published, or at once when its start has to wait for
        // room (a pool slot): the start goes on as the task. Until the call answers, the turn's
        // abort stops the start; after it, only task_cancel, the parent's end or host close do.
        const starting = new AbortController();
        const off = onAbort(ctx.signal, () => starting.abort(ctx.signal.reason));
        if (ctx.signal.aborted) starting.abort(ctx.signal.reason);
        let stopListening = () => undefined as void;
        // A start that has to wait makes the call answer: from that moment the turn's abort no longer
        // stops it (a sibling call of the same step could cancel the turn before this await resumes).
        const waits = new Promise<SessionId>(
          (resolve) =>
            (stopListening = onStartWaits(starting.signal, (id) => {
              off();
              resolve(id);
            })),
        );
        const started = host.subagents.start(provider.name, configured({ ...shared, label: description, signal: starting.signal }));
        let first: TaskStart;
        try {
          first = await Promise.race([
            started.then((run) => ({ run })),
            waits.then((id) => ({ id, starting: started, stop: (reason: unknown) => starting.abort(reason) })),
          ]);
        } finally {
          off();
          stopListening();
        }
        const task = backgroundTasks(host.subagents).adopt(first, ctx.agent, (message, error) => warnContained(host.logger, message, describeError(error)));
        return `started task ${task.id}`;
      }
      const request: SubagentStartRequest = configured({ ...shared, label: description, signal: ctx.signal });
      const run = await host.subagents.start(provider.name, request);
      let result: SubagentResult;
      try {
        result = await run.result;
      } finally {
        await run.dispose();
      }
      if (result.stopReason === 'completed') return render(result);
      const content: ContentBlock[] = [{ type: 'text', text: foregroundFailure(result) }];
      return { content, isError: true };
    },
  };
}

/**
 * Registers the `subagent` tool for `config.provider` in `host.tools`, now or whenever that
 * provider is (re-)registered, and removes it while the provider is gone. Returns the disposer.
 */
export function subagentTool(host: SubagentToolHost, given: SubagentToolConfig): () => void {
  assertToolHost(host, 'subagentTool', { tools: 'register' });
  // What was checked is what every call sends: a copy, checked again (a getter may answer twice).
  let config: SubagentToolConfig;
  try {
    validateConfig(given);
    config = structuredClone(given);
  } catch (error) {
    if (isSubagentError(error)) throw error;
    throw new SubagentError('INVALID_OPTIONS', 'subagentTool config could not be read or copied (a getter or proxy threw, or returned what cannot be copied)', { cause: error });
  }
  validateConfig(config);
  const name = config.toolName ?? 'subagent';
  const key = `${config.provider}\0${name}`;
  const keys = installed.get(host.subagents) ?? new Set<string>();
  // A second tool of that name for that provider would fail its registration, however late it comes.
  if (keys.has(key)) throw new SubagentError('DUPLICATE_TOOL', `subagentTool: a tool named ${name} for provider ${config.provider} is already installed on this host; call its disposer first or pick another toolName`);
  let unmount: (() => void) | undefined;
  let disposed = false;
  const mount = (provider: SubagentProvider) => {
    unmount?.();
    unmount = host.tools.register(buildTool(host, config, provider, name));
  };
  const offAdded = host.subagents.on('subagent/provider-added', (provider) => {
    // A throw here rolls the provider's registration back: fail loud on a config it cannot serve.
    if (!disposed && provider.name === config.provider) mount(provider);
  });
  const offRemoved = host.subagents.on('subagent/provider-removed', (removed) => {
    if (removed !== config.provider) return;
    unmount?.();
    unmount = undefined;
  });
  const present = host.subagents.getProvider(config.provider);
  try {
    if (present) mount(present);
  } catch (error) {
    offAdded();
    offRemoved();
    throw error;
  }
  installed.set(host.subagents, keys.add(key));
  return () => {
    if (disposed) return;
    disposed = true;
    keys.delete(key);
    offAdded();
    offRemoved();
    unmount?.();
    unmount = undefined;
  };
}
