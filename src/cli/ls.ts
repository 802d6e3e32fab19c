// `subagent-host ls SESSION [--db FILE] [--tree] [--json]` — placeholder until the catalog lands.
import { SubagentError } from '../seam/errors.js';

export async function run(_args: string[]): Promise<number> {
  throw new SubagentError('PERSISTENCE_UNAVAILABLE', 'ls is not available yet');
}
