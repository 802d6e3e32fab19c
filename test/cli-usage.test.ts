// The command line as a user first meets it, run as a real process: the command list, help, unknown
// commands and options, and a bad `acp --model` — each with its exit code and where its text goes.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const cli = new URL('../dist/src/cli.js', import.meta.url).pathname;

interface Outcome {
  code: number;
  stdout: string;
  stderr: string;
}

async function runCli(...args: string[]): Promise<Outcome> {
  try {
    const { stdout, stderr } = await promisify(execFile)(process.execPath, [cli, ...args]);
    return { code: 0, stdout, stderr };
  } catch (error) {
    const { code, stdout, stderr } = error as { code: number; stdout: string; stderr: string };
    return { code, stdout, stderr };
  }
}

const COMMANDS = ['demo', 'bench', 'ls', 'inspect', 'acp', 'worker'];

describe('subagent-host', () => {
  it('without a command lists every command on stdout and exits 2', async () => {
    const { code, stdout } = await runCli();
    expect(code).toBe(2);
    expect(stdout).toMatch(/^usage: subagent-host <command> \[options\]/);
    for (const name of COMMANDS) expect(stdout).toMatch(new RegExp(`^  ${name} +\\S`, 'm'));
  });

  it.each([['--help'], ['-h'], ['help']])('%s lists the commands and exits 0', async (flag) => {
    const { code, stdout } = await runCli(flag);
    expect(code).toBe(0);
    expect(stdout).toContain('Run `subagent-host <command> --help` for its options.');
  });

  it('names an unknown command on stderr and exits 2', async () => {
    const { code, stdout, stderr } = await runCli('frobnicate');
    expect(code).toBe(2);
    expect(stdout).toBe('');
    expect(stderr).toMatch(/^subagent-host: unknown command 'frobnicate'\n/);
  });
});

describe('subagent-host acp', () => {
  it('prints its usage on --help and exits 0', async () => {
    const { code, stdout } = await runCli('acp', '--help');
    expect(code).toBe(0);
    expect(stdout).toMatch(/^usage: subagent-host acp /);
  });

  it('names an unknown option with the usage on stderr and exits 2', async () => {
    const { code, stdout, stderr } = await runCli('acp', '--colour');
    expect(code).toBe(2);
    expect(stdout).toBe('');
    expect(stderr).toMatch(/^subagent-host acp: .*'--colour'/);
    expect(stderr).toContain('usage: subagent-host acp ');
  });

  it.each([['not a spec'], ['{"kind":"nope"}']])('refuses --model %j with INVALID_MODEL_SPEC and exits 1 before serving', async (model) => {
    const { code, stdout, stderr } = await runCli('acp', '--model', model);
    expect(code).toBe(1);
    expect(stdout).toBe('');
    expect(stderr).toMatch(/^subagent-host: INVALID_MODEL_SPEC: /);
  });
});
