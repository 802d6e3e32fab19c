// acpProvider options: validated once with zod (errors name the option), defaults applied, and the
// working-directory rule (configured, else the parent's; absolute and enterable; never ours).
import { accessSync, constants, statSync } from 'node:fs';
import { isAbsolute, resolve } from 'node:path';
import { z } from 'zod';
import type { Agent } from '../../seam/agent-types.js';
import { SubagentError } from '../../seam/errors.js';
import type { InheritEnv } from '../child-env.js';
import { MAX_TIMER_MS, parseOrThrow, readingInput } from '../../seam/parse.js';

export interface AcpProviderOptions {
  /** Registry name. @default 'acp' */
  name?: string;
  /** Executable spawned for each child. */
  command: string;
  /** @default [] */
  args?: string[];
  /** Working directory of every child (resolved against `process.cwd()` now). @default the parent session's cwd */
  cwd?: string;
  /**
   * Which host variables the child inherits: `'minimal'` (PATH, HOME, locale, temp and XDG
   * directories, proxies without userinfo…), `'all-but-credentials'`, or exactly these names/globs.
   * @default 'minimal'
   */
  inheritEnv?: InheritEnv;
  /** Added to the inherited environment, unchanged (an explicit key wins). @default {} */
  env?: Record<string, string>;
  /** How permission requests are answered: `allow` picks the first allow option. @default 'reject' */
  permission?: 'reject' | 'allow';
  /** Agent processes kept spawned and initialized in advance (needs `cwd`). @default 0 */
  prewarm?: number;
  /** How long a child may take to exit after stdin EOF before SIGTERM. @default 6000 */
  disposeEofGraceMs?: number;
  /** How long a child may take to exit after SIGTERM before SIGKILL. @default 3000 */
  disposeGraceMs?: number;
  /** The children's stderr: passed through, or discarded. Never parsed. @default 'inherit' */
  stderr?: 'inherit' | 'ignore';
  /**
   * How long each startup step (initialize, session/new, session/load) may wait for the agent's
   * answer before the start fails `START_FAILED` and the process is reaped. @default 60000
   */
  startupTimeoutMs?: number;
}

export type AcpProviderConfig = Required<Omit<AcpProviderOptions, 'cwd'>> & { cwd: string | undefined };

/** A string a process can be given: the operating system takes no NUL byte in an argument or variable. */
const processString = (min = 0) => z.string().min(min).refine((value) => !value.includes('\0'), 'must not contain a NUL byte');

const grace = (fallback: number) => z.number().positive().max(MAX_TIMER_MS, `must be a positive finite number no greater than ${MAX_TIMER_MS}`).default(fallback);

const optionsSchema = z.strictObject({
  name: z.string().min(1).default('acp'),
  command: processString(1),
  args: z.array(processString()).default([]),
  cwd: z.string().min(1, 'must not be empty').optional(),
  inheritEnv: z
    .union([z.enum(['minimal', 'all-but-credentials']), z.array(z.string().regex(/^[^=\0]+$/, 'must hold variable names or globs (non-empty, no "=")')).readonly()])
    .default('minimal'),
  // The issue names the variable, never its value (it may be a secret).
  env: z.record(z.string().regex(/^[^=\0]+$/, 'must be a variable name (non-empty, no "=" or NUL byte)'), processString()).default({}),
  permission: z.enum(['reject', 'allow']).default('reject'),
  prewarm: z.number().int().min(0).max(64).default(0),
  disposeEofGraceMs: grace(6000),
  disposeGraceMs: grace(3000),
  stderr: z.enum(['inherit', 'ignore']).default('inherit'),
  startupTimeoutMs: grace(60_000),
});

/** Throws unless `dir` is an absolute path to a directory this process may enter. */
function assertEnterable(dir: string, what: string): void {
  if (!isAbsolute(dir)) throw new Error(`${what} must be an absolute path`);
  try {
    if (!statSync(dir).isDirectory()) throw new Error('not a directory');
    accessSync(dir, constants.X_OK);
  } catch {
    throw new Error(`${what} is not an accessible directory`);
  }
}

/** Validates `opts`; `INVALID_OPTIONS` names the first bad option. */
export function parseAcpOptions(opts: AcpProviderOptions): AcpProviderConfig {
  const parsed = readingInput('acpProvider options', 'INVALID_OPTIONS', () => parseOrThrow(optionsSchema, opts, 'INVALID_OPTIONS', 'options'));
  const config = { ...parsed, cwd: parsed.cwd === undefined ? undefined : resolve(parsed.cwd) };
  if (config.cwd !== undefined) {
    try {
      assertEnterable(config.cwd, 'options.cwd');
    } catch (error) {
      throw new SubagentError('INVALID_OPTIONS', (error as Error).message);
    }
  }
  if (config.prewarm > 0 && config.cwd === undefined) {
    throw new SubagentError('INVALID_OPTIONS', 'options.prewarm needs options.cwd: warm processes start before any parent is known');
  }
  return config;
}

/** The child's working directory; `START_FAILED` when there is none or it is not usable. */
export function resolveChildCwd(configured: string | undefined, parent: Agent): string {
  if (configured !== undefined) {
    try {
      assertEnterable(configured, 'options.cwd');
    } catch (error) {
      throw new SubagentError('START_FAILED', (error as Error).message);
    }
    return configured;
  }
  const cwd = parent.session.header.cwd;
  if (cwd === undefined) {
    throw new SubagentError('START_FAILED', 'no working directory for the ACP child: configure options.cwd or delegate from a parent session that has a cwd');
  }
  try {
    assertEnterable(cwd, "the parent session's cwd");
  } catch (error) {
    throw new SubagentError('START_FAILED', (error as Error).message);
  }
  return cwd;
}
