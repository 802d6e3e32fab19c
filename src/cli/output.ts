// Whether the command's standard output lost its reader (`subagent-host demo | head -1`) or failed (a
// full disk): set by the entry point's stdout error handler, read by a command that tells that apart
// from a Ctrl-C.
let gone = false;
let failed = false;

/** Marks standard output as gone (`failed`: by an error other than a reader that left): later writes go nowhere. */
export function markOutputGone(failure = false): void {
  gone = true;
  failed ||= failure;
}

/** Whether standard output's reader went away, or its writes failed. */
export function outputGone(): boolean {
  return gone;
}

/** Whether a write to standard output failed for another reason than a reader that left: the command failed. */
export function outputFailed(): boolean {
  return failed;
}
