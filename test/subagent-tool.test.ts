// The model-facing subagent tool: wording per provider kind, lifecycle following its provider,
// config validation, exactly-once dispose, abort bridging and stop-reason rendering.
import { describe, expect, it } from 'vitest';
import {
  createHost,
  inProcessProvider,
  scriptedModel,
  subagentTool,
  text,
  type Host,
  type SubagentProvider,
  type SubagentResult,
  type SubagentRun,
  type SubagentToolConfig,
  type Tool,
} from 'subagent-host';
import { closeAfterEach, dataOf, deferred } from './helpers.js';

const track = closeAfterEach();

async function newHost(): Promise<Host> {
  const host = track(await createHost({ providers: false, pool: { minThreads: 0 } }));
  return host;
}

const promptText = (tool: Tool) => ((tool.parameters['properties'] as Record<string, { description: string }>)['prompt']!).description;

/** A provider whose runs settle as told and count their disposals. */
function fakeProvider(name: string, settle: (signal: AbortSignal) => Promise<SubagentResult>, options: Partial<SubagentProvider> = {}) {
  const stats = { starts: 0, disposals: 0, requests: [] as unknown[] };
  const provider: SubagentProvider = {
    name,
    capabilities: { outputSchema: false, depthLimit: true, toolFilter: false, persona: false },
    inheritsParentContext: false,
    async start(request) {
      stats.starts++;
      stats.requests.push(request);
      const run: SubagentRun = {
        id: `run-${stats.starts}`,
        localAgent: undefined,
        result: settle(request.signal),
        cancel: () => undefined,
        dispose: async () => {
          stats.disposals++;
        },
      };
      return run;
    },
    ...options,
  };
  return { provider, stats };
}

async function callTool(h: Host, steps: { name: string; input: unknown }[]) {
  const parent = await h.createAgent({ model: scriptedModel([{ toolCalls: steps }, { text: 'parent done' }]) });
  parent.followup([text('delegate')]);
  await parent.whenIdle();
  return dataOf<{ content: { text: string }[]; isError?: boolean; code?: string }>(parent.session.events, 'tool/result');
}

describe('subagent tool wording', () => {
  it('tells the model a fresh child does not see this conversation', async () => {
    const h = await newHost();
    h.subagents.registerProvider(inProcessProvider(h));
    subagentTool(h, { provider: 'in-process' });
    const tool = h.tools.get('subagent')!;
    expect(tool.description).toContain('does not see this conversation');
    expect(promptText(tool)).toContain('include everything it needs');
  });

  it('tells the model a forked child already sees the completed turns', async () => {
    const h = await newHost();
    h.subagents.registerProvider(inProcessProvider(h, { fork: true, name: 'forked' }));
    subagentTool(h, { provider: 'forked' });
    const tool = h.tools.get('subagent')!;
    expect(tool.description).toContain('inherits this conversation');
    expect(tool.description).not.toContain('does not see this conversation');
    expect(promptText(tool)).toContain('completed turns');
  });
});

