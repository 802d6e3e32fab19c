// acpProvider: each child is another agent process driven over ACP (spawn → initialize →
// session/new → prompt). Before publication the provider owns cleanup: any failure reaps the
// process first, then rejects. Every process it spawns is reaped by the run or by host.close().
import { SubagentError } from '../../seam/errors.js';
import { resolveChildDepth } from '../../seam/depth.js';
import type { ResolvedSubagentStartRequest, SubagentProvider, SubagentRun } from '../../seam/types.js';
import { NO_START_CAPABILITIES } from '../../seam/types.js';
import { childEnvironment } from '../child-env.js';
import { hostParts, type Host } from '../provider-host.js';
import { AcpClient, describeAcpFailure, isJsonRpcError } from './client.js';
import { SessionMirror } from './mirror.js';
import { parseAcpOptions, resolveChildCwd, type AcpProviderOptions } from './options.js';
import { WarmPool, type WarmChild } from './pool.js';
import { AgentProcess, describeExit, within, type AgentExit, type ReapGraces } from './process.js';
import { AcpRun } from './run.js';
import { AGENT_OPTIONS_META } from './sdk.js';

/** The ACP provider; `whenWarm` lets callers wait for the prewarm pool. */
export interface AcpProvider extends SubagentProvider {
  /** Resolves once no prewarm launch is in progress (at once without `prewarm`). */
  whenWarm(): Promise<void>;
}

/** Thrown inside a startup step when the start's signal aborted. */
class StartAborted extends Error {}

function exitMessage(exit: AgentExit, phase: string): string {
  return `the ACP agent process ${describeExit(exit)}${exit.errno === undefined ? ` during ${phase}` : ''}`;
}

/** Races one startup step against the process ending and the start being aborted. */
async function startupStep<T>(step: Promise<T>, proc: AgentProcess, signal: AbortSignal, phase: string): Promise<T> {
  let onAbort: (() => void) | undefined;
  const aborted = new Promise<never>((_, reject) => {
    onAbort = () => reject(new StartAborted());
    if (signal.aborted) onAbort();
    else signal.addEventListener('abort', onAbort, { once: true });
  });
  const ended = proc.ended.then((exit): never => {
    throw new SubagentError('START_FAILED', exitMessage(exit, phase));
  });
  try {
    return await Promise.race([step, ended, aborted]);
  } catch (error) {
    if (error instanceof StartAborted || error instanceof SubagentError) throw error;
    // A dead connection is usually followed by the process's exit, which says more.
    if (!isJsonRpcError(error) && (await within(proc.ended, 1000))) throw new SubagentError('START_FAILED', exitMessage(proc.exit!, phase), { cause: error });
    throw new SubagentError('START_FAILED', `the ACP agent failed during ${phase} (${describeAcpFailure(error)})`, { cause: error });
  } finally {
    if (onAbort) signal.removeEventListener('abort', onAbort);
  }
}

/** The route overrides our own ACP agent honours, as session/new `_meta` (undefined when none). */
function routeMeta(options: ResolvedSubagentStartRequest['agentOptions']): Record<string, unknown> | undefined {
  const { model, maxTokens, maxStepsPerTurn } = options ?? {};
  const route = { ...(model && { model }), ...(maxTokens && { maxTokens }), ...(maxStepsPerTurn && { maxStepsPerTurn }) };
  return Object.keys(route).length > 0 ? { [AGENT_OPTIONS_META]: route } : undefined;
}

function textPrompt(prompt: ResolvedSubagentStartRequest['prompt']): string[] {
  const text = prompt.flatMap((block) => (block.type === 'text' && block.text !== '' ? [block.text] : []));
  if (text.length === 0) throw new SubagentError('INVALID_REQUEST', 'request.prompt has no text block; the ACP provider sends text only');
  return text;
}

/** A provider whose children are ACP agent processes (`command args…`), one process per child. */
export function acpProvider(owner: Host, opts: AcpProviderOptions): AcpProvider {
  const host = hostParts(owner);
  const config = parseAcpOptions(opts);
  const graces: ReapGraces = { eofGraceMs: config.disposeEofGraceMs, graceMs: config.disposeGraceMs };
  const live = new Set<AgentProcess>();
  const closer = new AbortController();

  const retire = async (child: WarmChild) => {
    await child.proc.reap(graces);
    child.client.close();
  };

  const launch = async (cwd: string, signal: AbortSignal): Promise<WarmChild> => {
    const proc = AgentProcess.spawn({ command: config.command, args: config.args, cwd, env: childEnvironment(process.env, config.inheritEnv, config.env), stderr: config.stderr });
    live.add(proc);
    void proc.ended.then(() => live.delete(proc));
    let client: AcpClient | undefined;
    try {
      client = await startupStep(AcpClient.connect(proc, config.permission), proc, signal, 'connect');
      await startupStep(client.initialize(), proc, signal, 'initialize');
      return { proc, client };
    } catch (error) {
      await proc.reap(graces);
      client?.close();
      throw error;
    }
  };

  const pool = config.prewarm > 0 ? new WarmPool(config.prewarm, (signal) => launch(config.cwd!, AbortSignal.any([signal, closer.signal])), retire) : undefined;

  host.onClose(async () => {
    closer.abort();
    await pool?.close();
    await Promise.allSettled([...live].map((proc) => proc.reap(graces)));
  });
  pool?.fill();

  async function start(request: ResolvedSubagentStartRequest): Promise<SubagentRun> {
    const { signal } = request;
    if (signal.aborted) throw SubagentError.cancelled('the start', signal.reason, 'before the ACP child started');
    if (closer.signal.aborted) throw SubagentError.closed('the host');
    const prompt = textPrompt(request.prompt);
    const cwd = resolveChildCwd(config.cwd, request.parent);
    const delegationDepth = resolveChildDepth(request.parent, undefined);
    const meta = routeMeta(request.agentOptions);
    const runSignal = AbortSignal.any([signal, closer.signal]);
    let child = pool?.take();
    try {
      child ??= await launch(cwd, runSignal);
      await startupStep(child.client.newSession(cwd, meta), child.proc, runSignal, 'session/new');
    } catch (error) {
      if (child) await retire(child);
      if (!(error instanceof StartAborted)) throw error;
      if (closer.signal.aborted && !signal.aborted) throw SubagentError.closedWhile('the host', 'the ACP child was starting');
      throw SubagentError.cancelled('the start', signal.reason, 'before the ACP child was ready');
    }
    const header = { cwd, parentSession: request.parent.id, origin: 'subagent' as const, delegationDepth };
    let mirror: SessionMirror;
    try {
      mirror = new SessionMirror(host.sessions, header, request.descriptor, request.prompt);
    } catch (error) {
      await retire(child);
      throw error;
    }
    return new AcpRun({ child, mirror, sessions: host.sessions, prompt, signal: runSignal, graces });
  }

  return {
    name: config.name,
    capabilities: NO_START_CAPABILITIES,
    inheritsParentContext: false,
    start,
    whenWarm: () => pool?.whenWarm() ?? Promise.resolve(),
  };
}
