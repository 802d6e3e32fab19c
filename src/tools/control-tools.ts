// The model-facing control tools: message, interrupt, list and wait for continuable children, and
// read or cancel background one-shot tasks. Objects come back as JSON text; failures as error results.
import { onAbort } from '../seam/abort.js';
import type { Agent, Tool, ToolContext } from '../seam/agent-types.js';
import { textOf, type SessionId } from '../seam/content.js';
import { SubagentError } from '../seam/errors.js';
import type { SubagentListEntry } from '../seam/types.js';
import type { HostTools } from '../providers/provider-host.js';
import type { SubagentService } from '../service/service.js';
import { AgentStatusTracker, waitUntil, type AgentStatus, type TrackedAgent } from './agent-status.js';
import { backgroundTasks, type BackgroundTask } from './background-tasks.js';
import type { StoredStatusHost } from './stored-status.js';
import { assertToolHost } from './tool-host.js';
import { readingInput } from '../seam/parse.js';

/** What the control tools need of a host. */
export interface ControlToolsHost {
  readonly subagents: SubagentService;
  readonly tools: HostTools;
  readonly agents: { get(id: SessionId): TrackedAgent | undefined };
  /** Where the status of a child in no live place (evicted, or from before a restart) is read; without them it reads `idle`. */
  readonly persistence?: StoredStatusHost['persistence'] | undefined;
  readonly sessions?: StoredStatusHost['sessions'] | undefined;
}

const DEFAULT_WAIT_MS = 30_000;
const MAX_WAIT_MS = 600_000;
const timeoutSchema = { type: 'integer', minimum: 0, maximum: MAX_WAIT_MS, description: `Milliseconds to wait at most (default ${DEFAULT_WAIT_MS}, max ${MAX_WAIT_MS}).` };
const idSchema = { type: 'string', minLength: 1 };

const json = (value: unknown) => JSON.stringify(value);

function schema(properties: Record<string, unknown>, required: string[]): Tool['parameters'] {
  return { type: 'object', properties, required, additionalProperties: false };
}

/** Ids of the caller's direct children (any mode), from the catalog. */
async function childIds(host: ControlToolsHost, caller: Agent, signal: AbortSignal): Promise<Set<SessionId>> {
  const entries = await host.subagents.listChildren(caller.id, signal);
  return new Set(entries.filter((entry) => entry.kind === 'child').map((entry) => entry.id));
}

function taskView(task: BackgroundTask): { status: 'running' | 'settled'; stopReason?: string; output?: string; diagnostic?: string } {
  if (!task.result) return { status: 'running' };
  const { stopReason, output, diagnostic } = task.result;
  // Why a task failed is worth as much to the model as in its settlement notice.
  return { status: 'settled', stopReason, output: textOf(output), ...(diagnostic === undefined ? {} : { diagnostic }) };
}

/** Resolves once `task` settled, `timeoutMs` passed or `signal` aborted; keeps nothing on the task once it resolved. */
function within(task: BackgroundTask, timeoutMs: number, signal: AbortSignal): Promise<void> {
  // A call whose run was already cancelled (onAbort never calls back for such a signal) waits for nothing.
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(done, timeoutMs);
    const unwatch = onAbort(signal, done);
    const unwait = task.onSettled(done);
    function done() {
      clearTimeout(timer);
      unwatch();
      unwait();
      resolve();
    }
  });
}

