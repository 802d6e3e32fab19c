// Durability under SIGKILL: a child process appends to a SQLite store and reports each flush; after
// killing it mid-write, every acknowledged event must be on disk with contiguous seqs.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterAll, expect, it } from 'vitest';
import { sqlitePersistence } from 'subagent-host';

const fixture = fileURLToPath(new URL('./fixtures/sqlite-writer.js', import.meta.url));
const packageUrl = new URL('../dist/src/index.js', import.meta.url).href;
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'subagent-crash-'));
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));

const ACKS_BEFORE_KILL = 25;

it('keeps every acknowledged event, with contiguous seqs, after the writer is SIGKILLed', async () => {
  const file = path.join(tmp, 'crash.db');
  const child = spawn(process.execPath, [fixture, packageUrl, file], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  const exited = new Promise<NodeJS.Signals | null>((resolve) => child.on('exit', (_code, signal) => resolve(signal)));

  let acks = 0;
  let acked = 0;
  try {
    for await (const line of readline.createInterface({ input: child.stdout })) {
      const match = /^ack (\d+)$/.exec(line);
      expect(match, `unexpected child output: ${line}`).not.toBeNull();
      acked = Number(match?.[1]);
      acks += 1;
      if (acks === ACKS_BEFORE_KILL) break;
    }
  } finally {
    child.kill('SIGKILL');
  }
  expect(await exited, stderr).toBe('SIGKILL');
  expect(acks, stderr).toBe(ACKS_BEFORE_KILL);

  const store = sqlitePersistence(file);
  try {
    const events = (await store.load('crash'))?.events ?? [];
    expect(events.length).toBeGreaterThan(acked);
    expect(events.every((event, index) => event.seq === index)).toBe(true);
    const ticks = Array.from({ length: acked - 1 }, (_, index) => ({ n: index + 1 }));
    expect(events.slice(1, acked).map((event) => event.data)).toEqual(ticks);
    expect(events.at(-1)).toMatchObject({ type: 'turn/end', data: { turn: 1, reason: { kind: 'interrupted' } } });
  } finally {
    await store.close();
  }
});
