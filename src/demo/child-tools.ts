// Tool module of the demo's children (`toolModules`): loaded inside each child's worker thread.
// `analyse_files` is the real work; `crash_thread` and `spin_forever` exist for `--chaos`.
import type { Tool } from '../seam/agent-types.js';
import { analyseFilesInTurns } from './analysis.js';

export const tools: Tool[] = [
  {
    name: 'analyse_files',
    description: 'Tokenize, count, hash and MinHash-sketch the given files. Returns JSON.',
    parameters: {
      type: 'object',
      properties: { files: { type: 'array', items: { type: 'string' }, minItems: 1 } },
      required: ['files'],
      additionalProperties: false,
    },
    // A file at a time: an in-process child runs on the host's thread, whose Ctrl-C must get through.
    async execute(input, ctx) {
      return JSON.stringify(await analyseFilesInTurns((input as { files: string[] }).files, ctx.signal));
    },
  },
  {
    name: 'crash_thread',
    description: 'Throws an exception that escapes to the thread (chaos).',
    parameters: { type: 'object' },
    async execute() {
      setTimeout(() => {
        throw new Error('chaos: an exception escaped to the child thread');
      });
      return new Promise<never>(() => undefined);
    },
  },
  {
    name: 'spin_forever',
    description: 'Loops forever in synchronous code, ignoring cancellation (chaos).',
    parameters: { type: 'object' },
    async execute() {
      for (;;);
    },
  },
];
