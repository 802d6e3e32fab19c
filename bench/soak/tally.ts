// The soak's bookkeeping: outcomes by provider and kind, the checks on each run (one end event,
// one settlement, an allowed stop reason), and the one-line summary.
import { isSubagentError, type SubagentResult } from '../../src/index.js';
import { allowedOutcomes, type Delegation } from './plan.js';

export class Tally {
  readonly failures: string[] = [];
  readonly #byProvider = new Map<string, number>();
  readonly #byOutcome = new Map<string, number>();
  readonly #byKind = new Map<string, number>();
  readonly #ends = new Map<string, number>();
  readonly #runs = new Set<string>();
  #startsCancelled = 0;
  #disposed = 0;

  #count(map: Map<string, number>, key: string): void {
    map.set(key, (map.get(key) ?? 0) + 1);
  }

  fail(message: string): void {
    this.failures.push(message);
  }

  ended(id: string): void {
    this.#count(this.#ends, id);
  }

  startFailed(job: Delegation, error: unknown): void {
    this.#count(this.#byProvider, job.provider);
    this.#count(this.#byKind, job.kind);
    // Only a cancel may stop a start; anything else is a failure of the host.
    if (job.cancelAfterMs !== undefined && isSubagentError(error, 'CANCELLED')) this.#startsCancelled++;
    else this.fail(`start of ${job.kind} on ${job.provider} (cancel ${job.cancelAfterMs ?? '-'}) failed: ${error instanceof Error ? error.message : String(error)}`);
  }

  started(job: Delegation, id: string): void {
    this.#count(this.#byProvider, job.provider);
    this.#count(this.#byKind, job.kind);
    this.#runs.add(id);
  }

  finished(job: Delegation, id: string, result: SubagentResult, settledCount: number): void {
    this.#disposed++;
    this.#count(this.#byOutcome, result.stopReason);
    if (settledCount !== 1) this.fail(`run ${id} settled ${settledCount} times`);
    if (!allowedOutcomes(job).includes(result.stopReason)) {
      this.fail(`${job.kind} on ${job.provider} (cancel ${job.cancelAfterMs ?? '-'}, early dispose ${job.disposeEarly}) ended ${result.stopReason}: ${result.diagnostic ?? ''}`);
    }
  }

  /** Checks that every started run ended exactly once (call after close), then summarises. */
  summary(total: number): string {
    const unended = [...this.#runs].filter((id) => this.#ends.get(id) !== 1);
    if (unended.length > 0) this.fail(`${unended.length} runs without exactly one end event (first: ${unended[0]})`);
    const list = (map: Map<string, number>) => [...map].map(([key, n]) => `${key} ${n}`).join(', ');
    return (
      `${total} delegations (${list(this.#byProvider)}); kinds (${list(this.#byKind)}); ` +
      `outcomes (${list(this.#byOutcome)}, start cancelled ${this.#startsCancelled}); ` +
      `ended once ${this.#runs.size - unended.length}/${this.#runs.size}; disposes resolved ${this.#disposed}; failures ${this.failures.length}`
    );
  }
}
