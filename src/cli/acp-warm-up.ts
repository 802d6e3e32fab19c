// Warms a freshly started `subagent-host acp` before it serves: a few throwaway session/new and
// prompt rounds through the same SDK and server code on an in-memory host, so a client's first real
// request does not pay for the first runs of that code (schema compilation, lazy imports, cold ICs).
import { PassThrough } from 'node:stream';
import { createHost } from '../host.js';
import { loadAcpSdk, nodeAcpStream } from '../providers/acp/sdk.js';
import { serveAcp } from '../providers/acp/server.js';

/** Enough rounds for the prompt path's hot functions to leave the interpreter's first tier. */
const ROUNDS = 10;

/** Resolves once the warm-up ran and everything it opened is closed; never rejects. */
export async function warmUp(cwd: string): Promise<void> {
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
    try {
      await client.agent.request(sdk.methods.agent.initialize, { protocolVersion: sdk.PROTOCOL_VERSION, clientCapabilities: {} });
      for (let round = 0; round < ROUNDS; round++) {
        const { sessionId } = await client.agent.request(sdk.methods.agent.session.new, { cwd, mcpServers: [] });
        await client.agent.request(sdk.methods.agent.session.prompt, { sessionId, prompt: [{ type: 'text', text: 'warm-up' }] });
      }
    } finally {
      client.close();
      toServer.end();
      await served;
      await host.close();
    }
  } catch {
    // Only a speed-up: the real server does not depend on it.
  }
}
