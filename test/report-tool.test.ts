// The report tool: present only in continuable children, delivers the child's interim finding to
// its parent without ending the child's turn, and validates its input and options.
import { describe, expect, it } from 'vitest';
import { inProcessProvider, reportTool, subagentTool, text, type ModelSpec } from 'subagent-host';
import { closeAfterEach, deferred, recordingTool, tempFiles } from './helpers.js';
import { continuationHost, eventually, turnEnds, untilEvent, type Recorder } from './continuation-helpers.js';
import { call, lazyScript, messages, resultsOf, startedId, toolResults } from './tool-helpers.js';

const files = tempFiles('subagent-report-tool-');
const track = closeAfterEach();

async function setup(options: Parameters<typeof continuationHost>[1] = {}) {
  const host = await continuationHost(files.file(), options);
  track(host);
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

  it.each([
    ['quiet', false],
    ['next-step', true],
  ] as const)('with delivery %s, wakes an idle parent: %s', async (delivery, wakes) => {
    const gate = deferred();
    const { host, recorder } = await setup({ tools: [recordingTool('hold', { gate: gate.promise })] });
    reportTool(host, { delivery });
    const parent = await host.createAgent();
    const steps = [call('report', { output: 'partial: 3 files' }), call('hold', {}), { text: 'final: 5 files' }];
    const { childId } = await host.subagents.startContinuable({
      provider: 'in-process',
      label: 'count',
      request: { prompt: [text('count files')], parent, agentOptions: { model: { kind: 'scripted', steps } } },
    });
    // The report's tool result is logged once the report is accepted (and durable) in the parent.
    await untilEvent(host.agents.get(childId)!, 'tool/result');
    const accepted = parent.session.events.find((e) => e.type === 'inbox/accepted');
    expect(accepted?.data).toMatchObject({ target: 'next-step', source: { kind: 'subagent-report', senderSessionId: childId } });
    // A wake is synchronous with the acceptance: an idle parent that was woken has a turn to wait for.
    await parent.whenIdle();
    expect(parent.session.events.some((e) => e.type === 'turn/start')).toBe(wakes);
    gate.resolve();
    await recorder.until(() => recorder.ends.length === 1);
    await eventually(() => messages(parent).some((m) => m.source.kind === 'subagent-settled') && parent.status === 'idle');
    // A quiet report is context of the turn the settlement notice opens; it is delivered once.
    const reports = messages(parent).filter((m) => m.source.kind === 'subagent-report');
    expect(reports.map((m) => m.text)).toEqual([`Subagent ${childId} reported:\npartial: 3 files`]);
    expect(turnEnds(parent.session.events)).toHaveLength(wakes ? 2 : 1);
  });

  it('refuses a blank report: it would spend a turn of the parent it wakes on nothing', async () => {
    const { host, recorder } = await setup();
    reportTool(host);
    const parent = await host.createAgent();
    const { childId } = await host.subagents.startContinuable({
      provider: 'in-process',
      label: 'blank',
      request: { prompt: [text('go')], parent, agentOptions: { model: { kind: 'scripted', steps: [call('report', { output: '  \n' }), { text: 'done' }] } } },
    });
    await recorder.until(() => recorder.ends.length === 1);
    expect(toolResults(host.agents.get(childId)!)[0]).toMatchObject({ isError: true, code: 'INVALID_TOOL_INPUT' });
    expect(parent.session.events.some((e) => e.type === 'inbox/accepted' && (e.data as { source: { kind: string } }).source.kind === 'subagent-report')).toBe(false);
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

  it('refuses a second report tool on one host (DUPLICATE_TOOL) until the first is disposed', async () => {
    const { host } = await setup();
    const dispose = reportTool(host);
    expect(() => reportTool(host)).toThrow(expect.objectContaining({ code: 'DUPLICATE_TOOL' }));
    dispose();
    dispose();
    reportTool(host)();
  });

  // Otherwise every continuable child's start would fail on the duplicate name, as a tool error its parent's model cannot act on.
  it('refuses to install over a host tool named report (DUPLICATE_TOOL)', async () => {
    const { host } = await setup();
    const remove = host.tools.register(recordingTool('report'));
    expect(() => reportTool(host)).toThrow(expect.objectContaining({ code: 'DUPLICATE_TOOL', message: expect.stringContaining('host.tools') }));
    remove();
    reportTool(host)();
  });

  // Registered later, it would make every continuable start fail (its child inherits it and gets report too): refused at the registration.
  it('keeps the name report free in host.tools while installed: a later host tool of that name is refused (DUPLICATE_TOOL)', async () => {
    const { host, recorder } = await setup();
    const dispose = reportTool(host);
    const refused = expect.objectContaining({ code: 'DUPLICATE_TOOL', message: expect.stringContaining('reportTool is installed on this host') });
    expect(() => host.tools.register(recordingTool('report'))).toThrow(refused);
    host.subagents.registerProvider(inProcessProvider(host, { name: 'late' }));
    expect(() => subagentTool(host, { provider: 'late', toolName: 'report' })).toThrow(refused);
    expect(host.tools.get('report')).toBeUndefined();
    // Continuable children still start, and their report tool is the report tool.
    const parent = await host.createAgent();
    const { childId } = await host.subagents.startContinuable({
      provider: 'in-process',
      label: 'count',
      request: { prompt: [text('count files')], parent, agentOptions: { model: REPORTING } },
    });
    await recorder.until(() => recorder.ends.length === 1);
    expect(toolResults(host.agents.get(childId)!)).toStrictEqual([expect.objectContaining({ name: 'report', content: [{ type: 'text', text: expect.stringContaining('messageId') }] })]);
    dispose();
    host.tools.register(recordingTool('report'));
    expect(() => reportTool(host)).toThrow(expect.objectContaining({ code: 'DUPLICATE_TOOL' }));
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
