// The local session of an ACP child: the remote agent keeps its own history, so the host mirrors
// what it sees (prompt, streamed text, tool calls) as one turn in `host.sessions`. The catalog then
// lists ACP children like any other, and the log is complete when the run's result settles.
import { randomUUID } from 'node:crypto';
import type * as acp from '@agentclientprotocol/sdk';
import { MAX_CONTENT_DEPTH, nestingDepth, plainJsonProblem, type ContentBlock } from '../../seam/content.js';
import { DESCRIPTOR_EVENT, type SubagentDescriptorData } from '../../seam/descriptor.js';
import { AssistantOutputFold } from '../../seam/output.js';
import type { SessionHeader, TurnEndReason, Usage } from '../../seam/session-types.js';
import type { SubagentResult } from '../../seam/types.js';
import type { SessionLog } from '../../runtime/session.js';
import type { LiveSessionStore } from '../../runtime/session-store.js';

const TURN = 1;
const STEP = 1;

function turnEndReason(result: SubagentResult): TurnEndReason {
  switch (result.stopReason) {
    case 'completed':
      return { kind: 'completed' };
    case 'max-tokens':
      return { kind: 'max-tokens' };
    case 'refusal':
      return { kind: 'refusal' };
    case 'aborted':
      return { kind: 'aborted', cause: { kind: 'parent' } };
    default:
      return { kind: 'error', error: { code: 'ACP_TURN_FAILED', message: result.diagnostic ?? 'the ACP turn failed' } };
  }
}

function toolContent(content: readonly acp.ToolCallContent[] | null | undefined): ContentBlock[] {
  const blocks: ContentBlock[] = [];
  for (const item of content ?? []) {
    if (item.type === 'content' && item.content.type === 'text') blocks.push({ type: 'text', text: item.content.text });
    else if (item.type === 'diff') blocks.push({ type: 'text', text: `[diff of ${item.path}]` });
  }
  return blocks;
}

/**
 * An agent's `rawInput` as the log can keep it: JSON nested deeper than content may be (it parses,
 * but fails to be stored), or holding a number past a double's range (`1e400` parses as Infinity,
 * which a log cannot store), is recorded as a marker saying which.
 */
function storableInput(input: unknown): unknown {
  if (plainJsonProblem(input, 'rawInput') === undefined) return input;
  return nestingDepth(input) > MAX_CONTENT_DEPTH ? '[input nested too deeply to record]' : '[input holds a number beyond the range of a double]';
}

/** The local session of one ACP child; `end` closes its one turn. */
export class SessionMirror {
  readonly session: SessionLog;
  readonly #fold = new AssistantOutputFold();
  /**
   * Tool call id → name, its content as last reported (an update that carries content replaces it,
   * one that carries none keeps it, as ACP has it), and whether its result was recorded.
   */
  readonly #calls = new Map<string, { name: string; content: acp.ToolCallContent[] | undefined; done: boolean }>();
  #ended = false;

  /** Publishes the child's session: header, then the turn's opening events and the prompt. */
  constructor(sessions: LiveSessionStore, header: Omit<SessionHeader, 'id' | 'createdAt'>, descriptor: SubagentDescriptorData, prompt: ContentBlock[]) {
    this.session = sessions.create({ ...header, id: randomUUID(), createdAt: Date.now() });
    this.session.append('turn/start', { turn: TURN });
    this.session.append(DESCRIPTOR_EVENT, structuredClone(descriptor));
    this.session.append('step/start', { turn: TURN, step: STEP });
    this.session.append('user/message', { id: randomUUID(), content: structuredClone(prompt), source: { kind: 'user' } });
  }

  get id(): string {
    return this.session.id;
  }

  /** Records one `session/update`; ignored once the turn ended. */
  update(update: acp.SessionUpdate): void {
    if (this.#ended) return;
    switch (update.sessionUpdate) {
      case 'agent_message_chunk':
        if (update.content.type === 'text' && update.content.text !== '') {
          this.#fold.pushText(update.content.text);
          this.session.append('assistant/chunk', { turn: TURN, step: STEP, chunk: { type: 'text-delta', text: update.content.text } });
        }
        break;
      case 'agent_thought_chunk':
        if (update.content.type === 'text' && update.content.text !== '') {
          this.session.append('assistant/chunk', { turn: TURN, step: STEP, chunk: { type: 'reasoning-delta', text: update.content.text } });
        }
        break;
      case 'tool_call':
        this.#toolCall(update.toolCallId, update.title, update.rawInput);
        this.#toolResult(update.toolCallId, update.status, update.content);
        break;
      case 'tool_call_update':
        this.#toolResult(update.toolCallId, update.status, update.content);
        break;
      default:
        break; // plans, modes, usage, commands: not part of the child's log
    }
  }

  #toolCall(callId: string, title: string, input: unknown): void {
    if (this.#calls.has(callId)) return;
    this.#calls.set(callId, { name: title, content: undefined, done: false });
    this.session.append('tool/call', { turn: TURN, step: STEP, callId, name: title, input: storableInput(input ?? null) });
  }

  #toolResult(callId: string, status: acp.ToolCallStatus | null | undefined, content: acp.ToolCallContent[] | null | undefined): void {
    const call = this.#calls.get(callId);
    if (!call || call.done) return;
    if (content) call.content = content;
    if (status !== 'completed' && status !== 'failed') return;
    call.done = true;
    const result = toolContent(call.content);
    call.content = undefined;
    this.session.append('tool/result', { turn: TURN, step: STEP, callId, name: call.name, content: result, ...(status === 'failed' ? { isError: true } : {}) });
  }

  /** The streamed text so far, as the run's output. */
  output(): ContentBlock[] {
    return this.#fold.collect() ?? [];
  }

  /** Closes the turn with `result`'s outcome (and the agent's reported token usage); later updates are ignored. */
  end(result: SubagentResult, usage?: Usage): void {
    if (this.#ended) return;
    this.#ended = true;
    if (result.output.length > 0 || usage) {
      const message = { turn: TURN, step: STEP, id: randomUUID(), content: structuredClone(result.output) };
      this.session.append('assistant/message', usage ? { ...message, usage } : message);
    }
    this.session.append('step/end', { turn: TURN, step: STEP });
    this.session.append('turn/end', { turn: TURN, reason: turnEndReason(result) });
  }
}
