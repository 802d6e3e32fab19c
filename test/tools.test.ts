// Tool registry scopes: registration, restriction masks and visibility.
import { describe, expect, it } from 'vitest';
import { createHost, scriptedModel, text, type Tool } from 'subagent-host';
import { ToolRegistry } from 'subagent-host/internals';
import { dataOf, makeRuntime, recordingTool } from './helpers.js';

function names(registry: ToolRegistry): string[] {
  return registry.list().map((tool) => tool.name);
}

describe('ToolRegistry', () => {
  it('rejects a duplicate name with DUPLICATE_TOOL and keeps the first', () => {
    const root = new ToolRegistry();
    const first = recordingTool('a');
    root.register(first);
    expect(() => root.register(recordingTool('a'))).toThrow(expect.objectContaining({ code: 'DUPLICATE_TOOL' }));
    expect(root.get('a')).toBe(first);
  });

  it('rejects a malformed tool with INVALID_OPTIONS', () => {
    const root = new ToolRegistry();
    expect(() => root.register({ name: '', description: 'x', parameters: {}, execute: async () => '' })).toThrow(
      expect.objectContaining({ code: 'INVALID_OPTIONS' }),
    );
    expect(() => root.register({ name: 'x', description: 'x', parameters: {} } as unknown as Tool)).toThrow(
      expect.objectContaining({ code: 'INVALID_OPTIONS' }),
    );
  });

  it('rejects parameters that are not a plain JSON Schema (a function as a default) with INVALID_OPTIONS naming the field', () => {
    const root = new ToolRegistry();
    const parameters = { type: 'object', properties: { n: { type: 'number', default: () => 1 } } };
    expect(() => root.register({ name: 'odd', description: 'x', parameters, execute: async () => '' })).toThrow(
      expect.objectContaining({ code: 'INVALID_OPTIONS', message: expect.stringContaining('tool odd parameters.properties.n.default') }),
    );
    expect(root.get('odd')).toBeUndefined();
  });

  it('unregisters through the returned disposer', () => {
    const root = new ToolRegistry();
    const off = root.register(recordingTool('a'));
    off();
    expect(root.get('a')).toBeUndefined();
  });

  it('ignores a disposer called again: a later registration of the same tool object stays', () => {
    const root = new ToolRegistry();
    const tool = recordingTool('a');
    const off = root.register(tool);
    off();
    root.register(tool);
    off();
    expect(root.get('a')).toBe(tool);
  });

  it('rejects a concurrencySafe that is not a boolean with INVALID_OPTIONS', () => {
    const root = new ToolRegistry();
    expect(() => root.register({ ...recordingTool('a'), concurrencySafe: 'yes' } as unknown as Tool)).toThrow(
      expect.objectContaining({ code: 'INVALID_OPTIONS', message: expect.stringContaining('concurrencySafe') }),
    );
    expect(root.get('a')).toBeUndefined();
  });

  it('hides denied tools from list, get and execute', async () => {
    const root = new ToolRegistry();
    root.register(recordingTool('a'), recordingTool('b'));
    const scope = root.scope().restrict({ deny: ['b'] });
    expect(names(scope)).toEqual(['a']);
    expect(scope.get('b')).toBeUndefined();
    await expect(scope.execute('b', { value: 'x' }, {} as never)).rejects.toMatchObject({ code: 'UNKNOWN_TOOL' });
  });

  it('lets an allow mask exclude tools registered later while a deny mask admits them', () => {
    const root = new ToolRegistry();
    root.register(recordingTool('a'));
    const allow = root.scope().restrict({ allow: ['a'] });
    const deny = root.scope().restrict({ deny: ['a'] });
    root.register(recordingTool('late'));
    expect(names(allow)).toEqual(['a']);
    expect(names(deny)).toEqual(['late']);
  });

  it('intersects masks across restrict calls and never hides the scope’s own tools', () => {
    const root = new ToolRegistry();
    root.register(recordingTool('a'), recordingTool('b'), recordingTool('c'));
    const scope = root.scope();
    scope.register(recordingTool('own'));
    scope.restrict({ allow: ['a', 'b'] }).restrict({ allow: ['b', 'c'] });
    expect(names(scope)).toEqual(['b', 'own']);
  });

  it('fails loud on unknown names, an empty filter and the root registry', () => {
    const root = new ToolRegistry();
    root.register(recordingTool('a'));
    expect(() => root.scope().restrict({ allow: ['missing'] })).toThrow(expect.objectContaining({ code: 'UNKNOWN_TOOL' }));
    expect(() => root.scope().restrict({})).toThrow(expect.objectContaining({ code: 'INVALID_OPTIONS' }));
    expect(() => root.restrict({ deny: ['a'] })).toThrow(expect.objectContaining({ code: 'INVALID_OPTIONS' }));
  });

  it('validates input against the JSON schema before running the tool', async () => {
    const root = new ToolRegistry();
    const tool = recordingTool('a');
    root.register(tool);
    await expect(root.execute('a', { value: 1 }, {} as never)).rejects.toMatchObject({ code: 'INVALID_TOOL_INPUT' });
    await expect(root.execute('a', {}, {} as never)).rejects.toMatchObject({ code: 'INVALID_TOOL_INPUT' });
    expect(tool.calls).toEqual([]);
    expect(await root.execute('a', { value: 'v' }, {} as never)).toEqual({ content: [text('a ok')] });
  });

  it('tells the model its arguments were not JSON when an adapter hands them on as raw text', async () => {
    const root = new ToolRegistry();
    const tool = recordingTool('a');
    root.register(tool);
    await expect(root.execute('a', '{"value": "v', {} as never)).rejects.toMatchObject({
      code: 'INVALID_TOOL_INPUT',
      message: expect.stringMatching(/^a input is not valid JSON \(.+\): send one JSON object that matches its input schema$/),
    });
    // JSON, but not an object: the schema's own answer.
    await expect(root.execute('a', '"v"', {} as never)).rejects.toMatchObject({ code: 'INVALID_TOOL_INPUT', message: expect.not.stringContaining('not valid JSON') });
    expect(tool.calls).toEqual([]);
  });

  it('keeps a copy of the content a tool returned in the log: the tool may change its own blocks afterwards', async () => {
    const cached = [text('first')];
    const tool = { name: 'cache', description: '', parameters: { type: 'object' }, execute: async () => ({ content: cached }) };
    const host = await createHost({ providers: false, tools: [tool], model: { kind: 'scripted', steps: [{ toolCalls: [{ name: 'cache', input: {} }] }, { text: 'done' }] } });
    try {
      const agent = await host.createAgent();
      agent.followup([text('go')]);
      await agent.whenIdle();
      // The log froze its own copy, not the tool's array.
      cached.push(text('second'));
      const result = agent.session.events.find((event) => event.type === 'tool/result')!.data as { content: unknown };
      expect(result.content).toStrictEqual([text('first')]);
    } finally {
      await host.close();
    }
  });

  it('rejects a tool output that is neither a string nor content with CONTRACT_VIOLATION', async () => {
    const root = new ToolRegistry();
    root.register({ name: 'bad', description: '', parameters: { type: 'object' }, execute: async () => 42 as never });
    await expect(root.execute('bad', {}, {} as never)).rejects.toMatchObject({ code: 'CONTRACT_VIOLATION' });
  });

  it('shows a restricted agent only its visible tools and refuses the hidden ones', async () => {
    const runtime = makeRuntime({ tools: [recordingTool('seen'), recordingTool('hidden')] });
    const model = scriptedModel([{ toolCalls: [{ name: 'hidden', input: { value: 'x' } }] }, { text: 'ok' }]);
    const hidden = runtime.tools.get('hidden') as ReturnType<typeof recordingTool>;
    const handle = await runtime.agents.create({ model, setup: ({ tools }) => void tools.restrict({ deny: ['hidden'] }) });
    handle.agent.followup([text('go')]);
    await handle.agent.whenIdle();
    expect(model.requests[0]?.tools.map((t) => t.name)).toEqual(['seen']);
    expect(dataOf<{ code: string }>(handle.agent.session.events, 'tool/result')[0]?.code).toBe('UNKNOWN_TOOL');
    expect(hidden.calls).toEqual([]);
    await handle.dispose();
  });
});
