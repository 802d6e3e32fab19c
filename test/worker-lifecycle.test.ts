// Worker plumbing: a process that used the host exits by itself after close, and error codes
// cross the control channel in both directions.
import { spawn } from 'node:child_process';
import { MessageChannel } from 'node:worker_threads';
import { describe, expect, it, onTestFinished } from 'vitest';
import { SubagentError } from 'subagent-host';
// The control channel is internal; its protocol is tested over the two ends of a MessageChannel.
import { GuardedRemote, exposeOn } from '../dist/src/seam/wire-channel.js';

const packageUrl = new URL('../dist/src/index.js', import.meta.url).href;
const script = new URL('./fixtures/host-exit.mjs', import.meta.url).pathname;

describe('host shutdown', () => {
  it('leaves no thread, port, timer or proxy behind: the process exits by itself', async () => {
    const child = spawn(process.execPath, [script, packageUrl], { stdio: ['ignore', 'pipe', 'pipe'] });
    onTestFinished(() => {
      if (child.exitCode === null) child.kill('SIGKILL');
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (err += chunk.toString()));
    const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
    expect({ code, out, err }).toEqual({ code: 0, out: 'closed\n', err: '' });
  });
});

describe('control channel', () => {
  interface Api {
    fail(): Promise<void>;
    wait(): Promise<void>;
  }

  /** Both ends of one port, each serving one lane and calling the other, as main and worker do. */
  function pair(mainFails: SubagentError, workerFails: SubagentError) {
    const { port1: mainPort, port2: workerPort } = new MessageChannel();
    const waiting: (() => void)[] = [];
    const serve = (error: SubagentError): Api => ({
      fail: async () => {
        throw error;
      },
      wait: () => new Promise<void>((resolve) => waiting.push(resolve)),
    });
    exposeOn(serve(mainFails), mainPort, 'host');
    exposeOn(serve(workerFails), workerPort, 'control');
    const toWorker = new GuardedRemote<Api>(mainPort, 'control');
    const toMain = new GuardedRemote<Api>(workerPort, 'host');
    const close = () => {
      toWorker.close();
      toMain.close();
      mainPort.close();
    };
    return { toWorker, toMain, waiting, workerPort, close };
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

  it('rejects pending and later calls with CLOSED when the peer closes its port', async () => {
    const { toMain, waiting, workerPort, close } = pair(new SubagentError('CLOSED', 'x'), new SubagentError('CLOSED', 'y'));
    const { toWorker } = { toWorker: new GuardedRemote<Api>(workerPort, 'host') };
    const pending = toWorker.call((r) => r.wait());
    await expect.poll(() => waiting.length).toBe(1);
    close();
    await expect(pending).rejects.toMatchObject({ code: 'CLOSED' });
    await expect(toMain.call((r) => r.wait())).rejects.toMatchObject({ code: 'CLOSED' });
    expect(toWorker.closed).toBe(true);
  });
});
