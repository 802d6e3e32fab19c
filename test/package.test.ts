// The package as a user installs it: what its shipped files import is installed with it, CommonJS
// code can require it, its declarations typecheck in a strict Node program (the README's examples
// too), and a better-sqlite3 whose install script never ran is named as the problem.
import { spawnSync } from 'node:child_process';
import { cpSync, mkdirSync, readFileSync, readdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { tempFiles } from './helpers.js';

const root = fileURLToPath(new URL('..', import.meta.url));
const manifest = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { files: string[]; dependencies: Record<string, string> };
const temp = tempFiles('package-');

function shippedScripts(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter((entry) => entry.isFile() && /\.c?js$/.test(entry.name))
    .map((entry) => join(entry.parentPath, entry.name));
}

/** The package a bare specifier names (`@scope/name/sub` → `@scope/name`), or undefined for `node:` and relative ones. */
function packageOf(specifier: string): string | undefined {
  if (specifier.startsWith('node:') || !/^(@[a-z0-9-~][a-z0-9-._~]*\/)?[a-z0-9-~][a-z0-9-._~]*(\/|$)/.test(specifier)) return undefined;
  return specifier.split('/').slice(0, specifier.startsWith('@') ? 2 : 1).join('/');
}

/**
 * Typechecks `source` as a user's file that installed this package, under `options` (skipLibCheck
 * off), and every declaration file it loads but those of the big packages that are checked on their
 * own (the TypeScript and Node libraries, zod, ioredis, bullmq: checking them takes most of a minute).
 */
function typecheckConsumer(source: string, options: ts.CompilerOptions, name = `consumer-${options.moduleResolution}`): string {
  const dir = join(temp.dir, name);
  mkdirSync(join(dir, 'node_modules'), { recursive: true });
  symlinkSync(root, join(dir, 'node_modules', 'subagent-host'), 'dir');
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ type: 'module' }));
  writeFileSync(join(dir, 'index.ts'), source);
  const program = ts.createProgram([join(dir, 'index.ts')], {
    target: ts.ScriptTarget.ES2022,
    lib: ['lib.es2023.d.ts'],
    types: ['node'],
    typeRoots: [join(root, 'node_modules', '@types')],
    strict: true,
    exactOptionalPropertyTypes: true,
    skipLibCheck: false,
    noEmit: true,
    ...options,
  });
  const checked = program.getSourceFiles().filter((file) => !/[\\/]node_modules[\\/](typescript|@types[\\/]node|zod|ioredis|bullmq)[\\/]/.test(file.fileName));
  expect(checked.map((file) => file.fileName)).toContain(join(root, 'dist', 'src', 'index.d.ts'));
  const diagnostics = [
    ...program.getOptionsDiagnostics(),
    ...program.getGlobalDiagnostics(),
    ...checked.flatMap((file) => [...program.getSyntacticDiagnostics(file), ...program.getSemanticDiagnostics(file)]),
  ];
  return ts.formatDiagnostics(diagnostics, { getCanonicalFileName: (name) => name, getCurrentDirectory: () => dir, getNewLine: () => '\n' });
}

/**
 * The README's TypeScript examples as one module: each in a block of its own, their imports joined,
 * and what they take from the text around them (a host, a parent agent, a signal, a model) declared.
 */
function readmeExamples(): { count: number; source: string } {
  const readme = readFileSync(join(root, 'README.md'), 'utf8');
  const names = new Set(['text', 'subagentTool', 'acpProvider']);
  const blocks = [...readme.matchAll(/^( *)```ts\n([\s\S]*?)^ *```$/gm)].map(([, indent, body]) =>
    body!.replace(new RegExp(`^${indent}`, 'gm'), '').replace(/^import \{([^}]*)\} from 'subagent-host';\n/gm, (_, list: string) => {
      for (const imported of list.split(',')) names.add(imported.trim());
      return '';
    }),
  );
  const source = [
    `import { ${[...names].join(', ')} } from 'subagent-host';`,
    `import type { Host, ModelSpec } from 'subagent-host';`,
    `declare const host: Host, parent: Awaited<ReturnType<Host['createAgent']>>, signal: AbortSignal, model: ModelSpec;`,
    ...blocks.map((body) => `{\n${body}}`),
    'export {};',
  ].join('\n');
  return { count: blocks.length, source };
}

