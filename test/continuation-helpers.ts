// Helpers of the continuation tests: a SQLite host with the in-process providers, a recorder of
// lifecycle events, and waits keyed on those events (never on time).
import {
  createHost,
  inProcessProvider,
  text,
  type Agent,
  type ContentBlock,
  type Host,
  type HostOptions,
  type ModelSpec,
  type SessionEvent,
  type SubagentRunEndInfo,
  type SubagentRunInfo,
} from 'subagent-host';
import { closeAfterEach, tempFiles } from './helpers.js';

export interface Recorder {
  starts: SubagentRunInfo[];
  ends: SubagentRunEndInfo[];
  /** Resolves once `predicate` holds, checked now and after every lifecycle event. */
  until(predicate: () => boolean): Promise<void>;
}

/**
 * A test file's set-up: a temp folder of SQLite files, hosts closed after each test, and `setup()`
 * giving a continuation host (with `prepare` applied before the parent exists), a parent and the recorder.
 */
export function continuationSuite(prefix: string) {
  const files = tempFiles(prefix);
  const track = closeAfterEach();
  async function setup(options: HostOptions = {}, prepare: (host: Host) => void = () => undefined) {
    const host = track(await continuationHost(files.file(), options));
    prepare(host);
    const parent = await host.createAgent();
    return { host, parent, recorder: host.recorder };
  }
  return { files, track, setup };
}

export async function continuationHost(file: string, options: HostOptions = {}): Promise<Host & { recorder: Recorder }> {
  const host = await createHost({ persistence: { sqlite: file }, providers: false, pool: { minThreads: 0 }, ...options });
  host.subagents.registerProvider(inProcessProvider(host));
  host.subagents.registerProvider(inProcessProvider(host, { fork: true }));
  const waiters = new Set<() => void>();
  const check = () => {
    for (const waiter of [...waiters]) waiter();
  };
  const recorder: Recorder = {
    starts: [],
    ends: [],
    until(predicate) {
      return new Promise((resolve) => {
        const waiter = () => {
          if (!predicate()) return;
          waiters.delete(waiter);
          resolve();
        };
        waiters.add(waiter);
        waiter();
      });
    },
  };
  host.subagents.on('subagent/start', (info) => {
    recorder.starts.push(info);
    check();
  });
  host.subagents.on('subagent/end', (info) => {
    recorder.ends.push(info);
    // Listeners run inside the settling code; let it finish before predicates look around.
    setImmediate(check);
  });
  return Object.assign(host, { recorder });
}

/** Starts a continuable in-process child of `parent`. */
export function startChild(host: Host, parent: Agent, prompt: string, extra: { childId?: string; model?: ModelSpec; provider?: string; label?: string } = {}) {
  return host.subagents.startContinuable({
    provider: extra.provider ?? 'in-process',
    label: extra.label ?? 'helper',
    ...(extra.childId === undefined ? {} : { childId: extra.childId }),
    request: { prompt: [text(prompt)], parent, ...(extra.model ? { agentOptions: { model: extra.model } } : {}) },
  });
}

/** The texts of the user messages of a log, in order. */
export function userTexts(events: readonly SessionEvent[]): string[] {
  return events.filter((e) => e.type === 'user/message').map((e) => textsOf((e.data as { content: ContentBlock[] }).content));
}

export function textsOf(content: readonly ContentBlock[]): string {
  return content.map((block) => (block.type === 'text' ? block.text : `[${block.type}]`)).join(' | ');
}

/** Turn end kinds of a log, in order. */
export function turnEnds(events: readonly SessionEvent[]): string[] {
  return events.filter((e) => e.type === 'turn/end').map((e) => (e.data as { reason: { kind: string } }).reason.kind);
}

/** Resolves once the agent's log has an event of `type` (checked now and on each append). */
export function untilEvent(agent: Agent, type: string): Promise<void> {
  return new Promise((resolve) => {
    if (agent.session.events.some((e) => e.type === type)) return resolve();
    const off = agent.subscribe((event) => {
      if (event.type !== type) return;
      off();
      resolve();
    });
  });
}

/** A child model whose first request hangs until aborted; later requests echo. */
export const HANG: ModelSpec = { kind: 'scripted', steps: [{ finish: 'hang' }] };

/** Resolves once `predicate` holds; for states no event announces (e.g. a session leaving the live store). */
export async function eventually(predicate: () => boolean): Promise<void> {
  while (!predicate()) await new Promise((resolve) => setTimeout(resolve, 5));
}
