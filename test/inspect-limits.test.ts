// The inspector on logs too large or too damaged to send whole, and on a file still being created:
// texts cut to a cap per text and a budget per response (the whole text one request away), memory
// that does not grow with the log's text, a damaged row shown as unreadable among the readable
// ones, and an empty file read as no sessions yet.
import { readFileSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHost, inProcessProvider, text } from 'subagent-host';
import { tempFiles } from './helpers.js';
import { rawGet, startInspect, storedAgent, type InspectProcess } from './inspect-helpers.js';

interface Entry {
  seq: number;
  kind: string;
  title: string;
  text?: string;
  omitted?: number;
  isError?: boolean;
}

const TEXT_CAP = 64 * 1024;
const RESPONSE_BUDGET = 2 * 1024 * 1024;
const PREVIEW_CHARS = 256;
/** The text of the large log: 64 MiB. */
const TEXT = 64 * 1024 * 1024;

const files = tempFiles('inspect-limits-');
const db = files.file();
let server: InspectProcess;
let rootId: string;
let forkId: string;

/**
 * Appends `count` user messages of `size` characters each to session `id`: `size` letters `a`, then
 * ` end <n>` (n from 0), so a cut text is told from a whole one by its end.
 */
function appendMessages(path: string, id: string, count: number, size: number): void {
  const file = new Database(path);
  try {
    file.transaction(() => {
      const next = file.prepare('SELECT next_seq FROM sessions WHERE id = ?').pluck().get(id) as number;
      file
        .prepare(
          `WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < @count - 1)
           INSERT INTO events (session_id, seq, type, time, data)
           SELECT @id, @next + i, 'user/message', @time, json_object('id', 'big-' || i, 'source', json_object('kind', 'user'),
             'content', json_array(json_object('type', 'text', 'text', replace(hex(zeroblob(@size / 2)), '0', 'a') || ' end ' || i))) FROM n`,
        )
        .run({ id, next, count, size, time: Date.now() });
      file.prepare('UPDATE sessions SET next_seq = next_seq + ? WHERE id = ?').run(count, id);
    })();
  } finally {
    file.close();
  }
}

/** Appends `count` stream chunks (rows the transcript leaves out) to session `id`. */
function appendChunks(path: string, id: string, count: number): void {
  const file = new Database(path);
  try {
    file.transaction(() => {
      file
        .prepare(
          `WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < @count - 1)
           INSERT INTO events (session_id, seq, type, time, data)
           SELECT @id, s.next_seq + i, 'assistant/chunk', @time, '{"turn":1,"step":1,"chunk":{"type":"text-delta","text":"a"}}'
           FROM n, sessions s WHERE s.id = @id`,
        )
        .run({ id, count, time: Date.now() });
      file.prepare('UPDATE sessions SET next_seq = next_seq + ? WHERE id = ?').run(count, id);
    })();
  } finally {
    file.close();
  }
}

async function transcript(base: string, id: string): Promise<{ length: number; entries: Entry[] }> {
  const answer = await rawGet(base, `/api/sessions/${encodeURIComponent(id)}`);
  expect(answer.status).toBe(200);
  return { length: answer.body.length, entries: (JSON.parse(answer.body) as { entries: Entry[] }).entries };
}

beforeAll(async () => {
  const host = await createHost({ providers: false, persistence: { sqlite: db } });
  try {
    host.subagents.registerProvider(inProcessProvider(host, { fork: true }));
    const root = await host.createAgent();
    root.followup([text(`a${'😀'.repeat(40_000)}`)]);
    await root.whenIdle();
    rootId = root.id;
    const run = await host.subagents.start('in-process-fork', { label: 'fork', prompt: [text('go on')], parent: root, signal: new AbortController().signal });
    await run.result;
    await run.dispose();
    forkId = run.id;
  } finally {
    await host.close();
  }
  // 48 messages of 100,000 characters: 4.8 MB, more than a response's budget.
  appendMessages(db, rootId, 48, 100_000);
  // An event of a type this build does not know, named by 1,000 characters: its title is its type.
  const file = new Database(db);
  file.prepare("INSERT INTO events (session_id, seq, type, time, data) SELECT id, next_seq, ?, 1, '{}' FROM sessions WHERE id = ?").run('t'.repeat(1000), rootId);
  file.prepare('UPDATE sessions SET next_seq = next_seq + 1 WHERE id = ?').run(rootId);
  file.close();
  server = await startInspect(db);
});

