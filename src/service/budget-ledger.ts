// Tree budgets: the service's account of what each subtree with a `scope: 'tree'` budget has spent.
// Members report through their (mirrored) logs on this thread, or their final result when they have
// none; a spent tree refuses new members and tells the running ones to stop.
import { type BudgetStop, type SubagentBudget, type TreeHeadroom, addTreeSpend, describeBudgetStop, limitsOf, reachedLimit, readTreeSpend, remaining, takeAhead, treeSpend } from '../seam/budget.js';
import type { Agent } from '../seam/agent-types.js';
import type { SessionId } from '../seam/content.js';
import { SubagentError } from '../seam/errors.js';
import { MAX_TIMER_MS } from '../seam/parse.js';
import type { BudgetTreeLink, SubagentResult, SubagentRun } from '../seam/types.js';
import { UsageMeter, subtractUsage, type SubagentUsage } from '../seam/usage.js';

interface Tree {
  budget: SubagentBudget;
  startedAt: number;
  /** What the tree's members have spent (shared memory: a worker member adds its own spend there). */
  spent: BigInt64Array;
  stop?: BudgetStop;
  listeners: Set<(stop: BudgetStop) => void>;
  /** Checks the tree when its `wallMs` runs out, also while no member counts anything (an ACP member in a long prompt). */
  timer?: NodeJS.Timeout | undefined;
}


/**
 * Start requests whose budget is the `subagent` tool's config, not a caller's ask: a model cannot
 * choose it, so one above what a covering tree has left is not refused (the tree still binds the
 * child; its own budget stands for what it may spend of it).
 */
export const CONFIGURED_BUDGET_REQUESTS = new WeakSet<object>();

/** The trees a new child joins: refused when one is spent or cannot fit the child's own budget. */
export class BudgetLedger {
  /** The trees covering each running member. */
  readonly #members = new Map<SessionId, Tree[]>();

  /** Number of running members (for leak checks). */
  get size(): number {
    return this.#members.size;
  }

  /**
   * Admits a child of `parentId` with `budget`, or throws `INVALID_REQUEST`. Undefined when no tree
   * covers the child. A `resumed` child (admitted before) re-opens its own tree from its start with
   * what its descendants already spent; its own log is counted when it joins. A `configured` budget
   * (see `CONFIGURED_BUDGET_REQUESTS`) may ask for more than a tree has left.
   */
  admit(parentId: SessionId, budget: SubagentBudget | undefined, resumed?: { startedAt: number; descendants: SubagentUsage }, configured = false): TreeAdmission | undefined {
    const inherited = this.#members.get(parentId) ?? [];
    for (const tree of inherited) {
      const stop = check(tree);
      if (stop) {
        const refused = resumed ? 'an evicted or stored child cannot be resumed under it to take this message' : 'no new child may start under it';
        throw new SubagentError('INVALID_REQUEST', `an ancestor's tree budget is spent (${describeBudgetStop(stop)}); ${refused}`);
      }
      if (budget === undefined || resumed || configured) continue;
      const left = remaining(tree.budget, readTreeSpend(tree.spent), Date.now() - tree.startedAt);
      for (const limit of limitsOf(budget)) {
        const have = left[limit];
        if (have !== undefined && budget[limit]! > have) {
          throw new SubagentError('INVALID_REQUEST', `request.budget.${limit} ${budget[limit]} exceeds what is left of an ancestor's tree budget (${have}); ask for at most that`);
        }
      }
    }
    const own: Tree | undefined = budget?.scope === 'tree' ? { budget, startedAt: resumed?.startedAt ?? Date.now(), spent: treeSpend(), listeners: new Set() } : undefined;
    if (own && resumed) addTreeSpend(own.spent, resumed.descendants);
    const trees = own ? [...inherited, own] : inherited;
    return trees.length === 0 ? undefined : new TreeAdmission(this.#members, trees, own, resumed !== undefined);
  }
}

function check(tree: Tree): BudgetStop | undefined {
  if (tree.stop) return tree.stop;
  // A tree is only opened for a budget of scope 'tree', so its stop already names that scope.
  const stop = reachedLimit(tree.budget, readTreeSpend(tree.spent), Date.now() - tree.startedAt);
  if (stop) {
    tree.stop = stop;
    for (const listener of [...tree.listeners]) listener(stop);
    tree.listeners.clear();
  }
  return stop;
}

/** One admitted child: its link for the provider, then its membership once its run exists. */
export class TreeAdmission {
  readonly #members: Map<SessionId, Tree[]>;
  readonly #trees: Tree[];
  /** The child's own tree (`scope: 'tree'`); it ends when the child leaves. */
  readonly #own: Tree | undefined;
  /** A resumed child: the trees above it already counted what its log held before. */
  readonly #resumed: boolean;
  /** What of the member's spend was counted here (its log, mirrored or not, as last read). */
  #counted: SubagentUsage | undefined;
  /** The member adds its own spend to the trees (see `link.share`): it is not counted here again. */
  #countsItself = false;
  /** What a resident member counted into the trees where it runs before its log here showed it (see `link.countAhead`). */
  #ahead: BigInt64Array | undefined;

