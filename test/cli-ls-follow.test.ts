// `subagent-host ls --follow` as a user runs it: the built CLI in a child process watching a database
// this test process writes, printing a hanging child as running and exiting once it has settled.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it, vi } from 'vitest';
import { DESCRIPTOR_EVENT, createHost, inProcessProvider, sqlitePersistence, text } from 'subagent-host';
import { tempFiles } from './helpers.js';
// The watch loop itself, driven with a listing a commit lands in the middle of.
import { follow } from '../dist/src/cli/ls-follow.js';
import { openListing } from '../dist/src/cli/ls.js';
import { createSubagentCatalog } from '../dist/src/service/catalog.js';
import { InspectReader } from '../dist/src/inspect/reader.js';

const cliPath = fileURLToPath(new URL('../dist/src/cli.js', import.meta.url));
const files = tempFiles('subagent-ls-follow-');

/** A child process's output so far, with a wait for text to appear and for the exit. */
function watch(args: string[]) {
  const child = spawn(process.execPath, [cliPath, 'ls', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  const waiters = new Set<() => void>();
  const wake = (): void => {
    for (const waiter of [...waiters]) waiter();
  };
  child.stdout.on('data', (chunk: Buffer) => {
    stdout += chunk.toString();
    wake();
  });
  child.stderr.on('data', (chunk: Buffer) => {
    stderr += chunk.toString();
    wake();
  });
  const exit = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return {
    child,
    exit,
    output: () => ({ stdout, stderr }),
    /** Resolves once `pattern` matches the output so far (stdout, or stderr when asked). */
    until(pattern: RegExp, stream: 'stdout' | 'stderr' = 'stdout'): Promise<void> {
      return new Promise((resolve) => {
        const waiter = () => {
          if (!pattern.test(stream === 'stdout' ? stdout : stderr)) return;
          waiters.delete(waiter);
          resolve();
        };
        waiters.add(waiter);
        waiter();
      });
    },
  };
}

/** A host on a new database with one in-process child hanging in its first turn, stored so far. */
async function hangingChild(label?: string) {
  const db = files.file();
  const host = await createHost({ providers: false, persistence: { sqlite: db } });
  host.subagents.registerProvider(inProcessProvider(host));
  const parent = await host.createAgent();
  const run = await host.subagents.start('in-process', {
    ...(label === undefined ? {} : { label }),
    prompt: [text('wait')],
    parent,
    agentOptions: { model: { kind: 'scripted', steps: [{ finish: 'hang' }] } },
    signal: new AbortController().signal,
  });
  await host.sessions.flush();
  return { db, host, parent, run };
}

describe('subagent-host ls --follow', () => {
  it('prints a running child, then its settlement, and exits 0 once every child is inactive', async () => {
    const { db, host, parent, run } = await hangingChild('waiting');
    let watcher: ReturnType<typeof watch> | undefined;
    try {
      watcher = watch([parent.id, '--tree', '--follow', '--db', db]);
      await watcher.until(new RegExp(`${run.id}\\s+one-shot\\s+running\\s+-\\s+\\d+\\s+waiting`));
      run.cancel();
      await run.result.catch(() => undefined);
      await run.dispose();
      await host.sessions.flush();
      expect(await watcher.exit, JSON.stringify(watcher.output())).toBe(0);
      const listings = watcher.output().stdout.trimEnd().split('\n\n');
      expect(listings.at(-1)).toMatch(new RegExp(`^${run.id}\\s+one-shot\\s+inactive\\s+-\\s+\\d+\\s+waiting$`));
      expect(listings.length).toBeGreaterThanOrEqual(2);
    } finally {
      if (watcher !== undefined && watcher.child.exitCode === null) watcher.child.kill();
      await host.close();
    }
  }, 60_000);

  it('without --follow lists a child another process runs as running, read from its log', async () => {
    const { db, host, parent, run } = await hangingChild('waiting');
    try {
      const once = watch([parent.id, '--db', db]);
      expect(await once.exit, JSON.stringify(once.output())).toBe(0);
      expect(once.output().stdout).toMatch(new RegExp(`^${run.id}\\s+one-shot\\s+running\\s`));
      run.cancel();
      await run.dispose();
    } finally {
      await host.close();
    }
  }, 60_000);

  it('keeps watching a parent that is in a turn with no child yet, and shows its first child', async () => {
    const db = files.file();
    const host = await createHost({ providers: false, persistence: { sqlite: db } });
    host.subagents.registerProvider(inProcessProvider(host));
    const parent = await host.createAgent({ agentOptions: { model: { kind: 'scripted', steps: [{ finish: 'hang' }] } } });
    parent.followup([text('plan')]);
    await host.sessions.flush();
    let watcher: ReturnType<typeof watch> | undefined;
    try {
      watcher = watch([parent.id, '--follow', '--db', db]);
      await watcher.until(/^no subagent children yet\n/);
      const run = await host.subagents.start('in-process', {
        prompt: [text('wait')],
        parent,
        agentOptions: { model: { kind: 'scripted', steps: [{ finish: 'hang' }] } },
        signal: new AbortController().signal,
      });
      await host.sessions.flush();
      await watcher.until(new RegExp(`${run.id}\\s+one-shot\\s+running`));
      run.cancel();
      await run.dispose();
      parent.cancel();
      await parent.whenIdle();
      await host.sessions.flush();
      expect(await watcher.exit, JSON.stringify(watcher.output())).toBe(0);
    } finally {
      if (watcher !== undefined && watcher.child.exitCode === null) watcher.child.kill();
      await host.close();
    }
  }, 60_000);

  // SIGHUP: its terminal closed.
  it.each(['SIGINT', 'SIGTERM', 'SIGHUP'] as const)('stops on %s with exit 0 while a child is still running', async (signal) => {
    const { db, host, parent, run } = await hangingChild();
    let watcher: ReturnType<typeof watch> | undefined;
    try {
      watcher = watch([parent.id, '--follow', '--db', db]);
      await watcher.until(/running/);
      watcher.child.kill(signal);
      expect(await watcher.exit, JSON.stringify(watcher.output())).toBe(0);
      run.cancel();
      await run.result.catch(() => undefined);
      await run.dispose();
    } finally {
      if (watcher !== undefined && watcher.child.exitCode === null) watcher.child.kill();
      await host.close();
    }
  }, 60_000);
});

const ended = { turn: 1, reason: { kind: 'completed' } };

/** Writes session `root` with its turn open and one child `child` in its first turn into `file`, and closes the store. */
async function storeRunning(file: string, root: string, child: string): Promise<void> {
  const store = sqlitePersistence(file);
  await store.create({ id: root, createdAt: 0 });
  await store.append(root, [{ seq: 0, time: 0, type: 'turn/start', data: { turn: 1 } }]);
  await store.create({ id: child, createdAt: 1, parentSession: root, origin: 'subagent' });
  const descriptor = { version: 2, mode: 'one-shot', provider: 'spawn', label: child };
  await store.append(child, [{ seq: 0, time: 1, type: 'turn/start', data: { turn: 1 } }, { seq: 1, time: 1, type: DESCRIPTOR_EVENT, data: descriptor }]);
  await store.close();
}

/** Ends the turns `storeRunning` left open. */
async function storeEnded(file: string, root: string, child: string): Promise<void> {
  const store = sqlitePersistence(file);
  await store.append(child, [{ seq: 2, time: 2, type: 'turn/end', data: ended }]);
  await store.append(root, [{ seq: 1, time: 2, type: 'turn/end', data: ended }]);
  await store.close();
}

/** Appends `events` (seqs from `from`) to session `id` of `file`, creating it first when `create` says so. */
async function storeEvents(file: string, id: string, from: number, types: string[], create?: { createdAt: number; parentSession: string; label: string }): Promise<void> {
  const store = sqlitePersistence(file);
  if (create) {
    await store.create({ id, createdAt: create.createdAt, parentSession: create.parentSession, origin: 'subagent' });
    const descriptor = { version: 2, mode: 'continuable', provider: 'in-process', label: create.label };
    await store.append(id, [{ seq: 0, time: create.createdAt, type: DESCRIPTOR_EVENT, data: descriptor }]);
  }
  const data: Record<string, unknown> = { 'turn/start': { turn: 1 }, 'turn/end': ended };
  await store.append(id, types.map((type, index) => ({ seq: from + index, time: from + index, type, data: data[type] })));
  await store.close();
}

describe('ls --follow of a child whose own children still run', () => {
  it('keeps following without --tree while a grandchild runs, shows the child running again, and exits once the whole tree is quiet', async () => {
    const db = files.file();
    // R is between turns; its child C ended its turn, but C's child G is still in its first turn:
    // once G settles, C takes the notice as a turn of its own.
    const store = sqlitePersistence(db);
    await store.create({ id: 'R', createdAt: 0 });
    await store.close();
    await storeEvents(db, 'C', 1, ['turn/start', 'turn/end'], { createdAt: 1, parentSession: 'R', label: 'child' });
    await storeEvents(db, 'G', 1, ['turn/start'], { createdAt: 2, parentSession: 'C', label: 'grandchild' });
    const watcher = watch(['R', '--follow', '--db', db]);
    try {
      await watcher.until(/^C\s+continuable\s+inactive\s+\+/);
      // C's turn for G's settlement notice: the watch must still be there to show it.
      await storeEvents(db, 'C', 3, ['turn/start']);
      const outcome = await Promise.race([watcher.exit.then(() => 'exited'), watcher.until(/C\s+continuable\s+running/).then(() => 'followed')]);
      expect(outcome, JSON.stringify(watcher.output())).toBe('followed');
      await storeEvents(db, 'G', 2, ['turn/end']);
      await storeEvents(db, 'C', 4, ['turn/end']);
      expect(await watcher.exit, JSON.stringify(watcher.output())).toBe(0);
      expect(watcher.output().stdout.trimEnd().split('\n\n').at(-1)).toMatch(/^C\s+continuable\s+inactive\s+\+\s+0\s+child$/);
    } finally {
      if (watcher.child.exitCode === null) watcher.child.kill();
      await watcher.exit;
    }
  }, 60_000);
});

// The watch follows the path: a host creating the file leaves it empty for a moment, a session may be
// stored after the watch began, and a file may be emptied or replaced while watched.
describe('ls --follow on a file that changes under it', () => {
  const waiting = /no session "R" in .* yet; waiting for it/;

  it('waits for an empty file to be written and for the session to be stored, then lists it', async () => {
    const db = files.file();
    fs.writeFileSync(db, '');
    const watcher = watch(['R', '--follow', '--db', db]);
    try {
      await watcher.until(waiting, 'stderr');
      await sqlitePersistence(db).close();
      await storeRunning(db, 'R', 'L');
      await watcher.until(/^L\s+one-shot\s+running\s/m);
      await storeEnded(db, 'R', 'L');
      expect(await watcher.exit, JSON.stringify(watcher.output())).toBe(0);
      expect(watcher.output().stdout.trimEnd().split('\n\n').at(-1)).toMatch(/^L\s+one-shot\s+inactive\s+-\s+0\s+L$/);
    } finally {
      if (watcher.child.exitCode === null) watcher.child.kill();
    }
  }, 60_000);

  it('says which session it waits for with its control characters escaped, on one line', async () => {
    const db = files.file();
    fs.writeFileSync(db, '');
    const watcher = watch(['R\nforged\u001b[2J', '--follow', '--db', db]);
    try {
      await watcher.until(/waiting for it/, 'stderr');
      expect(watcher.output().stderr).toBe(`subagent-host ls: no session "R\\x0aforged\\x1b[2J" in ${db} yet; waiting for it (Ctrl-C stops)\n`);
    } finally {
      watcher.child.kill('SIGTERM');
    }
    expect(await watcher.exit).toBe(0);
  }, 60_000);

  it('waits while the file is emptied, then reads the file moved in its place', async () => {
    const db = files.file();
    const other = files.file();
    await storeRunning(db, 'R', 'L');
    const watcher = watch(['R', '--tree', '--follow', '--db', db]);
    try {
      await watcher.until(/^L\s+one-shot\s+running\s/m);
      fs.truncateSync(db, 0);
      await watcher.until(waiting, 'stderr');
      await storeRunning(other, 'R', 'M');
      fs.renameSync(other, db);
      await watcher.until(/^M\s+one-shot\s+running\s/m);
      await storeEnded(db, 'R', 'M');
      expect(await watcher.exit, JSON.stringify(watcher.output())).toBe(0);
      expect(watcher.output().stdout.trimEnd().split('\n\n').at(-1)).toMatch(/^M\s+one-shot\s+inactive\s+-\s+0\s+M$/);
    } finally {
      if (watcher.child.exitCode === null) watcher.child.kill();
    }
  }, 60_000);
});

describe('subagent-host ls --follow given a file copied in place while it watches', () => {
  // Before the fix the first read of the half-copied file failed CORRUPT_DATA and ended the watch, exit 1.
  it('waits while the copy is not a readable database yet, then lists it', async () => {
    const db = files.file();
    const source = files.file();
    await storeRunning(source, 'R', 'K');
    const bytes = fs.readFileSync(source);
    fs.writeFileSync(db, '');
    const watcher = watch(['R', '--tree', '--follow', '--db', db]);
    try {
      await watcher.until(/no session "R" in .* yet; waiting for it/, 'stderr');
      // The first pages, then a wait past a poll (250 ms), then the rest, as a slow copy writes them.
      const half = Math.floor(bytes.length / 2 / 4096) * 4096;
      fs.writeFileSync(db, bytes.subarray(0, half));
      await new Promise((resolve) => setTimeout(resolve, 1000));
      expect(watcher.child.exitCode, JSON.stringify(watcher.output())).toBeNull();
      fs.appendFileSync(db, bytes.subarray(half));
      await watcher.until(/^K\s+one-shot\s+running\s/m);
      await storeEnded(db, 'R', 'K');
      expect(await watcher.exit, JSON.stringify(watcher.output())).toBe(0);
    } finally {
      if (watcher.child.exitCode === null) watcher.child.kill();
    }
  }, 60_000);
});

// The watch lists (the catalog) and then reads activity from the log: a host committing between the
// two made it stop on a listing of no one state, which it then left on screen.
describe('the --follow loop', () => {
  it('ends only on a listing of one state: a commit between the listing and its log reads is listed again', async () => {
    const db = files.file();
    const writer = sqlitePersistence(db);
    const reader = sqlitePersistence(db);
    const stdout = vi.spyOn(process.stdout, 'write').mockImplementation(() => true);
    try {
      await writer.create({ id: 'R', createdAt: 0 });
      await writer.append('R', [{ seq: 0, time: 0, type: 'turn/start', data: { turn: 1 } }]);
      await writer.create({ id: 'L', createdAt: 1, parentSession: 'R', origin: 'subagent' });
      const descriptor = { version: 2, mode: 'one-shot', provider: 'spawn', label: 'live' };
      await writer.append('L', [{ seq: 0, time: 1, type: 'turn/start', data: { turn: 1 } }, { seq: 1, time: 1, type: DESCRIPTOR_EVENT, data: descriptor }]);
      await writer.flush();
      const catalog = createSubagentCatalog({ persistence: reader, sessions: { get: () => undefined, list: () => [] } });
      let lists = 0;
      const list = async () => {
        const rows = await catalog.listChildren('R');
        // The child's last answer and both turn ends, committed right after the first listing's read.
        if (++lists === 1) {
          const usage = { inputTokens: 10, outputTokens: 5 };
          void writer.append('L', [
            { seq: 2, time: 5, type: 'assistant/message', data: { turn: 1, step: 1, id: 'm', content: [], usage } },
            { seq: 3, time: 6, type: 'turn/end', data: { turn: 1, reason: { kind: 'completed' } } },
          ]);
          void writer.append('R', [{ seq: 1, time: 6, type: 'turn/end', data: { turn: 1, reason: { kind: 'completed' } } }]);
          await writer.flush();
        }
        return rows;
      };
      const listings: string[] = [];
      const open = async () => {
        const logs = new InspectReader(db);
        return { reader: logs, has: async () => true, list, close: async () => logs.close() };
      };
      await follow({
        file: db,
        rootId: 'R',
        open,
        waiting: '',
        print: (entries) => {
          const listing = JSON.stringify(entries.map((entry) => (entry.kind === 'diagnostic' ? [entry.id] : [entry.id, entry.activity, entry.usage.totalTokens])));
          listings.push(listing);
          return `${listing}\n`;
        },
      });
      expect(listings.at(-1)).toBe(JSON.stringify([['L', 'inactive', 15]]));
    } finally {
      stdout.mockRestore();
      await writer.close();
      await reader.close();
    }
  });
});

// The file checked before each poll can change between that check and the poll's reads.
describe('the --follow loop on a file emptied under it', () => {
  it('reads a failed listing of a file emptied since its check as a wait, then lists the file written again', async () => {
    const db = files.file();
    await storeRunning(db, 'R', 'L');
    const stdout = vi.spyOn(process.stdout, 'write').mockImplementation(() => true);
    // Once the watch waits (its handles closed), the file is written again, the child's turns ended.
    let rewritten: Promise<void> | undefined;
    const stderr = vi.spyOn(process.stderr, 'write').mockImplementation(() => {
      rewritten ??= storeRunning(db, 'R', 'M').then(() => storeEnded(db, 'R', 'M'));
      return true;
    });
    const listings: string[][] = [];
    let opens = 0;
    try {
      await follow({
        file: db,
        rootId: 'R',
        waiting: 'waiting\n',
        print: (entries) => `${JSON.stringify(entries.map((entry) => entry.id))}\n`,
        open: async () => {
          const listing = await openListing(db, 'R', false);
          const first = ++opens === 1;
          return {
            ...listing,
            // The first file is emptied after the poll's check, before its listing reads it.
            list: async () => {
              if (first) fs.truncateSync(db, 0);
              const entries = await listing.list();
              listings.push(entries.map((entry) => entry.id));
              return entries;
            },
          };
        },
      });
      await rewritten;
      expect(listings[0]).toEqual(['M']);
      expect(listings.at(-1)).toEqual(['M']);
      expect(stderr).toHaveBeenCalledWith('waiting\n');
    } finally {
      stdout.mockRestore();
      stderr.mockRestore();
    }
  });
});
