// Warms a freshly started `subagent-host acp`: throwaway session/new and prompt rounds through the
// same SDK and server code on an in-memory host, so a client's first real request does not pay for
// the first runs of that code (schema compilation, lazy imports, cold ICs). A few rounds run before
// the agent serves; more run while it waits for its first session (a prewarmed process idles after
// `initialize` until a start takes it), each after a turn of the event loop and none once the agent
// has a real session, so they only use time the process would have spent idle.
import { PassThrough } from 'node:stream';
import { createHost } from '../host.js';
import { loadAcpSdk, nodeAcpStream } from '../providers/acp/sdk.js';
import { serveAcp } from '../providers/acp/server.js';

/** Rounds before serving: enough for the prompt path's hot functions to leave the interpreter's first tier. */
const FIRST_ROUNDS = 10;
/** Rounds while idle, until a real session exists: enough for the optimizing compiler to take the hot path. */
const IDLE_ROUNDS = 190;

export interface WarmUp {
  /** Resolves once the first rounds ran; never rejects. */
  readonly ready: Promise<void>;
  /** Runs the idle rounds until `busy()`; resolves when they stopped and the warm-up closed; never rejects. */
  continueWhileIdle(busy: () => boolean): Promise<void>;
}

/** Starts warming the agent (see the file comment). */
export function startWarmUp(cwd: string): WarmUp {
  const rig = openRig(cwd);
  const ready = rig.then((open) => open?.rounds(FIRST_ROUNDS, () => false)).catch(() => undefined);
  return {
    ready,
    async continueWhileIdle(busy) {
      const open = await rig;
      await ready;
      await open?.rounds(IDLE_ROUNDS, busy).catch(() => undefined);
      await open?.close();
    },
  };
}

interface Rig {
  /** Runs up to `count` rounds, each after a turn of the event loop, until `stop()` says so. */
  rounds(count: number, stop: () => boolean): Promise<void>;
  close(): Promise<void>;
}

/** An in-memory host served over a pipe pair, and an SDK client connected to it; undefined when that fails. */
async function openRig(cwd: string): Promise<Rig | undefined> {
  try {
    const sdk = await loadAcpSdk();
    const host = await createHost({ persistence: 'memory', providers: false, model: { kind: 'scripted' } });
    const toServer = new PassThrough();
    const toClient = new PassThrough();
    const served = serveAcp(host, { input: toServer, output: toClient });
    const client = sdk
      .client({ name: 'warm-up' })
      .onNotification(sdk.methods.client.session.update, () => undefined)
      .connect(nodeAcpStream(sdk, toServer, toClient, 'client'));
    const initialized = client.agent.request(sdk.methods.agent.initialize, { protocolVersion: sdk.PROTOCOL_VERSION, clientCapabilities: {} });
    return {
      async rounds(count, stop) {
        await initialized;
        for (let round = 0; round < count && !stop(); round++) {
          const { sessionId } = await client.agent.request(sdk.methods.agent.session.new, { cwd, mcpServers: [] });
          await client.agent.request(sdk.methods.agent.session.prompt, { sessionId, prompt: [{ type: 'text', text: 'warm-up' }] });
          // Real requests waiting in the pipe are served before the next round.
          await new Promise((resolve) => setImmediate(resolve));
        }
      },
      async close() {
        client.close();
        toServer.end();
        await served.catch(() => undefined);
        await host.close().catch(() => undefined);
      },
    };
  } catch {
    // Only a speed-up: the real server does not depend on it.
    return undefined;
  }
}
