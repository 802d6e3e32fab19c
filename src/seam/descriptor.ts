// STUB — to be implemented: the durable `subagent/descriptor` event (seam-spec §6).
import type { SessionEvent } from './session-types.js';

export const SUBAGENT_DESCRIPTOR_VERSION = 2;
export const DESCRIPTOR_EVENT = 'subagent/descriptor';

export type SubagentDescriptorData =
  | { version: 2; mode: 'one-shot'; provider: string; label?: string }
  | {
      version: 2;
      mode: 'continuable';
      provider: string;
      label: string;
      agentModel?: string;
      persona?: string;
      toolFilter?: { allow?: string[]; deny?: string[] };
    };

export type SubagentDescriptorInput =
  | { mode: 'one-shot'; provider: string; label?: string }
  | {
      mode: 'continuable';
      provider: string;
      label: string;
      agentModel?: string;
      persona?: string;
      toolFilter?: { allow?: string[]; deny?: string[] };
    };

export function snapshotSubagentDescriptor(_input: SubagentDescriptorInput): SubagentDescriptorData {
  throw new Error('not implemented');
}

export function foldSubagentDescriptor(_events: readonly SessionEvent[]): SubagentDescriptorData | undefined {
  throw new Error('not implemented');
}
