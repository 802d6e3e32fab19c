// What `serveAcp` is given: the host it serves, the streams it serves on and its options, checked
// before anything is served; the route overrides a client's session/new may carry (and the event
// that keeps them); and the error codes that are the client's fault.
import type * as acp from '@agentclientprotocol/sdk';
import type { Readable, Writable } from 'node:stream';
import { z } from 'zod';
import type { Agent, AgentOptions } from '../../seam/agent-types.js';
import { SubagentError } from '../../seam/errors.js';
import { isRecord } from '../../seam/parse.js';
import type { CreateAgentOptions } from '../../runtime/agent-registry.js';
import { assertModelSpec } from '../../runtime/models/create.js';
import type { SessionPersistence } from '../../runtime/session-persistence.js';
import type { HostAgents } from '../provider-host.js';
import { AGENT_OPTIONS_META } from './sdk.js';

/** What `serveAcp` needs of a host (`createHost`'s Host satisfies it). */
export interface AcpServeHost {
  readonly agents: HostAgents;
  readonly persistence: SessionPersistence | undefined;
  /** A prompt is answered once its turn is stored (a Host's live session store). */
  readonly sessions: { flush(id: string): Promise<void> };
  /** session/close releases the session's continuable children before its agent is disposed. */
  readonly subagents: { drainContinuableDescendants(parents: Agent[]): Promise<void> };
  createAgent(options?: CreateAgentOptions): Promise<Agent>;
}

/** The streams to serve on. @default process.stdin / process.stdout */
export interface AcpServeIo {
  input: Readable;
  output: Writable;
}

export interface AcpServeOptions {
  /**
   * Whether prompts may carry images (advertised as `promptCapabilities.image`). With `false`, a
   * prompt with an image is refused (-32602) before anything is stored: a model that cannot take
   * images would fail that turn and every later one, since the image stays in the session's history.
   * @default true
   */
  images?: boolean;
}

/** Checked before anything is served: a bad argument is `INVALID_OPTIONS`, not a session that fails later. */
export function assertServeArguments(host: unknown, io: unknown, options: unknown): void {
  const problem = !isRecord(host) || typeof host['createAgent'] !== 'function' || typeof (host['agents'] as { dispose?: unknown } | undefined)?.dispose !== 'function' ||
    typeof (host['sessions'] as { flush?: unknown } | undefined)?.flush !== 'function' || typeof (host['subagents'] as { drainContinuableDescendants?: unknown } | undefined)?.drainContinuableDescendants !== 'function'
    ? 'host must be a host made by createHost()'
    : io !== undefined && (!isRecord(io) || typeof (io['input'] as { on?: unknown } | undefined)?.on !== 'function' || typeof (io['output'] as { write?: unknown } | undefined)?.write !== 'function')
      ? 'io must be { input: Readable, output: Writable }'
      : options !== undefined && (!isRecord(options) || Object.keys(options).some((key) => key !== 'images') || (options['images'] !== undefined && typeof options['images'] !== 'boolean'))
        ? 'options must be { images?: boolean }'
        : undefined;
  if (problem !== undefined) throw new SubagentError('INVALID_OPTIONS', `serveAcp: ${problem}`);
}

/** The event a served session's route overrides are kept in (its model, maxTokens, maxStepsPerTurn). */
export const SESSION_OPTIONS_EVENT = 'acp/session-options';

/** Codes of a request the server could not use (say a module model that does not load): the client's fault. */
export const CLIENT_FAULTS: ReadonlySet<string> = new Set(['INVALID_OPTIONS', 'INVALID_MODEL_SPEC', 'INVALID_REQUEST']);

const routeSchema = z.strictObject({
  model: z.unknown().optional(),
  maxTokens: z.number().int().positive().optional(),
  maxStepsPerTurn: z.number().int().positive().optional(),
  toolModules: z.array(z.string().min(1)).optional(),
});

/** The delegator's route overrides (`_meta` of session/new), validated like any boundary input; a string says what is wrong. */
export function routeOptions(value: unknown): AgentOptions | string {
  const parsed = routeSchema.safeParse(value);
  if (!parsed.success) return `_meta.${AGENT_OPTIONS_META} is invalid`;
  const { model, maxTokens, maxStepsPerTurn, toolModules } = parsed.data;
  const options: AgentOptions = {};
  if (maxTokens !== undefined) options.maxTokens = maxTokens;
  if (maxStepsPerTurn !== undefined) options.maxStepsPerTurn = maxStepsPerTurn;
  // Loaded where this agent runs, as a worker child's are in its thread; one that does not load is -32602.
  if (toolModules !== undefined) options.toolModules = toolModules;
  if (model === undefined) return options;
  try {
    assertModelSpec(model);
  } catch {
    return `_meta.${AGENT_OPTIONS_META}.model is not a valid model spec`;
  }
  return { ...options, model };
}

/** The answer to `initialize`: a store to load sessions from is what session/load and session/resume need. */
export function initializeAnswer(protocolVersion: number, stored: boolean, images: boolean): acp.InitializeResponse {
  return {
    protocolVersion,
    agentCapabilities: {
      loadSession: stored,
      sessionCapabilities: stored ? { resume: {}, close: {} } : { close: {} },
      promptCapabilities: { image: images, audio: false, embeddedContext: false },
    },
    authMethods: [],
  };
}
