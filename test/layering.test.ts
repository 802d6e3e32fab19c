// Architecture guard: each folder of src/ imports only from the layers above it (DESIGN.md),
// the worker entry never imports the service, no import cycle exists in src/ and no source file
// passes 400 lines; importing the package leaves the queue provider's BullMQ and ioredis unloaded.
import { execFileSync } from 'node:child_process';
import { readFileSync, readdirSync, existsSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const LAYERS = ['seam', 'runtime', 'persistence', 'service', 'providers', 'tools'];
/** Folders above every layer (they may import any of them). */
const TOP = ['cli', 'demo', 'inspect'];

function files(dir: string): string[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return files(path);
    return path.endsWith('.ts') ? [path] : [];
  });
}

/** Layer rank of a file under src/ (top-level files such as host.ts and cli.ts rank last). */
function rank(path: string): number {
  const [first] = relative(join(root, 'src'), path).split('/');
  const index = LAYERS.indexOf(first ?? '');
  return index === -1 ? LAYERS.length : index;
}

function relativeImports(path: string): string[] {
  const source = readFileSync(path, 'utf8');
  const found = [...source.matchAll(/(?:from|import)\s*\(?\s*'(\.[^']+)'/g)].map((m) => m[1]!);
  return found.map((spec) => resolve(dirname(path), spec));
}

/** Import cycles among `paths`, each as its files (relative to the root), sorted; found by Tarjan. */
function importCycles(paths: readonly string[]): string[][] {
  const known = new Set(paths);
  const edges = new Map(paths.map((path) => [path, relativeImports(path).map((target) => target.replace(/\.js$/, '.ts')).filter((target) => known.has(target))]));
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const cycles: string[][] = [];
  const visit = (path: string): void => {
    index.set(path, index.size);
    low.set(path, index.get(path)!);
    stack.push(path);
    for (const target of edges.get(path)!) {
      if (!index.has(target)) {
        visit(target);
        low.set(path, Math.min(low.get(path)!, low.get(target)!));
      } else if (stack.includes(target)) {
        low.set(path, Math.min(low.get(path)!, index.get(target)!));
      }
    }
    if (low.get(path) !== index.get(path)) return;
    const component: string[] = [];
    let member: string;
    do {
      member = stack.pop()!;
      component.push(relative(root, member));
    } while (member !== path);
    if (component.length > 1 || edges.get(path)!.includes(path)) cycles.push(component.sort());
  };
  for (const path of paths) if (!index.has(path)) visit(path);
  return cycles;
}

/**
 * Cycles that exist today and are being removed; each entry must disappear from here once its cycle
 * is gone (the test fails when a listed cycle no longer exists, so the list cannot go stale).
 */
const KNOWN_CYCLES: string[][] = [];

describe('layering', () => {
  const sources = files(join(root, 'src'));

  // Without this, a moved or renamed folder would leave the tables below empty or misranked, and pass.
  it('knows every folder of src/, and every layer and the worker entry hold sources', () => {
    const folders = readdirSync(join(root, 'src'), { withFileTypes: true }).filter((entry) => entry.isDirectory()).map((entry) => entry.name);
    expect(folders.filter((name) => !LAYERS.includes(name) && !TOP.includes(name))).toEqual([]);
    expect(LAYERS.filter((layer) => files(join(root, 'src', layer)).length === 0)).toEqual([]);
    expect(files(join(root, 'workers')).length).toBeGreaterThan(0);
  });

  it.each(sources.map((path) => [relative(root, path), path]))('%s imports only from layers above it', (_name, path) => {
    const upward = relativeImports(path).filter((target) => target.startsWith(join(root, 'src')) && rank(target) > rank(path));
    expect(upward.map((target) => relative(root, target))).toEqual([]);
  });

  it('keeps the worker entry free of the service, tools and host', () => {
    for (const path of files(join(root, 'workers'))) {
      const bad = relativeImports(path).filter((target) => {
        const layer = relative(join(root, 'src'), target).split('/')[0];
        return layer === 'service' || layer === 'tools' || layer === 'host.js' || layer === 'cli.js';
      });
      expect(bad).toEqual([]);
    }
  });

  it('has no import cycle in src/ (type-only imports count too)', () => {
    expect(importCycles(sources)).toEqual(KNOWN_CYCLES);
  });

  // BullMQ and ioredis are about half of the package's import time; only a queue connection needs them.
  it('loads neither BullMQ nor ioredis when the package is imported and a host runs without a queue', () => {
    const script = `
      const { createHost } = await import(${JSON.stringify(join(root, 'dist/src/index.js'))});
      const host = await createHost();
      await host.close();
      const { createRequire } = await import('node:module');
      const queueModules = () => Object.keys(createRequire(import.meta.url).cache).filter((path) => /[\\/]node_modules[\\/](bullmq|ioredis)[\\/]/.test(path));
      const loaded = queueModules();
      const probe = await import('bullmq');
      const after = queueModules();
      console.log(JSON.stringify({ loaded: loaded.length, after: after.length > 0 && typeof probe.Queue === 'function' }));`;
    const out = execFileSync(process.execPath, ['--input-type=module', '-e', script], { cwd: root, encoding: 'utf8' });
    // `after` proves the probe sees these modules once something imports them.
    expect(JSON.parse(out)).toEqual({ loaded: 0, after: true });
  });

  it('keeps every source file under 400 lines', () => {
    const long = [...sources, ...files(join(root, 'workers'))]
      .map((path) => [relative(root, path), readFileSync(path, 'utf8').split('\n').length] as const)
      .filter(([, lines]) => lines > 400);
    expect(long).toEqual([]);
  });
});
