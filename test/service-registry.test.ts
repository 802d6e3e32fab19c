// The provider registry of SubagentService: validation, frozen snapshots, insertion order,
// provider-added/removed events and their containment (seam-spec R1–R6).
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { SubagentError, type SubagentProvider } from 'subagent-host';
import { ALL_CAPABILITIES, fakeProvider, testHost, type TestHost } from './fake-provider.js';

let t: TestHost;

beforeEach(async () => {
  t = await testHost();
});

afterEach(() => t.host.close());

describe('registerProvider', () => {
  it('R1: registers, announces, and on disposal removes and announces the provider', () => {
    const heard: unknown[] = [];
    const offAdded = t.host.subagents.on('subagent/provider-added', (p) => void heard.push(['added', p]));
    const offRemoved = t.host.subagents.on('subagent/provider-removed', (name) => void heard.push(['removed', name]));
    const dispose = t.host.subagents.registerProvider(fakeProvider('alpha'));
    const snapshot = t.host.subagents.getProvider('alpha');
    expect(t.host.subagents.list()).toEqual(['alpha']);
    expect(snapshot).toMatchObject({ name: 'alpha', capabilities: ALL_CAPABILITIES, inheritsParentContext: false });
    dispose();
    expect(t.host.subagents.getProvider('alpha')).toBeUndefined();
    expect(t.host.subagents.list()).toEqual([]);
    expect(heard).toEqual([
      ['added', snapshot],
      ['removed', 'alpha'],
    ]);
    expect((heard[0] as unknown[])[1]).toBe(snapshot);
    offAdded();
    offRemoved();
  });

  it('R2: a duplicate name throws DUPLICATE_PROVIDER synchronously and the first stays', () => {
    t.host.subagents.registerProvider(fakeProvider('dup'));
    const first = t.host.subagents.getProvider('dup');
    expect(() => t.host.subagents.registerProvider(fakeProvider('dup'))).toThrow(expect.objectContaining({ code: 'DUPLICATE_PROVIDER' }));
    expect(t.host.subagents.getProvider('dup')).toBe(first);
    expect(t.host.subagents.list()).toEqual(['dup']);
  });

  it('R3: a throwing provider-added listener rolls the registration back', () => {
    const boom = new Error('no');
    const off = t.host.subagents.on('subagent/provider-added', () => {
      throw boom;
    });
    expect(() => t.host.subagents.registerProvider(fakeProvider('alpha'))).toThrow(boom);
    expect(t.host.subagents.getProvider('alpha')).toBeUndefined();
    expect(t.host.subagents.list()).toEqual([]);
    off();
    t.host.subagents.registerProvider(fakeProvider('alpha'));
    expect(t.host.subagents.list()).toEqual(['alpha']);
  });

  it('tells the provider-added listeners that ran before a throwing one that the provider is gone', () => {
    const heard: string[] = [];
    const offAdded = t.host.subagents.on('subagent/provider-added', (provider) => void heard.push(`added ${provider.name}`));
    const offRemoved = t.host.subagents.on('subagent/provider-removed', (name) => void heard.push(`removed ${name}`));
    const offBoom = t.host.subagents.on('subagent/provider-added', () => {
      throw new Error('no');
    });
    expect(() => t.host.subagents.registerProvider(fakeProvider('alpha'))).toThrow('no');
    expect(heard).toEqual(['added alpha', 'removed alpha']);
    expect(t.host.subagents.list()).toEqual([]);
    for (const off of [offAdded, offRemoved, offBoom]) off();
  });

  it('delivers an event a listener emits to the listeners after it only after the event being delivered', () => {
    const heard: string[] = [];
    let removeAlpha: () => void = () => undefined;
    let reloaded = false;
    const offs = [
      t.host.subagents.on('subagent/provider-added', (p) => {
        heard.push(`first added ${p.name}`);
        if (p.name === 'alpha' && !t.host.subagents.getProvider('beta')) t.host.subagents.registerProvider(fakeProvider('beta'));
      }),
      t.host.subagents.on('subagent/provider-removed', (name) => {
        heard.push(`first removed ${name}`);
        if (name === 'alpha' && !reloaded) {
          reloaded = true;
          removeAlpha = t.host.subagents.registerProvider(fakeProvider('alpha'));
        }
      }),
      t.host.subagents.on('subagent/provider-added', (p) => void heard.push(`second added ${p.name}`)),
      t.host.subagents.on('subagent/provider-removed', (name) => void heard.push(`second removed ${name}`)),
    ];
    removeAlpha = t.host.subagents.registerProvider(fakeProvider('alpha'));
    removeAlpha();
    expect(heard).toEqual([
      'first added alpha',
      'second added alpha',
      'first added beta',
      'second added beta',
      'first removed alpha',
      'second removed alpha',
      'first added alpha',
      'second added alpha',
    ]);
    expect(t.host.subagents.list()).toEqual(['beta', 'alpha']);
    offs.forEach((off) => off());
  });

  it('rolls back a registration whose later provider-added listener throws while a listener registers another provider', () => {
    const heard: string[] = [];
    const offs = [
      t.host.subagents.on('subagent/provider-added', (p) => {
        heard.push(`added ${p.name}`);
        if (p.name === 'alpha') t.host.subagents.registerProvider(fakeProvider('beta'));
      }),
      t.host.subagents.on('subagent/provider-removed', (name) => void heard.push(`removed ${name}`)),
      t.host.subagents.on('subagent/provider-added', (p) => {
        if (p.name === 'alpha') throw new Error('no alpha');
      }),
    ];
    expect(() => t.host.subagents.registerProvider(fakeProvider('alpha'))).toThrow('no alpha');
    expect(heard).toEqual(['added alpha', 'added beta', 'removed alpha']);
    expect(t.host.subagents.list()).toEqual(['beta']);
    offs.forEach((off) => off());
  });

  it('keeps a registration whose provider-added listener rejects later, and logs the rejection', async () => {
    const off = t.host.subagents.on('subagent/provider-added', () => Promise.reject(new Error('async no')));
    t.host.subagents.registerProvider(fakeProvider('alpha'));
    await t.warned(1);
    expect(t.host.subagents.list()).toEqual(['alpha']);
    expect(t.warnings).toHaveLength(1);
    off();
  });

  it('R4: lists providers in insertion order', () => {
    for (const name of ['b', 'a', 'c']) t.host.subagents.registerProvider(fakeProvider(name));
    expect(t.host.subagents.list()).toEqual(['b', 'a', 'c']);
  });

  it('R5: contains every failing provider-removed listener and logs one warning each', async () => {
    const heard: string[] = [];
    const unprintable = {
      toString() {
        throw new Error('cannot render');
      },
    };
    const offs = [
      t.host.subagents.on('subagent/provider-removed', () => {
        throw new Error('sync');
      }),
      t.host.subagents.on('subagent/provider-removed', () => Promise.reject(new Error('async'))),
      t.host.subagents.on('subagent/provider-removed', () => {
        throw unprintable;
      }),
      t.host.subagents.on('subagent/provider-removed', (name) => void heard.push(name)),
    ];
    const dispose = t.host.subagents.registerProvider(fakeProvider('alpha'));
    expect(() => dispose()).not.toThrow();
    await t.warned(3);
    expect(heard).toEqual(['alpha']);
    expect(t.warnings).toHaveLength(3);
    offs.forEach((off) => off());
  });

  it('R6: SubagentError carries its code and name and is an Error', () => {
    const error = new SubagentError('NO_PROVIDER', 'm');
    expect(error).toBeInstanceOf(Error);
    expect(error).toBeInstanceOf(SubagentError);
    expect(error.name).toBe('SubagentError');
    expect(error.code).toBe('NO_PROVIDER');
  });

  it('delivers provider-added and provider-removed to unscoped listeners only', () => {
    const heard: string[] = [];
    const offs = [
      t.host.subagents.on('subagent/provider-added', () => void heard.push('scoped added'), { parent: t.parent.id }),
      t.host.subagents.on('subagent/provider-removed', () => void heard.push('scoped removed'), { parent: t.parent.id }),
      t.host.subagents.on('subagent/provider-added', () => void heard.push('added')),
      t.host.subagents.on('subagent/provider-removed', () => void heard.push('removed')),
    ];
    t.host.subagents.registerProvider(fakeProvider('alpha'))();
    expect(heard).toEqual(['added', 'removed']);
    offs.forEach((off) => off());
  });

  it('has an idempotent disposer that never removes a later provider of the same name', () => {
    const removed: string[] = [];
    const off = t.host.subagents.on('subagent/provider-removed', (name) => void removed.push(name));
    const dispose = t.host.subagents.registerProvider(fakeProvider('alpha'));
    dispose();
    dispose();
    t.host.subagents.registerProvider(fakeProvider('alpha'));
    const second = t.host.subagents.getProvider('alpha');
    dispose();
    expect(t.host.subagents.getProvider('alpha')).toBe(second);
    expect(removed).toEqual(['alpha']);
    off();
  });
});

