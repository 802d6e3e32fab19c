// Worker plumbing: a process that used the host (workers, ACP, SQLite) ends every resource on close
// and exits by itself (a tool module that never finishes loading holds neither it nor a run), and
// error codes cross the control channel in both directions.
import { mkdtempSync } from 'node:fs';
import { join } from 'node:path';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { MessageChannel } from 'node:worker_threads';
import { describe, expect, it } from 'vitest';
import { SubagentError, createHost } from 'subagent-host';
import { FIXTURE_AGENT } from './acp-helpers.js';
import { runNodeScript, tempFiles } from './helpers.js';
// The control channel is internal; its protocol is tested over the two ends of a MessageChannel.
import { RunRouter } from '../dist/src/providers/worker/run-router.js';
import { GuardedRemote, exposeOn } from '../dist/src/providers/worker/wire-channel.js';

const packageUrl = new URL('../dist/src/index.js', import.meta.url).href;
const script = new URL('./fixtures/host-exit.mjs', import.meta.url).pathname;
const files = tempFiles('host-exit-');

describe('host shutdown', () => {
  it('leaves no thread, port, timer, process or open database behind: the process exits by itself', async () => {
    const { code, out, err } = await runNodeScript(script, [packageUrl, files.file(), FIXTURE_AGENT]);
    const [report, ...rest] = out.split('\n');
    expect({ code, rest, err }).toEqual({ code: 0, rest: ['closed', ''], err: '' });
    // What the host created (worker threads, their channels, ACP agents, timers, the SQLite file's WAL),
    // counted by the fixture through wrapped constructors, so unref'd ports and timers count too.
    expect(JSON.parse(report!)).toEqual({
      used: { channels: true, processes: 1 },
      channels: 0,
      workers: 0,
      processes: 0,
      timers: 0,
      extraThreads: 0,
      resources: [],
      wal: false,
    });
  });
});

describe('a tool module that never finishes loading', () => {
  const hanging = new URL('./fixtures/hanging-import.mjs', import.meta.url).pathname;
  const awaiting = new URL('./fixtures/hanging-import-tools.mjs', import.meta.url).href;
  const spinning = new URL('./fixtures/spinning-import-tools.mjs', import.meta.url).href;

  /** Runs the fixture in its own process; resolves with its exit code and output once it exits. */
  async function runFixture(who: string, mode: string, toolModule = awaiting) {
    const { code, out, err } = await runNodeScript(hanging, [packageUrl, toolModule, who, mode]);
    const [ended, ...rest] = out.split('\n');
    return { code, err, rest, ended: JSON.parse(ended || 'null') as unknown };
  }

  // The thread is not terminated while the import is in flight (that may abort the process on Node
  // 20), and the import never ends: the thread is asked to end itself instead. One whose module's
  // top level spins never hears it, and is terminated after the grace.
  it.each([
    ['cancel', 'awaits forever', awaiting],
    ['close', 'awaits forever', awaiting],
    ['cancel', 'spins', spinning],
    ['close', 'spins', spinning],
  ])('holds neither a worker child’s run nor the host (%s; the module %s)', async (mode, _, toolModule) => {
    expect(await runFixture('spawn', mode, toolModule)).toEqual({
      code: 0,
      err: '',
      rest: ['closed', ''],
      ended: {
        stopReason: 'aborted',
        diagnostic: 'the child did not stop within 50 ms of cancellation; its thread was terminated',
        // No event of the child reached the host before its thread ended: it is still listed as what it was.
        ...(mode === 'cancel' && { listed: ['child one-shot'] }),
      },
    });
  });

  it.each([
    ['in-process', 'cancel', 'CANCELLED'],
    ['in-process', 'close', 'CLOSED'],
    ['create', 'cancel', 'CANCELLED'],
    ['create', 'close', 'CLOSED'],
    ['resume', 'cancel', 'CANCELLED'],
    ['resume', 'close', 'CLOSED'],
    ['continuable-in-process', 'cancel', 'AbortError'],
    ['continuable-in-process', 'drain', 'DRAINING'],
    ['continuable-in-process', 'close', 'CLOSED'],
  ])('holds neither a start nor the host on the host’s thread (%s, %s)', async (who, mode, code) => {
    expect(await runFixture(who, mode)).toEqual({ code: 0, err: '', rest: ['closed', ''], ended: { rejected: code } });
  });

  it('rejects CLOSED a createAgent whose id was still being looked up when close() began', async () => {
    const host = await createHost({ providers: false });
    // Without the close, this creation would wait for the module for ever.
    const creating = host.createAgent({ sessionId: 'looked-up-first', agentOptions: { toolModules: [`${awaiting}?lookup`] } });
    const closing = host.close();
    await expect(creating).rejects.toMatchObject({ code: 'CLOSED' });
    await closing;
  });

  // Accepted once its prompt is durable; its stay, still being built in the thread, is what hangs.
  it.each(['drain', 'close'])('holds neither a drain nor the host with a resident worker child (%s)', async (mode) => {
    expect(await runFixture('continuable-spawn', mode)).toEqual({ code: 0, err: '', rest: ['closed', ''], ended: { created: true } });
  });

  // The stay is left while its task waits for a thread busy in a synchronous loop, and the leave's
  // grace passes before that thread takes it; the module it then loads ignores the leave, so only a
  // grace counted again from that moment ends the thread.
  it('holds no drain with a resident worker child left before its busy thread took it', { timeout: 180_000 }, async () => {
    expect(await runFixture('continuable-spawn-busy', 'drain', spinning)).toEqual({
      code: 0,
      err: '',
      rest: [JSON.stringify({ loaded: true, busy: 'completed' }), 'closed', ''],
      ended: { created: true },
    });
  });
});

