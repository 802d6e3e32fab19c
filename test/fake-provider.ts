// Fakes for service tests: providers and runs implementing the public seam interfaces, with every
// call recorded, and a host whose logger collects warnings.
import {
  createHost,
  text,
  type Agent,
  type Host,
  type ResolvedSubagentStartRequest,
  type SubagentCapabilities,
  type SubagentProvider,
  type SubagentRun,
  type SubagentStartRequest,
} from 'subagent-host';
import { deferred, type Deferred } from './helpers.js';

export const ALL_CAPABILITIES: SubagentCapabilities = { outputSchema: true, depthLimit: true, toolFilter: true, persona: true };
export const NO_CAPABILITIES: SubagentCapabilities = { outputSchema: false, depthLimit: false, toolFilter: false, persona: false };

/** A run whose result the test settles (or disposal does); counts cancel and dispose calls. */
export interface FakeRun extends SubagentRun {
  readonly settle: Deferred<unknown>;
  readonly cancels: unknown[];
  disposeCalls: number;
}

export function fakeRun(id = 'child-1', options: { localAgent?: Agent; dispose?: () => Promise<void> } = {}): FakeRun {
  const settle = deferred<unknown>();
  const run: FakeRun = {
    id,
    localAgent: options.localAgent,
    result: settle.promise as SubagentRun['result'],
    settle,
    cancels: [],
    disposeCalls: 0,
    cancel(reason) {
      run.cancels.push(reason);
    },
    // Like a real provider, disposal ends the child: an unsettled result settles aborted.
    dispose() {
      run.disposeCalls++;
      if (options.dispose) return options.dispose();
      settle.resolve({ output: [], stopReason: 'aborted' });
      return Promise.resolve();
    },
  };
  return run;
}

/** A provider recording every request; `start` defaults to resolving a fresh fake run. */
export interface FakeProvider extends SubagentProvider {
  readonly requests: ResolvedSubagentStartRequest[];
  readonly runs: FakeRun[];
}

export function fakeProvider(
  name: string,
  options: { capabilities?: SubagentCapabilities; start?: (request: ResolvedSubagentStartRequest) => Promise<SubagentRun> } = {},
): FakeProvider {
  const requests: ResolvedSubagentStartRequest[] = [];
  const runs: FakeRun[] = [];
  return {
    name,
    capabilities: options.capabilities ?? ALL_CAPABILITIES,
    inheritsParentContext: false,
    requests,
    runs,
    start(request) {
      requests.push(request);
      if (options.start) return options.start(request);
      const run = fakeRun(`child-${runs.length + 1}`);
      runs.push(run);
      return Promise.resolve(run);
    },
  };
}

/** A host whose logger records warnings; `warned(n)` resolves once n warnings arrived. */
export interface TestHost {
  host: Host;
  parent: Agent;
  warnings: string[];
  warned(count: number): Promise<void>;
  request(extra?: Partial<SubagentStartRequest>): SubagentStartRequest;
}

export async function testHost(): Promise<TestHost> {
  const warnings: string[] = [];
  const waiters: { count: number; done: () => void }[] = [];
  const host = await createHost({
    providers: false,
    logger: {
      warn(message) {
        warnings.push(message);
        for (const waiter of waiters) if (warnings.length >= waiter.count) waiter.done();
      },
    },
  });
  const parent = await host.createAgent();
  return {
    host,
    parent,
    warnings,
    warned(count) {
      if (warnings.length >= count) return Promise.resolve();
      const gate = deferred();
      waiters.push({ count, done: () => gate.resolve() });
      return gate.promise;
    },
    request: (extra = {}) => ({ prompt: [text('go')], parent, signal: new AbortController().signal, ...extra }),
  };
}
