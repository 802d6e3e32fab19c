// Translation between our agent's world and ACP for `serveAcp`: what a session request may ask,
// incoming prompt blocks, session events → `session/update`s (live while a turn streams, and as
// history for session/load), and turn end reasons → ACP stop reasons.
import type * as acp from '@agentclientprotocol/sdk';
import { isAbsolute, resolve } from 'node:path';
import { isBase64, isImageType, type ContentBlock } from '../../seam/content.js';
import type { Agent } from '../../seam/agent-types.js';
import type { SessionEvent, SessionEventMap, TurnEndReason } from '../../seam/session-types.js';

/** A prompt block we cannot take (audio, embedded resources): the caller rejects the request. */
export class UnsupportedPromptBlock extends Error {}

/**
 * An image the model could not take (no image type, no bytes, bytes that are not base64) is
 * refused: stored, it would stay in the session's history and fail that turn and every later one.
 */
function checkImage(block: acp.ImageContent): void {
  if (!isImageType(block.mimeType)) throw new UnsupportedPromptBlock('an image block needs an image mimeType (say image/png)');
  if (!isBase64(block.data)) throw new UnsupportedPromptBlock('an image block needs its bytes as padded base64 data');
}

/**
 * ACP prompt blocks → ours. Resource links become a text marker; audio and embedded resources are
 * refused, and images too when the server does not take them (`images: false`) or they are malformed.
 */
export function promptContent(prompt: readonly acp.ContentBlock[], images = true): ContentBlock[] {
  return prompt.map((block): ContentBlock => {
    switch (block.type) {
      case 'text':
        return { type: 'text', text: block.text };
      case 'image':
        if (!images) throw new UnsupportedPromptBlock('this agent takes no images (it is served text-only)');
        checkImage(block);
        return { type: 'image', mimeType: block.mimeType, data: block.data };
      case 'resource_link':
        return { type: 'text', text: `[resource ${block.name}: ${block.uri}]` };
      default:
        throw new UnsupportedPromptBlock(`prompt blocks of type ${block.type} are not supported`);
    }
  });
}

/**
 * What a session/new, load or resume asks that this agent cannot do, said plainly; undefined when
 * nothing. Its cwd must be a path (absolute, no NUL byte); it connects to no MCP servers (ACP's
 * stdio ones included: an editor sending its servers is told so, not left with tools it never
 * gets) and works in no directory but cwd.
 */
export function scopeProblem(params: { cwd: string; mcpServers?: readonly unknown[] | null; additionalDirectories?: readonly string[] | null }): string | undefined {
  if (!isAbsolute(params.cwd)) return 'cwd must be an absolute path';
  if (params.cwd.includes('\0')) return 'cwd must not contain a NUL byte';
  if (params.mcpServers?.length) return 'mcpServers: this agent connects to no MCP servers; send an empty list';
  if (params.additionalDirectories?.length) return 'additionalDirectories: this agent works in cwd only; send none';
  return undefined;
}

/**
 * Why `agent`'s session cannot be served in `cwd`; undefined when it can. A session works in the
 * cwd of its session/new: ACP lets a load or resume change other things only "as long as the
 * request cwd matches the session's cwd", and serving it elsewhere would run its tools in a
 * directory the client did not ask for. (A session stored without a cwd takes any.)
 */
export function cwdProblem(agent: Agent, cwd: string): string | undefined {
  const own = agent.session.header.cwd;
  if (own === undefined || sameCwd(own, cwd)) return undefined;
  return `cwd: session ${agent.id} works in ${own}; load or resume it with that cwd`;
}

/** Whether `a` and `b` name the same directory (`/a/b/` and `/a/./b` do). */
export const sameCwd = (a: string, b: string): boolean => resolve(a) === resolve(b);

/** Whether a session holds an image from its input (a prompt, or input accepted for the next one): a model taking text only fails each turn on it. */
export function holdsInputImages(events: readonly SessionEvent[]): boolean {
  return events.some(
    (event) => (event.type === 'user/message' || event.type === 'inbox/accepted') && (event.data as { content?: readonly ContentBlock[] }).content?.some((block) => block.type === 'image') === true,
  );
}

const text = (value: string): acp.ContentBlock => ({ type: 'text', text: value });

function toolCall(data: SessionEventMap['tool/call']): acp.SessionUpdate {
  return { sessionUpdate: 'tool_call', toolCallId: data.callId, title: data.name, kind: 'other', status: 'in_progress', rawInput: data.input };
}