describe('subagent tool lifecycle', () => {
  it('appears when its provider is registered later and goes when it is removed', async () => {
    const h = await newHost();
    const off = subagentTool(h, { provider: 'in-process' });
    expect(h.tools.get('subagent')).toBeUndefined();
    const remove = h.subagents.registerProvider(inProcessProvider(h));
    expect(h.tools.get('subagent')).toBeDefined();
    remove();
    expect(h.tools.get('subagent')).toBeUndefined();
    off();
  });

  it('re-derives its wording when the provider comes back as another kind', async () => {
    const h = await newHost();
    subagentTool(h, { provider: 'kid' });
    const first = h.subagents.registerProvider(inProcessProvider(h, { name: 'kid' }));
    expect(h.tools.get('subagent')!.description).toContain('does not see this conversation');
    first();
    h.subagents.registerProvider(inProcessProvider(h, { name: 'kid', fork: true }));
    expect(h.tools.get('subagent')!.description).toContain('inherits this conversation');
  });

  it('stays when a provider-removed listener registers the provider again', async () => {
    const h = await newHost();
    let remove = h.subagents.registerProvider(inProcessProvider(h, { name: 'kid' }));
    // A hot reload: the replacement is registered as the old provider goes, by a listener heard first.
    const offReload = h.subagents.on('subagent/provider-removed', (name) => {
      offReload();
      if (name === 'kid') remove = h.subagents.registerProvider(inProcessProvider(h, { name: 'kid', fork: true }));
    });
    const off = subagentTool(h, { provider: 'kid' });
    remove();
    expect(h.subagents.list()).toEqual(['kid']);
    expect(h.tools.get('subagent')!.description).toContain('inherits this conversation');
    remove();
    expect(h.tools.get('subagent')).toBeUndefined();
    off();
  });

  it('stops following the provider once disposed', async () => {
    const h = await newHost();
    const off = subagentTool(h, { provider: 'in-process' });
    off();
    h.subagents.registerProvider(inProcessProvider(h));
    expect(h.tools.get('subagent')).toBeUndefined();
    expect(h.subagents.listenerCount).toBe(0);
  });

  it('fails loud on a duplicate tool name', async () => {
    const h = await newHost();
    h.subagents.registerProvider(inProcessProvider(h));
    subagentTool(h, { provider: 'in-process' });
    expect(() => subagentTool(h, { provider: 'in-process' })).toThrow(expect.objectContaining({ code: 'DUPLICATE_TOOL' }));
    subagentTool(h, { provider: 'in-process', toolName: 'helper' });
    expect(h.tools.get('helper')).toBeDefined();
  });

  it('refuses a second tool of one name for one provider before that provider is registered, not at its registration', async () => {
    const h = await newHost();
    const off = subagentTool(h, { provider: 'in-process' });
    expect(() => subagentTool(h, { provider: 'in-process' })).toThrow(expect.objectContaining({ code: 'DUPLICATE_TOOL' }));
    subagentTool(h, { provider: 'other' });
    h.subagents.registerProvider(inProcessProvider(h));
    expect(h.tools.get('subagent')).toBeDefined();
    off();
    subagentTool(h, { provider: 'in-process' });
    expect(h.tools.get('subagent')).toBeDefined();
  });
});

