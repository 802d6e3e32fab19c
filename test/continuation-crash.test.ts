// "Accepted means durable": a follow-up acknowledged before a SIGKILL of the host runs after a
// restart on the same database, before any newer message, once the parent is resumed.
import { spawn } from 'node:child_process';
import readline from 'node:readline';
import { fileURLToPath } from 'node:url';
import { expect, it } from 'vitest';
import { spawnProvider, text } from 'subagent-host';
import { closeAfterEach, tempFiles } from './helpers.js';
import { continuationHost, turnEnds, userTexts } from './continuation-helpers.js';

const fixture = fileURLToPath(new URL('./fixtures/continuation-crash.mjs', import.meta.url));
const packageUrl = new URL('../dist/src/index.js', import.meta.url).href;
const files = tempFiles('subagent-continuation-crash-');
const track = closeAfterEach();

// `synchronous: 'normal'` leaves the fsync to checkpoints: a commit is in the OS, which a SIGKILL does not lose.
it.each([
  ['in-process', 'full'],
  ['spawn', 'full'],
  ['spawn', 'normal'],
])('runs a follow-up accepted before SIGKILL after restart, before a newer one (%s, synchronous %s)', async (provider, synchronous) => {
  const file = files.file();
  const child = spawn(process.execPath, [fixture, packageUrl, file, provider, synchronous], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  const exited = new Promise<NodeJS.Signals | null>((resolve) => child.on('exit', (_code, signal) => resolve(signal)));
  let accepted: string | undefined;
  try {
    for await (const line of readline.createInterface({ input: child.stdout })) {
      accepted = /^accepted (\S+)$/.exec(line)?.[1];
      break;
    }
  } finally {
    child.kill('SIGKILL');
  }
  expect(await exited, stderr).toBe('SIGKILL');
  expect(accepted, stderr).toBeDefined();

  const host = await continuationHost(file, { pool: { minThreads: 0 } });
  host.subagents.registerProvider(spawnProvider(host));
  track(host);
  const { recorder } = host;
  await expect(host.subagents.followup(await host.createAgent(), 'child', [text('x')])).rejects.toMatchObject({ code: 'UNAUTHORIZED' });
  const parent = (await host.agents.resume({ sessionId: 'parent' })).agent;
  const newer = await host.subagents.followup(parent, 'child', [text('newer')]);
  await recorder.until(() => recorder.ends.length >= 1);
  const events = host.sessions.get('child')!.events;
  expect(userTexts(events)).toStrictEqual(['first', 'queued', 'newer']);
  const ids = events.filter((e) => e.type === 'user/message').map((e) => (e.data as { id: string }).id);
  expect(ids.slice(1)).toStrictEqual([accepted, newer]);
  expect(turnEnds(events)).toStrictEqual(['interrupted', 'completed', 'completed']);
  expect(recorder.ends).toMatchObject([{ id: 'child', provider, stopReason: 'completed', lastAssistantMessage: [text('echo: newer')] }]);
});
