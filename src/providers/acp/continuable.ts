// Continuable ACP children. Whether a child can continue is negotiated per child: its agent must
// advertise `agentCapabilities.loadSession`. The remote session id and the launch configuration
// (never env values) go into the child's descriptor; a cold resume relaunches and loads the session.
import { z } from 'zod';
import { SubagentError } from '../../seam/errors.js';
import type { Usage } from '../../seam/session-types.js';
import type { ContinuableCreateRequest, ContinuableCreateSpec, ContinuableResumeRequest } from '../../seam/types.js';
import { describeAcpFailure, oversizePrompt, oversizeSessionNew, promptTexts, refuseOversize } from './client.js';
import { resolveChildCwd, type AcpProviderConfig } from './options.js';
import type { WarmChild, WarmPool } from './pool.js';
import type { ReapGraces } from './process.js';
import { RemoteSessionModel } from './remote-model.js';
import { StartAborted, abortedStart, checkOpen, routeMeta, startupStep } from './startup.js';

/** Where an agent process is started from; stored, so a resumed child runs the same agent. */
export interface LaunchConfig {
  command: string;
  args: string[];
  cwd: string;
}

/** What the continuable part borrows from its provider. */
export interface AcpContinuableDeps {
  config: AcpProviderConfig;
  graces: ReapGraces;
  pool: WarmPool | undefined;
  /** Aborted once the host closes. */
  closed: AbortSignal;
  launch(launch: LaunchConfig, signal: AbortSignal): Promise<WarmChild>;
  retire(child: WarmChild): Promise<void>;
  /** Reaps a process whose startup step failed: it serves no session, so SIGTERM comes with the EOF. */
  retireFailed(child: WarmChild): Promise<void>;
}

const providerDataSchema = z.strictObject({
  sessionId: z.string().min(1),
  command: z.string().min(1),
  args: z.array(z.string()),
  cwd: z.string().min(1),
});

function unsupported(name: string): SubagentError {
  return new SubagentError(
    'UNSUPPORTED_CAPABILITY',
    `the agent of provider ${name} does not advertise session/load (agentCapabilities.loadSession), so its children cannot be continued; start a one-shot child instead`,
  );
}

/** `prepareContinuable` and `resumeContinuable` of an ACP provider. */
export function acpContinuable(deps: AcpContinuableDeps) {
  const { config, graces, pool, closed } = deps;
  /** `spent`: what the child's log counts so far (a resumed session's running totals continue from it). */
  const resident = (first: WarmChild, session: { sessionId: string; launch: LaunchConfig }, stored: { providerData?: Record<string, unknown>; spent?: Usage }): ContinuableCreateSpec => {
    let current = first;
    // A process that ended (or whose connection closed) is replaced at the child's next prompt: a
    // fresh one loads the session, as a cold resume would. The old one is reaped once replaced.
    const relaunch = async (signal: AbortSignal): Promise<WarmChild> => {
      const runSignal = AbortSignal.any([signal, closed]);
      const next = await deps.launch(session.launch, runSignal);
      try {
        await startupStep(next.client.loadSession(session.sessionId, session.launch.cwd), next.proc, runSignal, 'session/load', config.startupTimeoutMs);
      } catch (error) {
        await deps.retireFailed(next);
        throw error;
      }
      const gone = current;
      current = next;
      await deps.retire(gone);
      return next;
    };
    return {
      // A warm process was taken: the pool refills once the first prompt is answered.
      model: new RemoteSessionModel(first, graces.graceMs, () => pool?.fillSoon(), relaunch, stored.spent),
      ...(stored.providerData ? { providerData: stored.providerData } : {}),
      release: () => deps.retire(current),
      // A message no session/prompt could carry (none with no text) is refused before it is accepted (so before it is in the child's log).
      admitInput: (content) => {
        const text = promptTexts(content);
        if (text.length === 0) throw new SubagentError('INVALID_REQUEST', 'the message has no text block; an ACP child receives text only');
        refuseOversize(oversizePrompt(session.sessionId, text));
      },
    };
  };

  async function prepareContinuable(request: ContinuableCreateRequest): Promise<ContinuableCreateSpec> {
    const { signal } = request;
    checkOpen(signal, closed);
    const launch: LaunchConfig = { command: config.command, args: config.args, cwd: resolveChildCwd(config.cwd, request.parent) };
    const meta = routeMeta(request.agentOptions);
    // Before any process is taken (one that large would end the agent's connection).
    refuseOversize(oversizeSessionNew(launch.cwd, meta));
    // Every pooled process runs the same agent: a warm one already answered, so nothing is spawned to ask.
    const warm = pool?.peek();
    if (warm && !warm.client.canLoadSession) throw unsupported(config.name);
    const runSignal = AbortSignal.any([signal, closed]);
    let child = pool?.take();
    try {
      child ??= await deps.launch(launch, runSignal);
      if (!child.client.canLoadSession) throw unsupported(config.name);
      const sessionId = await startupStep(child.client.newSession(launch.cwd, meta), child.proc, runSignal, 'session/new', config.startupTimeoutMs);
      return resident(child, { sessionId, launch }, { providerData: { sessionId, ...launch } });
    } catch (error) {
      pool?.fill();
      if (child) await deps.retireFailed(child);
      throw error instanceof StartAborted ? abortedStart(signal, closed) : error;
    }
  }

  async function resumeContinuable(request: ContinuableResumeRequest): Promise<ContinuableCreateSpec> {
    const { signal, sessionId: childId } = request;
    checkOpen(signal, closed);
    const parsed = providerDataSchema.safeParse(request.providerData);
    if (!parsed.success) throw new SubagentError('NOT_RESUMABLE', `the stored ACP session of child ${childId} is malformed; it cannot be continued`);
    const { sessionId, ...launch } = parsed.data;
    const runSignal = AbortSignal.any([signal, closed]);
    const sameAgent = launch.cwd === config.cwd && launch.command === config.command && launch.args.join('\0') === config.args.join('\0');
    let child = sameAgent ? pool?.take() : undefined;
    try {
      child ??= await deps.launch(launch, runSignal);
      if (!child.client.canLoadSession) throw new SubagentError('NOT_RESUMABLE', `the ACP agent of child ${childId} no longer advertises session/load`);
      await startupStep(child.client.loadSession(sessionId, launch.cwd), child.proc, runSignal, 'session/load', config.startupTimeoutMs);
      return resident(child, { sessionId, launch }, { spent: request.usage });
    } catch (error) {
      pool?.fill();
      if (child) await deps.retireFailed(child);
      if (error instanceof StartAborted) throw abortedStart(signal, closed);
      if (error instanceof SubagentError && error.code === 'NOT_RESUMABLE') throw error;
      // The agent's own error (a JSON-RPC error, or the process's end) is the cause.
      const cause: unknown = error instanceof SubagentError && error.cause !== undefined ? error.cause : error;
      const why = error instanceof SubagentError ? error.message : describeAcpFailure(cause);
      throw new SubagentError('NOT_RESUMABLE', `child ${childId} could not be resumed: loading ACP session ${sessionId} failed (${why})`, { cause });
    }
  }

  return { prepareContinuable, resumeContinuable };
}
