// One ACP agent process: spawn with piped stdin/stdout, observe its exit, and the teardown ladder
// (stdin EOF → grace → SIGTERM → grace → SIGKILL → exit) that every path out of a run shares.
import { spawn, type ChildProcess } from 'node:child_process';
import type { Readable, Writable } from 'node:stream';
import { within } from '../../seam/once.js';

export interface AgentProcessSpec {
  command: string;
  args: readonly string[];
  cwd: string;
  env: Record<string, string>;
  stderr: 'inherit' | 'ignore';
}

export interface ReapGraces {
  /** How long a process may take to exit on its own after stdin EOF. */
  eofGraceMs: number;
  /** How long it may take after SIGTERM before SIGKILL. */
  graceMs: number;
}

/** How a process ended: a spawn failure (`errno`) or an exit code / signal. */
export interface AgentExit {
  code: number | null;
  signal: NodeJS.Signals | null;
  errno?: string;
}

/** A short, secret-free description of an exit, for diagnostics. */
export function describeExit(exit: AgentExit): string {
  if (exit.errno !== undefined) return `could not be spawned (${exit.errno})`;
  if (exit.signal !== null) return `was killed by ${exit.signal}`;
  return `exited with code ${exit.code ?? 'unknown'}`;
}

/** A spawned agent process and its teardown; `ended` resolves once it exited (or failed to spawn). */
export class AgentProcess {
  readonly #child: ChildProcess;
  readonly #group: boolean;
  readonly ended: Promise<AgentExit>;
  #exit: AgentExit | undefined;
  #reaping: Promise<void> | undefined;

  private constructor(child: ChildProcess, group: boolean) {
    this.#child = child;
    this.#group = group;
    this.ended = new Promise((resolve) => {
      child.once('exit', (code, signal) => resolve((this.#exit ??= { code, signal })));
      // A failed spawn emits 'error' and never 'exit'; a live process may also emit 'error' for a
      // failed kill, which must not count as its end.
      child.once('error', (error: NodeJS.ErrnoException) => {
        if (child.pid === undefined) resolve((this.#exit ??= { code: null, signal: null, errno: error.code ?? 'error' }));
      });
    });
    // Writes to a dead process fail with EPIPE; the exit is what reports the failure.
    child.stdin?.on('error', () => undefined);
    child.stdout?.on('error', () => undefined);
  }

  /** Spawns `spec`. A failed spawn still returns: `ended` resolves with its `errno`. */
  static spawn(spec: AgentProcessSpec): AgentProcess {
    // Its own process group, so signals reach whatever the agent itself started.
    const group = process.platform !== 'win32';
    const child = spawn(spec.command, [...spec.args], {
      cwd: spec.cwd,
      env: spec.env,
      stdio: ['pipe', 'pipe', spec.stderr],
      detached: group,
      windowsHide: true,
    });
    return new AgentProcess(child, group);
  }

  get pid(): number | undefined {
    return this.#child.pid;
  }

  get stdin(): Writable {
    return this.#child.stdin!;
  }

  get stdout(): Readable {
    return this.#child.stdout!;
  }

  /** Set once the process has ended. */
  get exit(): AgentExit | undefined {
    return this.#exit;
  }

  #signal(signal: NodeJS.Signals): void {
    const pid = this.#child.pid;
    if (pid === undefined || this.#exit) return;
    try {
      if (this.#group) process.kill(-pid, signal);
      else this.#child.kill(signal);
    } catch {
      // Already gone (ESRCH): `ended` reports it.
      this.#child.kill(signal);
    }
  }

  /** Idempotent: EOF, then SIGTERM, then SIGKILL, each after its grace; resolves once it exited. */
  reap(graces: ReapGraces): Promise<void> {
    return (this.#reaping ??= this.#ladder(graces));
  }

  async #ladder(graces: ReapGraces): Promise<void> {
    await this.#stop(graces);
    await this.#reapGroup(graces.graceMs);
  }

  async #stop(graces: ReapGraces): Promise<void> {
    if (this.#child.pid === undefined || this.#exit) {
      await this.ended;
      return;
    }
    this.#child.stdin?.end();
    if (await within(this.ended, graces.eofGraceMs)) return;
    this.#signal('SIGTERM');
    if (await within(this.ended, graces.graceMs)) return;
    this.#signal('SIGKILL');
    await this.ended;
  }

  /**
   * What the agent started itself stays in its process group after the agent exited on its own
   * (at EOF): SIGTERM to the group, then SIGKILL to what is left after the grace.
   */
  async #reapGroup(graceMs: number): Promise<void> {
    const pid = this.#child.pid;
    if (!this.#group || pid === undefined || this.#exit?.errno !== undefined) return;
    const send = (signal: NodeJS.Signals | 0): boolean => {
      try {
        process.kill(-pid, signal);
        return true;
      } catch {
        return false; // ESRCH: the group is empty.
      }
    };
    if (!send('SIGTERM')) return;
    const deadline = performance.now() + graceMs;
    while (send(0) && performance.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 10));
    send('SIGKILL');
  }
}