describe('subagent tool config', () => {
  it.each<[string, object]>([
    ['a missing provider name', { provider: '' }],
    ['a negative maxDepth', { provider: 'p', maxDepth: -1 }],
    ['a fractional maxDepth', { provider: 'p', maxDepth: 1.5 }],
    ['-0 as maxDepth', { provider: 'p', maxDepth: -0 }],
    ['a string maxDepth', { provider: 'p', maxDepth: '3' }],
    ['a filter naming neither allow nor deny', { provider: 'p', toolFilter: {} }],
    ['a bad model spec', { provider: 'p', agentOptions: { model: { kind: 'nope' } } }],
    ['background with continuable mode', { provider: 'p', mode: 'continuable', background: true }],
    ['an unknown key', { provider: 'p', extra: 1 }],
    ['an unknown agentOptions key', { provider: 'p', agentOptions: { nope: 1 } }],
  ])('rejects %s at creation', async (_name, config) => {
    const h = await newHost();
    expect(() => subagentTool(h, config as never)).toThrow(expect.objectContaining({ code: expect.stringMatching(/INVALID_OPTIONS|INVALID_MODEL_SPEC/) }));
  });

  it.each<[string, 'persona' | 'toolFilter' | 'budget', Partial<SubagentToolConfig>]>([
    ['a persona', 'persona', { persona: 'You review code.' }],
    ['a toolFilter', 'toolFilter', { toolFilter: { deny: ['bash'] } }],
    ['a budget', 'budget', { budget: { tokens: 100 } }],
  ])('needs the capability for %s at install, not at each call, and rolls a late provider back', async (_name, capability, field) => {
    const h = await newHost();
    const capabilities = { outputSchema: false, depthLimit: true, toolFilter: true, persona: true, budget: true, [capability]: false };
    h.subagents.registerProvider(fakeProvider('lacking', async () => ({ output: [], stopReason: 'completed' }), { capabilities }).provider);
    expect(() => subagentTool(h, { provider: 'lacking', ...field })).toThrow(expect.objectContaining({ code: 'UNSUPPORTED_CAPABILITY', message: expect.stringContaining(capability) }));
    expect(h.tools.names()).not.toContain('subagent');
    subagentTool(h, { provider: 'late', toolName: 'late_tool', ...field });
    expect(() => h.subagents.registerProvider(fakeProvider('late', async () => ({ output: [], stopReason: 'completed' }), { capabilities }).provider)).toThrow(
      expect.objectContaining({ code: 'UNSUPPORTED_CAPABILITY' }),
    );
    expect(h.tools.names()).not.toContain('late_tool');
  });

  it('needs a provider that can run continuable children for mode continuable, at install and for a late provider', async () => {
    const h = await newHost();
    h.subagents.registerProvider(fakeProvider('one-shot-only', async () => ({ output: [], stopReason: 'completed' })).provider);
    expect(() => subagentTool(h, { provider: 'one-shot-only', mode: 'continuable' })).toThrow(expect.objectContaining({ code: 'UNSUPPORTED_CAPABILITY', message: expect.stringContaining('continuable') }));
    expect(h.tools.names()).not.toContain('subagent');
    subagentTool(h, { provider: 'late', toolName: 'late_tool', mode: 'continuable' });
    expect(() => h.subagents.registerProvider(fakeProvider('late', async () => ({ output: [], stopReason: 'completed' })).provider)).toThrow(expect.objectContaining({ code: 'UNSUPPORTED_CAPABILITY' }));
    expect(h.tools.names()).not.toContain('late_tool');
  });

  it('needs depthLimit for a numeric maxDepth, and rolls a late provider back otherwise', async () => {
    const h = await newHost();
    const { provider } = fakeProvider('shallow', async () => ({ output: [], stopReason: 'completed' }), {
      capabilities: { outputSchema: false, depthLimit: false, toolFilter: false, persona: false },
    });
    h.subagents.registerProvider(provider);
    expect(() => subagentTool(h, { provider: 'shallow', maxDepth: 2 })).toThrow(expect.objectContaining({ code: 'UNSUPPORTED_CAPABILITY' }));
    const other = fakeProvider('late', async () => ({ output: [], stopReason: 'completed' }), {
      capabilities: { outputSchema: false, depthLimit: false, toolFilter: false, persona: false },
    });
    subagentTool(h, { provider: 'late', maxDepth: 2, toolName: 'late_tool' });
    expect(() => h.subagents.registerProvider(other.provider)).toThrow(expect.objectContaining({ code: 'UNSUPPORTED_CAPABILITY' }));
    expect(h.subagents.getProvider('late')).toBeUndefined();
  });

  // The config was read again at each call: a change after install went out unchecked (a budget
  // of -1 tokens), and the tool's wording (fixed at mount) then told the model something else.
  it('sends what was checked at install, whatever the config object holds later', async () => {
    const h = await newHost();
    const { provider, stats } = fakeProvider('p', async () => ({ output: [text('ok')], stopReason: 'completed' }), {
      capabilities: { outputSchema: false, depthLimit: true, toolFilter: true, persona: true, budget: true },
    });
    h.subagents.registerProvider(provider);
    const config: SubagentToolConfig = { provider: 'p', persona: 'You review code.', budget: { tokens: 100 }, toolFilter: { deny: ['bash'] } };
    subagentTool(h, config);
    config.persona = 'changed';
    config.budget!.tokens = -1;
    config.toolFilter = { allow: ['bash'] };
    config.background = true;
    const results = await callTool(h, [{ name: 'subagent', input: { description: 'x', prompt: 'y' } }]);
    expect(results.map((result) => [result.isError ?? false, result.content[0]?.text])).toStrictEqual([[false, 'ok']]);
    expect(stats.requests).toMatchObject([{ persona: 'You review code.', budget: { tokens: 100 }, toolFilter: { deny: ['bash'] } }]);
  });

  it('refuses a config it cannot copy as INVALID_OPTIONS', () => {
    return newHost().then((h) => {
      const config = new Proxy({ provider: 'p' }, { ownKeys: () => { throw new Error('no keys'); } });
      expect(() => subagentTool(h, config)).toThrow(expect.objectContaining({ code: 'INVALID_OPTIONS' }));
      expect(h.tools.names()).not.toContain('subagent');
    });
  });

  it('sends maxDepth 3 by default, the configured cap, or none when provider-managed', async () => {
    const h = await newHost();
    const { provider, stats } = fakeProvider('p', async () => ({ output: [text('ok')], stopReason: 'completed' }));
    h.subagents.registerProvider(provider);
    subagentTool(h, { provider: 'p' });
    subagentTool(h, { provider: 'p', toolName: 'capped', maxDepth: 1 });
    subagentTool(h, { provider: 'p', toolName: 'managed', maxDepth: 'provider-managed' });
    const input = { description: 'x', prompt: 'y' };
    await callTool(h, [{ name: 'subagent', input }, { name: 'capped', input }, { name: 'managed', input }]);
    expect(stats.requests.map((r) => (r as { maxDepth?: number }).maxDepth)).toEqual([3, 1, undefined]);
  });
});

