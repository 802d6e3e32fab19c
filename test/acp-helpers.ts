// Helpers of the ACP tests: where the CLI and the fixture agent live, and process checks by pid
// (children of this test process, read from /proc, so no agent has to report its own pid).
import { readFileSync, readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { Session, SessionEvent } from 'subagent-host';

/** The built `subagent-host` command line. */
export const CLI = fileURLToPath(new URL('../dist/src/cli.js', import.meta.url));
/** The configurable fixture agent (see its header for the flags). */
export const FIXTURE_AGENT = fileURLToPath(new URL('./fixtures/acp/agent.js', import.meta.url));
/** The strict fixture agent, reading as serde_json does (see its header for the flags). */
export const STRICT_AGENT = fileURLToPath(new URL('./fixtures/acp/strict-agent.js', import.meta.url));

/** Pids of the live child processes of this process. */
export function childPids(): number[] {
  const pids: number[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      // Fields after the command name (which may hold spaces): state, ppid, …
      const [, ppid] = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (Number(ppid) === process.pid) pids.push(Number(name));
    } catch {
      // The process ended while we looked.
    }
  }
  return pids;
}

/** Child pids that appeared since `before`. */
export function newChildPids(before: readonly number[]): number[] {
  return childPids().filter((pid) => !before.includes(pid));
}

/** True while a process with this pid exists (`kill(pid, 0)` throws ESRCH once it is gone). */
export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ESRCH') return false;
    throw error;
  }
}

/**
 * Whether `pid` runs: a process reparented after its parent exited may linger as a zombie until
 * init reaps it, which does not count.
 */
export function isRunning(pid: number): boolean {
  try {
    return !/^\d+ \(.*\) Z /.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false; // gone
  }
}

/** Resolves with the session's events once `done(events)` holds (checked on every append). */
export function whenSession(session: Session & { subscribe(listener: (event: SessionEvent) => void): () => void }, done: (events: readonly SessionEvent[]) => boolean): Promise<readonly SessionEvent[]> {
  return new Promise((resolve) => {
    if (done(session.events)) return resolve(session.events);
    const off = session.subscribe(() => {
      if (!done(session.events)) return;
      off();
      resolve(session.events);
    });
  });
}

/** The streamed text of a session's assistant chunks. */
export function streamedText(events: readonly SessionEvent[]): string {
  return events
    .filter((event) => event.type === 'assistant/chunk')
    .map((event) => (event.data as { chunk: { type: string; text: string } }).chunk)
    .filter((chunk) => chunk.type === 'text-delta')
    .map((chunk) => chunk.text)
    .join('');
}
