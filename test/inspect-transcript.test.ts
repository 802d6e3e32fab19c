// What the inspector's transcript tells a reader about runs that went wrong or were forked: failed
// tool calls with their code, turns that ended in error, cancelled or stopped by a budget (with the
// interrupted answer and the reached limit), messages a cancel discarded, a model's reasoning, images of a
// prompt, and a fork's inherited prefix folded into one entry.
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHost, inProcessProvider, text, type Agent, type ContentBlock, type Host, type ScriptedStep, type SubagentBudget } from 'subagent-host';
import { tempFiles } from './helpers.js';
import { rawGet, startInspect, type InspectProcess } from './inspect-helpers.js';

interface Entry {
  kind: string;
  title: string;
  text?: string;
  isError?: boolean;
}

const files = tempFiles('inspect-transcript-');
const db = files.file();
let server: InspectProcess;
let failingId: string;
let forkId: string;
let forkParentId: string;
/** The fork's own token counts, as the library lists them (its inherited turns left out). */
let forkTokens: { inputTokens: number; outputTokens: number };
let cancelledId: string;
let budgetedId: string;
let discardedId: string;
let reasoningId: string;

async function delegate(host: Host, provider: string, parent: Agent, steps: ScriptedStep[], more: { prompt?: ContentBlock[]; budget?: SubagentBudget } = {}): Promise<string> {
  const cancel = new AbortController();
  const run = await host.subagents.start(provider, {
    label: provider,
    prompt: more.prompt ?? [text('work')],
    ...(more.budget ? { budget: more.budget } : {}),
    parent,
    signal: cancel.signal,
    agentOptions: { model: { kind: 'scripted', steps } },
  });
  // A hanging model waits for its cancel, which comes once the child has streamed its text.
  if (steps.some((step) => 'finish' in step && step.finish === 'hang')) {
    while (!(host.sessions.get(run.id)?.events ?? []).some((event) => event.type === 'assistant/chunk')) await new Promise((resolve) => setTimeout(resolve, 10));
    cancel.abort();
  }
  await run.result;
  await run.dispose();
  return run.id;
}