describe('subagent tool execution', () => {
  it('returns the child output, and structured output as JSON', async () => {
    const h = await newHost();
    h.subagents.registerProvider(fakeProvider('plain', async () => ({ output: [text('the answer')], stopReason: 'completed' })).provider);
    h.subagents.registerProvider(fakeProvider('structured', async () => ({ output: [], structured: { n: 1 }, stopReason: 'completed' })).provider);
    subagentTool(h, { provider: 'plain' });
    subagentTool(h, { provider: 'structured', toolName: 'structured' });
    const results = await callTool(h, [
      { name: 'subagent', input: { description: 'a', prompt: 'b' } },
      { name: 'structured', input: { description: 'a', prompt: 'b' } },
    ]);
    expect(results.map((r) => [r.content[0]?.text, r.isError ?? false])).toEqual([
      ['the answer', false],
      ['{"n":1}', false],
    ]);
  });

  it.each([
    ['aborted', 'subagent run was cancelled'],
    ['error', 'subagent run failed'],
    ['max-tokens', 'subagent run hit its token limit before finishing'],
    ['refusal', 'subagent declined the task'],
  ] as const)('renders a %s run as an error with headline, diagnostic and partial output', async (stopReason, headline) => {
    const h = await newHost();
    const { provider, stats } = fakeProvider('p', async () => ({ output: [text('half')], diagnostic: 'why', stopReason }));
    h.subagents.registerProvider(provider);
    subagentTool(h, { provider: 'p' });
    const [result] = await callTool(h, [{ name: 'subagent', input: { description: 'a', prompt: 'b' } }]);
    expect(result?.isError).toBe(true);
    expect(result?.content[0]?.text).toBe(`${headline}\nDiagnostic: why\nPartial output before the run ended:\nhalf`);
    expect(stats.disposals).toBe(1);
  });

  it('says a run its budget stopped was stopped by its budget, not cancelled, in the foreground and in a background notice', async () => {
    const h = await newHost();
    const diagnostic = 'budget: toolCalls limit 1 reached (2 used, child budget)';
    const { provider } = fakeProvider('p', async () => ({ output: [], diagnostic, stopReason: 'aborted' }));
    h.subagents.registerProvider(provider);
    subagentTool(h, { provider: 'p' });
    subagentTool(h, { provider: 'p', toolName: 'subagent_bg', background: true });
    const [foreground, background] = await callTool(h, [
      { name: 'subagent', input: { description: 'a', prompt: 'b' } },
      { name: 'subagent_bg', input: { description: 'a', prompt: 'b' } },
    ]);
    expect(foreground?.content[0]?.text).toBe(`subagent run was stopped by its budget\nDiagnostic: ${diagnostic}`);
    const taskId = background!.content[0]!.text.replace('started task ', '');
    const parent = h.agents.list().find((agent) => agent.session.events.some((e) => e.type === 'tool/result'))!;
    await expect.poll(() => dataOf<{ content: { text: string }[] }>(parent.session.events, 'user/message').map((m) => m.content[0]?.text ?? ''), { timeout: 15_000 }).toContainEqual(
      expect.stringContaining(`Background task ${taskId} was stopped by its budget before finishing (stop reason: aborted).\nDiagnostic: ${diagnostic}`),
    );
  });

  it('disposes exactly once when the result rejects', async () => {
    const h = await newHost();
    const { provider, stats } = fakeProvider('p', async () => {
      throw new Error('infrastructure fault');
    });
    h.subagents.registerProvider(provider);
    subagentTool(h, { provider: 'p' });
    const [result] = await callTool(h, [{ name: 'subagent', input: { description: 'a', prompt: 'b' } }]);
    expect(result).toMatchObject({ isError: true, code: 'TOOL_FAILED' });
    expect(stats.disposals).toBe(1);
  });

  it('bridges the tool’s abort to the run and disposes once', async () => {
    const h = await newHost();
    const aborted = deferred<void>();
    const { provider, stats } = fakeProvider('p', (signal) =>
      new Promise((resolve) =>
        signal.addEventListener('abort', () => {
          aborted.resolve();
          resolve({ output: [], stopReason: 'aborted' });
        }),
      ),
    );
    h.subagents.registerProvider(provider);
    subagentTool(h, { provider: 'p' });
    const parent = await h.createAgent({ model: scriptedModel([{ toolCalls: [{ name: 'subagent', input: { description: 'a', prompt: 'b' } }] }]) });
    parent.followup([text('go')]);
    await expect.poll(() => stats.starts, { timeout: 15_000 }).toBe(1);
    parent.cancel();
    await aborted.promise;
    await parent.whenIdle();
    expect(stats.disposals).toBe(1);
    expect(dataOf<{ isError: boolean }>(parent.session.events, 'tool/result')[0]?.isError).toBe(true);
  });

  it('turns a start failure into the tool error with its code, with nothing to dispose', async () => {
    const h = await newHost();
    h.subagents.registerProvider(inProcessProvider(h));
    subagentTool(h, { provider: 'in-process', maxDepth: 0 });
    const [result] = await callTool(h, [{ name: 'subagent', input: { description: 'a', prompt: 'b' } }]);
    expect(result).toMatchObject({ isError: true, code: 'DEPTH_EXCEEDED' });
  });

  it('runs sibling delegations of one answer in parallel', async () => {
    const h = await newHost();
    const gates = [deferred<SubagentResult>(), deferred<SubagentResult>()];
    let started = 0;
    h.subagents.registerProvider(fakeProvider('p', () => gates[started++]!.promise).provider);
    subagentTool(h, { provider: 'p' });
    const parent = await h.createAgent({
      model: scriptedModel([{ toolCalls: [{ name: 'subagent', input: { description: 'a', prompt: '1' } }, { name: 'subagent', input: { description: 'b', prompt: '2' } }] }, { text: 'ok' }]),
    });
    parent.followup([text('go')]);
    await expect.poll(() => started, { timeout: 15_000 }).toBe(2);
    gates[1]!.resolve({ output: [text('two')], stopReason: 'completed' });
    gates[0]!.resolve({ output: [text('one')], stopReason: 'completed' });
    await parent.whenIdle();
    expect(dataOf<{ content: { text: string }[] }>(parent.session.events, 'tool/result').map((r) => r.content[0]?.text)).toEqual(['one', 'two']);
  });
});
