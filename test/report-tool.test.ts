// The report tool: present only in continuable children, delivers the child's interim finding to
// its parent without ending the child's turn, and validates its input and options.
import { afterEach, describe, expect, it } from 'vitest';
import { reportTool, subagentTool, text, type Host, type ModelSpec } from 'subagent-host';
import { tempFiles } from './helpers.js';
import { continuationHost, eventually, turnEnds, type Recorder } from './continuation-helpers.js';
import { call, lazyScript, messages, resultsOf, startedId, toolResults } from './tool-helpers.js';

const files = tempFiles('subagent-report-tool-');
let open: Host | undefined;
afterEach(async () => {
  await open?.close();
  open = undefined;
});

async function setup() {
  const host = await continuationHost(files.file());
  open = host;
  return { host, recorder: host.recorder as Recorder };
}

const REPORTING: ModelSpec = { kind: 'scripted', steps: [{ toolCalls: [{ name: 'report', input: { output: 'partial: 3 files' } }] }, { text: 'final: 5 files' }] };

describe('report tool', () => {
  it('reaches the parent from a continuable child and the child goes on to its answer', async () => {
    const { host, recorder } = await setup();
    reportTool(host);
    subagentTool(host, { provider: 'in-process', mode: 'continuable', agentOptions: { model: REPORTING } });
    const parent = await host.createAgent({ model: lazyScript([call('subagent', { description: 'count', prompt: 'count files' }), { text: 'waiting' }]) });
    parent.followup([text('go')]);
    await recorder.until(() => recorder.ends.length === 1);
    await eventually(() => messages(parent).some((m) => m.source.kind === 'subagent-settled') && parent.status === 'idle');
    const childId = startedId(parent, 0);
    const child = host.sessions.get(childId)!;
    const [reported] = toolResults(host.agents.get(childId)!);
    const { messageId } = JSON.parse(reported!.content[0]!.text) as { messageId: string };
    expect(reported).toMatchObject({ name: 'report' });
    expect(reported!.isError).toBeUndefined();
    expect(turnEnds(child.events)).toStrictEqual(['completed']);
    expect(recorder.ends[0]).toMatchObject({ stopReason: 'completed', lastAssistantMessage: [text('final: 5 files')] });
    const report = parent.session.events.find((e) => e.type === 'user/message' && (e.data as { id: string }).id === messageId);
    expect(report?.data).toMatchObject({
      source: { kind: 'subagent-report', senderSessionId: childId },
      content: [text(`Subagent ${childId} reported:`), text('partial: 3 files')],
    });
  });

  it('is absent from one-shot children', async () => {
    const { host } = await setup();
    reportTool(host);
    subagentTool(host, { provider: 'in-process', agentOptions: { model: REPORTING } });
    const parent = await host.createAgent({ model: lazyScript([call('subagent', { description: 'count', prompt: 'count files' }), { text: 'done' }]) });
    parent.followup([text('go')]);
    await parent.whenIdle();
    expect(host.tools.get('report')).toBeUndefined();
    const [entry] = await host.subagents.listChildren(parent.id);
    expect(entry).toMatchObject({ kind: 'child', mode: 'one-shot' });
    const stored = await host.persistence!.load(entry!.id);
    expect(resultsOf(stored!.events)).toStrictEqual([expect.objectContaining({ name: 'report', isError: true, code: 'UNKNOWN_TOOL' })]);
  });

  it('stops installing once disposed, and rejects a bad delivery', async () => {
    const { host } = await setup();
    expect(() => reportTool(host, { delivery: 'loud' as never })).toThrow(expect.objectContaining({ code: 'INVALID_OPTIONS' }));
    reportTool(host)();
    subagentTool(host, { provider: 'in-process', mode: 'continuable', agentOptions: { model: REPORTING } });
    const parent = await host.createAgent({ model: lazyScript([call('subagent', { description: 'count', prompt: 'count files' }), { text: 'waiting' }]) });
    parent.followup([text('go')]);
    await eventually(() => messages(parent).some((m) => m.source.kind === 'subagent-settled') && parent.status === 'idle');
    const child = host.sessions.get(startedId(parent, 0))!;
    expect(resultsOf(child.events)).toStrictEqual([expect.objectContaining({ name: 'report', code: 'UNKNOWN_TOOL' })]);
  });
});
