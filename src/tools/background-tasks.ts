// Background one-shot runs started by the `subagent` tool: each task notifies its parent when it
// settles and is disposed exactly once, whether or not anyone collects it. It is its parent's held
// work: it goes before its parent (the parent's disposal, eviction or host close cancels it).
import type { Agent } from '../seam/agent-types.js';
import { textOf, type ContentBlock, type SessionId } from '../seam/content.js';
import { settledOneShot } from '../seam/descriptor.js';
import { limitDiagnostic } from '../seam/output.js';
import { SubagentError, isSubagentError } from '../seam/errors.js';
import type { AdmitInput, SubagentResult, SubagentRun, SubagentStopReason } from '../seam/types.js';
import type { HeldWork } from '../service/held-work.js';
import { heldWorkOf, type SubagentService } from '../service/service.js';
import { deliverFitting, fittedNotice, injectIfOpen } from '../service/continuation/notices.js';
import { stoppedByBudget } from './subagent-wording.js';

export interface BackgroundTask {
  readonly id: SessionId;
  readonly parentId: SessionId;
  /** Once published and until it is disposed: a settled task is remembered without its child (agent and log). */
  run: SubagentRun | undefined;
  result: SubagentResult | undefined;
  /** Resolves once the run settled and its notice went out (never rejects). */
  readonly settled: Promise<void>;
  /**
   * Calls `listener` once when `settled` resolves (soon, if it has); returns its removal. A wait
   * that ends first removes it, so polls of a long-running task keep nothing behind (a reaction
   * on `settled` would stay until the task settles).
   */
  onSettled(listener: () => void): () => void;
  /** Set when its parent went first: the notice is only added to the parent's context. */
  released: boolean;
  /** Cancels its run, or gives up its start while that still waits for room. */
  cancel(reason: unknown): void;
}

/** What the tool hands over: a published run, or a start still waiting for room, whose child will be `id`. */
export type TaskStart = { run: SubagentRun } | { id: SessionId; starting: Promise<SubagentRun>; stop: (reason: unknown) => void };

const SENTENCES: Partial<Record<string, string>> & Record<SubagentStopReason, string> = {
  completed: 'finished',
  aborted: 'was cancelled before finishing',
  error: 'failed before finishing',
  'max-tokens': 'ran out of room before finishing',
  refusal: 'declined the task',
};

/**
 * The parent's notice of a settled background task: task id, stop reason, output. `admit` (the
 * parent's transport bound, see ContinuableCreateSpec.admitInput) refusing it leaves the output out, said so.
 */
export function taskNotice(task: BackgroundTask, result: SubagentResult, admit?: AdmitInput): ContentBlock[] {
  const how = stoppedByBudget(result) ? 'was stopped by its budget before finishing' : (SENTENCES[result.stopReason] ?? 'ended abnormally');
  const sentence = `Background task ${task.id} ${how} (stop reason: ${result.stopReason}).`;
  const output = textOf(result.output);
  const lines = [sentence];
  if (result.diagnostic) lines.push(`Diagnostic: ${result.diagnostic}`);
  if (!output) return [{ type: 'text', text: [...lines, 'It left no output.'].join('\n') }];
  return fittedNotice([{ type: 'text', text: [...lines, `Its output:\n${output}`].join('\n') }], admit, (why) => [
    { type: 'text', text: [...lines, `Its output is left out: this agent could not take it (${why}).`].join('\n') },
  ]);
}

/**
 * A turn for an idle parent, its next step when busy; context only when the parent is going away
 * or is a one-shot child whose result settled (a new turn there would run outside every budget).
 */
function deliver(parent: Agent, content: ContentBlock[], senderSessionId: SessionId, released: boolean): void {
  const source = { kind: 'subagent-settled' as const, senderSessionId };
  if (released || settledOneShot(parent)) return injectIfOpen(parent, content, source);
  try {
    if (parent.status === 'idle') parent.followup(content, { source });
    else parent.steer(content, { source });
  } catch (error) {
    // A worker child that has just finished takes no input, before its main-thread face reads idle:
    // it gets nothing (as a settled one-shot parent would), which is no failure to warn about.
    if (!isSubagentError(error, 'CLOSED')) throw error;
  }
}

/**
 * A task as remembered. Its cancel state lives here, not in closures of `adopt`: those also hold the
 * parent, and a settled task stays readable (up to SETTLED_TASKS_KEPT) after its parent is gone.
 */
class Task implements BackgroundTask {
  run: SubagentRun | undefined;
  result: SubagentResult | undefined = undefined;
  released = false;
  settled: Promise<void> = Promise.resolve();
  /** Gives the start up while it waits; dropped once settled, like the run. */
  #stopStart: ((reason: unknown) => void) | undefined;
  #stopped = false;
  /** Waits for `settled` in progress; undefined once it resolved. */
  #waits: Set<() => void> | undefined = new Set();

  constructor(
    readonly id: SessionId,
    readonly parentId: SessionId,
    run: SubagentRun | undefined,
    stopStart: ((reason: unknown) => void) | undefined,
  ) {
    this.run = run;
    this.#stopStart = stopStart;
  }

  /** True once its waiting start was given up. */
  get stopped(): boolean {
    return this.#stopped;
  }

  cancel(reason: unknown): void {
    if (this.result) return;
    if (this.run) this.run.cancel(reason);
    else if (!this.#stopped && this.#stopStart) {
      this.#stopped = true;
      this.#stopStart(reason);
    }
  }

