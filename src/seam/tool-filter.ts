// The tool-filter shape, defined once: start requests, the subagent tool's config, stored descriptors
// and tool scopes all validate against this schema, and its type derives from it.
import { z } from 'zod';
import { lazy } from './once.js';

/** `{ allow?, deny? }`, at least one present; built on first use (worker threads load this file). */
export const toolFilterSchema = lazy(() =>
  z
    .strictObject({ allow: z.array(z.string()).optional(), deny: z.array(z.string()).optional() })
    .refine((filter) => filter.allow !== undefined || filter.deny !== undefined, { message: 'needs allow, deny or both' }),
);

/** Which inherited tools a scope sees: `allow` keeps only those names, `deny` hides them. Unknown names fail loud. */
export type ToolRestriction = z.infer<ReturnType<typeof toolFilterSchema>>;
