// The demo's inputs, checked before any work starts: the directory to analyse (it exists, can be
// read and holds source files) and the real model's environment. Each problem is one sentence.
import { accessSync, constants, readdirSync, statSync } from 'node:fs';
import { extname, join, resolve } from 'node:path';
import type { ModelSpec } from '../seam/agent-types.js';
import { assertEnvModelSpec } from '../runtime/models/create.js';

const SOURCE = ['.ts', '.js', '.mjs', '.cjs', '.tsx', '.jsx', '.json', '.md'];
const SKIP = new Set(['node_modules', 'dist', '.git', 'coverage']);
const MAX_FILE_BYTES = 1 << 20;

/** A checked input, or the sentence that says what is wrong with it. */
export type Checked<T> = { ok: true; value: T } | { ok: false; problem: string };

function listFiles(dir: string): string[] {
  const out: string[] = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    if (SKIP.has(entry.name)) continue;
    const path = join(dir, entry.name);
    try {
      if (entry.isDirectory()) out.push(...listFiles(path));
      else if (SOURCE.includes(extname(entry.name)) && statSync(path).size < MAX_FILE_BYTES) out.push(path);
    } catch {
      // An unreadable subfolder or a dangling link is skipped: the rest can still be analysed.
    }
  }
  return out.sort();
}

/** The source files under `dir` (absolute, sorted), or why there are none to analyse. */
export function sourceFiles(dir: string): Checked<{ dir: string; files: string[] }> {
  const path = resolve(dir);
  try {
    if (!statSync(path).isDirectory()) return { ok: false, problem: `--dir ${path} is not a directory` };
    accessSync(path, constants.R_OK | constants.X_OK);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    return { ok: false, problem: code === 'ENOENT' ? `--dir ${path} does not exist` : `--dir ${path} cannot be read (${code ?? 'error'})` };
  }
  const files = listFiles(path);
  if (files.length === 0) {
    return { ok: false, problem: `--dir ${path} holds no source files to analyse (${SOURCE.join(' ')} files under 1 MiB)` };
  }
  return { ok: true, value: { dir: path, files } };
}

/** The OpenAI-compatible model named by the environment, or which variables are missing or unusable. */
export function modelFromEnv(env: NodeJS.ProcessEnv): Checked<ModelSpec> {
  const named = namedModel(env);
  if (!named.ok) return named;
  try {
    // A malformed variable would otherwise fail the run after it started, naming a spec field.
    assertEnvModelSpec(named.value, { baseURL: 'OPENAI_BASE_URL', model: 'OPENAI_MODEL' });
  } catch (error) {
    return { ok: false, problem: `--model openai: ${(error as Error).message}` };
  }
  return named;
}

/** The spec the environment names, or which variables are missing. */
function namedModel(env: NodeJS.ProcessEnv): Checked<ModelSpec> {
  const baseURL = env['OPENAI_BASE_URL'];
  const model = env['OPENAI_MODEL'];
  if (!baseURL && env['DEEPSEEK_API_KEY']) {
    return { ok: true, value: { kind: 'openai', baseURL: 'https://api.deepseek.com', model: model || 'deepseek-chat', apiKeyEnv: 'DEEPSEEK_API_KEY' } };
  }
  if (baseURL || model) {
    const names = ['OPENAI_BASE_URL', 'OPENAI_MODEL', 'OPENAI_API_KEY'];
    const missing = names.filter((name) => !env[name]);
    if (missing.length > 0) {
      const set = names.filter((name) => env[name]);
      return { ok: false, problem: `--model openai needs ${names.join(', ')}: ${set.join(' and ')} ${set.length === 1 ? 'is' : 'are'} set, ${missing.join(' and ')} not` };
    }
    return { ok: true, value: { kind: 'openai', baseURL: baseURL!, model: model!, apiKeyEnv: 'OPENAI_API_KEY' } };
  }
  return { ok: false, problem: '--model openai needs OPENAI_BASE_URL, OPENAI_MODEL and OPENAI_API_KEY set (or DEEPSEEK_API_KEY for DeepSeek)' };
}
