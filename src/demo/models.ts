// The demo's deterministic models. The analyst (children) is loaded by module specifier so it can
// be built inside worker threads; the planner (parent) runs in the main thread.
import type { ContentBlock } from '../seam/content.js';
import { estimatedUsage } from '../runtime/models/scripted.js';
import type { ModelAdapter, ModelChunk, ModelRequest } from '../runtime/models/types.js';
import { decodeSignature, similarity, type ChunkAnalysis } from './analysis.js';

export const CHAOS_CRASH = 'CHAOS: crash your thread';
export const CHAOS_SPIN = 'CHAOS: spin forever';

function lastMessage(request: ModelRequest): ContentBlock[] {
  return request.messages.at(-1)?.content ?? [];
}

/** The answer `chunks` (the last one its finish), with the scripted model's deterministic usage before the finish. */
export async function* reply(chunks: [...ModelChunk[], ModelChunk & { type: 'finish' }], request: ModelRequest): AsyncGenerator<ModelChunk> {
  const text = chunks.map((chunk) => (chunk.type === 'text-delta' ? chunk.text : '')).join('');
  const calls = chunks.filter((chunk) => chunk.type === 'tool-call').length;
  yield* chunks.slice(0, -1);
  yield { type: 'usage', usage: estimatedUsage(request, text, calls) };
  return yield chunks[chunks.length - 1]!;
}

/** The analyst: asks its tool to analyse the files listed in its prompt, then returns the JSON. */
export function createAnalystModel(): ModelAdapter {
  let calls = 0;
  return {
    stream(request) {
      const last = lastMessage(request);
      const result = last.find((block) => block.type === 'tool_result');
      if (result?.type === 'tool_result') {
        const text = result.content.map((b) => (b.type === 'text' ? b.text : '')).join('');
        return reply([{ type: 'text-delta', text }, { type: 'finish', reason: result.isError ? 'error' : 'stop' }], request);
      }
      const prompt = last.map((b) => (b.type === 'text' ? b.text : '')).join('\n');
      const id = `call_${++calls}`;
      const chaos = prompt.includes(CHAOS_CRASH) ? 'crash_thread' : prompt.includes(CHAOS_SPIN) ? 'spin_forever' : undefined;
      if (chaos) return reply([{ type: 'tool-call', id, name: chaos, input: {} }, { type: 'finish', reason: 'tool-calls' }], request);
      const files = prompt.split('\n').filter((line) => line.startsWith('- ')).map((line) => line.slice(2).trim());
      return reply([{ type: 'tool-call', id, name: 'analyse_files', input: { files } }, { type: 'finish', reason: 'tool-calls' }], request);
    },
  };
}

export interface PlannedChild {
  label: string;
  prompt: string;
}

/** A one-line account of every chunk's analysis, plus near-duplicate files across chunks. */
export function summarize(results: { label: string; text: string; isError: boolean }[]): string {
  const analyses: ChunkAnalysis[] = [];
  const failures: string[] = [];
  for (const r of results) {
    try {
      if (r.isError) throw new Error(r.text.split('\n', 1)[0]);
      analyses.push(JSON.parse(r.text) as ChunkAnalysis);
    } catch (error) {
      failures.push(`${r.label}: ${(error as Error).message}`);
    }
  }
  const files = analyses.flatMap((a) => a.files);
  const signatures = files.map((file) => decodeSignature(file.signature));
  const pairs: string[] = [];
  for (let i = 0; i < files.length; i++) {
    for (let j = i + 1; j < files.length; j++) {
      const score = similarity(signatures[i]!, signatures[j]!);
      if (score >= 0.5) pairs.push(`${files[i]!.path} ~ ${files[j]!.path} (${Math.round(score * 100)}%)`);
    }
  }
  const total = (key: 'lines' | 'tokens' | 'bytes') => analyses.reduce((sum, a) => sum + a[key], 0);
  return [
    `Analysed ${files.length} files: ${total('lines')} lines, ${total('tokens')} tokens, ${total('bytes')} bytes.`,
    pairs.length > 0 ? `Near-duplicate files: ${pairs.slice(0, 5).join('; ')}` : 'No near-duplicate files.',
    failures.length > 0 ? `Children that failed: ${failures.join('; ')}` : 'Every child finished.',
  ].join('\n');
}

/** The planner: delegates one `subagent` call per chunk in one answer, then writes the summary. */
export function createPlannerModel(children: PlannedChild[], toolName = 'subagent'): ModelAdapter {
  return {
    stream(request) {
      const last = lastMessage(request);
      const results = last.filter((block) => block.type === 'tool_result');
      if (results.length === 0) {
        const calls: ModelChunk[] = children.map((child, i) => ({
          type: 'tool-call',
          id: `plan_${i + 1}`,
          name: toolName,
          input: { description: child.label, prompt: child.prompt },
        }));
        return reply([...calls, { type: 'finish', reason: 'tool-calls' }], request);
      }
      const summary = summarize(
        results.map((block, i) => ({
          label: children[i]?.label ?? `child ${i + 1}`,
          text: block.type === 'tool_result' ? block.content.map((b) => (b.type === 'text' ? b.text : '')).join('') : '',
          isError: block.type === 'tool_result' && block.isError === true,
        })),
      );
      return reply([{ type: 'text-delta', text: summary }, { type: 'finish', reason: 'stop' }], request);
    },
  };
}
