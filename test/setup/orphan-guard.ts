// Suite-wide companion of leak-guard.ts: a process that a test's child started and that outlived
// its parent is reparented to init, out of reach of the per-file check of descendants. At the end of
// the run this lists processes started during it, now parented by init, that run in this repository
// (their working directory or command line is in it) and fails the run if one does not exit within
// LEAK_GUARD_WINDOW_MS. Linux only; LEAK_GUARD=report only reports, LEAK_GUARD=off skips it.
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';

const MODE = process.env['LEAK_GUARD'] ?? 'fail';
const WINDOW_MS = Number(process.env['LEAK_GUARD_WINDOW_MS'] ?? 5_000);
const ROOT = process.cwd();

function stat(pid: number | 'self'): string[] {
  const text = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return text.slice(text.lastIndexOf(')') + 2).split(' '); // [0] state, [1] ppid, [19] start time
}

/** This process and the ones that started it (a launcher left parented by init is not a leak). */
function ancestors(): Set<string> {
  const chain = new Set<string>();
  for (let pid = String(process.pid); pid !== '0' && pid !== '1' && !chain.has(pid); ) {
    chain.add(pid);
    try {
      pid = stat(Number(pid))[1]!;
    } catch {
      break;
    }
  }
  return chain;
}

function orphansSince(since: number, exclude: Set<string>): string[] {
  const found: string[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    if (exclude.has(entry)) continue;
    try {
      const fields = stat(Number(entry));
      if (fields[1] !== '1' || Number(fields[19]) < since) continue;
      const cmd = readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0').join(' ').trim();
      const cwd = readlinkSync(`/proc/${entry}/cwd`);
      if (cwd === ROOT || cwd.startsWith(`${ROOT}/`) || cmd.includes(`${ROOT}/`)) found.push(`pid ${entry} (${fields[0]}) cwd ${cwd}: ${cmd.slice(0, 200)}`);
    } catch {
      /* exited meanwhile, or not ours to read */
    }
  }
  return found;
}

export default function setup(): (() => Promise<void>) | undefined {
  if (MODE === 'off' || process.platform !== 'linux') return undefined;
  // Projects that extend the root configuration run its global setup again: check once.
  const state = globalThis as { leakGuardOrphans?: boolean };
  if (state.leakGuardOrphans) return undefined;
  state.leakGuardOrphans = true;
  // Anything the tests start starts after vitest did.
  const since = Number(stat('self')[19]);
  return async () => {
    const started = Date.now();
    const exclude = ancestors();
    let left = orphansSince(since, exclude);
    while (left.length > 0 && Date.now() - started < WINDOW_MS) {
      await new Promise((resolve) => setTimeout(resolve, 100));
      left = orphansSince(since, exclude);
    }
    if (left.length === 0) return;
    const message = `leak guard: processes started by the tests outlived their parents:\n  ${left.join('\n  ')}`;
    console.error(message);
    // vitest only logs an error thrown by a global teardown; the exit code has to be set here.
    if (MODE !== 'report') process.exitCode = 1;
  };
}
