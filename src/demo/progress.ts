// Live progress of the demo's children: one line per child (queued → running → done, with times),
// redrawn with a progress bar on a TTY, printed as plain lines otherwise.
import type { Writable } from 'node:stream';
import { visible } from '../seam/visible.js';

export type ChildState = 'queued' | 'running' | 'done';

/** The outcome of a child whose start was cancelled (Ctrl-C) while it waited for a thread: it never ran. */
export const NOT_STARTED = 'not started';

export interface ChildProgress {
  label: string;
  id?: string;
  state: ChildState;
  queuedAt: number;
  startedAt?: number;
  endedAt?: number;
  stopReason?: string;
  note?: string;
  /** Tokens and turns the child spent, when its transport reports usage. */
  usage?: { tokens: number; turns: number };
}

const CLEAR_LINE = '\x1b[2K';
const up = (n: number) => (n > 0 ? `\x1b[${n}A` : '');

export class ProgressView {
  readonly children: ChildProgress[] = [];
  readonly #out: Writable;
  readonly #tty: boolean;
  readonly #quiet: boolean;
  readonly #t0 = performance.now();
  #drawn = 0;
  #timer: NodeJS.Timeout | undefined;

  constructor(out: Writable, options: { tty: boolean; quiet: boolean }) {
    this.#out = out;
    this.#tty = options.tty;
    this.#quiet = options.quiet;
    if (this.#tty && !this.#quiet) this.#timer = setInterval(() => this.#draw(), 100);
  }

  #now(): number {
    return performance.now() - this.#t0;
  }

  /** Milliseconds since the view was made: the clock of every time it shows. */
  elapsed(): number {
    return this.#now();
  }

  queued(label: string): ChildProgress {
    const child: ChildProgress = { label, state: 'queued', queuedAt: this.#now() };
    this.children.push(child);
    this.#changed(child);
    return child;
  }

  running(child: ChildProgress, id: string): void {
    Object.assign(child, { id, state: 'running', startedAt: this.#now() });
    this.#changed(child);
  }

  /** Replaces a child's note (e.g. its turns and reports so far) and shows the change. */
  note(child: ChildProgress, note: string): void {
    child.note = note;
    this.#changed(child);
  }

  done(child: ChildProgress, stopReason: string, note?: string, usage?: { tokens: number; turns: number }): void {
    Object.assign(child, { state: 'done', endedAt: this.#now(), stopReason, ...(note ? { note } : {}), ...(usage ? { usage } : {}) });
    this.#changed(child);
  }

  #line(child: ChildProgress): string {
    const ms = (value: number) => `${Math.round(value)} ms`;
    // A child that ended without starting (its start failed) counts from when it was queued.
    const since = child.startedAt ?? child.queuedAt;
    const status =
      child.state === 'queued'
        ? 'queued'
        : child.state === 'running'
          ? `running since ${ms(since)}`
          : child.stopReason === NOT_STARTED
            ? `${NOT_STARTED} after ${ms((child.endedAt ?? since) - since)} queued`
            : `${child.stopReason === 'completed' ? 'done' : child.stopReason} in ${ms((child.endedAt ?? since) - since)}`;
    // A note quotes what children said (a report, a server's failure message): shown, never obeyed.
    const note = child.note ? ` — ${visible(child.note)}` : '';
    return `  ${visible(child.label).padEnd(14)} ${status}${note}`;
  }

  #changed(child: ChildProgress): void {
    if (this.#quiet) return;
    if (this.#tty) this.#draw();
    else this.#out.write(`${this.#line(child)}\n`);
  }

  #draw(): void {
    const finished = this.children.filter((c) => c.state === 'done').length;
    const total = this.children.length;
    const width = 24;
    const filled = Math.round((finished / Math.max(total, 1)) * width);
    const bar = `  [${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${finished}/${total} children, ${(this.#now() / 1000).toFixed(1)} s`;
    const lines = [...this.children.map((c) => this.#line(c)), bar];
    this.#out.write(up(this.#drawn) + lines.map((l) => `${CLEAR_LINE}${l}\n`).join(''));
    this.#drawn = lines.length;
  }

  /** Stops redrawing (draws the final state once). */
  close(): void {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = undefined;
    if (this.#tty && !this.#quiet) this.#draw();
  }
}
