// A thread child's notices, host side: handed on in order as the hub delivers them, and counted,
// since the task's value travels on piscina's own port and may overtake them.
import type { ChildNotice } from '../../seam/child-protocol.js';
import type { RunRoute } from './run-router.js';
import type { GuardedRemote } from './wire-channel.js';

/**
 * Hands each notice of `route` to `onNotice` (synchronously, in order) and closes `control` when
 * the run's port closes. The returned `noticesIn(count)` resolves once `count` notices are in, or
 * the port closed (no more will come); it is called once, with the count the task's value reports.
 */
export function routeNotices(
  route: RunRoute,
  control: Pick<GuardedRemote<unknown>, 'close'>,
  onNotice: (notice: ChildNotice) => void,
): (count: number) => Promise<void> {
  let received = 0;
  let caughtUp = () => {};
  let portClosed = false;
  route.on('notice', (raw) => {
    received++;
    onNotice(raw as ChildNotice);
    caughtUp();
  });
  route.onClose(() => {
    portClosed = true;
    control.close('the child’s thread closed its channel');
    caughtUp();
  });
  return (count) =>
    new Promise<void>((resolve) => {
      caughtUp = () => (received >= count || portClosed) && resolve();
      caughtUp();
    });
}
