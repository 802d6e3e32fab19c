// Every dynamic import of caller code (tool modules, model modules) goes through here, so that a
// worker thread can fence its imports against termination (see providers/worker/import-gate.ts).
export type ImportGate = <T>(load: () => Promise<T>) => Promise<T>;

let gate: ImportGate = (load) => load();

/** Routes later imports through `next` (the worker entry installs one per thread). */
export function setImportGate(next: ImportGate): void {
  gate = next;
}

/** `import(specifier)`, through the thread's gate. */
export function importModule(specifier: string): Promise<unknown> {
  return gate(() => import(specifier));
}
