// queueProvider: each child runs on a worker process anywhere that can reach the Redis server.
// start() encodes the child task (as the spawn provider does), queues one BullMQ job per child
// (job id = the child's session id), and resolves once the job is queued and the child's mirror
// session is published. Connections open on the first start and close with the host.
import { randomUUID } from 'node:crypto';
import { encode } from '../../seam/codec.js';
import { SubagentError, describeError, isSubagentError } from '../../seam/errors.js';
import type { ResolvedSubagentStartRequest, SubagentProvider, SubagentRun } from '../../seam/types.js';
import type { SessionHeader } from '../../seam/session-types.js';
import type { ChildTaskData } from '../../seam/child-protocol.js';
import { localChildPlan } from '../local-child.js';
import { hostParts, type Host } from '../provider-host.js';
import { redisOutage } from './connect.js';
import { QueueConnection } from './connection.js';
import { parseQueueOptions, type QueueProviderOptions } from './options.js';
import { JOB_NAME, PROTOCOL_VERSION, type QueueJobData } from './protocol.js';
import { QueueRun } from './run.js';

/** Queue children can do everything a worker child can except call host tools. */
export const QUEUE_CAPABILITIES = Object.freeze({ outputSchema: true, depthLimit: true, toolFilter: false, persona: true });

function cancelledStart(signal: AbortSignal): SubagentError {
  return SubagentError.cancelled('the start', signal.reason, 'before the child was queued');
}

/** A provider whose children run on `subagent-host worker` processes through a BullMQ queue. */
export function queueProvider(owner: Host, opts: QueueProviderOptions): SubagentProvider {
  const host = hostParts(owner);
  const options = parseQueueOptions(opts);
  let connecting: Promise<QueueConnection> | undefined;
  let closed = false;

  const connection = (): Promise<QueueConnection> => {
    connecting ??= QueueConnection.open(options, host.logger).catch((error: unknown) => {
      connecting = undefined; // the next start tries again
      throw error;
    });
    return connecting;
  };

  host.onClose(async () => {
    closed = true;
    const open = connecting;
    connecting = undefined;
    await (await open?.catch(() => undefined))?.close();
  });

  async function start(request: ResolvedSubagentStartRequest): Promise<SubagentRun> {
    const { signal } = request;
    if (signal.aborted) throw cancelledStart(signal);
    if (closed) throw SubagentError.closed('the host');
    const plan = localChildPlan(request, false);
    const header: SessionHeader = { ...plan.header, id: randomUUID(), createdAt: Date.now() };
    const task: ChildTaskData = {
      header,
      seed: [],
      prompt: request.prompt,
      agentOptions: { ...plan.agentOptions, model: plan.agentOptions.model ?? host.agents.defaultModel },
      descriptor: request.descriptor,
      hostTools: [],
      ...(request.outputSchema ? { outputSchema: request.outputSchema } : {}),
    };
    const data: QueueJobData = { protocol: PROTOCOL_VERSION, task: encode(task), reply: '', attempt: 1 };
    const link = await connection();
    if (signal.aborted) throw cancelledStart(signal);
    data.reply = link.reply;
    const run = new QueueRun({ id: header.id, connection: link, sessions: host.sessions, data, seedLength: 0, descriptor: request.descriptor, budgetTree: request.budgetTree });
    // A start given up on (Redis silent) queues nothing when the server wakes up later.
    let givenUp = false;
    let sent = false;
    try {
      await link.answering(async () => {
        await link.ensureReply();
        if (givenUp) return;
        sent = true;
        await link.queue.add(JOB_NAME, data, { jobId: header.id, removeOnComplete: true });
      });
    } catch (error) {
      givenUp = true;
      const outage = redisOutage(link.client, error);
      // A job sent to a server that did not answer may still be queued once it does: it is withdrawn.
      if (sent && outage !== undefined) run.withdraw();
      else link.unregister(header.id);
      if (isSubagentError(error)) throw error;
      const why = outage === undefined ? describeError(error) : `${outage} (${describeError(error)})`;
      throw new SubagentError('START_FAILED', `the child could not be queued: ${why}`, { cause: error });
    }
    if (signal.aborted && (await link.answering(() => link.queue.remove(header.id)).catch(() => 0)) === 1) {
      link.unregister(header.id);
      throw cancelledStart(signal);
    }
    run.publish(host.sessions.create(header));
    const abort = () => run.cancel();
    signal.addEventListener('abort', abort, { once: true });
    if (signal.aborted) run.cancel();
    const unlisten = () => signal.removeEventListener('abort', abort);
    // A worker of another protocol version rejects the result (UNSUPPORTED_CAPABILITY).
    void run.result.then(unlisten, unlisten);
    return run;
  }

  return { name: options.name, capabilities: QUEUE_CAPABILITIES, inheritsParentContext: false, start };
}
