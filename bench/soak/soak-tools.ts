// Tool module of the soak's children (`toolModules`): a little real work, and every way a worker
// thread can die or run away. Only `work` is ever given to in-process children.
import type { Tool } from '../../src/index.js';

const object = { type: 'object' } as const;
const tool = (name: string, execute: Tool['execute']): Tool => ({ name, description: name, parameters: object, execute });

export const tools: Tool[] = [
  tool('work', async () => {
    let hash = 0;
    for (let i = 0; i < 20_000; i++) hash = (hash * 31 + i) | 0;
    return `worked ${hash}`;
  }),
  tool('exit_thread', async () => {
    process.exit(3);
  }),
  // An exception that escapes to the thread, not to the tool call.
  tool('escape', async () => {
    setTimeout(() => {
      throw new Error('escaped to the thread');
    });
    return new Promise<never>(() => undefined);
  }),
  // Runs away in synchronous code and never looks at its signal.
  tool('spin', async () => {
    for (;;);
  }),
  tool('hog_memory', async () => {
    const hoard: unknown[] = [];
    for (;;) hoard.push(new Array(1e5).fill({ x: Math.random() }));
  }),
];
