// Input to worker children: every message a main-side agent accepted reaches the child's log with
// its id and source, or is refused (`CLOSED`) at once; none vanishes between the two threads.
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { createHost, text, type Host, type MessageId, type MessageSource, type ScriptedStep, type SessionEvent, type SubagentStartRequest } from 'subagent-host';
import { dataOf, deferred, recordingTool, tempFiles } from './helpers.js';

let host: Host | undefined;

afterEach(async () => {
  await host?.close();
  host = undefined;
});

async function setup(options: Parameters<typeof createHost>[0] = {}) {
  host = await createHost({ ...options, pool: { minThreads: 1, maxThreads: 2, cancelGraceMs: 600_000, ...options.pool } });
  return { host, parent: await host.createAgent() };
}

const toolModule = new URL('./fixtures/worker-tools.mjs', import.meta.url).href;
const slowModule = new URL('./fixtures/slow-tools.mjs', import.meta.url).href;
const files = tempFiles('worker-input-');

function request(parent: SubagentStartRequest['parent'], steps: ScriptedStep[]): SubagentStartRequest {
  return { prompt: [text('work')], parent, signal: new AbortController().signal, agentOptions: { model: { kind: 'scripted', steps }, toolModules: [toolModule] } };
}

type Accepted = { id: MessageId; source: MessageSource; target: string };
const accepted = (events: readonly SessionEvent[]) => dataOf<Accepted>(events, 'inbox/accepted');

/** The awaited delivery of a worker child's main-side agent (beyond the synchronous Agent methods). */
interface Sender {
  send(target: 'next-turn' | 'next-step', content: ReturnType<typeof text>[], opts: { wake: boolean; source?: MessageSource }): Promise<MessageId>;
}