afterAll(async () => {
  await server?.stop();
});

describe('inspect on a log with long texts', () => {
  it('cuts each text to 64 KiB and the response to its budget, saying how many characters it left out', async () => {
    const { length, entries } = await transcript(server.url, rootId);
    const big = entries.filter((entry) => entry.title === 'user' && entry.text?.startsWith('aaaa'));
    expect(big).toHaveLength(48);
    for (const [index, entry] of big.entries()) {
      expect(entry.text!.length + entry.omitted!).toBe(100_000 + ` end ${index}`.length);
      expect(entry.text!.length).toBeLessThanOrEqual(TEXT_CAP);
      expect(entry.text!.length).toBeGreaterThanOrEqual(PREVIEW_CHARS);
    }
    expect(big[0]!.text!.length).toBe(TEXT_CAP);
    expect(big.at(-1)!.text!.length).toBe(PREVIEW_CHARS);
    const sent = entries.reduce((sum, entry) => sum + (entry.text?.length ?? 0), 0);
    expect(sent).toBeLessThanOrEqual(RESPONSE_BUDGET + entries.length * PREVIEW_CHARS);
    expect(length).toBeLessThan(RESPONSE_BUDGET + 100_000);
  });

  it('cuts a title to 500 characters', async () => {
    const { entries } = await transcript(server.url, rootId);
    expect(entries.at(-1)).toMatchObject({ kind: 'event', title: `${'t'.repeat(500)}…` });
  });

  it('never cuts between the halves of a surrogate pair', async () => {
    const { entries } = await transcript(server.url, rootId);
    const emoji = entries.find((entry) => entry.text?.startsWith('a😀'));
    expect(emoji?.omitted).toBe(80_001 - (emoji?.text?.length ?? 0));
    // 'a' then pairs: the cap falls inside a pair, so the cut keeps one character less.
    expect(emoji?.text?.length).toBe(TEXT_CAP - 1);
    expect(emoji?.text).toMatch(/😀$/u);
  });

  it('serves the whole text of one event as plain text, under the same host rules', async () => {
    const { entries } = await transcript(server.url, rootId);
    const last = entries.filter((entry) => entry.title === 'user').at(-1)!;
    const full = await rawGet(server.url, `/api/sessions/${encodeURIComponent(rootId)}/events/${last.seq}`);
    expect([full.status, full.type]).toEqual([200, 'text/plain; charset=utf-8']);
    expect(full.body).toBe(`${'a'.repeat(100_000)} end 47`);
    const refused = await rawGet(server.url, `/api/sessions/${encodeURIComponent(rootId)}/events/${last.seq}`, { headers: { host: 'attacker.example' } });
    expect(refused.status).toBe(403);
    const missing = await Promise.all(
      [`/api/sessions/${encodeURIComponent(rootId)}/events/99999`, '/api/sessions/nope/events/0', `/api/sessions/${encodeURIComponent(rootId)}/events/-1`].map((path) => rawGet(server.url, path)),
    );
    expect(missing.map((answer) => [answer.status, (JSON.parse(answer.body) as { error: { code: string } }).error.code])).toEqual([
      [404, 'UNKNOWN_EVENT'],
      [404, 'UNKNOWN_EVENT'],
      [404, 'NOT_FOUND'],
    ]);
  });

  it("cuts a fork's inherited prefix as one text, without a link to one event", async () => {
    const { entries } = await transcript(server.url, forkId);
    expect(entries[0]).toMatchObject({ kind: 'seed' });
    const seed = entries[0]!;
    expect(seed.text!.length).toBeGreaterThanOrEqual(TEXT_CAP - 1);
    expect(seed.text!.length).toBeLessThanOrEqual(TEXT_CAP);
    expect(seed.text).not.toMatch(/[\ud800-\udbff]$/);
    expect(seed.omitted).toBeGreaterThan(80_000 - TEXT_CAP);
    expect(entries.slice(1).some((entry) => entry.kind === 'message' && entry.text === 'go on')).toBe(true);
  });

  it('builds the transcript of 64 MB of text without holding it: the peak memory of inspect stays far below it', async () => {
    const path = files.file();
    const id = await storedAgent(path);
    appendMessages(path, id, 256, TEXT / 256);
    const other = await startInspect(path);
    const peak = (): number => Number(/^VmHWM:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${other.child.pid}/status`, 'utf8'))![1]) * 1024;
    try {
      const before = peak();
      const { length } = await transcript(other.url, id);
      expect(length).toBeLessThan(RESPONSE_BUDGET + 256 * 1024);
      // Reading the whole log into memory (and its JSON) would raise the peak by several times the text.
      expect(peak() - before).toBeLessThan(TEXT);
    } finally {
      expect(await other.stop()).toBe(0);
    }
  });
});

describe('inspect on a log of many events and a root of many descendants', () => {
  interface Page {
    entries: Entry[];
    through?: number;
    more?: true;
  }
  const page = async (base: string, path: string): Promise<Page> => {
    const answer = await rawGet(base, path);
    expect(answer.status).toBe(200);
    return JSON.parse(answer.body) as Page;
  };

  it('answers at most 1,000 entries at a time, says more follow, and pages on with ?after= through the whole log', async () => {
    const path = files.file();
    const id = await storedAgent(path);
    appendMessages(path, id, 2500, 8);
    const other = await startInspect(path);
    try {
      const base = `/api/sessions/${encodeURIComponent(id)}`;
      const first = await page(other.url, base);
      expect([first.entries.length, first.through, first.more]).toEqual([1000, 999, true]);
      const seqs: number[] = [];
      let next: Page = first;
      for (;;) {
        seqs.push(...next.entries.map((entry) => entry.seq));
        if (next.more !== true) break;
        next = await page(other.url, `${base}?after=${next.through}&limit=700`);
      }
      expect(seqs).toEqual(Array.from({ length: 2500 }, (_, seq) => seq));
      expect(next).toMatchObject({ through: 2499 });
      // Past the end: nothing, and nothing more.
      expect(await page(other.url, `${base}?after=2499`)).toEqual(expect.not.objectContaining({ more: true }));
      expect((await page(other.url, `${base}?after=2499`)).entries).toEqual([]);
    } finally {
      expect(await other.stop()).toBe(0);
    }
  });

  it('reads at most 100,000 events for one answer, so a log of stream chunks is paged too', async () => {
    const path = files.file();
    const id = await storedAgent(path);
    appendMessages(path, id, 1, 8);
    appendChunks(path, id, 150_000);
    appendMessages(path, id, 1, 8);
    const other = await startInspect(path);
    try {
      const base = `/api/sessions/${encodeURIComponent(id)}`;
      const first = await page(other.url, base);
      expect([first.entries.map((entry) => entry.seq), first.through, first.more]).toEqual([[0], 99_999, true]);
      const rest = await page(other.url, `${base}?after=${first.through}`);
      expect([rest.entries.map((entry) => entry.seq), rest.through, rest.more]).toEqual([[150_001], 150_001, undefined]);
    } finally {
      expect(await other.stop()).toBe(0);
    }
  });

  it("keeps a fork's inherited prefix one entry: a page of one entry holds it whole, and the next starts after it", async () => {
    const first = await page(server.url, `/api/sessions/${encodeURIComponent(forkId)}?limit=1`);
    expect(first.entries.map((entry) => entry.kind)).toEqual(['seed']);
    expect(first.more).toBe(true);
    const rest = await page(server.url, `/api/sessions/${encodeURIComponent(forkId)}?after=${first.through}`);
    expect(rest.entries.some((entry) => entry.kind === 'message' && entry.text === 'go on')).toBe(true);
    expect(rest.entries.every((entry) => entry.seq > first.through!)).toBe(true);
    // An after inside the prefix answers from its start.
    expect((await page(server.url, `/api/sessions/${encodeURIComponent(forkId)}?after=0&limit=1`)).entries[0]).toMatchObject({ kind: 'seed' });
  });

  it('answers the descendants of a root 1,000 at a time, with their total and ?offset= to page on', async () => {
    const path = files.file();
    const id = await storedAgent(path);
    // 1,200 sessions below the root that are not delegated children (no descriptor needed).
    const file = new Database(path);
    file
      .prepare(
        `WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 1199)
         INSERT INTO sessions (id, created_at, create_order, parent_session, next_seq)
         SELECT printf('below-%04d', i), 1000 + i, (SELECT max(create_order) FROM sessions) + 1 + i, @id, 0 FROM n`,
      )
      .run({ id });
    file.close();
    const other = await startInspect(path);
    try {
      const tree = async (query: string): Promise<{ nodes: { id: string }[]; total: number }> => {
        const answer = await rawGet(other.url, `/api/roots/${encodeURIComponent(id)}/tree${query}`);
        expect(answer.status).toBe(200);
        return JSON.parse(answer.body) as { nodes: { id: string }[]; total: number };
      };
      const first = await tree('');
      expect([first.nodes.length, first.total, first.nodes[0]!.id]).toEqual([1000, 1200, 'below-0000']);
      const rest = await tree('?offset=1000&limit=500');
      expect([rest.nodes.length, rest.total, rest.nodes[0]!.id, rest.nodes.at(-1)!.id]).toEqual([200, 1200, 'below-1000', 'below-1199']);
    } finally {
      expect(await other.stop()).toBe(0);
    }
  });

  it('answers the tree of a child with 200,000 children of its own (they once overflowed the stack)', async () => {
    const path = files.file();
    const id = await storedAgent(path);
    const file = new Database(path);
    file
      .prepare(
        `WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 200000)
         INSERT INTO sessions (id, created_at, create_order, parent_session, next_seq)
         SELECT printf('wide-%06d', i), 1000 + i, (SELECT max(create_order) FROM sessions) + 1 + i, CASE WHEN i = 0 THEN @id ELSE 'wide-000000' END, 0 FROM n`,
      )
      .run({ id });
    file.close();
    const other = await startInspect(path);
    try {
      const answer = await rawGet(other.url, `/api/roots/${encodeURIComponent(id)}/tree?offset=200000&limit=10`);
      expect(answer.status).toBe(200);
      const tree = JSON.parse(answer.body) as { nodes: { id: string; depth: number }[]; total: number };
      expect([tree.total, tree.nodes.map((node) => [node.id, node.depth])]).toEqual([200_001, [['wide-200000', 2]]]);
    } finally {
      expect(await other.stop()).toBe(0);
    }
  }, 60_000);

  it('refuses a bad query parameter with 400 INVALID_REQUEST, saying what it takes', async () => {
    const session = `/api/sessions/${encodeURIComponent(rootId)}`;
    const cases: [string, RegExp][] = [
      [`${session}?after=-1`, /\?after= must be a decimal integer from 0 to/],
      [`${session}?after=1e3`, /\?after= must be a decimal integer/],
      [`${session}?after=`, /\?after= must be a decimal integer/],
      [`${session}?limit=0`, /\?limit= must be a decimal integer from 1 to 10000/],
      [`${session}?limit=10001`, /\?limit= must be a decimal integer from 1 to 10000/],
      [`${session}?after=1&after=2`, /\?after= is given twice/],
      [`${session}?page=2`, /unknown query parameter "page": this request takes only \?after= and \?limit=/],
      [`/api/roots/${encodeURIComponent(rootId)}/tree?offset=x`, /\?offset= must be a decimal integer/],
      ['/api/roots?limit=5', /unknown query parameter "limit": this request takes no query parameters/],
      // Checked before the id: a bad request is told so even for an unknown session.
      ['/api/sessions/nope?limit=abc', /\?limit= must be a decimal integer/],
    ];
    const answers = await Promise.all(cases.map(([path]) => rawGet(server.url, path)));
    for (const [index, answer] of answers.entries()) {
      const body = JSON.parse(answer.body) as { error: { code: string; message: string } };
      expect([cases[index]![0], answer.status, answer.type.split(';')[0], body.error.code]).toEqual([cases[index]![0], 400, 'application/json', 'INVALID_REQUEST']);
      expect(body.error.message).toMatch(cases[index]![1]);
    }
  });
});

describe('inspect on a damaged log', () => {
  it('shows every readable event, and each damaged row as unreadable with its seq and why', async () => {
    const path = files.file();
    const host = await createHost({ providers: false, persistence: { sqlite: path } });
    let id: string;
    try {
      const root = await host.createAgent();
      root.followup([text('first')]);
      await root.whenIdle();
      root.followup([text('second')]);
      await root.whenIdle();
      id = root.id;
    } finally {
      await host.close();
    }
    const file = new Database(path);
    const seqs = file.prepare("SELECT seq FROM events WHERE session_id = ? AND type = 'user/message' ORDER BY seq").pluck().all(id) as number[];
    file.prepare('UPDATE events SET data = ? WHERE session_id = ? AND seq = ?').run('{damaged', id, seqs[0]);
    file.prepare("UPDATE events SET type = '' WHERE session_id = ? AND seq = ?").run(id, seqs[1]);
    file.close();
    const other = await startInspect(path);
    try {
      const { entries } = await transcript(other.url, id);
      const unreadable = entries.filter((entry) => entry.kind === 'unreadable');
      expect(unreadable.map(({ seq, title, isError }) => ({ seq, title, isError }))).toEqual(
        seqs.map((seq) => ({ seq, title: `event ${seq} is unreadable`, isError: true })),
      );
      expect(unreadable[0]!.text).toContain(`event ${seqs[0]} holds data that is not valid JSON`);
      expect(unreadable[1]!.text).toContain(`event ${seqs[1]} is invalid`);
      // Both turns are still there, around the rows that cannot be read.
      expect(entries.filter((entry) => entry.kind === 'turn-end')).toHaveLength(2);
      expect(entries.filter((entry) => entry.kind === 'assistant')).toHaveLength(2);
      const full = await rawGet(other.url, `/api/sessions/${encodeURIComponent(id)}/events/${seqs[0]}`);
      expect([full.status, (JSON.parse(full.body) as { error: { code: string } }).error.code]).toEqual([500, 'CORRUPT_DATA']);
    } finally {
      expect(await other.stop()).toBe(0);
    }
  });
});

describe('inspect on a file a host is creating', () => {
  it('reads an empty file as no sessions yet, and shows its sessions once a host has written them', async () => {
    const path = files.file();
    writeFileSync(path, '');
    const other = await startInspect(path);
    try {
      expect(JSON.parse((await rawGet(other.url, '/api/roots')).body)).toEqual([]);
      expect((await rawGet(other.url, '/api/sessions/nope')).status).toBe(404);
      expect((await rawGet(other.url, '/api/roots/nope/tree')).status).toBe(404);
      // A page listening is told once the file holds a database.
      const changed = new Promise<string>((resolve, reject) => {
        const req = http.get(`${other.url}api/changes`, (res) => {
          let seen = '';
          res.setEncoding('utf8');
          res.on('data', (chunk: string) => {
            seen += chunk;
            if (seen.includes('event: change')) {
              req.destroy();
              resolve(seen);
            }
          });
        });
        req.on('error', reject);
      });
      const host = await createHost({ providers: false, persistence: { sqlite: path } });
      let id: string;
      try {
        const root = await host.createAgent();
        root.followup([text('written after inspect started')]);
        await root.whenIdle();
        id = root.id;
      } finally {
        await host.close();
      }
      expect(await changed).not.toContain('event: gone');
      const roots = JSON.parse((await rawGet(other.url, '/api/roots')).body) as { id: string; title?: string }[];
      expect(roots).toEqual([expect.objectContaining({ id, title: 'written after inspect started' })]);
    } finally {
      expect(await other.stop()).toBe(0);
    }
  });
});
