// Cancellation: how soon a worker child busy in synchronous code sees `run.cancel()` (its signal
// reads the flag shared with the main thread), and how soon the result of a child that ignores
// cancellation settles `aborted` (its thread is terminated after `cancelGraceMs: 50`).
import { BroadcastChannel } from 'node:worker_threads';
import { createHost, text, type Agent, type Host, type SubagentRun } from '../src/index.js';
import { CANCEL_CHANNEL } from './fixtures/cancel-tools.js';
import { sampled, type Row, type Suite } from './lib.js';

const toolModule = new URL('./fixtures/cancel-tools.js', import.meta.url).href;
// The clock both threads share: each thread's own origin plus its monotonic time.
const now = () => performance.timeOrigin + performance.now();

interface ToolMessage {
  type: 'busy' | 'observed';
  at?: number;
}

/** The tools' messages, each awaited by type (one waiter per type at a time). */
class ToolMessages {
  readonly channel = new BroadcastChannel(CANCEL_CHANNEL);
  readonly #waiters = new Map<ToolMessage['type'], (message: ToolMessage) => void>();

  constructor() {
    this.channel.onmessage = (event) => {
      const data = (event as { data: ToolMessage }).data;
      const waiter = this.#waiters.get(data.type);
      this.#waiters.delete(data.type);
      waiter?.(data);
    };
  }

  next(type: ToolMessage['type']): Promise<ToolMessage> {
    return new Promise((resolve) => this.#waiters.set(type, resolve));
  }
}

/** A spawn child whose one tool call is `tool`, once that tool is looping. */
async function busyChild(host: Host, parent: Agent, messages: ToolMessages, tool: 'observe' | 'ignore'): Promise<SubagentRun> {
  const busy = messages.next('busy');
  const run = await host.subagents.start('spawn', {
    prompt: [text('loop')],
    parent,
    signal: new AbortController().signal,
    agentOptions: { model: { kind: 'scripted', steps: [{ toolCalls: [{ name: tool, input: {} }] }] }, toolModules: [toolModule] },
  });
  await busy;
  return run;
}

async function settleAborted(run: SubagentRun): Promise<void> {
  const { stopReason } = await run.result;
  if (stopReason !== 'aborted') throw new Error(`a cancelled child ended ${stopReason}`);
  await run.dispose();
}

export const cancelSuite: Suite = {
  name: 'cancel',
  async run() {
    const rows: Row[] = [];
    const messages = new ToolMessages();
    try {
      // A grace far above any sample: only the child's own look at its signal ends these.
      const polite = await createHost({ pool: { minThreads: 2, maxThreads: 2, cancelGraceMs: 60_000 } });
      const parent = await polite.createAgent();
      rows.push(
        await sampled('cancel/busy-child-observed', 50, async () => {
          const run = await busyChild(polite, parent, messages, 'observe');
          const observed = messages.next('observed');
          const t0 = now();
          run.cancel();
          const { at } = await observed;
          await settleAborted(run);
          return at! - t0;
        }),
      );
      await polite.close();

      const strict = await createHost({ pool: { minThreads: 2, maxThreads: 2, cancelGraceMs: 50 } });
      const top = await strict.createAgent();
      rows.push(
        await sampled('cancel/runaway-settled', 20, async () => {
          const run = await busyChild(strict, top, messages, 'ignore');
          const t0 = performance.now();
          run.cancel();
          await run.result;
          const ms = performance.now() - t0;
          await settleAborted(run);
          return ms;
        }),
      );
      await strict.close();
    } finally {
      messages.channel.close();
    }
    return rows;
  },
};
