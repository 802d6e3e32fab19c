// The usage figures alone, apart from their fold (usage.ts): budgets compare against them, and the
// fold reads descriptors, whose schema embeds the budget's, so one file for both would be a cycle.

/** Usage of one child (its own log), or summed over a tree. */
export interface SubagentUsage {
  inputTokens: number;
  outputTokens: number;
  /** inputTokens + outputTokens. */
  totalTokens: number;
  /** Model requests (steps). */
  requests: number;
  turns: number;
  toolCalls: number;
  /** From the child's first turn to its latest event. */
  wallMs: number;
}
