// Loads an agent's `toolModules` where the agent runs (the host's thread, or a worker thread) and
// puts their tools in its scope. Every refusal is a SubagentError naming the module.
import type { Tool } from '../seam/agent-types.js';
import { SubagentError, describeError, isSubagentError } from '../seam/errors.js';
import { isRecord, readingInput } from '../seam/parse.js';
import { importModule, specifierAdvice } from './module-import.js';
import { type ToolRegistry, assertTool, tagToolModule } from './tool-registry.js';

/**
 * The `tools` a loaded module exports, copied (`INVALID_OPTIONS` naming the module unless it is an
 * array: a getter or proxy trap of it that throws included).
 */
function exportedTools(specifier: string, mod: unknown): unknown[] {
  return readingInput(`tool module ${specifier}'s tools`, 'INVALID_OPTIONS', () => {
    const { tools, default: fallback } = mod as { tools?: unknown; default?: unknown };
    if (Array.isArray(tools)) return [...(tools as unknown[])];
    // A default export holding them: `export default { tools }`, or CommonJS exports Node could not name.
    const inDefault = isRecord(fallback) && Array.isArray(fallback['tools']);
    const hint = inDefault ? ' (its default export holds them: export them by name, `export const tools = […]`, or in CommonJS `exports.tools = […]`)' : '';
    throw new SubagentError('INVALID_OPTIONS', `tool module ${specifier} must export \`tools\`, an array of Tool${hint}`);
  });
}

/**
 * Loads `toolModules` (each exporting `tools: Tool[]`). Every refusal names the module: one listed
 * twice or a bad tool (`INVALID_OPTIONS`), or a name that another module's tool or one `scope` has
 * already takes (`DUPLICATE_TOOL`). `overInherited` (an agent built again from its log): a name only
 * a tool `scope` inherits has is no clash, see {@link registerModuleTools}.
 */
export async function loadToolModules(specifiers: readonly string[], scope?: ToolRegistry, opts: { overInherited?: boolean } = {}): Promise<Tool[]> {
  const twice = specifiers.find((specifier, index) => specifiers.indexOf(specifier) !== index);
  if (twice !== undefined) throw new SubagentError('INVALID_OPTIONS', `toolModules lists tool module ${twice} more than once; list each module once`);
  const tools: Tool[] = [];
  const from = new Map<string, string>();
  for (const specifier of specifiers) {
    let mod: unknown;
    try {
      mod = await importModule(specifier);
    } catch (error) {
      throw new SubagentError('INVALID_OPTIONS', `cannot load tool module ${specifier}: ${describeError(error)}${specifierAdvice(specifier, error)}`, { cause: error });
    }
    for (const [index, candidate] of exportedTools(specifier, mod).entries()) {
      let tool: Tool;
      try {
        tool = readingInput('a tool', 'INVALID_OPTIONS', () => {
          assertTool(candidate);
          return candidate;
        });
      } catch (error) {
        throw isSubagentError(error) ? new SubagentError(error.code, `tool module ${specifier}, tools[${index}]: ${error.message}`, { cause: error.cause }) : error;
      }
      const other = from.get(tool.name);
      const visible = scope?.get(tool.name);
      // Built again from its log, the agent's module tool may hide an inherited tool of its name.
      const held = visible !== undefined && (!opts.overInherited || scope!.layers().own.includes(visible));
      if (other !== undefined || held) {
        const holder = other === undefined ? 'a tool the agent already has' : other === specifier ? 'another of its tools' : `a tool of tool module ${other}`;
        throw new SubagentError('DUPLICATE_TOOL', `tool module ${specifier} exports a tool named ${tool.name}, as does ${holder}; pick another name`);
      }
      from.set(tool.name, specifier);
      tagToolModule(tool, specifier);
      tools.push(tool);
    }
  }
  return tools;
}

/**
 * Registers an agent's tool modules' tools in its scope. Built again from its log (`overInherited`:
 * a resume, a resident stay rebuilt), the agent keeps the tools it started with: a tool of a module
 * named as a host tool registered since then hides that host tool from it, as it did while the agent
 * was live (its own tool wins there), instead of failing the agent's return.
 */
export function registerModuleTools(scope: ToolRegistry, tools: readonly Tool[], overInherited: boolean): void {
  const hidden = overInherited ? tools.filter((tool) => scope.get(tool.name) !== undefined).map((tool) => tool.name) : [];
  if (hidden.length > 0) scope.restrict({ deny: hidden });
  if (tools.length > 0) scope.register(...tools);
}
