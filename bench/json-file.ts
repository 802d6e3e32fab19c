// The `--json FILE` of `bench`: which existing file it may replace (only the output of an earlier
// run), and the write itself, to a temp file beside FILE renamed over it, so FILE is whole or untouched.
import { randomBytes } from 'node:crypto';
import { closeSync, fchmodSync, fsyncSync, openSync, readFileSync, realpathSync, renameSync, rmSync, statSync, writeSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { z } from 'zod';

/** What `bench --json` writes; an existing file of another shape is someone else's and is never replaced. */
const BenchOutput = z.object({ node: z.string(), cpus: z.number(), rows: z.array(z.object({ id: z.string() })) });

/** Larger than any bench output by far: such a file is not read (nor replaced). */
const MAX_OUTPUT_BYTES = 16 * 1024 * 1024;

/** Why `file` may not be replaced by a bench output, or undefined when it does not exist or is an earlier one. */
export function notReplaceable(file: string): string | undefined {
  const stat = statSync(file, { throwIfNoEntry: false });
  if (stat === undefined) return undefined;
  // Checked before reading: a FIFO would block the read, a device (/dev/null) is not a result file.
  if (!stat.isFile()) return `${file} is not a regular file`;
  const refusal = `${file} exists and is not the output of an earlier bench run: remove it or name another file`;
  if (stat.size > MAX_OUTPUT_BYTES) return refusal;
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (error) {
    return `${file} exists and cannot be read to check that it is an earlier bench output (${reason(error)})`;
  }
  try {
    if (BenchOutput.safeParse(JSON.parse(text)).success) return undefined;
  } catch {
    // Not JSON.
  }
  return refusal;
}

/** An fs error's code and description without the path it names (a temp file's, here). */
function reason(error: unknown): string {
  const message = error instanceof Error ? error.message : String(error);
  return message.split(', ')[0] ?? message;
}

/**
 * The file `file` names: through its symlinks when it exists, so a link kept to the latest output
 * stays a link and the output it names is replaced (as writing in place did, and write-file-atomic does).
 */
export function targetOf(file: string): string {
  try {
    return realpathSync(file);
  } catch {
    // New, or a dangling link: the name itself.
    return resolve(file);
  }
}

/**
 * Writes `text` to `file` through a temp file in the same folder (a rename within one file system
 * replaces FILE whole), with the permissions of the output it replaces; returns why it could not, or
 * undefined. FILE is checked again just before the rename: it may have appeared during the run.
 */
export function writeWhole(file: string, text: string): string | undefined {
  const path = targetOf(file);
  const temp = join(dirname(path), `.${basename(path)}.${process.pid}-${randomBytes(4).toString('hex')}.tmp`);
  try {
    // 'wx': a file (or link) already at the temp path is never written through.
    const fd = openSync(temp, 'wx');
    try {
      // An earlier output kept private stays private.
      const earlier = statSync(path, { throwIfNoEntry: false });
      if (earlier?.isFile()) fchmodSync(fd, earlier.mode & 0o7777);
      writeSync(fd, text);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    const problem = notReplaceable(path);
    if (problem !== undefined) {
      rmSync(temp, { force: true });
      return problem;
    }
    renameSync(temp, path);
    return undefined;
  } catch (error) {
    try {
      rmSync(temp, { force: true });
    } catch {
      // Its folder is gone or closed to us: nothing was left there.
    }
    return reason(error);
  }
}
