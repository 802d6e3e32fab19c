// ACP: a bare SDK client/agent prompt round trip over a child's stdio (the floor: back to back,
// after idling, and paired with our prompt row), then our provider against `subagent-host acp`:
// start fresh and prewarmed, a one-shot prompt on a prewarmed child, a resident follow-up.
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { Readable, Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import * as acp from '@agentclientprotocol/sdk';
import { acpProvider, createHost, text, type Agent, type Host } from '../src/index.js';
import { rowOf, sampled, removeTempDir, suiteTempDir, type Row, type Suite } from './lib.js';

const CLI = fileURLToPath(new URL('../src/cli.js', import.meta.url));
const FLOOR_AGENT = fileURLToPath(new URL('./fixtures/floor-acp-agent.js', import.meta.url));
const GRACES = { disposeEofGraceMs: 5000, disposeGraceMs: 1000 };

/** How long the floor agent sits idle before each sample of `acp/floor-sdk-after-idle`. */
const IDLE_MS = 20;

/** A bare SDK client connected to the floor agent in a child process. */
interface Floor {
  newSession(): Promise<string>;
  /** One prompt round trip on `sessionId`, in ms. */
  roundTrip(sessionId: string): Promise<number>;
  close(): Promise<void>;
}

async function openFloor(cwd: string): Promise<Floor> {
  const child = spawn(process.execPath, [FLOOR_AGENT], { stdio: ['pipe', 'pipe', 'inherit'] });
  const stream = acp.ndJsonStream(Writable.toWeb(child.stdin) as WritableStream<Uint8Array>, Readable.toWeb(child.stdout) as ReadableStream<Uint8Array>);
  let chunks = 0;
  const connection = acp
    .client({ name: 'floor-client' })
    .onNotification(acp.methods.client.session.update, () => void chunks++)
    .connect(stream);
  await connection.agent.request(acp.methods.agent.initialize, { protocolVersion: acp.PROTOCOL_VERSION, clientCapabilities: {} });
  return {
    newSession: async () => (await connection.agent.request(acp.methods.agent.session.new, { cwd, mcpServers: [] })).sessionId,
    async roundTrip(sessionId) {
      const t0 = performance.now();
      await connection.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: 'text', text: 'hi' }] });
      return performance.now() - t0;
    },
    async close() {
      connection.close();
      child.stdin.end();
      if (child.exitCode === null) await new Promise((resolve) => child.once('exit', resolve));
    },
  };
}

/**
 * Prompt round trips of a bare SDK client to the floor agent: back to back on one session (the
 * floor), and each on a new session after the agent sat idle (a process that slept runs its first
 * request slower).
 */
async function floorRows(floor: Floor): Promise<Row[]> {
  const sessionId = await floor.newSession();
  const rows = [await sampled('acp/floor-sdk-roundtrip', 200, () => floor.roundTrip(sessionId), 20)];
  const afterIdle = await sampled(
    'acp/floor-sdk-after-idle',
    40,
    async () => {
      await new Promise((resolve) => setTimeout(resolve, IDLE_MS));
      return floor.roundTrip(await floor.newSession());
    },
    4,
  );
  afterIdle.note = `new session after ${IDLE_MS} ms idle`;
  return [...rows, afterIdle];
}

async function acpHost(cwd: string, options: { prewarm?: number; db?: string; lingerMs?: number } = {}): Promise<{ host: Host; parent: Agent; whenWarm(): Promise<void> }> {
  const host = await createHost({
    providers: false,
    pool: { minThreads: 0 },
    ...(options.db === undefined ? {} : { persistence: { sqlite: options.db }, continuation: { lingerMs: options.lingerMs ?? 60_000 } }),
  });
  const args = [CLI, 'acp', ...(options.db === undefined ? [] : ['--db', `${options.db}.remote`])];
  const provider = acpProvider(host, { command: process.execPath, args, cwd, prewarm: options.prewarm ?? 0, stderr: 'inherit', ...GRACES });
  host.subagents.registerProvider(provider);
  const parent = await host.createAgent({ header: { cwd } });
  return { host, parent, whenWarm: () => provider.whenWarm() };
}

const request = (parent: Agent) => ({ prompt: [text('hi')], parent, signal: new AbortController().signal });

