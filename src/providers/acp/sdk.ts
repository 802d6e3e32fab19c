// Lazy access to @agentclientprotocol/sdk. Importing it costs ~100 ms (its zod schemas), so only
// code that actually speaks ACP pays, once (an ACP provider from its creation on); `import
// 'subagent-host'` stays cheap.
import type * as AcpSdkModule from '@agentclientprotocol/sdk';
import type { Readable, Writable } from 'node:stream';
import { SubagentError } from '../../seam/errors.js';
import { ndJsonNodeStream, type Intercept, type Observe } from './ndjson.js';

export type AcpSdk = typeof AcpSdkModule;
export type AcpStream = AcpSdkModule.Stream;

/**
 * The `_meta` key of session/new carrying the delegator's route overrides (model, maxTokens,
 * maxStepsPerTurn). Our own ACP agent honours it; other agents ignore unknown `_meta` keys.
 */
export const AGENT_OPTIONS_META = 'subagent-host/agentOptions';

let loading: Promise<AcpSdk> | undefined;
let loaded = false;

/** The SDK module, imported on first call. */
export function loadAcpSdk(): Promise<AcpSdk> {
  return (loading ??= import('@agentclientprotocol/sdk').then((sdk) => {
    loaded = true;
    return sdk;
  }));
}

/**
 * Resolves once the SDK is loaded (undefined when it already is, so a start spawns at once);
 * `START_FAILED` when it cannot be imported. Awaited before an agent process is spawned: a burst of
 * starts would otherwise use up the file descriptors the import needs (two pipes a process), and
 * Node keeps a failed import failed for the life of the process.
 */
export function acpSdkToStart(): Promise<void> | undefined {
  return loaded ? undefined : importForStart();
}

async function importForStart(): Promise<void> {
  try {
    await loadAcpSdk();
  } catch (error) {
    const code = (error as NodeJS.ErrnoException | null)?.code;
    const why = typeof code === 'string' ? ` (${code})` : '';
    throw new SubagentError('START_FAILED', `the ACP SDK (@agentclientprotocol/sdk) could not be loaded${why}; no ACP child can start in this process`, { cause: error });
  }
}

/**
 * An ndjson ACP stream over a pair of Node streams (`output` is where this side writes); a client
 * sends the first message of a burst at once, an agent each burst in one write (see `Batching` in ndjson.ts).
 * Both sides write lone surrogates as U+FFFD (see LineWriter in ndjson.ts).
 */
export function nodeAcpStream(sdk: AcpSdk, output: Writable, input: Readable, side: 'client' | 'agent', intercept?: Intercept, observe?: Observe): AcpStream {
  const batching = side === 'agent' ? 'whole-burst' : 'first-at-once';
  return ndJsonNodeStream(sdk, output, input, batching, intercept, observe);
}
