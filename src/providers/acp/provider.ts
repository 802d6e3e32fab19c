// acpProvider: each child is another agent process driven over ACP (spawn → initialize →
// session/new → prompt). Before publication the provider owns cleanup: any failure reaps the
// process first, then rejects. Every process it spawns is reaped by the run or by host.close().
import { SubagentError } from '../../seam/errors.js';
import { resolveChildDepth } from '../../seam/depth.js';
import type { ResolvedSubagentStartRequest, SubagentProvider, SubagentRun } from '../../seam/types.js';
import { NO_START_CAPABILITIES } from '../../seam/types.js';
import { childEnvironment } from '../child-env.js';
import { hostParts, type Host } from '../provider-host.js';
import { AcpClient, oversizePrompt, oversizeSessionNew, promptTexts, refuseOversize } from './client.js';
import { acpContinuable, type LaunchConfig } from './continuable.js';
import { SessionMirror } from './mirror.js';
import { parseAcpOptions, resolveChildCwd, type AcpProviderOptions } from './options.js';
import { WarmPool, type WarmChild } from './pool.js';
import { AgentProcess, type ReapGraces } from './process.js';
import { AcpRun } from './run.js';
import { acpSdkToStart, loadAcpSdk } from './sdk.js';
import { StartAborted, abortedStart, checkOpen, routeMeta, startupStep } from './startup.js';

/** The ACP provider; `whenWarm` lets callers wait for the prewarm pool. */
export interface AcpProvider extends SubagentProvider {
  /** Resolves once no prewarm launch is in progress (at once without `prewarm`). */
  whenWarm(): Promise<void>;
}

function textPrompt(prompt: ResolvedSubagentStartRequest['prompt']): string[] {
  const text = promptTexts(prompt);
  if (text.length === 0) throw new SubagentError('INVALID_REQUEST', 'request.prompt has no text block; the ACP provider sends text only');
  return text;
}

/** A provider whose children are ACP agent processes (`command args…`), one process per child. */
export function acpProvider(owner: Host, opts: AcpProviderOptions): AcpProvider {
  const host = hostParts(owner);
  const config = parseAcpOptions(opts);
  // Loaded now, while nothing of ours holds descriptors (a start waits for it before spawning).
  loadAcpSdk().catch(() => undefined);
  const graces: ReapGraces = { eofGraceMs: config.disposeEofGraceMs, graceMs: config.disposeGraceMs };
  // A process that failed to start serves no session yet: nothing is lost by sending SIGTERM with
  // the EOF, and an agent that never answered (a command that is no ACP agent) never reads it.
  const failedStart: ReapGraces = { eofGraceMs: 0, graceMs: config.disposeGraceMs };
  const live = new Set<AgentProcess>();
  const closer = new AbortController();

  const retire = async (child: WarmChild, reaping = graces) => {
    await child.proc.reap(reaping);
    child.client.close();
  };

  // Env values come from the configuration, never from a stored launch config.
  const launch = async ({ command, args, cwd }: LaunchConfig, signal: AbortSignal): Promise<WarmChild> => {
    const loading = acpSdkToStart();
    if (loading) {
      await loading;
      if (signal.aborted) throw new StartAborted();
    }
    let proc: AgentProcess;
    try {
      proc = AgentProcess.spawn({ command, args, cwd, env: childEnvironment(process.env, config.inheritEnv, config.env), stderr: config.stderr });
    } catch (error) {
      // Node refuses the spawn itself (say a NUL byte in a stored launch's args); its message may quote values.
      throw new SubagentError('START_FAILED', `the ACP agent process could not be spawned (${(error as NodeJS.ErrnoException).code ?? 'refused'})`);
    }
    live.add(proc);
    void proc.ended.then(() => live.delete(proc));
    let client: AcpClient | undefined;
    try {
      // The SDK is loaded; only the steps after connecting wait for the agent.
      client = await startupStep(AcpClient.connect(proc, config.permission), proc, signal, 'connect');
      await startupStep(client.initialize(), proc, signal, 'initialize', config.startupTimeoutMs);
      return { proc, client };
    } catch (error) {
      await proc.reap(failedStart);
      client?.close();
      throw error;
    }
  };

  const launchConfig = (cwd: string): LaunchConfig => ({ command: config.command, args: config.args, cwd });
  const pool =
    config.prewarm > 0 ? new WarmPool(config.prewarm, (signal) => launch(launchConfig(config.cwd!), AbortSignal.any([signal, closer.signal])), retire) : undefined;

  host.onClose(async () => {
    closer.abort();
    await pool?.close();
    await Promise.allSettled([...live].map((proc) => proc.reap(graces)));
  });
  pool?.fill();

  async function start(request: ResolvedSubagentStartRequest): Promise<SubagentRun> {
    const { signal } = request;
    checkOpen(signal, closer.signal);
    const prompt = textPrompt(request.prompt);
    // Before any process is taken; the session id the agent picks is counted once it is known.
    refuseOversize(oversizePrompt('', prompt));
    const cwd = resolveChildCwd(config.cwd, request.parent);
    const delegationDepth = resolveChildDepth(request.parent, undefined);
    const meta = routeMeta(request.agentOptions);
    refuseOversize(oversizeSessionNew(cwd, meta));
    const runSignal = AbortSignal.any([signal, closer.signal]);
    let child = pool?.take();
    try {
      child ??= await launch(launchConfig(cwd), runSignal);
      await startupStep(child.client.newSession(cwd, meta), child.proc, runSignal, 'session/new', config.startupTimeoutMs);
      refuseOversize(child.client.oversizePrompt(prompt));
    } catch (error) {
      pool?.fill();
      if (child) await retire(child, failedStart);
      throw error instanceof StartAborted ? abortedStart(signal, closer.signal) : error;
    }
    const header = { cwd, parentSession: request.parent.id, origin: 'subagent' as const, delegationDepth };
    let mirror: SessionMirror;
    try {
      mirror = new SessionMirror(host.sessions, header, request.descriptor, request.prompt);
    } catch (error) {
      await retire(child, failedStart);
      throw error;
    }
    const run = new AcpRun({ child, mirror, sessions: host.sessions, prompt, signal: runSignal, graces });
    const refill = () => pool?.fillSoon();
    void run.result.then(refill, refill);
    return run;
  }

  return {
    name: config.name,
    capabilities: NO_START_CAPABILITIES,
    inheritsParentContext: false,
    start,
    ...acpContinuable({ config, graces, pool, closed: closer.signal, launch, retire, retireFailed: (child) => retire(child, failedStart) }),
    whenWarm: () => pool?.whenWarm() ?? Promise.resolve(),
  };
}