/** The floor agent's answer: one text chunk, then `end_turn` (our scripted model streams its text word by word). */
const LIKE_THE_FLOOR = { model: { kind: 'scripted' as const, steps: [{ text: 'ok' }] } };

/** `start()` → published; the run is finished and disposed outside the timed window. */
async function timedStart(host: Host, parent: Agent, before: () => Promise<void>): Promise<number> {
  await before();
  const t0 = performance.now();
  const run = await host.subagents.start('acp', request(parent));
  const ms = performance.now() - t0;
  await run.result;
  await run.dispose();
  return ms;
}

/** Publication (the prompt is sent) → result, on a prewarmed child answering like the floor agent. */
async function timedPrompt(host: Host, parent: Agent): Promise<number> {
  const run = await host.subagents.start('acp', { ...request(parent), agentOptions: LIKE_THE_FLOOR });
  const t0 = performance.now();
  await run.result;
  const ms = performance.now() - t0;
  await run.dispose();
  return ms;
}

/**
 * `acp/prompt-roundtrip` and, in the same iterations, the floor under the same conditions: once
 * the pool's refill is done (as before each of our samples), a new session on the floor agent and
 * one round trip. No refill spawn runs during either sample.
 */
async function promptRows(warm: Awaited<ReturnType<typeof acpHost>>, floor: Floor): Promise<Row[]> {
  const ours: number[] = [];
  const paired: number[] = [];
  for (let i = 0; i < 22; i++) {
    await warm.whenWarm();
    ours.push(await timedPrompt(warm.host, warm.parent));
    await warm.whenWarm();
    paired.push(await floor.roundTrip(await floor.newSession()));
  }
  // The first two of each are warm-up.
  const prompt = rowOf('acp/prompt-roundtrip', ours.slice(2));
  const pairedFloor = rowOf('acp/floor-sdk-paired', paired.slice(2));
  pairedFloor.note = 'the floor on a new session, sampled in the prompt-roundtrip loop';
  prompt.note = `prewarmed one-shot child answering one chunk like the floor: publication → result; ×${(prompt.medianMs / pairedFloor.medianMs).toFixed(2)} of acp/floor-sdk-paired`;
  return [pairedFloor, prompt];
}

/** A follow-up to a resident continuable ACP child → the end of the epoch it opened. */
async function followupRow(cwd: string, db: string): Promise<Row> {
  const { host, parent } = await acpHost(cwd, { db });
  try {
    const ended = (childId?: string) =>
      new Promise<void>((resolve) => {
        const off = host.subagents.on('subagent/end', (end) => {
          if (childId !== undefined && end.id !== childId) return;
          off();
          resolve();
        });
      });
    const first = ended();
    const { childId } = await host.subagents.startContinuable({ provider: 'acp', label: 'bench', request: { prompt: [text('hi')], parent } });
    await first;
    await parent.whenIdle();
    const row = await sampled(
      'acp/followup-resident',
      50,
      async () => {
        const end = ended(childId);
        const t0 = performance.now();
        await host.subagents.followup(parent, childId, [text('again')]);
        await end;
        const ms = performance.now() - t0;
        await parent.whenIdle();
        return ms;
      },
      5,
    );
    row.note = 'continuable child, subagent-host acp --db';
    return row;
  } finally {
    await host.close();
  }
}

export const acpSuite: Suite = {
  name: 'acp',
  async run() {
    const dir = suiteTempDir('subagent-acp-bench-');
    const floor = await openFloor(dir);
    try {
      const rows: Row[] = await floorRows(floor);
      const fresh = await acpHost(dir);
      try {
        rows.push(await sampled('acp/start-fresh', 10, () => timedStart(fresh.host, fresh.parent, async () => undefined), 1));
      } finally {
        await fresh.host.close();
      }
      const warm = await acpHost(dir, { prewarm: 2 });
      try {
        const prewarmed = await sampled('acp/start-prewarmed', 20, () => timedStart(warm.host, warm.parent, warm.whenWarm), 2);
        prewarmed.note = 'prewarm 2';
        rows.push(prewarmed, ...(await promptRows(warm, floor)));
      } finally {
        await warm.host.close();
      }
      rows.push(await followupRow(dir, join(dir, 'followup.db')));
      return rows;
    } finally {
      await floor.close();
      removeTempDir(dir);
    }
  },
};