  constructor(members: Map<SessionId, Tree[]>, trees: Tree[], own: Tree | undefined, resumed: boolean) {
    this.#members = members;
    this.#trees = trees;
    this.#own = own;
    this.#resumed = resumed;
  }

  readonly link: BudgetTreeLink = {
    stop: () => {
      for (const tree of this.#trees) {
        const stop = check(tree);
        if (stop) return stop;
      }
      return undefined;
    },
    onStop: (listener) => {
      const stopped = this.#trees.find((tree) => tree.stop);
      if (stopped) {
        listener(stopped.stop!);
        return () => undefined;
      }
      const once = (stop: BudgetStop) => {
        for (const tree of this.#trees) tree.listeners.delete(once);
        listener(stop);
      };
      for (const tree of this.#trees) tree.listeners.add(once);
      return () => {
        for (const tree of this.#trees) tree.listeners.delete(once);
      };
    },
    share: () => {
      this.#countsItself = true;
      return this.#shared();
    },
    countAhead: () => {
      this.#ahead ??= treeSpend();
      return { trees: this.#shared(), ahead: this.#ahead };
    },
  };

  #shared(): TreeHeadroom[] {
    return this.#trees.map((tree) => ({ budget: tree.budget, startedAt: tree.startedAt, spent: tree.spent }));
  }

  /** Arms the own tree's `wallMs` check (again, until the deadline, for one past a timer's reach); the tree ends when its owner leaves. */
  #arm(): void {
    const own = this.#own;
    if (own?.budget.wallMs === undefined || own.timer || own.stop) return;
    const left = own.startedAt + own.budget.wallMs - Date.now();
    own.timer = setTimeout(() => {
      own.timer = undefined;
      if (!check(own)) this.#arm();
    }, Math.min(MAX_TIMER_MS, Math.max(0, left) + 1));
    own.timer.unref();
  }

  /**
   * Brings `usage` (the member's figures so far) into every covering tree, unless it counts itself
   * (what it counted ahead is taken from there); then checks them.
   */
  #count(usage: SubagentUsage): void {
    const delta = this.#counted ? subtractUsage(usage, this.#counted) : usage;
    this.#counted = usage;
    const rest = this.#ahead ? takeAhead(this.#ahead, delta) : delta;
    for (const tree of this.#trees) {
      if (!this.#countsItself) addTreeSpend(tree.spent, rest);
      check(tree);
    }
  }

  /**
   * Makes the published run a member until its result settles: its log is counted as it grows; a
   * run without a log on this thread counts its result's usage and is cancelled when a tree is spent,
   * unless it counts itself (see `link.share`): its provider stops it then.
   */
  join(run: SubagentRun): void {
    const agent = run.localAgent;
    const leaveAgent = agent ? this.joinAgent(agent) : undefined;
    if (!agent) this.#members.set(run.id, this.#trees);
    const unsubscribe = agent || this.#countsItself ? () => undefined : this.link.onStop((stop) => run.cancel({ kind: 'hook', reason: describeBudgetStop(stop) }));
    this.#arm();
    const leave = (result?: SubagentResult) => {
      unsubscribe();
      leaveAgent?.();
      clearTimeout(this.#own?.timer);
      if (result?.usage) this.#count(result.usage);
      this.#members.delete(run.id);
    };
    run.result.then(leave, () => leave());
  }

  /**
   * Makes a child with a log on this thread a member until the returned leave is called. `stopTurn`
   * is for a child whose whole remote prompt is one step (a continuable ACP child): it is called
   * when a covering tree is spent by what others spent or by its `wallMs`, as a one-shot ACP
   * member is cancelled then; a stop its own figures call for waits for its next step boundary.
   */
  joinAgent(agent: Agent, stopTurn?: (stop: BudgetStop) => void): () => void {
    this.#members.set(agent.id, this.#trees);
    // A fork's seed is its parent's spend, not its own.
    const meter = new UsageMeter(agent.session.header.seedLength ?? 0);
    const before = meter.read(agent.session.events);
    if (this.#resumed) {
      // Its earlier turns were counted by the trees above while they ran (or, after a restart, in
      // their stored descendants' spend); only its own re-opened tree starts from its whole log.
      const own = this.#own;
      if (own) {
        addTreeSpend(own.spent, before);
        check(own);
      }
      this.#counted = before;
    } else {
      this.#count(before);
    }
    let counting = false;
    const unsubscribe = agent.subscribe(() => {
      counting = true;
      try {
        this.#count(meter.read(agent.session.events));
      } finally {
        counting = false;
      }
    });
    const unwatch = stopTurn && this.link.onStop((stop) => counting || stopTurn(stop));
    this.#arm();
    return () => {
      unsubscribe();
      unwatch?.();
      clearTimeout(this.#own?.timer);
      if (this.#members.get(agent.id) === this.#trees) this.#members.delete(agent.id);
    };
  }
}
