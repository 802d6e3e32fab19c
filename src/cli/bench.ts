// `subagent-host bench [SUITE…] [--json FILE]`: the benchmark suites (startup, overhead, throughput, listing, queue, continuation, cancel, acp; all when none is named).
export async function run(args: string[]): Promise<number> {
  // The suites ship compiled beside the library (dist/bench); they are loaded only when asked for.
  const { runBench } = (await import(new URL('../../bench/run.js', import.meta.url).href)) as { runBench(args: string[]): Promise<number> };
  return runBench(args);
}
