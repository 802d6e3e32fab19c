// acpProvider against a strict third-party agent (test/fixtures/acp/strict-agent.js, which reads as
// serde_json does): a message the agent cannot read, answered with an error for id null, fails the
// step that waits for it at once instead of leaving it waiting forever; a lone UTF-16 surrogate in
// a prompt reaches the agent as U+FFFD instead of breaking the child.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { acpProvider, createHost, text, type Agent, type Host, type SubagentStartRequest } from 'subagent-host';
import { childPids, isAlive, newChildPids } from './acp-helpers.js';

const STRICT_AGENT = fileURLToPath(new URL('./fixtures/acp/strict-agent.js', import.meta.url));
const dir = mkdtempSync(join(tmpdir(), 'acp-strict-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const GRACES = { disposeEofGraceMs: 200, disposeGraceMs: 200 };

describe('acpProvider with a strict agent', () => {
  let host: Host;
  let parent: Agent;

  beforeEach(async () => {
    host = await createHost({ providers: false });
    parent = await host.createAgent({ header: { cwd: dir } });
  });

  afterEach(async () => {
    await host.close();
  });

  // The default startupTimeoutMs (60 s) is longer than a test may take: a step left waiting fails the test.
  function use(flags: string[] = []): void {
    host.subagents.registerProvider(acpProvider(host, { command: process.execPath, args: [STRICT_AGENT, ...flags], stderr: 'ignore', ...GRACES }));
  }

  function start(request: Partial<SubagentStartRequest> = {}) {
    return host.subagents.start('acp', { prompt: [text('go')], parent, signal: new AbortController().signal, ...request });
  }

  it.each(['initialize', 'session/new'])('rejects START_FAILED at once and reaps the agent when it cannot read %s', async (method) => {
    use([`--refuse=${method}`]);
    const before = childPids();
    await expect(start()).rejects.toMatchObject({
      code: 'START_FAILED',
      message: `the ACP agent failed during ${method} (the ACP agent could not read a message this client sent: JSON-RPC error -32600 for id null)`,
    });
    expect(newChildPids(before).filter(isAlive)).toEqual([]);
  });

  it('settles error at once when the agent cannot read session/prompt', async () => {
    use(['--refuse=session/prompt']);
    const before = childPids();
    const run = await start();
    await expect(run.result).resolves.toEqual({
      output: [],
      stopReason: 'error',
      diagnostic: 'the ACP prompt failed (the ACP agent could not read a message this client sent: JSON-RPC error -32600 for id null)',
    });
    await run.dispose();
    expect(newChildPids(before).filter(isAlive)).toEqual([]);
  });

  it('sends a lone surrogate in the prompt as U+FFFD, keeping pairs and the prompt in the log as given', async () => {
    use();
    const prompt = ['half \ud83d of an emoji', 'a low \ude00 half, a whole 😀, a backslash \\ud800 in text'];
    const run = await start({ prompt: prompt.map((value) => text(value)) });
    await expect(run.result).resolves.toEqual({
      output: [text('half \ufffd of an emoji|a low \ufffd half, a whole 😀, a backslash \\ud800 in text')],
      stopReason: 'completed',
    });
    const asked = host.sessions.get(run.id)!.events.find((event) => event.type === 'user/message');
    expect(asked?.data).toMatchObject({ content: prompt.map((value) => text(value)) });
    await run.dispose();
  });
});
