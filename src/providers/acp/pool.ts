// The prewarm pool: keeps `size` agent processes spawned and initialized, so a start costs a
// session/new instead of a process launch. Each process serves one child and is then retired.
// Spawning blocks this thread for milliseconds, so the taker refills once its child's first prompt
// is answered (a take that finds the pool empty refills at once). Failures are not retried until
// the next refill, so an agent that crashes at startup cannot turn the pool into a spawn loop.
import type { AcpClient } from './client.js';
import type { AgentProcess } from './process.js';

/** An initialized agent process with no session yet. */
export interface WarmChild {
  readonly proc: AgentProcess;
  readonly client: AcpClient;
}

/** Spawns and initializes one process; on failure or abort it reaps what it spawned and rejects. */
export type Launch = (signal: AbortSignal) => Promise<WarmChild>;

/** Whether a warm child can still take a session: its process runs and its connection is open. */
function usable(child: WarmChild): boolean {
  return !child.proc.exit && !child.client.signal.aborted;
}

/** Initialized agent processes waiting for a child; see the file header. */
export class WarmPool {
  readonly #size: number;
  readonly #launch: Launch;
  readonly #retire: (child: WarmChild) => Promise<void>;
  readonly #ready: WarmChild[] = [];
  readonly #warming = new Set<Promise<void>>();
  readonly #closer = new AbortController();
  #closing: Promise<void> | undefined;

  constructor(size: number, launch: Launch, retire: (child: WarmChild) => Promise<void>) {
    this.#size = size;
    this.#launch = launch;
    this.#retire = retire;
  }

  /** Starts warming processes until `size` are ready or warming. */
  fill(): void {
    while (!this.#closer.signal.aborted && this.#ready.length + this.#warming.size < this.#size) {
      const warming: Promise<void> = this.#launch(this.#closer.signal).then(
        (child) => {
          this.#warming.delete(warming);
          if (this.#closer.signal.aborted || !usable(child)) return this.#retire(child);
          this.#ready.push(child);
          // A warm process that dies, or whose connection closes (its stdout ended, a line too
          // long), while idle just leaves the pool.
          void child.proc.ended.then(() => this.#drop(child));
          child.client.signal.addEventListener('abort', () => this.#drop(child), { once: true });
        },
        () => {
          this.#warming.delete(warming);
        },
      );
      this.#warming.add(warming);
    }
  }

  /** `fill()` on a later turn of the event loop, after whoever is waiting on the current answer ran. */
  fillSoon(): void {
    setImmediate(() => this.fill()).unref();
  }

  #drop(child: WarmChild): void {
    const index = this.#ready.indexOf(child);
    if (index === -1) return;
    this.#ready.splice(index, 1);
    void this.#retire(child);
  }

  /** The ready process `take()` would hand out next (still the pool's), or undefined. */
  peek(): WarmChild | undefined {
    return this.#ready.find(usable);
  }

  /** A ready process (now the caller's, who calls `fill()` later), or undefined (the pool refills now). */
  take(): WarmChild | undefined {
    let child: WarmChild | undefined;
    while ((child = this.#ready.shift()) && !usable(child)) void this.#retire(child);
    if (!child) this.fill();
    return child;
  }

  /** Resolves once nothing is warming (the pool is full, or some launches failed). */
  async whenWarm(): Promise<void> {
    while (this.#warming.size > 0) await Promise.allSettled([...this.#warming]);
  }

  /** Idempotent: stops refilling, aborts launches in progress and retires every idle process. */
  close(): Promise<void> {
    this.#closing ??= (async () => {
      this.#closer.abort();
      const idle = this.#ready.splice(0);
      await Promise.allSettled([...idle.map((child) => this.#retire(child)), ...this.#warming]);
    })();
    return this.#closing;
  }
}
