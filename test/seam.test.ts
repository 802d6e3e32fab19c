// Seam vocabulary: the error class and the depth helpers.
import { describe, expect, it } from 'vitest';
import { SubagentError, SUBAGENT_ERROR_CODES, assertSubagentMaxDepth, delegationDepthOf, isSubagentError, type Agent } from 'subagent-host';
import { makeRuntime } from './helpers.js';

describe('SubagentError', () => {
  it('is an Error named SubagentError with its code and cause', () => {
    const cause = new Error('root');
    const error = new SubagentError('NO_PROVIDER', 'no provider named x', { cause });
    expect(error).toBeInstanceOf(Error);
    expect(error.name).toBe('SubagentError');
    expect(error.code).toBe('NO_PROVIDER');
    expect(error.cause).toBe(cause);
    expect(isSubagentError(error, 'NO_PROVIDER')).toBe(true);
    expect(isSubagentError(error, 'CLOSED')).toBe(false);
    expect(isSubagentError(new Error('x'))).toBe(false);
  });

  it('lists every code of the API contract', () => {
    for (const code of ['INVALID_PROVIDER', 'DUPLICATE_PROVIDER', 'NO_PROVIDER', 'UNSUPPORTED_CAPABILITY', 'INVALID_REQUEST', 'DEPTH_EXCEEDED',
      'CONTRACT_VIOLATION', 'START_FAILED', 'CONTINUATION_UNAVAILABLE', 'PERSISTENCE_UNAVAILABLE', 'DUPLICATE_CHILD', 'DRAINING', 'UNAUTHORIZED',
      'NOT_RESUMABLE', 'ACTIVATION_CLOSING', 'PARENT_UNAVAILABLE', 'ACTIVATION_TEARDOWN_FAILED', 'ACTIVATION_SETUP_REVOKED',
      'ACTIVATION_SETUP_RELEASE_FAILED', 'CANCELLED', 'CLOSED']) {
      expect(SUBAGENT_ERROR_CODES).toContain(code);
    }
  });
});

describe('assertSubagentMaxDepth', () => {
  it.each([undefined, 0, 1, 3, Number.MAX_SAFE_INTEGER])('accepts %s', (value) => {
    expect(() => assertSubagentMaxDepth(value)).not.toThrow();
  });

  it.each([-1, Number.NaN, 1.5, -0, Infinity, '2', null])('rejects %s with INVALID_REQUEST', (value) => {
    expect(() => assertSubagentMaxDepth(value)).toThrow(expect.objectContaining({ code: 'INVALID_REQUEST' }));
  });
});

describe('delegationDepthOf', () => {
  it('takes the larger of the header depth and the runtime option', async () => {
    const runtime = makeRuntime();
    const child = await runtime.agents.create({ header: { delegationDepth: 2 }, agentOptions: { subagentDepth: 1 } });
    const deeper = await runtime.agents.create({ header: { delegationDepth: 1 }, agentOptions: { subagentDepth: 4 } });
    const top = await runtime.agents.create();
    expect([delegationDepthOf(child.agent), delegationDepthOf(deeper.agent), delegationDepthOf(top.agent)]).toEqual([2, 4, 0]);
    await Promise.all([child.dispose(), deeper.dispose(), top.dispose()]);
  });

  it('rejects a malformed runtime depth with INVALID_OPTIONS', () => {
    const agent = { options: { subagentDepth: -1 }, session: { header: { id: 'x', createdAt: 0 }, events: [] } } as unknown as Agent;
    expect(() => delegationDepthOf(agent)).toThrow(expect.objectContaining({ code: 'INVALID_OPTIONS' }));
  });
});
