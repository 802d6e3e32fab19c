// Tools an agent can call. A root registry holds host tools; each agent gets a scope that
// inherits them, may hide some with `restrict`, and registers its own (which no mask hides).
// One visibility view feeds `list`, `get` and `execute`: a hidden tool is neither shown nor callable.
import { z } from 'zod';
import type { JsonSchema, Tool, ToolContext, ToolOutput, ToolRestriction } from '../seam/agent-types.js';
import { contentProblem, copyContent, nestingDepth, parsedNonFinite, plainJsonProblem, type ContentBlock } from '../seam/content.js';
import { SubagentError, describeError } from '../seam/errors.js';
import { lazy } from '../seam/once.js';
import { compileJsonSchema } from './json-schema.js';
import type { ToolSchema } from './models/types.js';
import { parseOrThrow, readingInput } from '../seam/parse.js';
import { toolFilterSchema } from '../seam/tool-filter.js';

export interface ToolResultContent {
  content: ContentBlock[];
  isError?: boolean;
}

const toolShape = lazy(() =>
  z.object({
    name: z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, 'letters, digits, _ or -, at most 64'),
    description: z.string(),
    parameters: z.record(z.string(), z.unknown()),
    execute: z.custom<Tool['execute']>((value) => typeof value === 'function', 'must be a function'),
    concurrencySafe: z.boolean().optional(),
  }),
);

const outputShape = lazy(() =>
  z.union([
    z.string(),
    z.object({ content: z.array(z.looseObject({ type: z.string() })), isError: z.boolean().optional() }),
  ]),
);

// Compiled input validators, shared by every registry (tools are often registered in many scopes).
const validators = new WeakMap<Tool, z.ZodType>();

function validatorOf(tool: Tool): z.ZodType {
  let validator = validators.get(tool);
  if (!validator) {
    try {
      validator = compileJsonSchema(tool.parameters, 'parameters');
    } catch (error) {
      throw new SubagentError('INVALID_OPTIONS', `tool ${tool.name}: parameters is not a usable JSON Schema (${describeError(error)})`, { cause: error });
    }
    validators.set(tool, validator);
  }
  return validator;
}

/** Why `text` (arguments an adapter kept as text) is no JSON input, or undefined when it is JSON text. */
function jsonError(text: string): string | undefined {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (error) {
    return `is not valid JSON (${error instanceof Error ? error.message : String(error)})`;
  }
  return parsedNonFinite(text, parsed) ? 'holds a number beyond the range of a double (such as 1e309), which JSON cannot carry back' : undefined;
}

/** `INVALID_TOOL_INPUT` for input nested deeper than copying or validating it can recurse (`cause`: the stack overflow). */
function inputTooDeep(name: string, input: unknown, cause: RangeError): SubagentError {
  return new SubagentError('INVALID_TOOL_INPUT', `${name} input is nested ${nestingDepth(input)} levels deep, too deep to copy or check against its input schema: send a flatter value`, { cause });
}

/** Validates a tool's shape; throws `INVALID_OPTIONS` naming the bad field. */
export function assertTool(tool: unknown): asserts tool is Tool {
  parseOrThrow(toolShape(), tool, 'INVALID_OPTIONS', 'tool');
  // The schema crosses to worker threads and into model requests: a function in it (a `default`)
  // would fail every worker child's start instead of this registration.
  const problem = plainJsonProblem((tool as Tool).parameters, `tool ${(tool as Tool).name} parameters`);
  if (problem) throw new SubagentError('INVALID_OPTIONS', `${problem}; a tool's parameters are a plain JSON Schema`);
  // A model sends a tool's input as one JSON object (an OpenAI-compatible server refuses any other
  // function parameters, failing every request of every agent that sees the tool): refused here.
  if ((tool as Tool).parameters['type'] !== 'object') {
    throw new SubagentError('INVALID_OPTIONS', `tool ${(tool as Tool).name}: parameters must be an object schema ({ type: 'object', properties: { … } }): a model sends a tool's input as one JSON object`);
  }
  validatorOf(tool as Tool);
}

