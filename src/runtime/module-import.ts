// Every dynamic import of caller code (tool modules, model modules) goes through here, so that a
// worker thread can fence its imports against termination (see providers/worker/import-gate.ts).
export type ImportGate = <T>(load: () => Promise<T>) => Promise<T>;

/** Loads one module by specifier. */
export type ModuleImporter = (specifier: string) => Promise<unknown>;

let gate: ImportGate = (load) => load();
let importer: ModuleImporter = (specifier) => import(specifier);

/** Routes later imports through `next` (the worker entry installs one per thread). */
export function setImportGate(next: ImportGate): void {
  gate = next;
}

/**
 * Replaces the `import()` behind `importModule`. The worker bundle runs from V8's code cache as a
 * `vm.Script`, whose own `import()` Node 20 refuses; its loader hands in one of its own.
 */
export function setModuleImporter(next: ModuleImporter): void {
  importer = next;
}

/** `import(specifier)`, through the thread's gate. */
export function importModule(specifier: string): Promise<unknown> {
  return gate(() => importer(specifier));
}

/**
 * What to do about a module that failed to load, for its error message. A relative specifier is
 * resolved from this package's own files (the worker entry, in a worker thread), never the caller's.
 */
export function specifierAdvice(specifier: string): string {
  if (/^\.\.?(\/|$)/.test(specifier)) {
    return `a relative specifier is resolved from subagent-host's own files, not from your code: pass a file URL, e.g. new URL(${JSON.stringify(specifier)}, import.meta.url).href, or an installed package name`;
  }
  return 'use a file URL or an installed package name';
}
