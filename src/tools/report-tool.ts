// The `report` tool: a continuable child's interim message to its parent. It is installed in each
// continuable child's own tool scope (never in one-shot children) and does not end the child's turn.
import type { Agent, Tool } from '../seam/agent-types.js';
import { SubagentError } from '../seam/errors.js';
import { assertKnownKeys, pickFields, readingInput } from '../seam/parse.js';
import { ToolRegistry, tagToolHolder } from '../runtime/tool-registry.js';
import type { SubagentService } from '../service/service.js';
import { assertToolHost } from './tool-host.js';

export interface ReportToolOptions {
  /** 'next-step' wakes the parent; 'quiet' only adds context to its next turn. @default 'next-step' */
  delivery?: 'next-step' | 'quiet';
}

/** What the report tool needs of a host. */
export interface ReportToolHost {
  readonly subagents: SubagentService;
}

/** What adds report to a child, as a clash with a tool module's tool of that name says. */
const HOLDER = 'reportTool (installed on this host: it adds report to every continuable child)';

const RESERVED = 'reportTool is installed on this host and adds its report tool to every continuable child, which inherits the host tools; rename this tool, or call the reportTool disposer first';

/** Services with a report tool installed. */
const installed = new WeakSet<SubagentService>();

function buildTool(host: ReportToolHost, delivery: 'next-step' | 'quiet'): Tool {
  return {
    name: 'report',
    description:
      'Send your parent agent an interim finding now, without ending your work. Use it for partial results worth acting on early; your final answer still ends your turn. Returns { messageId }.',
    parameters: {
      type: 'object',
      properties: { output: { type: 'string', minLength: 1, description: 'The finding, self-contained.' } },
      required: ['output'],
      additionalProperties: false,
    },
    concurrencySafe: true,
    async execute(input, ctx) {
      const { output } = input as { output: string };
      // A blank report would only spend a turn of the parent it may wake on nothing.
      if (output.trim() === '') throw new SubagentError('INVALID_TOOL_INPUT', 'report input.output must not be blank: give the finding itself');
      const messageId = await host.subagents.reportFrom(ctx.agent, [{ type: 'text', text: output }], { delivery, signal: ctx.signal });
      return JSON.stringify({ messageId });
    },
  };
}

/** Installs `report` in every continuable child created from now on; returns the disposer. */
export function reportTool(host: ReportToolHost, opts: ReportToolOptions = {}): () => void {
  assertToolHost(host, 'reportTool');
  const { delivery = 'next-step' } = readingInput('reportTool opts', 'INVALID_OPTIONS', () => {
    assertKnownKeys('reportTool opts', opts, ['delivery']);
    return pickFields(opts, ['delivery']) as ReportToolOptions;
  });
  if (delivery !== 'next-step' && delivery !== 'quiet') throw new SubagentError('INVALID_OPTIONS', "reportTool opts.delivery must be 'next-step' or 'quiet'");
  // A second one would make every continuable child's setup fail on the duplicate name: refuse it here.
  if (installed.has(host.subagents)) throw new SubagentError('DUPLICATE_TOOL', 'reportTool is already installed on this host; call its disposer first');
  // So would a host tool of that name, which every continuable child inherits.
  const tools = readingInput('reportTool: host', 'INVALID_OPTIONS', () => (host as { tools?: { get?: unknown } }).tools);
  const holdsReport = readingInput('reportTool: host.tools', 'INVALID_OPTIONS', () => typeof tools?.get === 'function' && (tools.get as (name: string) => unknown)('report') !== undefined);
  if (holdsReport) {
    throw new SubagentError('DUPLICATE_TOOL', 'reportTool: host.tools already has a tool named report, which every continuable child inherits; rename or remove it first');
  }
  // And so would a host tool of that name registered later: the name is kept free in host.tools
  // while the report tool is installed, and such a registration is refused there, naming the reason.
  const unreserve = tools instanceof ToolRegistry ? tools.reserve('report', RESERVED) : () => undefined;
  // A continuable child whose tool module exports report: the refusal names the module and reportTool.
  const tool = tagToolHolder(buildTool(host, delivery), HOLDER);
  let remove: () => void;
  try {
    remove = host.subagents.registerContinuableSetup((child: Agent) => {
      const scope = (child as { tools?: unknown }).tools;
      // Children whose tool scope lives elsewhere (not on this thread) get no report tool here.
      if (!(scope instanceof ToolRegistry)) return () => undefined;
      return scope.register(tool);
    });
  } catch (error) {
    unreserve();
    throw error;
  }
  installed.add(host.subagents);
  let removed = false;
  return () => {
    if (removed) return;
    removed = true;
    installed.delete(host.subagents);
    unreserve();
    remove();
  };
}
