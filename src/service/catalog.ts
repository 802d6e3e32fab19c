// The catalog: listChildren / listDescendants over stored headers and stored projections, with live
// sessions overriding stored ones. Cold children are listed from what the store's enumeration read,
// else from one batched projection read; never from a replay.
import type { Session, SessionStore } from '../seam/agent-types.js';
import type { SessionId } from '../seam/content.js';
import { describeError } from '../seam/errors.js';
import { subagentIdentity } from '../seam/projections.js';
import type { SubagentIdentityState } from '../seam/projections.js';
import type { SubagentDescendantListEntry, SubagentListEntry } from '../seam/types.js';
import { subagentUsage, type SubagentUsageState } from '../seam/usage.js';
import type { SessionPersistence } from '../runtime/session-persistence.js';
import type { Logger } from '../runtime/session-store.js';
import { LiveIndex, checkpoint, guarded, placed, preOrder, rowOf, treeTotals, type CorpusNode } from './catalog-rows.js';
import { listedRows, listedTree } from './listed-rows.js';
import type { PublishedChildren, SubagentCatalog } from './service.js';

/** Options of {@link createSubagentCatalog}. */
export interface SubagentCatalogOptions {
  persistence: SessionPersistence;
  /** The live sessions; a session here is listed from its live log, as `running`. */
  sessions: SessionStore;
  /** Told when a projection read fails (those children list as `unavailable`). @default silent */
  logger?: Logger | undefined;
  /** Ids per projection read; cancellation is checked between reads. @default 1000 */
  batchSize?: number;
  /** What started a live child whose log holds no descriptor yet (listed as that, `running`). */
  published?: PublishedChildren | undefined;
}

/** Live identity and usage folds, resumed where they stopped: a live log only grows. */
interface LiveFold {
  seen: number;
  state: SubagentIdentityState;
  usage: SubagentUsageState;
}

class StoredCatalog implements SubagentCatalog {
  readonly #persistence: SessionPersistence;
  readonly #sessions: SessionStore;
  readonly #logger: Logger | undefined;
  readonly #batchSize: number;
  readonly #published: PublishedChildren | undefined;
  readonly #liveFolds = new WeakMap<Session, LiveFold>();

  constructor(options: SubagentCatalogOptions) {
    this.#persistence = options.persistence;
    this.#sessions = options.sessions;
    this.#logger = options.logger;
    this.#batchSize = options.batchSize ?? 1000;
    this.#published = options.published;
  }

  async listChildren(parentId: SessionId, signal?: AbortSignal): Promise<SubagentListEntry[]> {
    checkpoint(signal);
    const stored = await guarded(this.#persistence.childRecords(parentId), signal);
    checkpoint(signal);
    const live = new LiveIndex(this.#sessions);
    const listed = live.byId.size === 0 ? listedRows(stored) : undefined;
    if (listed !== undefined) return listed;
    const candidates = live
      .corpus(stored, (header) => header.parentSession === parentId)
      .filter((node) => node.header.origin === 'subagent');
    await this.#readProjections(candidates, signal);
    const entries: SubagentListEntry[] = [];
    candidates.forEach((node) => {
      const row = this.#rowOf(node, live);
      if (row !== undefined) entries.push(row);
    });
    return entries;
  }

  async listDescendants(rootId: SessionId, signal?: AbortSignal): Promise<SubagentDescendantListEntry[]> {
    checkpoint(signal);
    const stored = await guarded(this.#persistence.descendantRecords(rootId), signal);
    checkpoint(signal);
    const live = new LiveIndex(this.#sessions);
    const listed = live.byId.size === 0 ? listedTree(rootId, stored) : undefined;
    if (listed !== undefined) return listed;
    let walk = live.preOrdered(rootId, stored);
    if (walk !== undefined) {
      await this.#readProjections(walk.filter((node) => node.header.origin === 'subagent'), signal);
    } else {
      const corpus = live.corpus(stored, (header) => header.parentSession !== undefined);
      // Ordinary sessions are walked through (their subagent descendants are listed) but not listed.
      walk = preOrder(rootId, corpus);
      // Read in creation order (the order the store enumerated them in), listed in walk order.
      await this.#readProjections(
        corpus.filter((node) => node.depth !== 0 && node.header.origin === 'subagent'),
        signal,
      );
    }
    const rows = walk.map((node) => (node.header.origin === 'subagent' ? this.#rowOf(node, live) : undefined));
    const totals = treeTotals(walk, rows);
    const entries: SubagentDescendantListEntry[] = [];
    rows.forEach((row, index) => {
      const node = walk[index]!;
      if (row !== undefined) entries.push(placed(row, node.header.parentSession ?? rootId, node.depth, totals[index]));
    });
    return entries;
  }

  #rowOf(node: CorpusNode, live: LiveIndex): SubagentListEntry | undefined {
    const hasChildren = node.hasStoredSubagentChildren || live.subagentParents.has(node.header.id);
    if (node.live === undefined) return rowOf(node, hasChildren, null, node.stored);
    const fold = this.#liveFold(node.live);
    // A worker child published before its first events crossed from its thread: as its start said.
    const identity = subagentIdentity.view(fold.state) ?? this.#published?.(node.header.id) ?? null;
    return rowOf(node, hasChildren, identity, node.stored, subagentUsage.view(fold.usage));
  }

  /**
   * Reads the projections of the cold `candidates` the enumeration did not list in batches of
   * `batchSize` into their `stored`; a failed read leaves its batch's `stored` undefined (listed
   * `unavailable`).
   */
  async #readProjections(candidates: CorpusNode[], signal: AbortSignal | undefined): Promise<void> {
    const cold = candidates.filter((node) => node.live === undefined && node.listed === undefined);
    for (let start = 0; start < cold.length; start += this.#batchSize) {
      checkpoint(signal);
      const batch = cold.slice(start, start + this.#batchSize);
      try {
        const read = await guarded(
          this.#persistence.projections(batch.map((node) => node.header.id)),
          signal,
        );
        batch.forEach((node) => (node.stored = read.get(node.header.id)));
      } catch (error) {
        checkpoint(signal);
        // Not remembered: the next listing reads these children again.
        this.#logger?.warn(`listing could not read the stored projections of ${batch.length} session(s)`, describeError(error));
      }
    }
    checkpoint(signal);
  }

  #liveFold(session: Session): LiveFold {
    let fold = this.#liveFolds.get(session);
    if (fold === undefined) {
      fold = { seen: 0, state: subagentIdentity.initial(), usage: subagentUsage.initial() };
      this.#liveFolds.set(session, fold);
    }
    const { events } = session;
    for (; fold.seen < events.length; fold.seen++) {
      fold.state = subagentIdentity.step(fold.state, events[fold.seen]!);
      fold.usage = subagentUsage.step(fold.usage, events[fold.seen]!);
    }
    return fold;
  }
}

/**
 * The catalog of a host: children and descendants of a session from stored headers and stored
 * projections, live sessions overriding stored ones. Listing order is creation order.
 */
export function createSubagentCatalog(options: SubagentCatalogOptions): SubagentCatalog {
  return new StoredCatalog(options);
}