describe('registerProvider validation', () => {
  const valid = () => fakeProvider('valid') as unknown as Record<string, unknown>;
  const cases: [string, (p: Record<string, unknown>) => void][] = [
    ['an empty name', (p) => void (p['name'] = '')],
    ['a non-string name', (p) => void (p['name'] = 7)],
    ['missing capabilities', (p) => void delete p['capabilities']],
    ['capabilities.outputSchema not boolean', (p) => void (p['capabilities'] = { ...ALL_CAPABILITIES, outputSchema: 'yes' })],
    ['capabilities.depthLimit missing', (p) => void (p['capabilities'] = { outputSchema: true, toolFilter: true, persona: true })],
    ['capabilities.toolFilter not boolean', (p) => void (p['capabilities'] = { ...ALL_CAPABILITIES, toolFilter: 1 })],
    ['capabilities.persona not boolean', (p) => void (p['capabilities'] = { ...ALL_CAPABILITIES, persona: null })],
    ['inheritsParentContext missing', (p) => void delete p['inheritsParentContext']],
    ['start not a function', (p) => void (p['start'] = 'start')],
    ['prepareContinuable present but not a function', (p) => void (p['prepareContinuable'] = {})],
    ['resumeContinuable present but not a function', (p) => void (p['resumeContinuable'] = 'resume')],
  ];

  it.each(cases)('rejects %s with INVALID_PROVIDER and registers nothing', (_label, spoil) => {
    const added: unknown[] = [];
    const off = t.host.subagents.on('subagent/provider-added', (p) => void added.push(p));
    const provider = valid();
    spoil(provider);
    expect(() => t.host.subagents.registerProvider(provider as unknown as SubagentProvider)).toThrow(expect.objectContaining({ code: 'INVALID_PROVIDER' }));
    expect(t.host.subagents.list()).toEqual([]);
    expect(added).toEqual([]);
    off();
  });

  it('rejects a non-object provider with INVALID_PROVIDER', () => {
    expect(() => t.host.subagents.registerProvider(null as unknown as SubagentProvider)).toThrow(expect.objectContaining({ code: 'INVALID_PROVIDER' }));
  });

  it('rejects a provider whose getters or proxy traps throw with INVALID_PROVIDER, the throw as cause, and registers nothing', () => {
    const boom = new Error('getter threw');
    const hostile: [string, () => unknown][] = [
      ['a throwing name getter', () => Object.defineProperty(valid(), 'name', { get: () => { throw boom; } })],
      ['a throwing capabilities getter', () => Object.defineProperty(valid(), 'capabilities', { get: () => { throw boom; } })],
      ['a throwing capability getter', () => ({ ...valid(), capabilities: Object.defineProperty({ ...ALL_CAPABILITIES }, 'persona', { get: () => { throw boom; } }) })],
      ['a proxy whose get trap throws', () => new Proxy(valid(), { get: () => { throw boom; } })],
      ['a proxy whose has trap throws', () => new Proxy(valid(), { has: () => { throw boom; } })],
    ];
    for (const [label, make] of hostile) {
      let thrown: unknown;
      try {
        t.host.subagents.registerProvider(make() as SubagentProvider);
      } catch (error) {
        thrown = error;
      }
      expect({ label, code: (thrown as SubagentError | undefined)?.code, cause: (thrown as Error | undefined)?.cause }).toStrictEqual({ label, code: 'INVALID_PROVIDER', cause: boom });
    }
    expect(t.host.subagents.list()).toEqual([]);
  });

  it('registers a frozen provider, one whose start getter throws after its first read, and a class whose fields are getters on its prototype', async () => {
    t.host.subagents.registerProvider(Object.freeze({ ...fakeProvider('frozen'), capabilities: Object.freeze({ ...ALL_CAPABILITIES }) }));
    // Each field is read once: what was validated is what is kept.
    let reads = 0;
    const once = fakeProvider('once');
    t.host.subagents.registerProvider(Object.defineProperty({ ...once }, 'start', { get: () => { if (reads++ > 0) throw new Error('read twice'); return once.start.bind(once); } }));
    const inner = fakeProvider('inner');
    class Accessors {
      get name() { return 'accessors'; }
      get capabilities() { return ALL_CAPABILITIES; }
      get inheritsParentContext() { return false; }
      start(request: Parameters<SubagentProvider['start']>[0]) {
        return inner.start(request);
      }
    }
    t.host.subagents.registerProvider(new Accessors());
    expect(t.host.subagents.list()).toEqual(['frozen', 'once', 'accessors']);
    for (const name of ['once', 'accessors']) await (await t.host.subagents.start(name, t.request())).dispose();
  });

  it('keeps a frozen snapshot that later mutation of the caller object cannot change', async () => {
    const provider = fakeProvider('alpha', { capabilities: { ...ALL_CAPABILITIES } });
    t.host.subagents.registerProvider(provider);
    const snapshot = t.host.subagents.getProvider('alpha');
    expect(snapshot).not.toBe(provider);
    expect(Object.isFrozen(snapshot)).toBe(true);
    expect(Object.isFrozen(snapshot?.capabilities)).toBe(true);
    const mutable = provider as { -readonly [K in keyof SubagentProvider]: SubagentProvider[K] };
    mutable.capabilities.persona = false;
    mutable.name = 'renamed';
    const replacedStart: string[] = [];
    mutable.start = () => {
      replacedStart.push('called');
      return Promise.reject(new Error('replaced'));
    };
    expect(t.host.subagents.getProvider('alpha')).toMatchObject({ name: 'alpha', capabilities: ALL_CAPABILITIES });
    expect(t.host.subagents.getProvider('renamed')).toBeUndefined();
    const run = await t.host.subagents.start('alpha', t.request({ persona: 'still supported' }));
    expect(replacedStart).toEqual([]);
    expect(provider.requests).toHaveLength(1);
    await run.dispose();
  });

  it('calls a class provider with its own this', async () => {
    class ClassProvider {
      readonly name = 'klass';
      readonly capabilities = ALL_CAPABILITIES;
      readonly inheritsParentContext = false;
      readonly #inner = fakeProvider('inner');
      start(request: Parameters<SubagentProvider['start']>[0]) {
        return this.#inner.start(request);
      }
    }
    t.host.subagents.registerProvider(new ClassProvider());
    const run = await t.host.subagents.start('klass', t.request());
    expect(run.id).toBe('child-1');
    await run.dispose();
  });
});
