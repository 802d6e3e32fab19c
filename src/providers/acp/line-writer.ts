// The writing side of the ACP wire: newline-delimited JSON lines written in bursts, with backpressure.
import type * as acp from '@agentclientprotocol/sdk';
import type { Writable } from 'node:stream';
import { wellFormedJson } from '../../seam/parse.js';

type AnyMessage = acp.AnyMessage;

/** How the messages of one run of promise callbacks (a burst) leave. */
export type Batching =
  /** The first at once (the peer starts on it), the rest in one write once the run is over: a client's requests. */
  | 'first-at-once'
  /**
   * All in one write once the run is over: an agent's answers. A turn that runs without waiting
   * (a scripted model) then sends its updates and its answer in one pipe write, and the client
   * wakes once for all of them; a streaming model's chunk leaves as soon as the callback that
   * received it is done.
   */
  | 'whole-burst';

/**
 * Writes the messages of a burst together once it is over (`process.nextTick` runs when the
 * microtask queue drained), the first of them at once with `first-at-once`. A burst that outgrows
 * the output's high-water mark leaves at once, so backpressure holds its writer: held to the end,
 * a replay of a long log would be buffered whole for a client that reads nothing.
 */
export class LineWriter {
  readonly #output: Writable;
  readonly #holdFirst: boolean;
  #held: string[] | undefined;
  #heldLength = 0;
  #failed = false;
  #drained: Promise<void> | undefined;

  constructor(output: Writable, batching: Batching) {
    this.#output = output;
    this.#holdFirst = batching === 'whole-burst';
    // A peer that went away (EPIPE) closes the connection through the next write, not a crash.
    output.once('error', () => (this.#failed = true));
  }

  get #closed(): boolean {
    return this.#failed || this.#output.destroyed || this.#output.writableEnded;
  }

  write(message: AnyMessage): Promise<void> {
    if (this.#closed) return Promise.reject(new Error('the ACP output stream is closed'));
    // Lone surrogates as U+FFFD: peers on serde_json (codex-acp and other Rust agents, editors such
    // as Zed) refuse their `\udXXX` escapes, so half an emoji would break the session.
    const line = `${wellFormedJson(message)}\n`;
    if (this.#held) this.#held.push(line);
    else {
      if (this.#holdFirst) this.#held = [line];
      else {
        this.#held = [];
        this.#output.write(line);
      }
      process.nextTick(() => this.#flush());
    }
    this.#heldLength += line.length;
    if (this.#heldLength >= this.#output.writableHighWaterMark) this.#flush();
    // Backpressure: a peer that stopped reading holds the writer until it drains (or goes away).
    return this.drained();
  }

  /** Resolves once the output drained (at once when it is not backed up); rejects when it closed meanwhile. */
  drained(): Promise<void> {
    return this.#output.writableNeedDrain ? this.nextDrain() : Promise.resolve();
  }

  /** Resolves at the output's next drain (the peer read output that was backed up); rejects once it closed. */
  nextDrain(): Promise<void> {
    // One pair of listeners for every waiting write (one pair each made a drain O(n²)).
    return (this.#drained ??= new Promise<void>((resolve, reject) => {
      const done = () => {
        this.#output.off('drain', done).off('close', done);
        this.#drained = undefined;
        if (this.#closed) reject(new Error('the ACP output stream is closed'));
        else resolve();
      };
      this.#output.on('drain', done).on('close', done);
    }));
  }

  /** True while the peer is not reading what was written. */
  get backedUp(): boolean {
    return this.#output.writableNeedDrain && !this.#closed;
  }

  #flush(): void {
    const held = this.#held ?? [];
    this.#held = undefined;
    this.#heldLength = 0;
    if (held.length > 0 && !this.#closed) this.#output.write(held.length === 1 ? held[0]! : held.join(''));
  }
}
