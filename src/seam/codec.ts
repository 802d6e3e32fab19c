// STUB — to be implemented: the one superjson instance used at every boundary.
export interface Encoded { json: unknown; meta?: unknown }
export function encode(_value: unknown): Encoded { throw new Error('not implemented'); }
export function decode<T = unknown>(_encoded: Encoded): T { throw new Error('not implemented'); }
export function stringify(_value: unknown): string { throw new Error('not implemented'); }
export function parse<T = unknown>(_text: string): T { throw new Error('not implemented'); }
