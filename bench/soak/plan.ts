// The soak's delegations, drawn from a seeded generator so a failing mix can be replayed: which
// provider, which behaviour, and when (if at all) it is cancelled or disposed.
import type { ScriptedStep, SubagentStopReason } from '../../src/index.js';

export type Kind = 'quick' | 'hang' | 'exit' | 'throw' | 'spin' | 'oom';

export interface Delegation {
  kind: Kind;
  provider: 'spawn' | 'fork' | 'in-process';
  steps: ScriptedStep[];
  cancelAfterMs?: number;
  disposeEarly: boolean;
  disposeAfterMs: number;
}

const call = (name: string): ScriptedStep[] => [{ toolCalls: [{ name, input: {} }] }, { text: 'done' }];

// Weight, steps, and whether the behaviour may only run in a worker thread (it kills or blocks its thread).
const KINDS: Record<Kind, { weight: number; steps: ScriptedStep[]; workerOnly: boolean; alwaysCancelled: boolean }> = {
  quick: { weight: 46, steps: call('work'), workerOnly: false, alwaysCancelled: false },
  hang: { weight: 14, steps: [{ finish: 'hang' }], workerOnly: false, alwaysCancelled: true },
  exit: { weight: 10, steps: call('exit_thread'), workerOnly: true, alwaysCancelled: false },
  throw: { weight: 10, steps: call('escape'), workerOnly: true, alwaysCancelled: false },
  spin: { weight: 12, steps: call('spin'), workerOnly: true, alwaysCancelled: true },
  oom: { weight: 3, steps: call('hog_memory'), workerOnly: true, alwaysCancelled: false },
};

/** The stop reasons a delegation may end with; a cancel or dispose may overtake any behaviour. */
export function allowedOutcomes(job: Delegation): SubagentStopReason[] {
  const interrupted = job.cancelAfterMs !== undefined || job.disposeEarly;
  const natural: SubagentStopReason = job.kind === 'quick' ? 'completed' : job.kind === 'hang' || job.kind === 'spin' ? 'aborted' : 'error';
  return interrupted ? [natural, 'aborted'] : [natural];
}

/** mulberry32: small, fast, good enough to draw a test mix. */
function generator(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export function plan(count: number, seed: number): Delegation[] {
  const random = generator(seed);
  const entries = Object.entries(KINDS) as [Kind, (typeof KINDS)[Kind]][];
  const totalWeight = entries.reduce((sum, [, kind]) => sum + kind.weight, 0);
  const pick = (): Kind => {
    let roll = random() * totalWeight;
    for (const [name, kind] of entries) if ((roll -= kind.weight) < 0) return name;
    return 'quick';
  };
  return Array.from({ length: count }, () => {
    const kind = pick();
    const spec = KINDS[kind];
    const providers = spec.workerOnly ? (['spawn', 'fork'] as const) : (['spawn', 'fork', 'in-process'] as const);
    const provider = providers[Math.floor(random() * providers.length)]!;
    const disposeEarly = random() < 0.15;
    const cancelled = spec.alwaysCancelled ? !disposeEarly : random() < 0.3;
    return {
      kind,
      provider,
      steps: spec.steps,
      ...(cancelled ? { cancelAfterMs: Math.floor(random() * 80) } : {}),
      disposeEarly,
      disposeAfterMs: Math.floor(random() * 40),
    };
  });
}
