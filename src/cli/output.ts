// Whether the command's standard output lost its reader (`subagent-host demo | head -1`): set by the
// entry point's stdout error handler, read by a command that tells that apart from a Ctrl-C.
let gone = false;

/** Marks standard output as gone: later writes go nowhere. */
export function markOutputGone(): void {
  gone = true;
}

/** Whether standard output's reader went away. */
export function outputGone(): boolean {
  return gone;
}
