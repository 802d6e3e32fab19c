// acpProvider against misbehaving agents (the SDK-written fixture in test/fixtures/acp): every stop
// reason mapping, agents that never answer, ignore EOF, trap SIGTERM, crash or write junk, and
// failures before the session is ready, secret-free diagnostics. Graces are small so each ladder
// finishes in well under a second; the agent logs which signals reached it.
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { acpProvider, createHost, text, type AcpProviderOptions, type Agent, type Host, type SubagentStartRequest } from 'subagent-host';
import { FIXTURE_AGENT, childPids, isAlive, isRunning, newChildPids, streamedText, whenSession } from './acp-helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'acp-misbehave-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const GRACES = { disposeEofGraceMs: 200, disposeGraceMs: 200 };
const SECRET = 'secret-token-123';

describe('acpProvider with misbehaving agents', () => {
  let host: Host;
  let parent: Agent;

  beforeEach(async () => {
    host = await createHost({ providers: false });
    parent = await host.createAgent({ header: { cwd: dir } });
  });

  afterEach(async () => {
    await host.close();
  });

  function use(flags: string[], extra: Partial<AcpProviderOptions> = {}): void {
    host.subagents.registerProvider(acpProvider(host, { command: process.execPath, args: [FIXTURE_AGENT, ...flags], stderr: 'ignore', ...GRACES, ...extra }));
  }

  function start(request: Partial<SubagentStartRequest> = {}) {
    return host.subagents.start('acp', { prompt: [text('go')], parent, signal: new AbortController().signal, ...request });
  }

  /** The processes spawned since `before`, once there is one (a first start spawns once the ACP SDK is loaded). */
  async function spawnedSince(before: readonly number[]): Promise<number[]> {
    for (;;) {
      const spawned = newChildPids(before);
      if (spawned.length > 0) return spawned;
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
  }

  /** Starts a run and returns it with the pid of the process it spawned. */
  async function startWithPid(request: Partial<SubagentStartRequest> = {}) {
    const before = childPids();
    const run = await start(request);
    const [pid] = newChildPids(before);
    return { run, pid: pid! };
  }

  it.each([
    ['end_turn', 'completed'],
    ['max_tokens', 'max-tokens'],
    ['refusal', 'refusal'],
    ['cancelled', 'aborted'],
    ['max_turn_requests', 'error'],
    ['something_new', 'error'],
  ])('maps stop reason %s to %s', async (reason, stopReason) => {
    use([`--stop=${reason}`]);
    const run = await start();
    const result = await run.result;
    expect(result).toMatchObject({ output: [text('hello world')], stopReason });
    expect(typeof result.diagnostic).toBe(stopReason === 'error' ? 'string' : 'undefined');
    await run.dispose();
  });

  // Counts that are negative, fractional, unsafe or not finite (1e400 parses as Infinity) are no
  // report: the result has no usage and the child's log counts no spend, rather than a negative or
  // unbounded one.
  it.each([
    ['a negative input count', '{"inputTokens":-5,"outputTokens":7}'],
    ['a negative output count', '{"inputTokens":5,"outputTokens":-7}'],
    ['an infinite count', '{"inputTokens":1e400,"outputTokens":7}'],
    ['a fractional count', '{"inputTokens":5,"outputTokens":0.5}'],
    ['an unsafe integer count', '{"inputTokens":5,"outputTokens":18014398509481984}'],
    ['a count that is a string', '{"inputTokens":"5","outputTokens":7}'],
  ])('ignores reported usage with %s', async (_name, usage) => {
    use([`--usage-json=${usage}`]);
    const run = await start();
    const result = await run.result;
    expect(result).toEqual({ output: [text('hello world')], stopReason: 'completed' });
    const messages = host.sessions.get(run.id)!.events.filter((e) => e.type === 'assistant/message');
    expect(messages).toHaveLength(1);
    expect(messages[0]!.data).not.toHaveProperty('usage');
    await run.dispose();
  });

  it('counts well-formed reported usage', async () => {
    use(['--usage-json={"inputTokens":5,"outputTokens":7,"totalTokens":12}']);
    const run = await start();
    const result = await run.result;
    expect(result.usage).toMatchObject({ inputTokens: 5, outputTokens: 7 });
    const messages = host.sessions.get(run.id)!.events.filter((e) => e.type === 'assistant/message');
    expect(messages.map((e) => (e.data as { usage?: unknown }).usage)).toEqual([expect.objectContaining({ inputTokens: 5, outputTokens: 7 })]);
    await run.dispose();
  });

  it('settles aborted with the partial output when a cooperative agent confirms the cancel', async () => {
    use(['--wait']);
    const run = await start();
    await whenSession(host.sessions.get(run.id)!, (events) => streamedText(events) === 'hello ');
    run.cancel();
    await expect(run.result).resolves.toEqual({ output: [text('hello ')], stopReason: 'aborted' });
    await run.dispose();
  });

  it('cancels through the agent: session/cancel reaches it, and at dispose stdin EOF ends it with no signal', async () => {
    const file = join(dir, `polite-${randomUUID()}.log`);
    // A long EOF grace: an agent that exits at EOF never sees SIGTERM, however loaded the machine.
    use(['--wait', `--log=${file}`], { disposeEofGraceMs: 5000 });
    const run = await start();
    await whenSession(host.sessions.get(run.id)!, (events) => streamedText(events) === 'hello ');
    run.cancel();
    await expect(run.result).resolves.toEqual({ output: [text('hello ')], stopReason: 'aborted' });
    await run.dispose();
    // `answered`: the agent ended its turn on session/cancel; `eof`: it ended once its stdin did.
    expect(agentLog(file).map((entry) => entry.what)).toStrictEqual(['prompt', 'answered', 'eof']);
  });

  it('reaps the process of a finished run at once, before anyone disposes the run', async () => {
    use([]);
    const { run, pid } = await startWithPid();
    await expect(run.result).resolves.toMatchObject({ stopReason: 'completed' });
    while (isAlive(pid)) await new Promise((resolve) => setTimeout(resolve, 10));
    await run.dispose();
  });

  it('settles aborted once the grace ran out when the agent never answers the prompt nor the cancel', async () => {
    use(['--hang']);
    const { run, pid } = await startWithPid();
    await whenSession(host.sessions.get(run.id)!, (events) => streamedText(events) === 'hello ');
    run.cancel();
    await expect(run.result).resolves.toEqual({ output: [text('hello ')], stopReason: 'aborted' });
    await run.dispose();
    expect(isAlive(pid)).toBe(false);
  });

  /** The agent's own log of what reached it (`eof`, `sigterm`), with epoch-ms times. */
  function agentLog(file: string): { what: string; at: number }[] {
    return readFileSync(file, 'utf8').trim().split('\n').map((line) => {
      const [what, at] = line.split(' ');
      return { what: what!, at: Number(at) };
    });
  }

  it('reaps an agent that ignores stdin EOF with SIGTERM, no sooner than the EOF grace', async () => {
    const file = join(dir, `log-${randomUUID()}`);
    use(['--hang', '--ignore-eof', `--log=${file}`]);
    const { run, pid } = await startWithPid();
    const disposing = Date.now();
    await run.dispose();
    await expect(run.result).resolves.toMatchObject({ stopReason: 'aborted' });
    expect(isAlive(pid)).toBe(false);
    // EOF may reach the agent's log before or after SIGTERM on a loaded machine; SIGTERM came once.
    const sigterm = agentLog(file).filter((entry) => entry.what === 'sigterm');
    expect(sigterm).toHaveLength(1);
    // One clock for both processes; timers never fire early, so only a skipped grace fails these.
    expect(sigterm[0]!.at - disposing).toBeGreaterThanOrEqual(GRACES.disposeEofGraceMs - 2);
  });

  it('reaps an agent that ignores EOF and traps SIGTERM with SIGKILL, no sooner than the SIGTERM grace', async () => {
    const file = join(dir, `log-${randomUUID()}`);
    use(['--hang', '--ignore-eof', '--trap-sigterm', `--log=${file}`]);
    const { run, pid } = await startWithPid();
    const disposing = Date.now();
    await run.dispose();
    const reaped = Date.now();
    await expect(run.result).resolves.toMatchObject({ stopReason: 'aborted' });
    // It survived EOF and SIGTERM by design: only SIGKILL ends it.
    expect(isAlive(pid)).toBe(false);
    // EOF may reach the agent's log before or after SIGTERM on a loaded machine; SIGTERM came once.
    const sigterm = agentLog(file).filter((entry) => entry.what === 'sigterm');
    expect(sigterm).toHaveLength(1);
    expect(sigterm[0]!.at - disposing).toBeGreaterThanOrEqual(GRACES.disposeEofGraceMs - 2);
    expect(reaped - disposing).toBeGreaterThanOrEqual(GRACES.disposeEofGraceMs + GRACES.disposeGraceMs - 2);
  });

  it('reaps what the agent started itself when the agent exits on its own at EOF', async () => {
    const file = join(dir, `sleeper-${randomUUID()}`);
    use([`--sleeper=${file}`]);
    const { run, pid } = await startWithPid();
    await run.result;
    const sleeper = Number(readFileSync(file, 'utf8'));
    expect(isAlive(sleeper)).toBe(true);
    await run.dispose();
    expect(isAlive(pid)).toBe(false);
    await expect.poll(() => isRunning(sleeper), { timeout: 5000 }).toBe(false);
  });

  it('reaps a process the agent left that ignores SIGTERM after the grace, also while the wall clock steps back (no hang)', async () => {
    // In a plain host process whose wall clock steps an hour back at every read: the grace is measured on the monotonic clock.
    const file = join(dir, `sleeper-${randomUUID()}`);
    const fixture = (name: string) => fileURLToPath(new URL(`./fixtures/${name}`, import.meta.url));
    const args = ['--import', fixture('stepping-clock.mjs'), fixture('clock-stepped.mjs'), new URL('../dist/src/index.js', import.meta.url).href, 'acp', FIXTURE_AGENT, file];
    try {
      const { stdout } = await promisify(execFile)(process.execPath, args, { timeout: 15_000, env: { ...process.env, CLOCK_STEP: 'back' } });
      expect(stdout).toBe('acp disposed\n');
      expect(isRunning(Number(readFileSync(file, 'utf8')))).toBe(false);
    } finally {
      // A host that hung was killed by the timeout: what it left is not left running.
      const sleeper = existsSync(file) ? Number(readFileSync(file, 'utf8')) : undefined;
      if (sleeper !== undefined && isAlive(sleeper)) process.kill(sleeper, 'SIGKILL');
    }
  });

  it('host.close() reaps a stubborn agent whose run was never disposed', async () => {
    use(['--hang', '--ignore-eof', '--trap-sigterm']);
    const { run, pid } = await startWithPid();
    await host.close();
    await expect(run.result).resolves.toMatchObject({ stopReason: 'aborted' });
    expect(isAlive(pid)).toBe(false);
  });

  it('settles error with the partial output and a short diagnostic when the agent crashes mid-prompt', async () => {
    use(['--crash']);
    const { run, pid } = await startWithPid();
    const result = await run.result;
    expect(result).toMatchObject({ output: [text('hello ')], stopReason: 'error' });
    expect(result.diagnostic!.length).toBeLessThan(200);
    expect(host.sessions.get(run.id)!.events.at(-1)).toMatchObject({ type: 'turn/end', data: { reason: { kind: 'error' } } });
    await run.dispose();
    expect(isAlive(pid)).toBe(false);
  });

  it('settles error when the agent exits mid-prompt while a process it started still holds its stdout, and reaps that process', async () => {
    const holder = join(dir, `holder-${randomUUID()}`);
    use(['--crash-holding-stdout', `--sleeper=${holder}`]);
    const { run, pid } = await startWithPid();
    const result = await run.result;
    expect(result).toMatchObject({ output: [text('hello ')], stopReason: 'error', diagnostic: 'the ACP agent process exited with code 3 before the turn finished' });
    await run.dispose();
    expect(isAlive(pid)).toBe(false);
    const holderPid = Number(readFileSync(holder, 'utf8'));
    await expect.poll(() => isRunning(holderPid), { timeout: 5000 }).toBe(false);
  });

  it('settles error and closes the turn when the agent answers session/prompt without a stop reason', async () => {
    use(['--null-answer']);
    const run = await start();
    const result = await run.result;
    expect(result).toMatchObject({ output: [text('hello ')], stopReason: 'error' });
    expect(result.diagnostic).toContain('without a stopReason');
    expect(host.sessions.get(run.id)!.events.at(-1)).toMatchObject({ type: 'turn/end', data: { reason: { kind: 'error' } } });
    await run.dispose();
  });

  it.each([
    ['a failed prompt whose error quotes a secret', ['--fail-prompt']],
    ['a free-text stop reason holding a secret', [`--stop=${SECRET}`]],
    ['a crash', ['--crash']],
  ])('settles error with a short, one-line, secret-free diagnostic for %s', async (_name, flags) => {
    use(flags);
    const run = await start();
    const result = await run.result;
    expect(result.stopReason).toBe('error');
    expect(result.diagnostic).toMatch(/^the ACP /);
    expect(result.diagnostic).not.toContain(SECRET);
    expect(result.diagnostic).not.toContain('\n');
    expect(result.diagnostic!.length).toBeLessThan(200);
    const turnEnd = JSON.stringify(host.sessions.get(run.id)!.events.at(-1));
    expect(turnEnd).toContain('ACP_TURN_FAILED');
    expect(turnEnd).not.toContain(SECRET);
    await run.dispose();
  });

  it.each([
    ['names a code word the agent put in the error data', 'AUTH', 'the ACP prompt failed (JSON-RPC error -32603, AUTH)'],
    ['leaves out error data that is not a code word', SECRET, 'the ACP prompt failed (JSON-RPC error -32603)'],
  ])('%s', async (_name, code, diagnostic) => {
    use([`--fail-code=${code}`]);
    const run = await start();
    const result = await run.result;
    expect(result).toMatchObject({ stopReason: 'error', diagnostic });
    await run.dispose();
  });

  it('names the oversized message when the agent sends one over 32 MiB, not the exit that follows', async () => {
    use(['--huge']);
    const run = await start();
    const result = await run.result;
    expect(result).toMatchObject({ output: [text('hello ')], stopReason: 'error' });
    expect(result.diagnostic).toMatch(/^the ACP agent sent a message over 33554432 bytes/);
    await run.dispose();
  });

  it('ignores junk lines on the agent stdout', async () => {
    use(['--junk']);
    const run = await start();
    await expect(run.result).resolves.toEqual({ output: [text('hello world')], stopReason: 'completed' });
    await run.dispose();
  });

  it('drops session/updates that break the ACP schema: neither the output nor the log sees them', async () => {
    use(['--bad-update']);
    const run = await start();
    await expect(run.result).resolves.toEqual({ output: [text('hello world')], stopReason: 'completed' });
    const types = host.sessions.get(run.id)!.events.map((event) => event.type);
    expect(types.filter((type) => type.startsWith('assistant/') || type.startsWith('tool/'))).toEqual(['assistant/chunk', 'assistant/chunk', 'assistant/message']);
    await run.dispose();
  });

  it('drops session/updates of kinds it does not know without a word on stderr', async () => {
    use(['--future-update']);
    const printed: unknown[][] = [];
    const spy = vi.spyOn(console, 'error').mockImplementation((...args: unknown[]) => void printed.push(args));
    try {
      const run = await start();
      await expect(run.result).resolves.toEqual({ output: [text('hello world')], stopReason: 'completed' });
      expect(streamedText(host.sessions.get(run.id)!.events)).toBe('hello world');
      await run.dispose();
    } finally {
      spy.mockRestore();
    }
    expect(printed).toStrictEqual([]);
  });

  it('records a tool call whose rawInput nests too deeply to store with a marker instead, so the whole log is stored', async () => {
    use(['--deep-input']);
    const run = await start();
    await expect(run.result).resolves.toMatchObject({ stopReason: 'completed' });
    const events = host.sessions.get(run.id)!.events;
    expect(events.find((event) => event.type === 'tool/call')?.data).toMatchObject({ name: 'dig', input: '[input nested too deeply to record]' });
    await run.dispose();
    expect((await host.persistence!.load(run.id))?.events).toHaveLength(events.length);
  });

  it('records a tool call whose rawInput holds a number past the range of a double with a marker saying so', async () => {
    use(['--wide-number']);
    const run = await start();
    await expect(run.result).resolves.toMatchObject({ stopReason: 'completed' });
    const events = host.sessions.get(run.id)!.events;
    expect(events.find((event) => event.type === 'tool/call')?.data).toMatchObject({ name: 'measure', input: '[input holds a number beyond the range of a double]' });
    await run.dispose();
  });

  describe('before the session is ready', () => {
    it('rejects CANCELLED and reaps a stubborn agent that never answers initialize when the start is aborted', async () => {
      use(['--hang-init', '--ignore-eof', '--trap-sigterm']);
      const controller = new AbortController();
      const before = childPids();
      const starting = start({ signal: controller.signal });
      const spawned = await spawnedSince(before);
      controller.abort(new Error('give up'));
      await expect(starting).rejects.toMatchObject({ code: 'CANCELLED' });
      expect(spawned).toHaveLength(1);
      expect(spawned.filter(isAlive)).toEqual([]);
      expect(host.sessions.list().map((session) => session.header.id)).toEqual([parent.id]);
    });

    it('rejects CLOSED (not CANCELLED) and reaps the agent when host.close() interrupts the start', async () => {
      use(['--hang-init', '--ignore-eof', '--trap-sigterm']);
      const before = childPids();
      const starting = start();
      const spawned = await spawnedSince(before);
      const rejected = expect(starting).rejects.toMatchObject({ code: 'CLOSED', cause: { code: 'CANCELLED' } });
      await host.close();
      await rejected;
      expect(spawned).toHaveLength(1);
      expect(spawned.filter(isAlive)).toEqual([]);
      expect(host.sessions.list()).toEqual([]);
    });

    it('rejects START_FAILED and reaps an agent that closes its output but keeps running', async () => {
      host.subagents.registerProvider(acpProvider(host, { command: process.execPath, args: ['-e', 'process.stdout.end(); setInterval(() => {}, 1000)'], ...GRACES }));
      const before = childPids();
      const error = await start().catch((caught: unknown) => caught);
      expect(error).toMatchObject({ code: 'START_FAILED', message: expect.stringContaining('the ACP agent failed during') });
      expect(newChildPids(before).filter(isAlive)).toEqual([]);
    });

    it('rejects START_FAILED and reaps the agent when it speaks another protocol version', async () => {
      use(['--protocol=2']);
      const before = childPids();
      await expect(start()).rejects.toMatchObject({ code: 'START_FAILED' });
      expect(newChildPids(before)).toEqual([]);
    });

    it('rejects START_FAILED without echoing the agent error when session/new fails', async () => {
      use(['--fail-new']);
      const before = childPids();
      const error = await start().then(
        () => undefined,
        (caught: unknown) => caught as Error,
      );
      expect(error).toMatchObject({ code: 'START_FAILED' });
      expect(error?.message).not.toContain(SECRET);
      expect(newChildPids(before)).toEqual([]);
    });

    it('rejects START_FAILED and reaps the agent when session/new answers an empty session id', async () => {
      // An empty id could not be addressed by a prompt, cancel or load.
      use(['--empty-session']);
      const before = childPids();
      await expect(start()).rejects.toMatchObject({ code: 'START_FAILED', message: 'the ACP agent answered session/new without a session id' });
      expect(newChildPids(before).filter(isAlive)).toEqual([]);
      expect(host.sessions.list().map((session) => session.header.id)).toEqual([parent.id]);
    });

    it('rejects START_FAILED when the command cannot be spawned', async () => {
      host.subagents.registerProvider(acpProvider(host, { command: join(dir, 'no-such-agent'), ...GRACES }));
      await expect(start()).rejects.toMatchObject({ code: 'START_FAILED' });
    });

    it('rejects START_FAILED within startupTimeoutMs and reaps a command that never answers initialize (no ACP agent)', async () => {
      host.subagents.registerProvider(acpProvider(host, { command: process.execPath, args: ['-e', 'process.stdin.resume()'], startupTimeoutMs: 300, ...GRACES }));
      const before = childPids();
      await expect(start()).rejects.toMatchObject({ code: 'START_FAILED', message: 'the ACP agent did not answer initialize within 300 ms (is the command an ACP agent speaking on stdio?)' });
      expect(newChildPids(before).filter(isAlive)).toEqual([]);
    });

    it('rejects START_FAILED at startupTimeoutMs without waiting out the EOF grace of an agent that never answers initialize and ignores EOF', async () => {
      use(['--hang-init', '--ignore-eof'], { startupTimeoutMs: 300, disposeEofGraceMs: 600_000 });
      const before = childPids();
      await expect(start()).rejects.toMatchObject({ code: 'START_FAILED', message: expect.stringContaining('did not answer initialize within 300 ms') });
      expect(newChildPids(before).filter(isAlive)).toEqual([]);
    }, 60_000);

    it('rejects START_FAILED and reaps a command that floods its stdout with lines that are not JSON and never reads its stdin', async () => {
      // Each junk line is answered with a parse error; those answers must not pile up unread.
      const flood = "const chunk = 'x\\n'.repeat(10000); let i = 0; const more = () => { while (i < 200000) { i += 10000; if (!process.stdout.write(chunk)) return process.stdout.once('drain', more); } }; more(); setInterval(() => {}, 1e9);";
      host.subagents.registerProvider(acpProvider(host, { command: process.execPath, args: ['-e', flood], stderr: 'ignore', startupTimeoutMs: 1000, ...GRACES }));
      const before = childPids();
      await expect(start()).rejects.toMatchObject({ code: 'START_FAILED', message: expect.stringContaining('did not answer initialize within 1000 ms') });
      expect(newChildPids(before).filter(isAlive)).toEqual([]);
    }, 60_000);

    it('rejects START_FAILED naming the step when the agent answers initialize with null', async () => {
      use(['--null-init']);
      await expect(start()).rejects.toMatchObject({ code: 'START_FAILED', message: 'the ACP agent answered initialize with no result object' });
    });

    it('refuses a NUL byte in command, args or env with INVALID_OPTIONS naming the option, never echoing an env value', () => {
      const make = (options: Partial<AcpProviderOptions>) => () => acpProvider(host, { command: process.execPath, ...options });
      expect(make({ command: 'node\0' })).toThrow(expect.objectContaining({ code: 'INVALID_OPTIONS', message: 'options.command: must not contain a NUL byte' }));
      expect(make({ args: ['ok', 'x\0y'] })).toThrow(expect.objectContaining({ code: 'INVALID_OPTIONS', message: 'options.args[1]: must not contain a NUL byte' }));
      expect(make({ env: { MY_API_KEY: `${SECRET}\0` } })).toThrow(expect.objectContaining({ code: 'INVALID_OPTIONS', message: 'options.env.MY_API_KEY: must not contain a NUL byte' }));
    });

    it('rejects START_FAILED when the agent exits during startup', async () => {
      host.subagents.registerProvider(acpProvider(host, { command: process.execPath, args: ['-e', 'process.exit(5)'], ...GRACES }));
      await expect(start()).rejects.toMatchObject({ code: 'START_FAILED' });
    });
  });
});

describe('acpProvider out of file descriptors', () => {
  // In a process of its own under `ulimit -n 128`: 80 processes at once need more descriptors than
  // that, so some spawns fail EMFILE. The ACP SDK, imported at the first start, must not be what
  // runs out (Node keeps a failed import failed): once the burst is reaped, an agent starts.
  it('rejects START_FAILED naming EMFILE for what cannot be spawned, and starts children once descriptors are free', async () => {
    const script = new URL('./fixtures/acp/fd-burst.mjs', import.meta.url).pathname;
    const packageUrl = new URL('../dist/src/index.js', import.meta.url).href;
    const { stdout } = await promisify(execFile)('bash', ['-c', 'ulimit -n 128 && exec "$0" "$@"', process.execPath, script, packageUrl, FIXTURE_AGENT, '80'], { cwd: dir, timeout: 60_000 });
    const { ended, later } = JSON.parse(stdout) as { ended: Record<string, number>; later: string };
    expect(Object.keys(ended).sort()).toEqual(['START_FAILED', 'START_FAILED EMFILE']);
    expect(later).toBe('completed');
  }, 90_000);
});