/** An OpenAI-compatible server on loopback whose every answer streams reasoning, then text. */
async function reasoningModel(): Promise<{ baseURL: string; close(): Promise<void> }> {
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      const chunk = (delta: object, finish: string | null) => `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 0, model: 'm', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.end(`${chunk({ role: 'assistant', reasoning_content: 'weighing the options' }, null)}${chunk({ content: 'the answer' }, null)}${chunk({}, 'stop')}data: [DONE]\n\n`);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    baseURL: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

beforeAll(async () => {
  const host = await createHost({ providers: false, persistence: { sqlite: db } });
  try {
    host.subagents.registerProvider(inProcessProvider(host));
    host.subagents.registerProvider(inProcessProvider(host, { fork: true }));
    const parent = await host.createAgent({ agentOptions: { model: { kind: 'scripted', steps: [{ text: 'the parent context' }] } } });
    parent.followup([text('what the fork inherits')]);
    await parent.whenIdle();
    failingId = await delegate(host, 'in-process', parent, [{ toolCalls: [{ name: 'no_such_tool', input: { a: 1 } }] }, { finish: 'error' }]);
    forkId = await delegate(host, 'in-process-fork', parent, [{ text: 'forked answer' }]);
    forkParentId = parent.id;
    const forkRow = (await host.subagents.listChildren(parent.id)).find((row) => row.id === forkId);
    if (forkRow?.kind !== 'child') throw new Error('the fork is not listed');
    forkTokens = { inputTokens: forkRow.usage.inputTokens, outputTokens: forkRow.usage.outputTokens };
    cancelledId = await delegate(host, 'in-process', parent, [{ finish: 'hang', text: 'partial' }], {
      prompt: [text('look at this'), { type: 'image', mimeType: 'image/png', data: 'iVBORw0KGgo=' }],
    });
    budgetedId = await delegate(host, 'in-process', parent, [{ toolCalls: [{ name: 'no_such_tool', input: {} }] }, { text: 'never' }], { budget: { toolCalls: 1 } });

    // A root cancelled with a message still waiting in its inbox.
    const busy = await host.createAgent({ agentOptions: { model: { kind: 'scripted', steps: [{ finish: 'hang', text: 'partial' }] } } });
    busy.followup([text('first')]);
    while (!busy.session.events.some((event) => event.type === 'assistant/chunk')) await new Promise((resolve) => setTimeout(resolve, 10));
    busy.followup([text('second')]);
    busy.cancel();
    await busy.whenIdle();
    discardedId = busy.id;

    // A root whose (OpenAI-compatible) model reasons before it answers.
    const model = await reasoningModel();
    try {
      process.env['INSPECT_TRANSCRIPT_KEY'] = 'sk-test';
      const thinker = await host.createAgent({ agentOptions: { model: { kind: 'openai', baseURL: model.baseURL, model: 'm', apiKeyEnv: 'INSPECT_TRANSCRIPT_KEY' } } });
      thinker.followup([text('think first')]);
      await thinker.whenIdle();
      reasoningId = thinker.id;
    } finally {
      delete process.env['INSPECT_TRANSCRIPT_KEY'];
      await model.close();
    }
  } finally {
    await host.close();
  }
  server = await startInspect(db);
});

afterAll(async () => {
  await server?.stop();
});

async function entriesOf(id: string): Promise<Entry[]> {
  const answer = await rawGet(server.url, `/api/sessions/${encodeURIComponent(id)}`);
  expect(answer.status).toBe(200);
  return (JSON.parse(answer.body) as { entries: Entry[] }).entries;
}

describe('inspector transcript', () => {
  it('shows a failed tool call as an error result with its code, and the turn that ended in error', async () => {
    const entries = await entriesOf(failingId);
    const call = entries.find((entry) => entry.kind === 'tool-call');
    expect(call?.title).toMatch(/^tool call no_such_tool \(/);
    expect(JSON.parse(call?.text ?? 'null')).toEqual({ a: 1 });
    const result = entries.find((entry) => entry.kind === 'tool-result');
    expect(result).toMatchObject({ isError: true });
    expect(result?.title).toMatch(/^tool result no_such_tool \(.+\) error [A-Z_]+$/);
    const end = entries.filter((entry) => entry.kind === 'turn-end').at(-1);
    expect(end).toMatchObject({ isError: true });
    expect(end?.title).toMatch(/^turn \d+ ended: error: [A-Z_]+ \S/);
  });

  it("folds a fork's inherited prefix into one seed entry, then shows the fork's own turn", async () => {
    const entries = await entriesOf(forkId);
    expect(entries[0]).toMatchObject({ kind: 'seed' });
    expect(entries[0]?.title).toMatch(/^\d+ events inherited from the parent \(fork seed\)$/);
    expect(entries[0]?.text).toContain('what the fork inherits');
    expect(entries.filter((entry) => entry.kind === 'seed')).toHaveLength(1);
    expect(entries.slice(1).map((entry) => entry.text ?? '').join('\n')).toContain('forked answer');
    expect(entries.slice(1).map((entry) => entry.text ?? '').join('\n')).not.toContain('what the fork inherits');
  });

  it("counts a fork's own tokens, not those of the parent turns it inherits, in its transcript and its tree node", async () => {
    // The parent's turn reported tokens too: summed with the seed, the fork would show them as its own.
    expect(forkTokens.outputTokens).toBeGreaterThan(0);
    const transcript = await rawGet(server.url, `/api/sessions/${encodeURIComponent(forkId)}`);
    expect((JSON.parse(transcript.body) as { usage?: unknown }).usage).toEqual(forkTokens);
    const tree = await rawGet(server.url, `/api/roots/${encodeURIComponent(forkParentId)}/tree`);
    const nodes = (JSON.parse(tree.body) as { nodes: { id: string; usage?: unknown }[] }).nodes;
    expect(nodes.find((node) => node.id === forkId)?.usage).toEqual(forkTokens);
  });

  it('shows an image of the prompt as a note of its type and size, and a cancelled turn as aborted with its cause', async () => {
    const entries = await entriesOf(cancelledId);
    expect(entries.find((entry) => entry.kind === 'message')).toMatchObject({ title: 'user', text: 'look at this\n[image image/png, 12 base64 characters]' });
    const end = entries.filter((entry) => entry.kind === 'turn-end').at(-1);
    expect(end).toMatchObject({ isError: true });
    expect(end?.title).toMatch(/^turn \d+ ended: aborted \(parent\)$/);
    expect(entries.find((entry) => entry.kind === 'assistant')).toMatchObject({ title: expect.stringMatching(/^assistant \(interrupted\)/), text: 'partial' });
  });

  it('shows a child stopped by its budget: the limit it reached, and the turn aborted with that reason', async () => {
    const entries = await entriesOf(budgetedId);
    const budget = entries.find((entry) => entry.title === 'subagent/budget');
    expect(budget?.kind).toBe('event');
    expect(JSON.parse(budget?.text ?? 'null')).toMatchObject({ limit: 'toolCalls' });
    const end = entries.filter((entry) => entry.kind === 'turn-end').at(-1);
    expect(end?.title).toMatch(/^turn 1 ended: aborted \(hook: budget: toolCalls limit 1 reached \(1 used, child budget\)\)$/);
  });

  it('shows the messages a cancel discarded from the inbox', async () => {
    const entries = await entriesOf(discardedId);
    expect(entries.filter((entry) => entry.kind === 'inbox').map((entry) => entry.title)).toContain('discarded 1 queued message(s)');
  });

  it("shows a model's reasoning before its answer", async () => {
    const entries = await entriesOf(reasoningId);
    expect(entries.find((entry) => entry.kind === 'assistant')?.text).toBe('[reasoning]\nweighing the options\nthe answer');
  });
});