/** Normalizes what a tool returned into content blocks. */
export function normalizeToolOutput(name: string, output: ToolOutput): ToolResultContent {
  const parsed = outputShape().safeParse(output);
  if (!parsed.success) {
    throw new SubagentError('CONTRACT_VIOLATION', `tool ${name} returned neither a string nor { content: ContentBlock[] }`);
  }
  if (typeof output === 'string') {
    // Stored as the text of one block, and held to what such a block may hold (MAX_CONTENT_CHARS).
    const content: ContentBlock[] = [{ type: 'text', text: output }];
    const problem = contentProblem(content, 'content');
    if (problem) throw new SubagentError('CONTRACT_VIOLATION', `tool ${name} returned ${problem}`);
    return { content };
  }
  // Tool results go into the log and across threads: what neither can carry fails this call, not the
  // thread. A copy: the log freezes what it holds, and the tool may keep (and change) the blocks it returned.
  const copied = copyContent(output.content, 'content');
  if ('problem' in copied) throw new SubagentError('CONTRACT_VIOLATION', `tool ${name} returned ${copied.problem}`);
  const { content } = copied;
  return output.isError === undefined ? { content } : { content, isError: output.isError };
}

/**
 * Runs a tool for an agent of another thread (a worker child's host tool call): a `concludeTurn()`
 * of the tool travels back as `concludes`, for the child's turn to end as an agent's here would.
 */
export async function executeForChild(tools: ToolRegistry, name: string, input: unknown, ctx: Omit<ToolContext, 'concludeTurn'>): Promise<ToolResultContent & { concludes?: true }> {
  let concludes = false;
  const result = await tools.execute(name, input, {
    ...ctx,
    concludeTurn: () => {
      concludes = true;
    },
  });
  return concludes && !result.isError ? { ...result, concludes } : result;
}

/** Where a tool came from, for the message of a clash with it: the tool module that exports it, or what adds it. */
const modules = new WeakMap<Tool, string>();
const holders = new WeakMap<Tool, string>();

/** Marks `tool` as exported by tool module `specifier`. */
export function tagToolModule(tool: Tool, specifier: string): void {
  modules.set(tool, specifier);
}

/** Marks `tool` with what adds it to an agent, e.g. `reportTool (…)`: a clash with a tool module's tool names it. */
export function tagToolHolder<T extends Tool>(tool: T, holder: string): T {
  holders.set(tool, holder);
  return tool;
}

/** What adds `tool` to an agent, if it was tagged. */
export function toolHolder(tool: Tool): string | undefined {
  return holders.get(tool);
}

export class ToolRegistry {
  readonly #parent: ToolRegistry | undefined;
  readonly #own = new Map<string, Tool>();
  /** Names kept free in this registry (not its scopes) for a tool installed elsewhere: why, for the refusal. */
  readonly #reserved = new Map<string, string>();
  #allow: Set<string> | undefined;
  readonly #deny = new Set<string>();
  #closed = false;

  constructor(parent?: ToolRegistry) {
    this.#parent = parent;
  }

  /** A child scope inheriting this registry's visible tools. */
  scope(): ToolRegistry {
    return new ToolRegistry(this);
  }

  /**
   * Refuses later registrations in this registry (`CLOSED`): the host calls it on its registry as it
   * closes. Registered tools stay listed, and their disposers still remove them.
   */
  close(): void {
    this.#closed = true;
  }

