// Builds the chat-completions request body from a ModelRequest: our content blocks mapped onto
// OpenAI's message roles, as DeepSeek and other compatible servers accept them.
import type { ContentBlock, ImageBlock, ToolCallBlock } from '../../seam/content.js';
import { textOf } from '../../seam/content.js';
import { wellFormedJson } from '../../seam/parse.js';
import type { JsonSchema } from '../../seam/agent-types.js';
import type { ModelMessage, ModelRequest } from './types.js';

/** A user content part: text or an inline (data URL) image. */
export type WireContentPart =
  | { type: 'text'; text: string }
  | { type: 'image_url'; image_url: { url: string } };

export interface WireToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

export interface WireAssistantMessage {
  role: 'assistant';
  content: string;
  tool_calls?: WireToolCall[];
  reasoning_content?: string;
}

/** One chat-completions message. Fields are present only when set: servers reject `null`s. */
export type WireMessage =
  | { role: 'system'; content: string }
  | { role: 'user'; content: string | WireContentPart[] }
  | WireAssistantMessage
  | { role: 'tool'; tool_call_id: string; content: string };

export interface WireTool {
  type: 'function';
  function: { name: string; description: string; parameters: JsonSchema };
}

/** The JSON body POSTed to `/chat/completions`. */
export interface WireRequest {
  model: string;
  messages: WireMessage[];
  stream: true;
  stream_options: { include_usage: true };
  tools?: WireTool[];
  max_tokens?: number;
}

/** The arguments string of a tool call: a string input is the raw text the model sent earlier. */
function argumentsOf(call: ToolCallBlock): string {
  if (typeof call.input === 'string') return call.input;
  // The arguments are JSON text inside the body: their own escapes would reach the server's parser too.
  return wellFormedJson(call.input);
}

function userMessages(content: readonly ContentBlock[]): WireMessage[] {
  const out: WireMessage[] = [];
  // A `tool` message holds text only: images a tool returned go in the user message after them.
  const parts: WireContentPart[] = [];
  let hasImage = false;
  // Tool results come first: a `tool` message must directly follow the assistant's tool calls.
  for (const block of content) {
    if (block.type !== 'tool_result') continue;
    const images = block.content.filter((part): part is ImageBlock => part.type === 'image');
    out.push({ role: 'tool', tool_call_id: block.callId, content: textOf(block.content) || (images.length > 0 ? '(images: in the next message)' : '(no output)') });
    if (images.length === 0) continue;
    hasImage = true;
    parts.push({ type: 'text', text: `Images returned by tool call ${block.callId}:` });
    for (const image of images) parts.push({ type: 'image_url', image_url: { url: `data:${image.mimeType};base64,${image.data}` } });
  }
  // Text blocks of one message are lines apart: a notice's sentence and the child's closing message
  // (blocks of their own) must not run together as one line.
  for (const block of content) {
    if (block.type === 'text') {
      const last = parts.at(-1);
      if (last?.type === 'text') last.text += `\n${block.text}`;
      else parts.push({ type: 'text', text: block.text });
    } else if (block.type === 'image') {
      hasImage = true;
      parts.push({ type: 'image_url', image_url: { url: `data:${block.mimeType};base64,${block.data}` } });
    }
  }
  if (hasImage) out.push({ role: 'user', content: parts });
  else if (parts.length > 0) out.push({ role: 'user', content: parts.map((part) => (part.type === 'text' ? part.text : '')).join('') });
  return out;
}

function assistantMessage(content: readonly ContentBlock[]): WireAssistantMessage {
  // `content` is never null: DeepSeek rejects an assistant message without content or tool calls.
  const message: WireAssistantMessage = { role: 'assistant', content: textOf(content) };
  const calls = content.filter((block): block is ToolCallBlock => block.type === 'tool_call');
  if (calls.length > 0) {
    message.tool_calls = calls.map((call) => ({
      id: call.id,
      type: 'function',
      function: { name: call.name, arguments: argumentsOf(call) },
    }));
  }
  // DeepSeek's thinking mode needs its reasoning back on tool-call turns; others ignore it.
  let reasoning = '';
  for (const block of content) if (block.type === 'reasoning') reasoning += block.text;
  if (reasoning !== '') message.reasoning_content = reasoning;
  return message;
}

/** Maps the conversation onto wire messages, system prompt first. */
export function toWireMessages(system: string | undefined, messages: readonly ModelMessage[]): WireMessage[] {
  const out: WireMessage[] = [];
  if (system !== undefined && system !== '') out.push({ role: 'system', content: system });
  for (const message of messages) {
    if (message.role === 'assistant') out.push(assistantMessage(message.content));
    else out.push(...userMessages(message.content));
  }
  return out;
}

/** The complete request body for `model`. */
export function toWireRequest(model: string, request: ModelRequest): WireRequest {
  const body: WireRequest = {
    model,
    messages: toWireMessages(request.system, request.messages),
    stream: true,
    stream_options: { include_usage: true },
  };
  if (request.tools.length > 0) {
    body.tools = request.tools.map((tool) => ({
      type: 'function',
      function: { name: tool.name, description: tool.description, parameters: tool.parameters },
    }));
  }
  if (request.maxTokens !== undefined) body.max_tokens = request.maxTokens;
  return body;
}