describe('input to worker children', () => {
  it('carries each message’s id and source into the child’s log', async () => {
    const gate = deferred();
    const { host, parent } = await setup({ tools: [recordingTool('hold', { gate: gate.promise })] });
    const run = await host.subagents.start('spawn', request(parent, [{ toolCalls: [{ name: 'hold', input: { value: 'x' } }] }, { text: 'first' }, { text: 'second' }]));
    const agent = run.localAgent!;
    const settledSource: MessageSource = { kind: 'subagent-settled', senderSessionId: parent.id };
    const steered = agent.steer([text('now')], { source: settledSource });
    const injected = agent.inject([text('also')], { source: { kind: 'tool', callId: 'c-1' } });
    const followed = agent.followup([text('later')]);
    gate.resolve();
    await run.result;
    const byId = new Map(accepted(host.sessions.get(run.id)!.events).map((data) => [data.id, data]));
    expect(byId.get(steered)).toMatchObject({ target: 'next-step', source: settledSource });
    expect(byId.get(injected)).toMatchObject({ target: 'next-step', source: { kind: 'tool', callId: 'c-1' } });
    expect(byId.get(followed)).toMatchObject({ target: 'next-turn', source: { kind: 'user' } });
    await run.dispose();
  });

  it('refuses a message whose content or source a port cannot carry, at once, and the child still ends', async () => {
    const gate = deferred();
    const { host, parent } = await setup({ tools: [recordingTool('hold', { gate: gate.promise })] });
    const run = await host.subagents.start('spawn', request(parent, [{ toolCalls: [{ name: 'hold', input: { value: 'x' } }] }, { text: 'done' }]));
    const agent = run.localAgent!;
    const bad: [ReturnType<typeof text>[], unknown, RegExp][] = [
      [[text('x')], { kind: 'user', note: () => 'hi' }, /source\.note is not a field/],
      [[text('x')], { kind: 'user', n: 1n }, /source\.n is not a field/],
      [[text('x')], { kind: 'nope' }, /source\.kind must be one of/],
      [[text('x')], { kind: 'tool', callId: 7 }, /source\.callId must be a string/],
      [[{ type: 'bogus' } as unknown as ReturnType<typeof text>], undefined, /type must be one of/],
      [[{ type: 'text', text: 'x', run: () => 1 } as unknown as ReturnType<typeof text>], undefined, /is a function/],
    ];
    for (const [content, source, message] of bad) {
      expect(() => agent.steer(content, { source: source as MessageSource })).toThrow(expect.objectContaining({ code: 'INVALID_REQUEST', message: expect.stringMatching(message) }));
    }
    gate.resolve();
    expect(await run.result).toMatchObject({ stopReason: 'completed', output: [text('done')] });
    // Only the prompt was accepted.
    expect(accepted(host.sessions.get(run.id)!.events)).toHaveLength(1);
    await run.dispose();
  });

  it('reports as not delivered only messages the child never took, however close to its end they were sent', async () => {
    const { host, parent } = await setup();
    for (let round = 0; round < 25; round++) {
      const run = await host.subagents.start('spawn', request(parent, [{ toolCalls: [{ name: 'sleep', input: { ms: 10 } }] }, { finish: 'error', text: 'x' }]));
      const sent: MessageId[] = [];
      let ended = false;
      void run.result.then(() => (ended = true));
      while (!ended) {
        try {
          sent.push(run.localAgent!.inject([text('m')]));
        } catch {
          break; // refused at once: the child had closed its input
        }
        await new Promise((resolve) => setImmediate(resolve));
      }
      const result = await run.result;
      const taken = new Set(accepted(host.sessions.get(run.id)!.events).map((data) => data.id));
      const lost = sent.filter((id) => !taken.has(id)).length;
      const reported = Number(/(\d+) message\(s\) sent to the child were not delivered/.exec(result.diagnostic ?? '')?.[1] ?? 0);
      expect({ round, reported }).toStrictEqual({ round, reported: lost });
      await run.dispose();
    }
  }, 60_000);

  it('settles a child whose tool module failed while a message to it was on its way: that message was not delivered', async () => {
    const { host, parent } = await setup();
    const busy = files.file();
    const release = files.file();
    const module = new URL(`./fixtures/failing-tools.mjs?busy=${encodeURIComponent(busy)}&release=${encodeURIComponent(release)}`, import.meta.url).href;
    const run = await host.subagents.start('spawn', { ...request(parent, [{ text: 'never' }]), agentOptions: { model: { kind: 'scripted', steps: [{ text: 'never' }] }, toolModules: [module] } });
    while (!existsSync(busy)) await sleep(5);
    // Sent while the thread is busy: it reaches the thread only after the child has failed.
    const delivery = (run.localAgent as unknown as Sender).send('next-turn', [text('late')], { wake: true });
    writeFileSync(release, '');
    await expect(delivery).rejects.toMatchObject({ code: 'CLOSED' });
    const result = await run.result;
    expect(result).toMatchObject({ stopReason: 'error', diagnostic: expect.stringContaining('1 message(s) sent to the child were not delivered') });
    await run.dispose();
  });

  it('refuses at once, or logs, a followup sent as the child ends its last turn', async () => {
    const { host, parent } = await setup();
    const run = await host.subagents.start('spawn', request(parent, [{ text: 'only' }]));
    const agent = run.localAgent!;
    const attempt = deferred<{ id: MessageId } | { error: unknown }>();
    // Runs when the mirror learns that the child's turn ended: the child is idle and about to return.
    const unsubscribe = agent.subscribe((event) => {
      if (event.type !== 'turn/end') return;
      unsubscribe();
      try {
        attempt.resolve({ id: agent.followup([text('one more')]) });
      } catch (error) {
        attempt.resolve({ error });
      }
    });
    const result = await run.result;
    const outcome = await attempt.promise;
    if ('error' in outcome) {
      expect(outcome.error).toMatchObject({ code: 'CLOSED' });
      expect(result).toMatchObject({ stopReason: 'completed', output: [text('only')] });
    } else {
      // Accepted means it reached the child and ran: the result is the answer to it.
      expect(accepted(host.sessions.get(run.id)!.events).map((data) => data.id)).toContain(outcome.id);
      expect(dataOf(host.sessions.get(run.id)!.events, 'turn/end')).toHaveLength(2);
    }
    await run.dispose();
  });

  it('resolves an awaited delivery once the child holds it, and rejects it after the child ended', async () => {
    const gate = deferred();
    const { host, parent } = await setup({ tools: [recordingTool('hold', { gate: gate.promise })] });
    const run = await host.subagents.start('spawn', request(parent, [{ toolCalls: [{ name: 'hold', input: { value: 'x' } }] }, { text: 'first' }, { text: 'second' }]));
    const sender = run.localAgent as unknown as Sender;
    const id = await sender.send('next-turn', [text('more')], { wake: true, source: { kind: 'plugin', name: 'test' } });
    gate.resolve();
    expect((await run.result).output).toEqual([text('second')]);
    expect(accepted(host.sessions.get(run.id)!.events).find((data) => data.id === id)).toMatchObject({ source: { kind: 'plugin', name: 'test' } });
    await expect(sender.send('next-turn', [text('late')], { wake: true })).rejects.toMatchObject({ code: 'CLOSED' });
    await run.dispose();
  });

  it('holds input sent while the child is still being set up, and hands it over after the prompt', async () => {
    const gate = files.file();
    const { host, parent } = await setup();
    const start = request(parent, [{ text: 'first' }, { text: 'second' }]);
    const run = await host.subagents.start('spawn', {
      ...start,
      agentOptions: { ...start.agentOptions, toolModules: [`${slowModule}?gate=${encodeURIComponent(gate)}`] },
    });
    const delivery = (run.localAgent as unknown as Sender).send('next-turn', [text('more')], { wake: true });
    // Not a condition of the test: the pause only lets the message reach the thread before its
    // tool module finishes loading, which is the case this test is about.
    await sleep(100);
    writeFileSync(gate, '');
    const id = await delivery;
    expect((await run.result).output).toEqual([text('second')]);
    const ids = accepted(host.sessions.get(run.id)!.events).map((data) => data.id);
    expect(ids).toHaveLength(2);
    expect(ids[1]).toBe(id); // after the prompt
    await run.dispose();
  });

  it('reports input its thread never took: the delivery rejects CLOSED and the result says so', async () => {
    const { host, parent } = await setup({ pool: { cancelGraceMs: 300 } });
    // The tool writes the marker as it starts: from then on the child's thread spins and reads no message
    // (its logged call is no such sign: the thread still reads its messages before the tool body starts).
    const marker = join(files.dir, 'running-spin');
    const run = await host.subagents.start('spawn', request(parent, [{ toolCalls: [{ name: 'spin', input: { marker } }] }]));
    await expect.poll(() => existsSync(marker), { timeout: 15_000 }).toBe(true);
    const delivery = (run.localAgent as unknown as Sender).send('next-step', [text('never read')], { wake: true });
    run.cancel();
    await expect(delivery).rejects.toMatchObject({ code: 'CLOSED' });
    const result = await run.result;
    expect(result.stopReason).toBe('aborted');
    expect(result.diagnostic).toMatch(/terminated; 1 message\(s\) sent to the child were not delivered$/);
    expect(accepted(host.sessions.get(run.id)!.events).map((data) => data.source)).toEqual([{ kind: 'user' }]); // the prompt alone
    await run.dispose();
  });
});
