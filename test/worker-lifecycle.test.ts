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
    fail(code: 'UNAUTHORIZED' | 'INVALID_REQUEST'): Promise<void>;
    echo(value: unknown): Promise<unknown>;
  }

  function pair() {
    const { port1, port2 } = new MessageChannel();
    const api: Api = {
      async fail(code) {
        throw new SubagentError(code, 'refused', { cause: new SubagentError('CLOSED', 'inner') });
      },
      async echo(value) {
        return value;
      },
    };
    const stop = exposeOn(api, port2);
    const remote = new GuardedRemote<Api>(port1);
    return { remote, stop };
  }

  it('carries a SubagentError’s class, code and cause to the caller', async () => {
    const { remote, stop } = pair();
    const error = await remote.call((r) => r.fail('UNAUTHORIZED')).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(SubagentError);
    expect(error).toMatchObject({ code: 'UNAUTHORIZED', cause: { code: 'CLOSED' } });
    remote.close();
    stop();
  });

  it('carries errors the other way too (both ends serve and call)', async () => {
    const a = new MessageChannel();
    const b = new MessageChannel();
    const stopA = exposeOn({ fail: async () => { throw new SubagentError('INVALID_REQUEST', 'from main'); } }, a.port2);
    const stopB = exposeOn({ fail: async () => { throw new SubagentError('DEPTH_EXCEEDED', 'from worker'); } }, b.port2);
    const toMain = new GuardedRemote<{ fail(): Promise<void> }>(a.port1);
    const toWorker = new GuardedRemote<{ fail(): Promise<void> }>(b.port1);
    await expect(toMain.call((r) => r.fail())).rejects.toMatchObject({ code: 'INVALID_REQUEST' });
    await expect(toWorker.call((r) => r.fail())).rejects.toMatchObject({ code: 'DEPTH_EXCEEDED' });
    toMain.close();
    toWorker.close();
    stopA();
    stopB();
  });

  it('rejects pending and later calls with CLOSED when the peer closes its port', async () => {
    const { port1, port2 } = new MessageChannel();
    let release!: () => void;
    const stop = exposeOn({ wait: () => new Promise<void>((resolve) => (release = resolve)) }, port2);
    const remote = new GuardedRemote<{ wait(): Promise<void> }>(port1);
    const pending = remote.call((r) => r.wait());
    await expect.poll(() => typeof release).toBe('function');
    stop();
    await expect(pending).rejects.toMatchObject({ code: 'CLOSED' });
    await expect(remote.call((r) => r.wait())).rejects.toMatchObject({ code: 'CLOSED' });
    expect(remote.closed).toBe(true);
  });
});