describe('a thread being terminated', () => {
  const script = new URL('./fixtures/ending-thread.mjs', import.meta.url).pathname;
  const tools = new URL('./fixtures/blocking-exit-tools.mjs', import.meta.url).href;

  // The pool's one thread is being terminated when its child's result comes in (a cancel's grace
  // that ran out as the child finished does this); the start waiting for the slot gets it then, and
  // its task goes to the pool before that thread has exited: it needs a thread of its own.
  it('holds neither a start granted its slot meanwhile nor the host', async () => {
    const { code, out, err } = await runNodeScript(script, [packageUrl, tools, mkdtempSync(join(files.dir, 'ending-'))]);
    expect({ code, out, err }).toEqual({ code: 0, out: `${JSON.stringify({ first: 'completed', second: 'completed' })}\nclosed\n`, err: '' });
  });
});

describe('control channel', () => {
  interface Api {
    fail(): Promise<void>;
    wait(): Promise<void>;
    answer(turn: number): Promise<{ turn: number; events: string[] }>;
  }

  /** Main and worker routers over one hub port, one run routed, each side serving one lane. */
  function pair(mainFails: SubagentError, workerFails: SubagentError) {
    const { port1: mainPort, port2: workerPort } = new MessageChannel();
    const mainRouter = new RunRouter();
    const workerRouter = new RunRouter();
    mainRouter.listen(mainPort);
    workerRouter.listen(workerPort);
    const main = mainRouter.route('run-1');
    const worker = workerRouter.route('run-1');
    main.bind(mainPort);
    worker.bind(workerPort);
    const waiting: (() => void)[] = [];
    const serve = (error: SubagentError): Api => ({
      fail: async () => {
        throw error;
      },
      wait: () => new Promise<void>((resolve) => waiting.push(resolve)),
      answer: async (turn) => ({ turn, events: Array.from({ length: 10 }, (_, i) => `event ${i} of turn ${turn}`) }),
    });
    exposeOn(serve(mainFails), main.endpoint('host'));
    exposeOn(serve(workerFails), worker.endpoint('control'));
    const toWorker = new GuardedRemote<Api>(main.endpoint('control'));
    const toMain = new GuardedRemote<Api>(worker.endpoint('host'));
    worker.onClose(() => toMain.close('main went away'));
    const close = () => {
      toWorker.close();
      main.dispose();
      mainPort.close();
    };
    return { toWorker, toMain, waiting, close };
  }

  it('carries a SubagentError’s class, code and cause in both directions on one port', async () => {
    const { toWorker, toMain, close } = pair(
      new SubagentError('UNAUTHORIZED', 'from main', { cause: new SubagentError('CLOSED', 'inner') }),
      new SubagentError('DEPTH_EXCEEDED', 'from worker'),
    );
    const fromMain = await toMain.call((r) => r.fail()).catch((e: unknown) => e);
    expect(fromMain).toBeInstanceOf(SubagentError);
    expect(fromMain).toMatchObject({ code: 'UNAUTHORIZED', cause: { code: 'CLOSED' } });
    await expect(toWorker.call((r) => r.fail())).rejects.toMatchObject({ code: 'DEPTH_EXCEEDED' });
    close();
  });

  it('rejects pending and later calls with CLOSED when the other side closes the port', async () => {
    const { toMain, waiting, close } = pair(new SubagentError('CLOSED', 'x'), new SubagentError('CLOSED', 'y'));
    const pending = toMain.call((r) => r.wait());
    await expect.poll(() => waiting.length, { timeout: 10_000 }).toBe(1);
    close();
    await expect(pending).rejects.toMatchObject({ code: 'CLOSED' });
    await expect(toMain.call((r) => r.wait())).rejects.toMatchObject({ code: 'CLOSED' });
    expect(toMain.closed).toBe(true);
  });

  it('keeps no answer of a call once it is answered, however many calls a channel that stays open carries', async () => {
    // A resident child's channels live for all its turns: one answer kept per call is a leak per turn.
    setFlagsFromString('--expose-gc');
    const gc = runInNewContext('gc') as () => void;
    const { toWorker, toMain, close } = pair(new SubagentError('CLOSED', 'x'), new SubagentError('CLOSED', 'y'));
    const answers: WeakRef<object>[] = [];
    for (let turn = 0; turn < 200; turn++) {
      answers.push(new WeakRef(await toWorker.call((r) => r.answer(turn))));
      answers.push(new WeakRef(await toMain.call((r) => r.answer(turn))));
    }
    for (let i = 0; i < 4; i++) {
      gc();
      await new Promise((resolve) => setImmediate(resolve));
    }
    const kept = answers.filter((answer) => answer.deref() !== undefined).length;
    const open = !toWorker.closed && !toMain.closed;
    close();
    expect({ kept, open }).toStrictEqual({ kept: 0, open: true });
  });
});