  /** Registers tools in this scope; `DUPLICATE_TOOL` if a visible tool has the name, `CLOSED` once closed. */
  register(...tools: Tool[]): () => void {
    if (this.#closed) throw SubagentError.closed('the host', 'register tools on an open host');
    for (const tool of tools) readingInput('a tool', 'INVALID_OPTIONS', () => assertTool(tool));
    const names = new Set<string>();
    for (const tool of tools) {
      const module = this.#own.has(tool.name) ? modules.get(this.#own.get(tool.name)!) : undefined;
      if (module !== undefined) {
        throw new SubagentError('DUPLICATE_TOOL', `tool module ${module} exports a tool named ${tool.name}, as does ${holders.get(tool) ?? 'a tool added to the agent after its tool modules'}; pick another name`);
      }
      if (names.has(tool.name) || this.get(tool.name)) {
        throw new SubagentError('DUPLICATE_TOOL', `a tool named ${tool.name} is already registered here; pick another name`);
      }
      const reserved = this.#reserved.get(tool.name);
      if (reserved !== undefined) throw new SubagentError('DUPLICATE_TOOL', `a tool named ${tool.name} cannot be registered here: ${reserved}`);
      names.add(tool.name);
    }
    for (const tool of tools) this.#own.set(tool.name, tool);
    let removed = false;
    // Once only: a disposer called again must not remove a later registration of the same tool object.
    return () => {
      if (removed) return;
      removed = true;
      for (const tool of tools) if (this.#own.get(tool.name) === tool) this.#own.delete(tool.name);
    };
  }

  /**
   * Keeps `name` free in this registry (its scopes may still register it) until the returned
   * disposer runs: a later `register` of it is refused (`DUPLICATE_TOOL`) with `reason`. For a tool
   * installed into scopes later, which a tool of its name here would collide with. `DUPLICATE_TOOL`
   * if a visible tool has the name or it is reserved already.
   */
  reserve(name: string, reason: string): () => void {
    if (this.get(name) || this.#reserved.has(name)) throw new SubagentError('DUPLICATE_TOOL', `a tool named ${name} is already registered or reserved here; pick another name`);
    this.#reserved.set(name, reason);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.#reserved.delete(name);
    };
  }

  /**
   * Hides inherited tools from this scope (never the scope's own). Masks intersect across calls.
   * Throws `INVALID_OPTIONS` on the root registry or an empty filter, `UNKNOWN_TOOL` on an
   * unknown name.
   */
  restrict(filter: ToolRestriction): this {
    if (!this.#parent) throw new SubagentError('INVALID_OPTIONS', 'restrict() applies to an agent scope, not the root registry');
    parseOrThrow(toolFilterSchema(), filter, 'INVALID_OPTIONS', 'tool filter', 'allow and/or deny, each an array of tool names');
    const inherited = new Set(this.#parent.names());
    for (const name of [...(filter.allow ?? []), ...(filter.deny ?? [])]) {
      if (!inherited.has(name)) {
        throw new SubagentError('UNKNOWN_TOOL', `tool filter names ${name}, which is not a known tool (known: ${[...inherited].join(', ') || 'none'})`);
      }
    }
    if (filter.allow) {
      const allow = new Set(filter.allow);
      this.#allow = this.#allow ? new Set([...this.#allow].filter((name) => allow.has(name))) : allow;
    }
    for (const name of filter.deny ?? []) this.#deny.add(name);
    return this;
  }

  #inherits(name: string): boolean {
    return !this.#deny.has(name) && (this.#allow === undefined || this.#allow.has(name));
  }

  /** The visible tool of that name. */
  get(name: string): Tool | undefined {
    const own = this.#own.get(name);
    if (own) return own;
    return this.#inherits(name) ? this.#parent?.get(name) : undefined;
  }

  /** Visible tools in two parts: those inherited, and this scope's own, each in registration order. */
  layers(): { inherited: Tool[]; own: Tool[] } {
    const inherited = this.#parent?.list().filter((tool) => this.#inherits(tool.name) && !this.#own.has(tool.name)) ?? [];
    return { inherited, own: [...this.#own.values()] };
  }

  /** Visible tools: inherited first, then this scope's own, each in registration order. */
  list(): Tool[] {
    const { inherited, own } = this.layers();
    return [...inherited, ...own];
  }

  names(): string[] {
    return this.list().map((tool) => tool.name);
  }

  /** What a model is shown. */
  schemas(): ToolSchema[] {
    return this.list().map(({ name, description, parameters }) => ({ name, description, parameters: parameters as JsonSchema }));
  }

  /**
   * Validates `input` against the tool's schema and runs it. `UNKNOWN_TOOL` for a hidden or
   * missing tool, `INVALID_TOOL_INPUT` for input failing the schema.
   */
  async execute(name: string, input: unknown, ctx: ToolContext): Promise<ToolResultContent> {
    const tool = this.get(name);
    if (!tool) throw new SubagentError('UNKNOWN_TOOL', `no tool named ${name} is available to this agent`);
    try {
      parseOrThrow(validatorOf(tool), input, 'INVALID_TOOL_INPUT', `${name} input`, `it does not match the input schema of ${name}`);
    } catch (error) {
      // Validating against a recursive schema recurses as deep as the input nests: deep enough, it overflows the stack.
      if (error instanceof RangeError) throw inputTooDeep(name, input, error);
      // An adapter hands on arguments it could not parse as their raw text: say that, not "expected object".
      const notJson = typeof input === 'string' ? jsonError(input) : undefined;
      if (notJson === undefined) throw error;
      throw new SubagentError('INVALID_TOOL_INPUT', `${name} input ${notJson}: send one JSON object that matches its input schema`, { cause: error });
    }
    return normalizeToolOutput(name, await tool.execute(input, ctx));
  }
}
