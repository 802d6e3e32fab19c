// The agents serveAcp connections of one host serve (one may load a session another serves): the
// last connection to let an agent go frees it, and a load on another connection meanwhile waits for
// that, then restores the session afresh instead of serving an agent being disposed.
import type { Agent } from '../../seam/agent-types.js';

/** The connections serving each live agent. */
const serving = new WeakMap<Agent, Set<object>>();
/** The agents being freed by the last connection that served them. */
const freeing = new WeakMap<Agent, Promise<unknown>>();

/** `connection` serves `agent` from now on. */
export function serveBy(agent: Agent, connection: object): void {
  serving.set(agent, (serving.get(agent) ?? new Set()).add(connection));
}

/** Whether some connection serves `agent`. */
export function servedByAny(agent: Agent): boolean {
  return (serving.get(agent)?.size ?? 0) > 0;
}

/** `connection` no longer serves `agent`: `free` runs (awaited) unless another connection still serves it. */
export async function letGo(agent: Agent, connection: object, free: () => Promise<unknown>): Promise<void> {
  const connections = serving.get(agent);
  connections?.delete(connection);
  if (connections?.size) return;
  const freed = free();
  freeing.set(agent, freed);
  await freed.finally(() => freeing.delete(agent));
}

/** `live`, or once the connection freeing it is done, what `find` then finds (a later restore, or nothing). */
export async function unlessFreed<T extends Agent>(live: T | undefined, find: () => T | undefined): Promise<T | undefined> {
  const freed = live && freeing.get(live);
  if (!freed) return live;
  await freed.catch(() => undefined);
  return find();
}
