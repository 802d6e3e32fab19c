// Helpers of the model-facing tool tests: a scripted parent whose steps are built when the model
// asks for them (so a step can name a child id an earlier tool result returned), and result readers.
import { scriptedModel, type Agent, type ModelAdapter, type ScriptedStep, type SessionEvent } from 'subagent-host';
import { dataOf } from './helpers.js';

export interface ToolResultData {
  name: string;
  content: { type: string; text: string }[];
  isError?: boolean;
  code?: string;
}

/** A scripted model over steps computed lazily; call ids stay unique across steps. */
export function lazyScript(steps: (ScriptedStep | (() => ScriptedStep))[]): ModelAdapter {
  let next = 0;
  let callId = 1;
  return {
    async *stream(request) {
      const entry = steps[next++];
      const step = typeof entry === 'function' ? entry() : entry;
      for await (const chunk of scriptedModel(step ? [step] : []).stream(request)) {
        yield chunk.type === 'tool-call' ? { ...chunk, id: `call_${callId++}` } : chunk;
      }
    },
  };
}

export const call = (name: string, input: unknown): ScriptedStep => ({ toolCalls: [{ name, input }] });

/** The agent's tool results, in order. */
export function toolResults(agent: Agent): ToolResultData[] {
  return resultsOf(agent.session.events);
}

/** The tool results of a log, in order. */
export function resultsOf(events: readonly SessionEvent[]): ToolResultData[] {
  return dataOf<ToolResultData>(events, 'tool/result');
}

/** The text of the agent's n-th tool result. */
export function resultText(agent: Agent, n: number): string {
  const result = toolResults(agent)[n];
  if (!result) throw new Error(`no tool result #${n} in ${agent.id}'s log`);
  return result.content.map((block) => block.text).join('');
}

/** The JSON a tool returned as its n-th result. */
export function resultJson(agent: Agent, n: number): unknown {
  return JSON.parse(resultText(agent, n));
}

/** The id in a `started subagent <id>` / `started task <id>` result. */
export function startedId(agent: Agent, n: number): string {
  const match = /^started (?:subagent|task) (\S+)$/.exec(resultText(agent, n));
  if (!match) throw new Error(`tool result #${n} is not a start: ${resultText(agent, n)}`);
  return match[1]!;
}

/** The user messages of a log with their source and text. */
export function messages(agent: Agent): { source: { kind: string; senderSessionId?: string }; text: string }[] {
  return dataOf<{ source: { kind: string; senderSessionId?: string }; content: { type: string; text?: string }[] }>(agent.session.events, 'user/message').map(
    (message) => ({ source: message.source, text: message.content.map((block) => block.text ?? '').join('\n') }),
  );
}
