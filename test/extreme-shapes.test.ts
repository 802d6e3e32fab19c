// Trees of extreme shapes through the public API: the host's walks over them stay linear (counted
// in registry lookups, not timed) and nothing overflows the stack.
import { expect, it } from 'vitest';
import { createHost, inProcessProvider, text } from 'subagent-host';

it('closes a host holding thousands of undisposed one-shot children with a linear number of registry lookups', async () => {
  const host = await createHost({ providers: false });
  host.subagents.registerProvider(inProcessProvider(host));
  const parent = await host.createAgent();
  const n = 2000;
  for (let i = 0; i < n; i++) {
    const run = await host.subagents.start('in-process', { prompt: [text(`task ${i}`)], parent, signal: new AbortController().signal });
    expect((await run.result).stopReason).toBe('completed');
  }
  // Each child's disposal closes admission below it; it once swept every other child's entry (all
  // still live while close() disposes them together): n² / 2 lookups.
  const get = host.agents.get.bind(host.agents);
  let lookups = 0;
  host.agents.get = (id) => {
    lookups++;
    return get(id);
  };
  await host.close();
  expect(host.agents.list()).toEqual([]);
  expect(lookups).toBeLessThan(20 * n);
}, 60_000);
