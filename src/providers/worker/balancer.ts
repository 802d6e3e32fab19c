// Which thread piscina gives a task: its least-busy choice, minus threads being terminated or
// retiring (a child's code let an error escape in them, see workers/child.ts). A
// thread's last task may end while its termination is under way; piscina, which learns of the
// termination only when the thread exits, would otherwise give that thread the next task.

export interface Candidate {
  readonly id: number;
  readonly currentUsage: number;
  readonly isRunningAbortableTask: boolean;
}

/**
 * A piscina `loadBalancer` that never picks a thread whose id is in `doomed` or `avoided`;
 * `onPlaced` hears which thread each task goes to.
 */
export function leastBusyBalancer(
  maximumUsage: number,
  doomed: ReadonlySet<number>,
  avoided: ReadonlySet<number>,
  onPlaced: (task: object, worker: Candidate) => void = () => undefined,
) {
  return <W extends Candidate>(task: { readonly isAbortable: boolean }, workers: W[]): W | null => {
    const chosen = leastBusy(maximumUsage, doomed, avoided, task, workers);
    if (chosen) onPlaced(task, chosen);
    return chosen;
  };
}

function leastBusy<W extends Candidate>(maximumUsage: number, doomed: ReadonlySet<number>, avoided: ReadonlySet<number>, task: { readonly isAbortable: boolean }, workers: W[]): W | null {
  let candidate: W | null = null;
  let checkpoint = maximumUsage;
  for (const worker of workers) {
    // A doomed thread is skipped only when a task is dispatched while its termination is under way
    // (a race no test orders); an avoided one whenever a task is dispatched while it retires.
    if (doomed.has(worker.id) || avoided.has(worker.id)) continue;
    if (worker.currentUsage === 0) return worker;
    if (worker.isRunningAbortableTask) continue;
    if (!task.isAbortable && worker.currentUsage < checkpoint) {
      candidate = worker;
      checkpoint = worker.currentUsage;
    }
  }
  return candidate;
}