/** A tool's text and images (a screenshot tool's output), as ACP tool call content. */
function toolResult(data: SessionEventMap['tool/result']): acp.SessionUpdate {
  const content = data.content.flatMap((block): acp.ToolCallContent[] => {
    if (block.type === 'text') return [{ type: 'content', content: text(block.text) }];
    return block.type === 'image' ? [{ type: 'content', content: { type: 'image', mimeType: block.mimeType, data: block.data } }] : [];
  });
  return { sessionUpdate: 'tool_call_update', toolCallId: data.callId, status: data.isError ? 'failed' : 'completed', content };
}

/**
 * Turns the events of running turns into updates: text and reasoning deltas as chunks, tool calls
 * and results. A step whose model did not stream its text or reasoning still has it sent once, from its message.
 */
export class TurnStreamer {
  readonly #send: (update: acp.SessionUpdate) => void;
  #streamedText = false;
  #streamedThought = false;

  constructor(send: (update: acp.SessionUpdate) => void) {
    this.#send = send;
  }

  push(event: SessionEvent): void {
    switch (event.type) {
      case 'step/start':
        this.#streamedText = false;
        this.#streamedThought = false;
        break;
      case 'assistant/chunk': {
        const { chunk } = event.data as SessionEventMap['assistant/chunk'];
        if (chunk.text === '') break;
        if (chunk.type === 'text-delta') this.#streamedText = true;
        else this.#streamedThought = true;
        this.#send({ sessionUpdate: chunk.type === 'text-delta' ? 'agent_message_chunk' : 'agent_thought_chunk', content: text(chunk.text) });
        break;
      }
      case 'assistant/message':
        for (const update of messageUpdates(event.data as SessionEventMap['assistant/message'])) {
          // What streamed as chunks is not sent again.
          if (!(update.sessionUpdate === 'agent_thought_chunk' ? this.#streamedThought : this.#streamedText)) this.#send(update);
        }
        break;
      case 'tool/call':
        this.#send(toolCall(event.data as SessionEventMap['tool/call']));
        break;
      case 'tool/result':
        this.#send(toolResult(event.data as SessionEventMap['tool/result']));
        break;
      default:
        break;
    }
  }
}

function messageUpdates(data: { content: readonly ContentBlock[] }, kind: 'agent' | 'user' = 'agent'): acp.SessionUpdate[] {
  const updates: acp.SessionUpdate[] = [];
  for (const block of data.content) {
    if (block.type === 'text' && block.text !== '') {
      updates.push({ sessionUpdate: kind === 'agent' ? 'agent_message_chunk' : 'user_message_chunk', content: text(block.text) });
    } else if (block.type === 'reasoning' && block.text !== '' && kind === 'agent') {
      updates.push({ sessionUpdate: 'agent_thought_chunk', content: text(block.text) });
    } else if (block.type === 'image') {
      updates.push({ sessionUpdate: kind === 'agent' ? 'agent_message_chunk' : 'user_message_chunk', content: { type: 'image', mimeType: block.mimeType, data: block.data } });
    }
  }
  return updates;
}

/**
 * A stored conversation as the updates `session/load` replays: messages and tool traffic, in order.
 * Yielded one by one: a message may hold more blocks than a call's arguments may spread (a prompt of
 * 200 000 blocks fits in one ACP message).
 */
export function* historyUpdates(events: readonly SessionEvent[]): Generator<acp.SessionUpdate> {
  for (const event of events) {
    if (event.type === 'user/message') yield* messageUpdates(event.data as SessionEventMap['user/message'], 'user');
    else if (event.type === 'assistant/message') yield* messageUpdates(event.data as SessionEventMap['assistant/message']);
    else if (event.type === 'tool/call') yield toolCall(event.data as SessionEventMap['tool/call']);
    else if (event.type === 'tool/result') yield toolResult(event.data as SessionEventMap['tool/result']);
  }
}

/**
 * Our turn end → an ACP stop reason; `undefined` for a failed turn (the prompt request fails). A
 * turn the host aborted or interrupted, or none at all (a cancel discarded the input), is `cancelled`.
 */
export function acpStopReason(reason: TurnEndReason | undefined): acp.StopReason | undefined {
  switch (reason?.kind) {
    case 'completed':
      return 'end_turn';
    case 'max-tokens':
      return 'max_tokens';
    case 'refusal':
      return 'refusal';
    case 'error':
      // Reaching maxStepsPerTurn is ACP's own stop reason; any other error fails the request.
      return reason.error.code === 'MAX_STEPS' ? 'max_turn_requests' : undefined;
    default:
      return 'cancelled';
  }
}
