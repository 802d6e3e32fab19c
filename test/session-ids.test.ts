// Session ids a caller chooses (`createAgent({ sessionId })`, a continuable start's `childId`) are
// ones every tool can show and be given back: `ls` takes them on its command line, the inspector in
// its URL path. An id those could not carry is refused up front, as a typed error naming the field.
import { execFile } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { sqlitePersistence } from 'subagent-host';
import { cli, rawGet, startInspect } from './inspect-helpers.js';
import { continuationHost, continuationSuite, startChild } from './continuation-helpers.js';

const { files, track, setup } = continuationSuite('subagent-session-ids-');

/** Ids no listing could show raw or no command line could pass: controls (C0, DEL, C1), or past 1,024 characters. */
const UNSHOWABLE = ['a\nforged  continuable', 'nul\u0000id', 'tab\tid', '\u001b[2Jclear', 'del\u007f', 'next\u0085line', 'x'.repeat(1025), '漢'.repeat(1025)];

function ls(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(cli, ['ls', ...args], { maxBuffer: 2 ** 24 }, (error, stdout, stderr) => resolve({ code: error ? Number(error.code ?? 1) : 0, stdout, stderr }));
  });
}

describe('session ids a caller chooses', () => {
  it('refuses as createAgent sessionId and as startContinuable childId an id with a control character or past 1,024 characters, storing nothing', async () => {
    const { host, parent } = await setup();
    for (const id of UNSHOWABLE) {
      await expect(host.createAgent({ sessionId: id }), JSON.stringify(id.slice(0, 20))).rejects.toMatchObject({
        code: 'INVALID_OPTIONS',
        message: expect.stringContaining('options.sessionId must be'),
      });
      await expect(startChild(host, parent, 'p', { childId: id }), JSON.stringify(id.slice(0, 20))).rejects.toMatchObject({
        code: 'INVALID_REQUEST',
        message: expect.stringContaining('spec.childId must be'),
      });
    }
    expect(host.agents.list()).toStrictEqual([parent]);
    const stored = await host.persistence!.projections(UNSHOWABLE);
    expect(stored.size).toBe(0);
    // A stored id is only looked up: one no release stored is unknown, not malformed.
    await expect(host.agents.resume({ sessionId: 'x'.repeat(1025) })).rejects.toMatchObject({ code: 'UNKNOWN_SESSION' });
  });

  it('resumes a stored session whose id an earlier release took (a newline in it): only new ids are held to the rule', async () => {
    const db = files.file();
    const store = sqlitePersistence(db);
    await store.create({ id: 'old\nid', createdAt: 1 });
    await store.close();
    const host = track(await continuationHost(db));
    const { agent } = await host.agents.resume({ sessionId: 'old\nid' });
    expect(agent.id).toBe('old\nid');
  });

  it('takes the longest id of three-byte characters, which the inspector serves and ls lists', async () => {
    const db = files.file();
    const parentId = '漢'.repeat(1024);
    const childId = '字'.repeat(1024);
    const host = track(await continuationHost(db));
    const parent = await host.createAgent({ sessionId: parentId });
    await startChild(host, parent, 'p', { childId, label: 'longest' });
    await host.subagents.drainContinuableChildren(parent, [childId]);
    await host.close();

    const listed = await ls([parentId, '--db', db]);
    expect([listed.code, listed.stderr]).toEqual([0, '']);
    expect(listed.stdout).toMatch(new RegExp(`^${childId}  continuable  inactive  -  \\d+  longest\n$`));

    const inspector = await startInspect(db);
    try {
      const tree = await rawGet(inspector.url, `/api/roots/${encodeURIComponent(parentId)}/tree`);
      expect(tree.status).toBe(200);
      expect((JSON.parse(tree.body) as { nodes: { id: string }[] }).nodes.map((node) => node.id)).toEqual([childId]);
      const transcript = await rawGet(inspector.url, `/api/sessions/${encodeURIComponent(childId)}`);
      expect([transcript.status, (JSON.parse(transcript.body) as { id: string }).id]).toEqual([200, childId]);
    } finally {
      await inspector.stop();
    }
  });
});
