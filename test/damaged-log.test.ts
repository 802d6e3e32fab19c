// A stored log whose rows were damaged by hand (valid JSON of the wrong shape): a host resuming it
// after a restart refuses it CORRUPT_DATA rather than going on from it and writing more of the damage.
import Database from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import { createHost, text, type Host } from 'subagent-host';
import { tempFiles } from './helpers.js';

const files = tempFiles('damaged-log-');
const hosts: Host[] = [];
afterEach(async () => {
  await Promise.all(hosts.splice(0).map((host) => host.close()));
});

async function newHost(file: string): Promise<Host> {
  const host = await createHost({ persistence: { sqlite: file }, providers: false, pool: { minThreads: 0 } });
  hosts.push(host);
  return host;
}

/** A file holding one agent's session of one completed turn, its `turn/end` data replaced by `data`. */
async function storedWithTurnEnd(data: string): Promise<{ file: string; id: string; events: number }> {
  const file = files.file();
  const writer = await createHost({ persistence: { sqlite: file }, providers: false, pool: { minThreads: 0 } });
  const agent = await writer.createAgent();
  agent.followup([text('hi')]);
  await agent.whenIdle();
  const { id } = agent;
  const events = agent.session.events.length;
  await writer.close();
  const db = new Database(file);
  expect(db.prepare("UPDATE events SET data = ? WHERE session_id = ? AND type = 'turn/end'").run(data, id).changes).toBe(1);
  db.close();
  return { file, id, events };
}

describe('a stored turn/end whose data holds no turn number', () => {
  it.each(['null', '{}', '{"turn":"1","reason":{"kind":"completed"}}', '{"turn":0,"reason":{"kind":"completed"}}', '{"turn":1.5,"reason":{"kind":"completed"}}'])(
    'data %s: resume fails CORRUPT_DATA naming the event, and nothing is appended to the log',
    async (data) => {
      const { file, id, events } = await storedWithTurnEnd(data);
      const host = await newHost(file);
      await expect(host.agents.resume({ sessionId: id })).rejects.toMatchObject({
        name: 'SubagentError',
        code: 'CORRUPT_DATA',
        message: expect.stringContaining(`event ${events - 1} (turn/end)`),
      });
      expect(host.agents.get(id)).toBeUndefined();
      expect((await host.persistence!.load(id))?.events).toHaveLength(events);
    },
  );

  it('a log whose turn numbers are whole resumes and numbers its next turn after them', async () => {
    const { file, id } = await storedWithTurnEnd('{"turn":1,"reason":{"kind":"completed"}}');
    const host = await newHost(file);
    const { agent } = await host.agents.resume({ sessionId: id });
    agent.followup([text('again')]);
    await agent.whenIdle();
    expect(agent.session.events.at(-1)).toMatchObject({ type: 'turn/end', data: { turn: 2, reason: { kind: 'completed' } } });
  });
});