  forgetStart(): void {
    this.#stopStart = undefined;
  }

  onSettled(listener: () => void): () => void {
    const waits = this.#waits;
    if (!waits) {
      queueMicrotask(listener);
      return () => undefined;
    }
    // A wrapper per call: the same function waiting twice is removed once per wait.
    const wait = () => listener();
    waits.add(wait);
    return () => void waits.delete(wait);
  }

  /** `settled` resolved: each wait still in progress hears it once. */
  settledNow(): void {
    const waits = this.#waits;
    this.#waits = undefined;
    for (const wait of waits ?? []) wait();
  }
}

/** The diagnostic of a start that failed before its child existed: its code and message, bounded as any diagnostic. */
function startFailure(error: unknown): string {
  return limitDiagnostic(isSubagentError(error) ? `${error.code}: ${error.message}` : String(error));
}

/** Settled tasks remembered for `task_output` per service; older ones are forgotten (UNKNOWN_SESSION). */
export const SETTLED_TASKS_KEPT = 1024;

/** The tasks of one service: every running task, plus the most recently settled ones (bounded). */
export class BackgroundTasks {
  readonly #tasks = new Map<SessionId, BackgroundTask>();
  /** Ids of settled tasks, oldest first: a long-lived host must not keep one entry per task forever. */
  readonly #settledOrder: SessionId[] = [];
  readonly #keep: number;
  readonly #held: HeldWork | undefined;

  constructor(keep = SETTLED_TASKS_KEPT, held?: HeldWork) {
    this.#keep = keep;
    this.#held = held;
  }

  #remember(id: SessionId): void {
    this.#settledOrder.push(id);
    while (this.#settledOrder.length > this.#keep) this.#tasks.delete(this.#settledOrder.shift()!);
  }

  /**
   * Adopts a started run, or a start that waits for room: from now on it is owned here and its run
   * is disposed once when it settles. It is held for its parent, which cannot go (dispose, evict,
   * host close) before the task did. A start that fails settles the task `error` (`aborted` when it
   * was given up, or cancelled by a host that closed), with the failure as diagnostic.
   */
  adopt(start: TaskStart, parent: Agent, onWarn: (message: string, error: unknown) => void): BackgroundTask {
    let done = () => undefined as void;
    const task = new Task('run' in start ? start.run.id : start.id, parent.id, 'run' in start ? start.run : undefined, 'stop' in start ? start.stop : undefined);
    const { id } = task;
    const notify = (result: SubagentResult) => {
      try {
        deliverFitting(this.#held?.admitInputOf(parent), (admit) => taskNotice(task, result, admit), (content) => deliver(parent, content, id, task.released));
      } catch (error) {
        onWarn(`the settlement notice of background task ${id} could not reach its parent`, error);
      }
    };
    const starting = 'run' in start ? Promise.resolve(start.run) : start.starting;
    task.settled = starting
      .then(
        (run) => {
          task.run = run;
          return run.result.then(
            (result) => {
              task.result = result;
            },
            (error: unknown) => {
              task.result = { stopReason: 'error', output: [], diagnostic: String(error) };
              onWarn(`background task ${id} failed`, error);
            },
          );
        },
        (error: unknown) => {
          const givenUp = task.stopped || isSubagentError(error, 'CANCELLED') || isSubagentError(error, 'CLOSED');
          task.result = { stopReason: givenUp ? 'aborted' : 'error', output: [], diagnostic: startFailure(error) };
        },
      )
      .then(() => notify(task.result!))
      .finally(async () => {
        this.#remember(id);
        task.forgetStart();
        await task.run?.dispose().catch((error: unknown) => onWarn(`disposing background task ${id} failed`, error));
        task.run = undefined;
      })
      .finally(() => done());
    void task.settled.then(() => task.settledNow());
    this.#tasks.set(id, task);
    if (this.#held) {
      done = this.#held.hold(parent, async () => {
        task.released = true;
        if (task.run) await task.run.dispose().catch(() => undefined);
        else task.cancel({ kind: 'parent' });
        await task.settled;
      });
    }
    return task;
  }

  has(id: SessionId): boolean {
    return this.#tasks.has(id);
  }

  /** The caller's own task; `UNKNOWN_SESSION` or `UNAUTHORIZED` as an error the model reads. */
  ownedBy(caller: Agent, id: SessionId): BackgroundTask {
    const task = this.#tasks.get(id);
    if (!task) throw new SubagentError('UNKNOWN_SESSION', `no background task ${id}; task ids come from "started task <id>"`);
    if (task.parentId !== caller.id) throw new SubagentError('UNAUTHORIZED', `task ${id} belongs to another agent; only the agent that started it may read or cancel it`);
    return task;
  }

  /** The parent's tasks: every running one and the settled ones still remembered. */
  of(parentId: SessionId): BackgroundTask[] {
    return [...this.#tasks.values()].filter((task) => task.parentId === parentId);
  }

  runningOf(parentId: SessionId): BackgroundTask[] {
    return this.of(parentId).filter((task) => task.result === undefined);
  }
}

const registries = new WeakMap<SubagentService, BackgroundTasks>();

/** The task registry shared by every tool of one service. */
export function backgroundTasks(service: SubagentService): BackgroundTasks {
  let tasks = registries.get(service);
  if (!tasks) {
    tasks = new BackgroundTasks(SETTLED_TASKS_KEPT, heldWorkOf(service));
    registries.set(service, tasks);
  }
  return tasks;
}
