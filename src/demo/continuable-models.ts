// The scripted models of `demo --continuable`: a planner that starts continuable children, sends
// each a follow-up and waits for them, and an analyst that reports a partial finding before it answers.
import type { ContentBlock } from '../seam/content.js';
import type { ModelAdapter, ModelChunk, ModelRequest } from '../runtime/models/types.js';
import type { ChunkAnalysis } from './analysis.js';
import { reply, type PlannedChild } from './models.js';

export const FOLLOW_UP = 'Now list the three largest files of your chunk.';

const textOf = (content: readonly ContentBlock[]): string => content.map((b) => (b.type === 'text' ? b.text : '')).join('');
const resultsOf = (request: ModelRequest) => request.messages.flatMap((m) => m.content).flatMap((b) => (b.type === 'tool_result' ? [b] : []));

/** The child: analyse its files, `report` the totals, answer; on the follow-up, answer from that analysis. */
export function createContinuableAnalystModel(): ModelAdapter {
  let calls = 0;
  return {
    stream(request) {
      const last = request.messages.at(-1)?.content ?? [];
      const result = last.find((b) => b.type === 'tool_result');
      const analysisText = resultsOf(request).find((r) => r.callId.startsWith('analyse_'));
      const analysis = analysisText && !analysisText.isError ? (JSON.parse(textOf(analysisText.content)) as ChunkAnalysis) : undefined;
      const totals = analysis ? `${analysis.files.length} files, ${analysis.lines} lines, ${analysis.tokens} tokens` : 'no analysis';
      const stop = (text: string) => reply([{ type: 'text-delta', text }, { type: 'finish', reason: 'stop' }], request);
      const call = (prefix: string, name: string, input: unknown) =>
        reply([{ type: 'tool-call', id: `${prefix}_${++calls}`, name, input }, { type: 'finish', reason: 'tool-calls' }], request);
      if (result?.type === 'tool_result' && result.callId.startsWith('analyse_')) return call('report', 'report', { output: `partial finding: ${totals}` });
      if (result?.type === 'tool_result') return stop(`Analysed ${totals}.`);
      const prompt = textOf(last);
      if (prompt.includes(FOLLOW_UP)) {
        const largest = [...(analysis?.files ?? [])].sort((a, b) => b.bytes - a.bytes).slice(0, 3);
        return stop(`The three largest files: ${largest.map((f) => `${f.path} (${f.bytes} bytes)`).join(', ') || 'none'}.`);
      }
      const files = prompt.split('\n').filter((line) => line.startsWith('- ')).map((line) => line.slice(2).trim());
      return call('analyse', 'analyse_files', { files });
    },
  };
}

/**
 * The planner: starts every chunk's child, waits until all are idle, sends each the follow-up,
 * waits again, then summarizes from the reports and closing messages it received.
 */
export function createContinuablePlannerModel(children: PlannedChild[]): ModelAdapter {
  let phase: 'start' | 'first' | 'second' | 'done' = 'start';
  const ids: string[] = [];
  let settled = new Set<string>();
  let waits = 0;
  // The last wait of the previous phase: its answer says nothing about the follow-up turns.
  let phaseWaits = 0;
  return {
    stream(request) {
      const calls = (list: { id: string; name: string; input: unknown }[]): AsyncGenerator<ModelChunk> =>
        reply([...list.map((c) => ({ type: 'tool-call' as const, ...c })), { type: 'finish', reason: 'tool-calls' }], request);
      const results = resultsOf(request);
      if (phase === 'start') {
        phase = 'first';
        return calls(children.map((child, i) => ({ id: `plan_${i + 1}`, name: 'subagent', input: { description: child.label, prompt: child.prompt } })));
      }
      if (phase === 'done') return reply([{ type: 'text-delta', text: 'Noted.' }, { type: 'finish', reason: 'stop' }], request);
      if (ids.length === 0) {
        for (const r of results.filter((r) => r.callId.startsWith('plan_'))) {
          const id = /started subagent (\S+)/.exec(textOf(r.content))?.[1];
          if (id !== undefined) ids.push(id);
        }
      }
      const last = results.findLast((r) => r.callId === `wait_${waits}`);
      if (last !== undefined && !last.isError && waits > phaseWaits) {
        const status = (JSON.parse(textOf(last.content)) as { status: Record<string, string> }).status;
        for (const [id, value] of Object.entries(status)) if (value !== 'running') settled.add(id);
      }
      const pending = ids.filter((id) => !settled.has(id));
      if (pending.length > 0 && waits < 200) return calls([{ id: `wait_${++waits}`, name: 'wait_agent', input: { agent_ids: pending, timeout_ms: 600_000 } }]);
      if (phase === 'first') {
        phase = 'second';
        settled = new Set();
        phaseWaits = waits;
        return calls(ids.map((id, i) => ({ id: `followup_${i + 1}`, name: 'send_message', input: { agent_id: id, message: FOLLOW_UP } })));
      }
      phase = 'done';
      const heard = request.messages.filter((m) => m.role === 'user').map((m) => textOf(m.content));
      const reports = heard.filter((t) => /partial finding: \d+ files/.test(t)).length;
      const largest = heard.filter((t) => t.includes('The three largest files')).length;
      // A start or follow-up the host refused (it was closing: Ctrl-C) is said, not counted as done.
      const refusedStarts = results.filter((r) => r.callId.startsWith('plan_') && r.isError).length;
      const followups = results.filter((r) => r.callId.startsWith('followup_'));
      const refused = followups.filter((r) => r.isError).length;
      const stopped = new Set(heard.flatMap((t) => [...t.matchAll(/Background subagent (\S+) stopped before finishing/g)].map((m) => m[1]))).size;
      const answer =
        refusedStarts === 0 && refused === 0 && stopped === 0
          ? `Started ${ids.length} continuable children and sent each a follow-up; all are idle. Heard ${reports} partial findings and ${largest} lists of largest files so far.`
          : `Started ${ids.length} of ${children.length} continuable children${refusedStarts === 0 ? '' : ` (${refusedStarts} refused)`}; ` +
            `sent ${followups.length - refused} of ${ids.length} follow-ups${refused === 0 ? '' : ` (${refused} refused)`}. ` +
            `Heard ${reports} partial findings, ${largest} lists of largest files and ${stopped} notices of a child stopped before finishing so far.`;
      return reply([{ type: 'text-delta', text: answer }, { type: 'finish', reason: 'stop' }], request);
    },
  };
}
