// What the tool installers check of the host they are given: a bad argument is an INVALID_OPTIONS
// naming the installer, not a TypeError from deep inside it.
import { SubagentError } from '../seam/errors.js';
import { isRecord, readingInput } from '../seam/parse.js';
import { SubagentService } from '../service/service.js';

/**
 * Throws `INVALID_OPTIONS` unless `host` has a SubagentService, and each of `needs` with its `method`
 * (also where reading them throws: a revoked proxy, a getter that throws).
 */
export function assertToolHost(host: unknown, installer: string, needs: Record<string, string> = {}): void {
  readingInput(`${installer}: host`, 'INVALID_OPTIONS', () => checkToolHost(host, installer, needs));
}

function checkToolHost(host: unknown, installer: string, needs: Record<string, string>): void {
  const missing = !isRecord(host)
    ? 'host is not an object'
    : !(host['subagents'] instanceof SubagentService)
      ? 'host.subagents is not a SubagentService'
      : Object.entries(needs).find(([part, method]) => !isRecord(host[part]) || typeof (host[part] as Record<string, unknown>)[method] !== 'function');
  if (missing === undefined) return;
  const problem = typeof missing === 'string' ? missing : `host.${missing[0]} has no ${missing[1]}()`;
  throw new SubagentError('INVALID_OPTIONS', `${installer}: ${problem}; pass a host made by createHost()`);
}
