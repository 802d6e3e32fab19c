// Every dynamic import of caller code (tool modules, model modules) goes through here, so that a
// worker thread can fence its imports against termination (see providers/worker/import-gate.ts).
import { statSync } from 'node:fs';
import { isAbsolute } from 'node:path';
import { fileURLToPath } from 'node:url';

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

/** Node's codes for a module that could not be found or named (not for one that failed to run). */
const NOT_FOUND = new Set(['ERR_MODULE_NOT_FOUND', 'MODULE_NOT_FOUND', 'ERR_UNSUPPORTED_DIR_IMPORT', 'ERR_INVALID_MODULE_SPECIFIER', 'ERR_UNSUPPORTED_ESM_URL_SCHEME', 'ERR_INVALID_URL']);

/** Whether `specifier` is a file URL or an absolute path that names an existing file. */
function namesAFile(specifier: string): boolean {
  try {
    const path = specifier.startsWith('file:') ? fileURLToPath(specifier) : isAbsolute(specifier) ? specifier : undefined;
    return path !== undefined && statSync(path, { throwIfNoEntry: false })?.isFile() === true;
  } catch {
    return false;
  }
}

/**
 * What to do about a module that failed to load, for its error message ('' when its own code failed,
 * e.g. a syntax error: the message says so). A relative specifier is resolved from this package's own
 * files (the worker entry, in a worker thread), never the caller's. A module that was not found
 * although the specifier names a file is one that file imports: the specifier is not at fault.
 */
export function specifierAdvice(specifier: string, error: unknown): string {
  if (/^\.\.?(\/|$)/.test(specifier)) {
    return `; a relative specifier is resolved from subagent-host's own files, not from your code: pass a file URL, e.g. new URL(${JSON.stringify(specifier)}, import.meta.url).href, or an installed package name`;
  }
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code !== 'string' || !NOT_FOUND.has(code)) return '';
  return namesAFile(specifier) ? '; that file was found: what is missing is a module it imports' : '; use a file URL or an installed package name';
}