describe('the installed package', () => {
  it('depends on every package its shipped JavaScript imports', () => {
    const imported = new Set<string>();
    for (const folder of manifest.files) {
      for (const file of shippedScripts(join(root, folder))) {
        const text = readFileSync(file, 'utf8');
        for (const match of text.matchAll(/(?:\bfrom\s*|\bimport\s*\(\s*|\brequire\s*\(\s*)['"]([^'"]+)['"]/g)) {
          const name = packageOf(match[1]!);
          if (name !== undefined) imported.add(name);
        }
      }
    }
    expect(imported).toContain('better-sqlite3');
    expect([...imported].filter((name) => !(name in manifest.dependencies)).sort()).toEqual([]);
  });

  it('can be required from CommonJS code, as the same module import gives', () => {
    const script = `
      const root = require('subagent-host');
      const internals = require('subagent-host/internals');
      import('subagent-host').then((esm) => console.log(typeof root.createHost, typeof internals.hostParts, esm.createHost === root.createHost));`;
    const ran = spawnSync(process.execPath, ['--input-type=commonjs', '-e', script], { cwd: root, encoding: 'utf8' });
    expect(ran.stderr).toBe('');
    expect(ran.stdout.trim()).toBe('function function true');
  });

  it('ships declarations that typecheck in a strict Node program without the DOM library', () => {
    const source = `
      import * as api from 'subagent-host';
      import * as internals from 'subagent-host/internals';
      const host: api.Host = await api.createHost({ pool: { maxThreads: 1 } });
      const parts = internals.hostParts(host);
      export const used = [api, internals, parts.pool.threads];
      await host.close();`;
    for (const options of [
      { module: ts.ModuleKind.NodeNext, moduleResolution: ts.ModuleResolutionKind.NodeNext },
      { module: ts.ModuleKind.ESNext, moduleResolution: ts.ModuleResolutionKind.Bundler },
    ]) {
      expect(typecheckConsumer(source, options)).toBe('');
    }
  }, 60_000);

  it("typechecks the README's TypeScript examples", () => {
    const { count, source } = readmeExamples();
    expect(count).toBeGreaterThan(5);
    expect(typecheckConsumer(source, { module: ts.ModuleKind.NodeNext, moduleResolution: ts.ModuleResolutionKind.NodeNext }, 'readme')).toBe('');
  }, 60_000);

  it('names a better-sqlite3 without its native addon as the problem, not the database path', () => {
    // An install whose better-sqlite3 install script never ran (npm's allowScripts, --ignore-scripts).
    const install = join(temp.dir, 'no-addon');
    cpSync(join(root, 'dist', 'src'), join(install, 'dist', 'src'), { recursive: true });
    cpSync(join(root, 'package.json'), join(install, 'package.json'));
    const modules = join(install, 'node_modules');
    mkdirSync(modules);
    for (const name of readdirSync(join(root, 'node_modules'))) {
      if (name !== 'better-sqlite3' && !name.startsWith('.')) symlinkSync(join(root, 'node_modules', name), join(modules, name), 'dir');
    }
    for (const part of ['package.json', 'lib']) cpSync(join(root, 'node_modules', 'better-sqlite3', part), join(modules, 'better-sqlite3', part), { recursive: true });
    const script = `
      const { sqlitePersistence } = await import(${JSON.stringify(new URL('dist/src/index.js', `file://${install}/`).href)});
      try {
        await sqlitePersistence(${JSON.stringify(join(install, 'sessions.db'))}).close();
      } catch (error) {
        console.log(JSON.stringify({ code: error.code, message: error.message }));
      }`;
    const ran = spawnSync(process.execPath, ['--input-type=module', '-e', script], { cwd: install, encoding: 'utf8' });
    expect(ran.stderr).toBe('');
    const failure = JSON.parse(ran.stdout) as { code: string; message: string };
    expect(failure.code).toBe('PERSISTENCE_UNAVAILABLE');
    expect(failure.message).toMatch(/better-sqlite3 cannot load its native addon/);
  });
});
