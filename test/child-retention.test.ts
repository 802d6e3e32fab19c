// A disposed child's agent (and the whole session log it holds in memory) is not kept alive by the
// host: not by the record of a settled background task, not by a scoped drain's admission record;
// nor is a disposed parent kept by the records of its settled tasks.
// Measured in its own process with --expose-gc, where full collections can be forced.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { expect, it } from 'vitest';

const script = new URL('./fixtures/child-retention.mjs', import.meta.url).pathname;
const packageUrl = new URL('../dist/src/index.js', import.meta.url).href;

it('keeps no disposed child, nor its disposed parent, reachable, background or foreground', { timeout: 120_000 }, async () => {
  const { stdout } = await promisify(execFile)(process.execPath, ['--expose-gc', script, packageUrl], { timeout: 100_000 });
  expect(JSON.parse(stdout)).toStrictEqual({
    background: { children: 30, reachable: 0, parentReachable: false },
    foreground: { children: 30, reachable: 0, parentReachable: false },
  });
});
