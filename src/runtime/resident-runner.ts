// Runs a continuable child's stay where it was sent (a worker thread): rebuilds its agent from the
// log its host holds, takes one turn per `prompt`, streams the events back as notices and keeps the
// agent (its history, its tools' state) between turns until the host tells it to leave.
import type { HostToolSchema, ResidentHostApi, ResidentHostTools, ResidentMessage, ResidentTaskData, ChildTaskResult, ChildTransport } from '../seam/child-protocol.js';
import { decodeOwned, type Encoded } from '../seam/codec.js';
import { takeEvents } from '../seam/event-texts.js';
import { SubagentError } from '../seam/errors.js';
import type { SessionEvent } from '../seam/session-types.js';
import { AgentRegistry, type AgentHandle } from './agent-registry.js';
import { loadToolModules, registerModuleTools } from './tool-modules.js';
import type { LocalAgent, OwnInput } from './agent.js';
import { EventStream, failedOutcome, hostTool } from './child-runner.js';
import { budgetHooks, treeCounter } from './child-run.js';
import { LiveSessionStore } from './session-store.js';
import { ToolRegistry } from './tool-registry.js';

/** Runs one stay to its end (the host's `leave`, or a failure to build the agent); never rejects. */
export async function runResident(task: Encoded, transport: ChildTransport): Promise<ChildTaskResult> {
  const stream = new EventStream(transport);
  // The inherited host tools are the root's; the host-side agent's own go in the agent's scope, after
  // its tool modules' tools (registered there first, while it is built), as in-process.
  const root = new ToolRegistry();
  let scope: ToolRegistry | undefined;
  const unregister: { inherited: (() => void) | undefined; own: (() => void) | undefined } = { inherited: undefined, own: undefined };
  const register = (registry: ToolRegistry, schemas: HostToolSchema[]) => (schemas.length > 0 ? registry.register(...schemas.map((schema) => hostTool(schema, transport))) : undefined);
  const setOwnTools = (schemas: HostToolSchema[]) => {
    unregister.own?.();
    unregister.own = register(scope!, schemas);
  };
  const setHostTools = ({ inherited, own }: ResidentHostTools) => {
    unregister.inherited?.();
    unregister.inherited = register(root, inherited);
    setOwnTools(own);
  };
  let agent: LocalAgent | undefined;
  let leave!: () => void;
  const left = new Promise<void>((resolve) => (leave = resolve));
  const flag = transport.cancelFlag;
  // The running turn's prompt, answered at the turn's end with the events still pending.
  let answer: ((events: SessionEvent[]) => void) | undefined;
  // Input the child added to itself, on its way to the host-side agent, which keeps its inbox: a
  // turn's end is answered after it, so a steer lands in the host-side turn it was made in.
  const ownInput = new Set<Promise<void>>();
  // Set when the host-side agent is about to be disposed: later input would reach no agent.
  let ownClosed = false;
  const sendOwn: OwnInput = (target, id, content, wake, source) => {
    if (ownClosed) throw SubagentError.closed(`continuable child ${agent?.id ?? ''}`, 'it is leaving residence and takes no more input from its own code');
    const sent = transport
      .callHost((host) => (host as ResidentHostApi).acceptOwn(target, id, content, wake, source))
      // Refused only once the host-side agent is gone (CLOSED): the stay is ending with it.
      .catch(() => undefined)
      .finally(() => ownInput.delete(sent));
    ownInput.add(sent);
  };
  // Messages of the next turn's first step handed over so far: the first of them opens the turn.
  let staged = 0;
  const stage = (messages: ResidentMessage[]) => {
    if (!agent) throw new Error('the resident child is not built yet');
    for (const { id, content, source } of messages) agent.deliver(staged++ === 0 ? 'next-turn' : 'next-step', id, content, false, source);
  };
  transport.serve({
    stage,
    prompt(messages, hostTools, steps) {
      if (!agent) throw new Error('the resident child is not built yet');
      if (hostTools) setHostTools(hostTools);
      if (steps !== undefined) agent.allowSteps(steps);
      // The previous turn's cancellation is spent: this turn starts afresh.
      if (flag) Atomics.store(flag, 0, 0);
      let reply!: (events: SessionEvent[]) => void;
      const ended = new Promise<SessionEvent[]>((resolve) => (answer = reply = resolve));
      stage(messages);
      staged = 0;
      agent.wake();
      // A cancellation that lands before the turn starts stops it from starting: the prompt is
      // answered all the same (with no turn/end), so the host's turn ends now, not at the grace's kill.
      void agent.whenIdle().then(() => {
        if (answer !== reply) return;
        answer = undefined;
        reply(stream.take());
      });
      return ended;
    },
    cancel(cause) {
      agent?.cancel(cause);
    },
    leave: () => leave(),
    closeOwnInput: async () => {
      ownClosed = true;
      await Promise.all(ownInput);
    },
  });
  let handle: AgentHandle | undefined;
  let unsubscribe = () => {};
  try {
    const data = decodeOwned<ResidentTaskData>(task);
    unregister.inherited = register(root, data.hostTools.inherited);
    // Parsed here and nowhere else, one text at a time, each dropped as its event is made (the task is
    // held by this thread's frames for the whole stay: it keeps none of the log's text). Frozen, the
    // events are the agent's log as they are, not copied into it (see seam/event-texts.ts).
    const events = takeEvents(data.events);
    const agents = new AgentRegistry({ sessions: new LiveSessionStore(), tools: root });
    const { id, createdAt: _createdAt, seedLength: _seedLength, ...header } = data.header;
    // The completed turns come in as this copy's prefix; only the turns it runs here go back.
    handle = await agents.create({
      sessionId: id,
      header,
      seed: events,
      agentOptions: data.agentOptions,
      // Its tool modules load here, not in create(): a child that started before (this stay is built
      // again) keeps its modules' tools over host tools of their names registered since, as in-process.
      loadToolModules: false,
      setup: async ({ tools }) => {
        scope = tools;
        const specifiers = data.agentOptions.toolModules ?? [];
        const started = data.started === true;
        if (specifiers.length > 0) registerModuleTools(tools, await loadToolModules(specifiers, tools, { overInherited: started }), started);
        setOwnTools(data.hostTools.own);
      },
      hooks: {
        beforeTool: async () => stream.flush(),
        // The child's own budget stops it at a step boundary, as in-process; its host sees why in the
        // log. So do the trees covering it, as their spend stands in memory shared with the host.
        ...budgetHooks(() => handle!.agent.session, { startedAt: 0, seedLength: 0, ...data.budget, trees: transport.trees }),
      },
      ...(flag ? { cancelFlag: flag } : {}),
      ownInput: sendOwn,
    });
    agent = handle.agent;
    const session = agent.session;
    // What the stay adds to its log goes into the trees before its host-side log can show it.
    const count = transport.trees && transport.ahead && treeCounter(transport.trees, 0, { ahead: transport.ahead, prior: session.events });
    unsubscribe = agent.subscribe((event) => {
      count?.(session.events);
      stream.push(event);
      if (event.type !== 'turn/end') return;
      // A turn's end goes out at once, as its prompt's answer: the host's turn waits for it.
      const reply = answer;
      answer = undefined;
      if (!reply) stream.flush();
      else if (ownInput.size === 0) reply(stream.take());
      else void Promise.all(ownInput).then(() => reply(stream.take()));
    });
    transport.notify({ type: 'ready' });
    await left;
    return { type: 'result', result: { output: [], stopReason: 'completed' } };
  } catch (error) {
    return failedOutcome(error);
  } finally {
    unsubscribe();
    await handle?.dispose().catch(() => undefined);
    transport.notify({ type: 'end', events: stream.take() });
  }
}
