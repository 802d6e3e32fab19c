// The shape of a ChildTaskData as a host of this version writes it, checked where the child runs
// before anything reads it: a queue job's task comes from whoever can write to Redis.
import { z } from 'zod';
import type { ChildTaskData } from '../seam/child-protocol.js';
import { contentProblem, describeKind } from '../seam/content.js';
import { descriptorSchema } from '../seam/descriptor.js';
import { SubagentError } from '../seam/errors.js';
import { lazy } from '../seam/once.js';
import { describeIssue, isRecord } from '../seam/parse.js';
import { toolFilterSchema } from '../seam/tool-filter.js';

const count = () => z.number().int('must be a whole number').nonnegative('must not be negative');

// Strict objects: a field no host writes is refused, not ignored (a worker of this version would
// not enforce what it means). The agent options' own fields are checked when the agent is built.
const taskSchema = lazy(() =>
  z.strictObject({
    header: z.strictObject({
      id: z.string(),
      createdAt: z.number(),
      cwd: z.string().optional(),
      parentSession: z.string().optional(),
      origin: z.literal('subagent').optional(),
      delegationDepth: count().optional(),
      seedLength: count().optional(),
    }),
    seed: z.array(z.string()),
    prompt: z.array(z.unknown()).min(1, 'must be a non-empty array of content blocks'),
    agentOptions: z.record(z.string(), z.unknown()).optional(),
    descriptor: descriptorSchema(),
    outputSchema: z.record(z.string(), z.unknown()).optional(),
    toolFilter: toolFilterSchema().optional(),
    // As the host lists them (see HostToolSchema): what the model is offered, and whose tool it is.
    hostTools: z.array(
      z.strictObject({
        name: z.string().min(1),
        description: z.string(),
        parameters: z.record(z.string(), z.unknown()),
        concurrencySafe: z.boolean().optional(),
        holder: z.string().optional(),
      }),
    ),
    treeStop: z
      .strictObject({ limit: z.enum(['tokens', 'turns', 'wallMs', 'toolCalls']), max: z.number(), used: z.number(), scope: z.enum(['child', 'tree']) })
      .optional(),
  }),
);

function corrupt(problem: string, cause?: unknown): SubagentError {
  return new SubagentError('CORRUPT_DATA', `the task handed to this child ${problem}; it was not written by a host of this version`, cause === undefined ? {} : { cause });
}

/**
 * Throws `CORRUPT_DATA` naming the first field of `data` that is missing, of another type, or not
 * one a host writes: a field the child reads unchecked would otherwise end it with a bare TypeError
 * that names no cause, and one it does not know (a budget limit) would go unenforced.
 */
export function assertTaskShape(data: unknown): asserts data is ChildTaskData {
  if (!isRecord(data)) throw corrupt(`is ${describeKind(data)}, not an object`);
  if (!isRecord(data['header']) || typeof data['header']['id'] !== 'string' || typeof data['header']['createdAt'] !== 'number') {
    throw corrupt('has no session header (an id and a creation time)');
  }
  if (!isRecord(data['descriptor'])) throw corrupt('has no descriptor');
  if (!Array.isArray(data['hostTools'])) throw corrupt('has no list of host tools');
  const parsed = taskSchema().safeParse(data);
  if (!parsed.success) throw corrupt(`has a malformed field (${describeIssue(parsed.error, 'task')})`, parsed.error);
  const problem = contentProblem(data['prompt'], 'task.prompt');
  if (problem !== undefined) throw corrupt(`has a malformed prompt (${problem})`);
}
