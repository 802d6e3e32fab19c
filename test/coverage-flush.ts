// Under `npm run coverage` (NODE_V8_COVERAGE set) each test file's process writes its V8 coverage
// before vitest tears the process down, which would otherwise lose it; without the variable this is a no-op.
import { takeCoverage } from 'node:v8';
import { afterAll } from 'vitest';

// Registered first, so with vitest's stacked hook order it runs after the test file's own afterAll hooks.
afterAll(() => {
  if (process.env.NODE_V8_COVERAGE !== undefined) takeCoverage();
});
