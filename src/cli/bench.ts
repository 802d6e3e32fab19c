// `subagent-host bench [startup|overhead|throughput|listing|queue|continuation|cancel|acp] [--json FILE]`: the benchmark suites.
export async function run(args: string[]): Promise<number> {
  // The suites ship compiled beside the library (dist/bench); they are loaded only when asked for.
  const { runBench } = (await import(new URL('../../bench/run.js', import.meta.url).href)) as { runBench(args: string[]): Promise<number> };
  return runBench(args);
}
