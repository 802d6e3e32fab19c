// A session log reduced to what a reader follows: messages, tool calls and results, reports,
// notices, turn boundaries. Streaming chunks and step markers are left out (the messages carry
// their text); every body is plain text, which the page shows as text.
import type { SessionEvent } from '../seam/session-types.js';
import type { TranscriptEntry } from './api-types.js';

type Data = Record<string, unknown>;

// `acp/session-options`: the route a served ACP session was created with (its model spec), not a step of it.
const SKIPPED = new Set(['assistant/chunk', 'step/start', 'step/end', 'session/end-seed', 'acp/session-options']);

function asData(value: unknown): Data {
  return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Data) : {};
}

/** `value` (parsed from the stored JSON, so always serializable) as indented JSON; `undefined` as such. */
function json(value: unknown): string {
  return JSON.stringify(value, null, 2) ?? String(value);
}

/** The text of content blocks; a non-text block becomes a short bracketed note. */
export function contentText(content: unknown): string {
  if (!Array.isArray(content)) return content === undefined ? '' : json(content);
  return content
    .map((raw) => {
      const block = asData(raw);
      switch (block['type']) {
        case 'text':
          return String(block['text']);
        case 'reasoning':
          return `[reasoning]\n${String(block['text'])}`;
        case 'image':
          return `[image ${String(block['mimeType'])}, ${String(block['data']).length} base64 characters]`;
        case 'tool_call':
          return `[calls ${String(block['name'])}]`;
        case 'tool_result':
          return `[result of ${String(block['callId'])}]\n${contentText(block['content'])}`;
        default:
          return json(raw);
      }
    })
    .join('\n');
}

function sourceOf(data: Data): { kind: string; sender?: string } {
  const source = asData(data['source']);
  const kind = typeof source['kind'] === 'string' ? source['kind'] : 'user';
  return typeof source['senderSessionId'] === 'string' ? { kind, sender: source['senderSessionId'] } : { kind };
}

function usageNote(data: Data): string {
  const usage = asData(data['usage']);
  if (typeof usage['inputTokens'] !== 'number') return '';
  return ` · ${usage['inputTokens']} in / ${String(usage['outputTokens'])} out tokens`;
}

function reasonText(reason: Data): string {
  const kind = String(reason['kind'] ?? 'unknown');
  if (kind === 'error') {
    const error = asData(reason['error']);
    return `error: ${String(error['code'] ?? '')} ${String(error['message'] ?? '')}`.trim();
  }
  if (kind === 'aborted') {
    const cause = asData(reason['cause']);
    return `aborted (${String(cause['kind'] ?? 'unknown')}${typeof cause['reason'] === 'string' ? `: ${cause['reason']}` : ''})`;
  }
  return kind;
}

/** One event as an entry, or undefined when the transcript leaves it out. */
export function entryOf(event: SessionEvent): TranscriptEntry | undefined {
  if (SKIPPED.has(event.type)) return undefined;
  const data = asData(event.data);
  const base = { seq: event.seq, time: event.time };
  switch (event.type) {
    case 'user/message': {
      const { kind, sender } = sourceOf(data);
      const body = contentText(data['content']);
      if (kind === 'subagent-report') return { ...base, kind: 'report', title: `report from ${sender ?? 'a child'}`, text: body };
      if (kind === 'subagent-settled') return { ...base, kind: 'notice', title: `notice: ${sender ?? 'a child'} settled`, text: body };
      return { ...base, kind: 'message', title: kind === 'user' ? 'user' : `message from ${kind}${sender ? ` ${sender}` : ''}`, text: body };
    }
    case 'inbox/accepted': {
      const { kind, sender } = sourceOf(data);
      const from = sender === undefined ? kind : `${kind} ${sender}`;
      return { ...base, kind: 'inbox', title: `accepted into the inbox (${String(data['target'])}) from ${from}` };
    }
    case 'inbox/discarded':
      return { ...base, kind: 'inbox', title: `discarded ${Array.isArray(data['ids']) ? data['ids'].length : 0} queued message(s)` };
    case 'assistant/message': {
      const interrupted = data['interrupted'] === true ? ' (interrupted)' : '';
      return { ...base, kind: 'assistant', title: `assistant${interrupted}${usageNote(data)}`, text: contentText(data['content']) };
    }
    case 'tool/call':
      return { ...base, kind: 'tool-call', title: `tool call ${String(data['name'])} (${String(data['callId'])})`, text: json(data['input']) };
    case 'tool/result': {
      const entry: TranscriptEntry = { ...base, kind: 'tool-result', title: `tool result ${String(data['name'])} (${String(data['callId'])})`, text: contentText(data['content']) };
      if (data['isError'] === true) {
        entry.isError = true;
        entry.title += typeof data['code'] === 'string' ? ` error ${data['code']}` : ' error';
      }
      return entry;
    }
    case 'turn/start':
      return { ...base, kind: 'turn-start', title: `turn ${String(data['turn'])} started` };
    case 'turn/end': {
      const reason = asData(data['reason']);
      const entry: TranscriptEntry = { ...base, kind: 'turn-end', title: `turn ${String(data['turn'])} ended: ${reasonText(reason)}` };
      if (reason['kind'] !== 'completed') entry.isError = true;
      return entry;
    }
    case 'subagent/descriptor':
      return { ...base, kind: 'descriptor', title: `delegated as ${String(data['mode'])} child via ${String(data['provider'])}`, text: json(data) };
    default:
      return { ...base, kind: 'event', title: event.type, text: json(event.data) };
  }
}