function buildTools(host: ControlToolsHost, tracker: AgentStatusTracker): Tool[] {
  const tasks = backgroundTasks(host.subagents);
  return [
    {
      name: 'send_message',
      description: 'Send a message to one of your continuable subagents; it becomes that agent’s next turn (in order). Returns { messageId }.',
      parameters: schema({ agent_id: idSchema, message: { type: 'string', minLength: 1 } }, ['agent_id', 'message']),
      async execute(input, ctx) {
        const { agent_id, message } = input as { agent_id: string; message: string };
        // As the subagent tool's prompt: a blank message would only spend the child's turn on nothing.
        if (message.trim() === '') throw new SubagentError('INVALID_TOOL_INPUT', 'send_message input.message must not be blank: say what the subagent should do next');
        const messageId = await host.subagents.followup(ctx.agent, agent_id, [{ type: 'text', text: message }], { signal: ctx.signal });
        return json({ messageId });
      },
    },
    {
      name: 'interrupt_agent',
      description: 'Stop the current turn of one of your subagents (or any agent below you). The agent and its own subagents stay; its queued messages stay too, and run, in order, before the next message it gets. Returns { accepted: true }.',
      parameters: schema({ agent_id: idSchema }, ['agent_id']),
      async execute(input, ctx) {
        const { agent_id } = input as { agent_id: string };
        // The caller's own task is stopped or read with its own tools, not list_agents (which lists no
        // task); told from the registry, whatever the catalog lists of its child yet.
        const task = tasks.of(ctx.agent.id).find((candidate) => candidate.id === agent_id);
        if (task?.result) throw new SubagentError('INVALID_REQUEST', `${agent_id} is your background task and it has already settled; read its output with task_output`);
        if (task && !task.run) throw new SubagentError('INVALID_REQUEST', `${agent_id} is your background task and it is still waiting to start; stop it with task_cancel`);
        if (task) throw new SubagentError('INVALID_REQUEST', `${agent_id} is your one-shot background task; stop it with task_cancel`);
        const resident = host.agents.get(agent_id) !== undefined;
        // The service ignores targets that are no continuable child (the reference's contract): say so
        // here rather than answer `accepted` for a turn nothing stops.
        const entry = (await host.subagents.listDescendants(ctx.agent.id, ctx.signal)).find((candidate) => candidate.id === agent_id);
        if (entry?.kind !== 'child') {
          if (!resident) throw new SubagentError('UNKNOWN_SESSION', `no resident agent ${agent_id}; use list_agents for the ids of your subagents`);
          throw new SubagentError('UNAUTHORIZED', `${agent_id} is not a subagent below you; use list_agents for the ids of your subagents`);
        }
        // Residency is a cache: a continuable child that left it runs no turn, as an idle resident one.
        if (!resident && entry.mode === 'continuable') return json({ accepted: true });
        // A worker child's main-thread face is in no agent registry: its live log tells it is running.
        if (!resident && entry.activity !== 'running') throw new SubagentError('UNKNOWN_SESSION', `${agent_id} is a one-shot subagent that has finished; there is no turn to stop`);
        if (entry.mode !== 'continuable') {
          // Only its parent's own tools stop a one-shot child (a task of this caller's was answered above).
          throw new SubagentError(
            'INVALID_REQUEST',
            entry.parentId === ctx.agent.id
              ? `${agent_id} is your one-shot subagent; it cannot be interrupted on its own: it runs until its result`
              : `${agent_id} is a one-shot subagent of ${entry.parentId ?? 'another agent'}; it cannot be interrupted on its own: interrupt its continuable parent instead`,
          );
        }
        host.subagents.interrupt(agent_id, { kind: 'ancestor', agent: ctx.agent });
        return json({ accepted: true });
      },
    },
    {
      name: 'list_agents',
      description: 'List your continuable subagents with their status (running, idle or failed). scope "descendants" lists the whole tree below you, with each entry’s parent and depth.',
      parameters: schema({ scope: { type: 'string', enum: ['children', 'descendants'] } }, []),
      async execute(input, ctx) {
        const { scope = 'children' } = input as { scope?: 'children' | 'descendants' };
        const entries: (SubagentListEntry & { parentId?: SessionId; depth?: number })[] =
          scope === 'descendants' ? await host.subagents.listDescendants(ctx.agent.id, ctx.signal) : await host.subagents.listChildren(ctx.agent.id, ctx.signal);
        // Children in no live place (evicted, or from before a restart) read as their logs say.
        await tracker.refresh(entries.filter((entry) => entry.kind === 'child' && entry.mode === 'continuable').map((entry) => entry.id));
        const agents: Record<string, unknown>[] = [];
        const diagnostics: Record<string, unknown>[] = [];
        for (const entry of entries) {
          if (entry.kind === 'diagnostic') {
            diagnostics.push({ id: entry.id, reason: entry.reason });
            continue;
          }
          if (entry.mode !== 'continuable') continue;
          const placed = scope === 'descendants' ? { parent: entry.parentId, depth: entry.depth } : {};
          agents.push({ id: entry.id, label: entry.label ?? null, status: tracker.statusOf(entry.id), ...placed });
        }
        return json({ agents, diagnostics });
      },
    },
    {
      name: 'wait_agent',
      description: `Wait until one of the given subagents (default: every running subagent of yours) settles, or the timeout passes. Returns { status: { id: running|idle|failed }, timed_out }.`,
      parameters: schema({ agent_ids: { type: 'array', items: idSchema }, timeout_ms: timeoutSchema }, []),
      async execute(input, ctx) {
        const { agent_ids, timeout_ms = DEFAULT_WAIT_MS } = input as { agent_ids?: string[]; timeout_ms?: number };
        const mine = await childIds(host, ctx.agent, ctx.signal);
        // Its settled tasks too: one whose start was given up or failed before it had a slot never
        // had a child (no catalog entry), yet its id came from "started task <id>".
        const own = new Map(tasks.of(ctx.agent.id).map((task) => [task.id, task]));
        for (const task of own.values()) if (!task.result) mine.add(task.id);
        for (const id of agent_ids ?? []) {
          if (!mine.has(id) && !own.has(id)) throw new SubagentError('UNAUTHORIZED', `${id} is not a subagent of yours; use list_agents for their ids`);
        }
        if (agent_ids) await tracker.refresh(agent_ids.filter((id) => !own.has(id)));
        // A background task whose start still waits for room has no child yet (no subagent/start):
        // it is running all the same, and one whose start failed has failed (no subagent/end).
        const unpublished = [...own.values()].filter((task) => !task.run && !task.result);
        const statusOf = (id: SessionId): AgentStatus => {
          const task = own.get(id);
          if (task?.result) return task.result.stopReason === 'error' ? 'failed' : 'idle';
          return task && !task.run ? 'running' : tracker.statusOf(id);
        };
        const targets = agent_ids ? [...new Set(agent_ids)] : [...mine].filter((id) => statusOf(id) === 'running');
        const view = () => Object.fromEntries(targets.map((id) => [id, statusOf(id)])) as Record<string, AgentStatus>;
        if (targets.length === 0) return json({ status: {}, timed_out: false });
        const startsEnd = unpublished.map((task) => (listener: () => void) => task.onSettled(listener));
        const settled = await waitUntil(tracker, () => targets.some((id) => statusOf(id) !== 'running'), timeout_ms, ctx.signal, startsEnd);
        return json({ status: view(), timed_out: !settled });
      },
    },
    {
      name: 'task_output',
      description: 'Read a background task’s state; with wait: true, wait first until it settles or timeout_ms passes. Returns { status: running|settled, stopReason?, output?, diagnostic? }.',
      parameters: schema({ task_id: idSchema, wait: { type: 'boolean' }, timeout_ms: timeoutSchema }, ['task_id']),
      async execute(input, ctx: ToolContext) {
        const { task_id, wait = false, timeout_ms = DEFAULT_WAIT_MS } = input as { task_id: string; wait?: boolean; timeout_ms?: number };
        const task = tasks.ownedBy(ctx.agent, task_id);
        if (wait && !task.result) await within(task, timeout_ms, ctx.signal);
        return json(taskView(task));
      },
    },
    {
      name: 'task_cancel',
      description: 'Cancel a running background task. Returns { cancelled } (false when it had already settled).',
      parameters: schema({ task_id: idSchema }, ['task_id']),
      async execute(input, ctx) {
        const { task_id } = input as { task_id: string };
        const task = tasks.ownedBy(ctx.agent, task_id);
        if (task.result) return json({ cancelled: false });
        task.cancel({ kind: 'parent' });
        return json({ cancelled: true });
      },
    },
  ];
}

/** Registers the control tools in `host.tools`; returns their disposer. */
export function controlTools(host: ControlToolsHost): () => void {
  assertToolHost(host, 'controlTools', { tools: 'register', agents: 'get' });
  const { persistence, sessions } = readingInput('controlTools: host', 'INVALID_OPTIONS', () => ({ persistence: host.persistence, sessions: host.sessions }));
  const tracker = new AgentStatusTracker(host.subagents, host.agents, persistence && sessions ? { persistence, sessions, agents: host.agents } : undefined);
  let unregister: () => void;
  try {
    unregister = host.tools.register(...buildTools(host, tracker));
  } catch (error) {
    tracker.dispose();
    throw error;
  }
  let disposed = false;
  return () => {
    if (disposed) return;
    disposed = true;
    unregister();
    tracker.dispose();
  };
}
