// Values a log, a store or a thread port cannot carry must not get into a log by changing after
// they were checked (a getter that answers the check with plain text and the copy with a BigInt or
// arrays nested thousands deep), and a stored log nested deeper than any writer stores is corrupt.
import Database from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import { createHost, text, type ContentBlock, type Host, type SessionEvent } from 'subagent-host';
import { dataOf, tempFiles } from './helpers.js';
// @ts-expect-error: a plain JavaScript fixture without types.
import { shiftingBlock } from './fixtures/shifting-tools.mjs';

const files = tempFiles('unsendable-');
const hosts: Host[] = [];
afterEach(async () => {
  await Promise.all(hosts.splice(0).map((host) => host.close()));
});

async function newHost(options: Parameters<typeof createHost>[0] = {}): Promise<Host> {
  const host = await createHost(options);
  hosts.push(host);
  return host;
}

const block = shiftingBlock as (reads: number, turns: 'bigint' | 'throws') => ContentBlock;
const shiftingTools = (turns: 'bigint' | 'deep', reads: number) => new URL(`./fixtures/shifting-tools.mjs?turns=${turns}&reads=${reads}`, import.meta.url).href;
const callShifting = { kind: 'scripted' as const, steps: [{ toolCalls: [{ name: 'shifting', input: {} }] }, { text: 'done' }] };

/** However many reads the block answers plainly, its call either kept plain text or failed CONTRACT_VIOLATION. */
function expectPlainOrRefused(events: readonly SessionEvent[]): void {
  const [result] = dataOf<{ content: ContentBlock[]; isError?: true; code?: string }>(events, 'tool/result');
  if (result?.isError) expect(result).toMatchObject({ code: 'CONTRACT_VIOLATION', content: [{ type: 'text', text: expect.stringContaining('tool shifting returned content[0].text') }] });
  else expect(result?.content).toStrictEqual([{ type: 'text', text: 'plain' }]);
  expect(dataOf(events, 'turn/end')).toStrictEqual([{ turn: 1, reason: { kind: 'completed' } }]);
}

// Each count of plain reads puts the change at another read: before, during or after the copy.
const readCounts = [1, 2, 3, 4, 5, 6];

describe('a value that changes after it was checked', () => {
  it.each(readCounts)('a spawn child whose tool result nests 2,000 deep from read %i on: the run settles and the log holds no such value', async (reads) => {
    const host = await newHost({ pool: { maxThreads: 1 } });
    const parent = await host.createAgent();
    const run = await host.subagents.start('spawn', {
      prompt: [text('go')],
      parent,
      signal: new AbortController().signal,
      agentOptions: { model: callShifting, toolModules: [shiftingTools('deep', reads)] },
    });
    expect(await run.result).toMatchObject({ stopReason: 'completed', output: [{ type: 'text', text: 'done' }] });
    expectPlainOrRefused(host.sessions.get(run.id)!.events);
    await run.dispose();
  });

  it.each(readCounts)('a tool result that turns BigInt from read %i on: the memory store takes every append', async (reads) => {
    const host = await newHost({ persistence: 'memory', providers: false });
    const agent = await host.createAgent({ agentOptions: { model: callShifting, toolModules: [shiftingTools('bigint', reads)] } });
    agent.followup([text('go')]);
    await agent.whenIdle();
    expectPlainOrRefused(agent.session.events);
    await host.sessions.flush(agent.id);
    expect((await host.persistence!.load(agent.id))?.events).toHaveLength(agent.session.events.length);
  });

  const followups = readCounts.flatMap((reads) => (['bigint', 'throws'] as const).map((turns) => [reads, turns] as const));
  it.each(followups)('a follow-up whose text changes from read %i on (%s) is taken as checked or refused INVALID_REQUEST, and the store takes the log', async (reads, turns) => {
    const host = await newHost({ persistence: 'memory', providers: false });
    const agent = await host.createAgent();
    let refused: unknown;
    try {
      agent.followup([block(reads, turns)]);
    } catch (error) {
      refused = error;
    }
    if (refused === undefined) expect(dataOf(agent.session.events, 'inbox/accepted')[0]).toMatchObject({ content: [{ type: 'text', text: 'plain' }] });
    else expect(refused).toMatchObject({ code: 'INVALID_REQUEST', message: expect.stringMatching(/^message content(\[0\]\.text)? /) });
    await agent.whenIdle();
    await host.sessions.flush(agent.id);
    expect((await host.persistence!.load(agent.id))?.events).toHaveLength(agent.session.events.length);
  });
});

describe('a stored log nested deeper than any writer stores', () => {
  /** A SQLite store holding one finished session whose `user/message` data gets `extra` nested `depth` deep. */
  async function storedWithNesting(depth: number): Promise<{ file: string; id: string }> {
    const file = files.file();
    const writer = await createHost({ persistence: { sqlite: file }, providers: false });
    const agent = await writer.createAgent();
    agent.followup([text('hi')]);
    await agent.whenIdle();
    const id = agent.id;
    await writer.close();
    let nested = '"x"';
    for (let level = 0; level < depth; level++) nested = `[${nested}]`;
    const db = new Database(file);
    const row = db.prepare("SELECT seq, data FROM events WHERE session_id = ? AND type = 'user/message'").get(id) as { seq: number; data: string };
    db.prepare('UPDATE events SET data = ? WHERE session_id = ? AND seq = ?').run(`${row.data.slice(0, -1)},"extra":${nested}}`, id, row.seq);
    db.close();
    return { file, id };
  }

  it('100,000 levels: load and resume fail CORRUPT_DATA naming the session and event, and the host goes on', async () => {
    const { file, id } = await storedWithNesting(100_000);
    const host = await newHost({ persistence: { sqlite: file }, providers: false });
    const corrupt = { name: 'SubagentError', code: 'CORRUPT_DATA', message: expect.stringMatching(new RegExp(`"${id}" is corrupt: event \\d+ holds data nested more than \\d+ levels deep`)) };
    await expect(host.persistence!.load(id)).rejects.toMatchObject(corrupt);
    await expect(host.agents.resume({ sessionId: id })).rejects.toMatchObject(corrupt);
    const other = await host.createAgent();
    other.followup([text('still here')]);
    await other.whenIdle();
    expect(dataOf(other.session.events, 'turn/end')).toHaveLength(1);
  });

  it('data nested 256 levels deep, as deep as a log holds, loads and resumes', async () => {
    const { file, id } = await storedWithNesting(255);
    const host = await newHost({ persistence: { sqlite: file }, providers: false });
    const handle = await host.agents.resume({ sessionId: id });
    expect(handle.agent.session.events.length).toBeGreaterThan(0);
  });
});
