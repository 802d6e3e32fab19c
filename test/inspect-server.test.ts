// The inspect server as a user starts it: read-only over a real database, 404 JSON for unknown ids,
// nothing served but its own assets and JSON, and a clear failure for a missing database.
import { execFile } from 'node:child_process';
import { existsSync, rmSync } from 'node:fs';
import http from 'node:http';
import { connect } from 'node:net';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHost, sqlitePersistence, text } from 'subagent-host';
import { tempFiles } from './helpers.js';
import { cli, rawGet, startInspect, storedParentWithChild, type InspectProcess } from './inspect-helpers.js';

const files = tempFiles('inspect-server-');
const db = files.file();
let server: InspectProcess;
let childId: string;

beforeAll(async () => {
  ({ childId } = await storedParentWithChild(db, 'one'));
  server = await startInspect(db);
});

afterAll(async () => {
  await server?.stop();
});

/** Writes one root session, whose first message is `title`, to the database at `path`. */
async function writeRootAt(path: string, title: string): Promise<void> {
  const host = await createHost({ providers: false, persistence: { sqlite: path } });
  try {
    const agent = await host.createAgent();
    agent.followup([text(title)]);
    await agent.whenIdle();
  } finally {
    await host.close();
  }
}

describe('subagent-host inspect server', () => {
  it('serves its page, its script, its stylesheet and the roots', async () => {
    const answers = await Promise.all(['/', '/page.js', '/page.css', '/api/roots'].map((path) => rawGet(server.url, path)));
    expect(answers.map((answer) => [answer.status, answer.type.split(';')[0]])).toEqual([
      [200, 'text/html'],
      [200, 'text/javascript'],
      [200, 'text/css'],
      [200, 'application/json'],
    ]);
  });

  it('answers a known child with its transcript', async () => {
    const answer = await rawGet(server.url, `/api/sessions/${encodeURIComponent(childId)}`);
    expect(answer.status).toBe(200);
    const body = JSON.parse(answer.body) as { id: string; entries: { kind: string }[] };
    expect(body.id).toBe(childId);
    expect(body.entries.map((entry) => entry.kind)).toContain('turn-end');
  });

  it('answers unknown or malformed ids with 404 JSON', async () => {
    const paths = ['/api/sessions/nope', '/api/roots/nope/tree', '/api/sessions/%E0%A4%A', '/api/roots/%/tree'];
    const answers = await Promise.all(paths.map((path) => rawGet(server.url, path)));
    for (const answer of answers) {
      expect(answer.status).toBe(404);
      expect(answer.type).toMatch(/^application\/json/);
      expect((JSON.parse(answer.body) as { error: { code: string } }).error.code).toBe('UNKNOWN_SESSION');
    }
  });

  it('refuses every path outside its assets, encoded traversal included', async () => {
    const paths = [
      '/../package.json',
      '/%2e%2e/package.json',
      '/..%2fpackage.json',
      '/%2e%2e%2f%2e%2e%2f%2e%2e%2fetc%2fpasswd',
      '/%252e%252e%252fpackage.json',
      '/page.js/../../package.json',
      '/page.js%2f..%2f..%2fpackage.json',
      '//etc/passwd',
      '/dist/src/cli.js',
      '/src/inspect/server.ts',
      '/inspect/page.js',
      '/api/../../package.json',
      '/api/sessions/..%2f..%2fpackage.json',
      '/api/roots/..%2f..%2f..%2fetc%2fpasswd/tree',
      '/api/sessions/../../../etc/passwd',
      'http://127.0.0.1/../package.json',
    ];
    const answers = await Promise.all(paths.map((path) => rawGet(server.url, path)));
    for (const [index, answer] of answers.entries()) {
      expect([paths[index], answer.status, answer.type.split(';')[0]]).toEqual([paths[index], 404, 'application/json']);
      expect(answer.body).not.toMatch(/"subagent-host"|root:x:0|import /);
    }
  });

  it('is read-only: other methods are refused', async () => {
    const answer = await rawGet(server.url, '/api/roots', { method: 'POST' });
    expect(answer.status).toBe(405);
  });

  it('answers HEAD with the headers of GET and no body', async () => {
    const [head, get] = await Promise.all([rawGet(server.url, '/api/roots', { method: 'HEAD' }), rawGet(server.url, '/api/roots')]);
    expect([head.status, head.type, head.body]).toEqual([200, get.type, '']);
    expect(head.length).toBe(String(Buffer.byteLength(get.body)));
  });

  it('answers HEAD of the change stream with its headers, and ends the answer', async () => {
    const head = await rawGet(server.url, '/api/changes', { method: 'HEAD' });
    expect([head.status, head.type, head.body]).toEqual([200, 'text/event-stream', '']);
  });

  it('refuses a request naming another host (DNS rebinding), or naming none', async () => {
    // A name that only starts like a loopback name is another site's.
    for (const host of ['attacker.example:80', 'localhost.attacker.example', '127.0.0.1.attacker.example:80']) {
      expect([host, (await rawGet(server.url, '/api/roots', { headers: { host } })).status]).toEqual([host, 403]);
    }
    // HTTP/1.0 lets a client leave Host out.
    const { hostname, port } = new URL(server.url);
    const socket = connect(Number(port), hostname);
    socket.end('GET /api/roots HTTP/1.0\r\n\r\n');
    let raw = '';
    for await (const chunk of socket) raw += String(chunk);
    expect(raw).toMatch(/^HTTP\/1\.1 403 /);
  });

  it('answers a loopback name in any letter case (host names are case-insensitive)', async () => {
    const { port } = new URL(server.url);
    for (const name of [`LOCALHOST:${port}`, `LocalHost:${port}`, `[::FFFF:127.0.0.1]:${port}`]) {
      expect([name, (await rawGet(server.url, '/api/roots', { headers: { host: name } })).status]).toEqual([name, 200]);
    }
  });

  it('ends an open change stream when it is stopped, and exits 0', async () => {
    const other = await startInspect(db);
    const { hostname, port } = new URL(other.url);
    let stopped: Promise<number | null> | undefined;
    const ended = new Promise<string>((resolve, reject) => {
      http.get({ host: hostname, port, path: '/api/changes' }, (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          body += chunk;
          // Stopped once the stream said hello, so it is open when the server closes.
          if (body.includes('event: hello')) stopped ??= other.stop();
        });
        res.on('end', () => resolve(body));
      }).on('error', reject);
    });
    expect(await ended).toMatch(/^retry: 1000\nevent: hello\ndata: \d+\n\n$/);
    expect(await stopped).toBe(0);
  });

  it('stops on SIGHUP (its terminal closed) as on Ctrl-C: exit 0, no -wal or -shm file left beside the database', async () => {
    const path = join(files.dir, 'hangup.db');
    await writeRootAt(path, 'hung up');
    const other = await startInspect(path);
    const exited = new Promise<number | null>((resolve) => other.child.once('exit', (code) => resolve(code)));
    // Opened: the reader's WAL files exist while it serves.
    expect((await rawGet(other.url, '/api/roots')).status).toBe(200);
    other.child.kill('SIGHUP');
    expect(await exited).toBe(0);
    expect([existsSync(`${path}-wal`), existsSync(`${path}-shm`)]).toEqual([false, false]);
  });

  it('follows a database deleted and written again at its path: says it is gone, then serves the new one', async () => {
    const path = join(files.dir, 'rewritten.db');
    const writeRoot = (title: string) => writeRootAt(path, title);
    await writeRoot('first run');
    const other = await startInspect(path);
    const { hostname, port } = new URL(other.url);
    let body = '';
    const waiters = new Set<() => void>();
    const until = (text: string) => new Promise<void>((resolve) => {
      const check = () => body.includes(text) && (waiters.delete(check), resolve());
      waiters.add(check);
      check();
    });
    const request = http.get({ host: hostname, port, path: '/api/changes' }, (res) => {
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        body += chunk;
        for (const waiter of [...waiters]) waiter();
      });
    });
    try {
      await until('event: hello');
      for (const name of [path, `${path}-wal`, `${path}-shm`]) rmSync(name, { force: true });
      await until('event: gone');
      await writeRoot('second run');
      await until('event: change');
      // The new file may have been read while its first root was being written: later changes show it.
      const titles = async () => (JSON.parse((await rawGet(other.url, '/api/roots')).body) as { title?: string }[]).map((root) => root.title);
      await expect.poll(titles, { timeout: 15_000 }).toStrictEqual(['second run']);
    } finally {
      request.destroy();
      await other.stop();
    }
  });

  it('serves a database replaced at its path to a client that never opened the change stream', async () => {
    const path = join(files.dir, 'replaced.db');
    const writeRoot = (title: string) => writeRootAt(path, title);
    await writeRoot('first run');
    const other = await startInspect(path);
    const titles = async () => (JSON.parse((await rawGet(other.url, '/api/roots')).body) as { title?: string }[]).map((root) => root.title);
    try {
      expect(await titles()).toStrictEqual(['first run']);
      for (const name of [path, `${path}-wal`, `${path}-shm`]) rmSync(name, { force: true });
      await writeRoot('second run');
      expect(await titles()).toStrictEqual(['second run']);
    } finally {
      await other.stop();
    }
  });

  it('answers the tree of a session whose parent links loop back to it (its own parent, or its child\'s child), without hanging', async () => {
    const path = join(files.dir, 'looped.db');
    const store = sqlitePersistence(path);
    // Nothing refuses these links: a session is stored before or after its parent, and may name itself.
    const turn = (id: string) => store.append(id, [
      { seq: 0, time: 10, type: 'turn/start', data: { turn: 1 } },
      { seq: 1, time: 10, type: 'subagent/descriptor', data: { version: 2, mode: 'one-shot', provider: 'spawn', label: id } },
      { seq: 2, time: 11, type: 'turn/end', data: { turn: 1, reason: { kind: 'completed' } } },
    ]);
    await store.create({ id: 'itself', createdAt: 1, parentSession: 'itself', origin: 'subagent' });
    await store.create({ id: 'a', createdAt: 2, parentSession: 'b', origin: 'subagent' });
    await store.create({ id: 'b', createdAt: 3, parentSession: 'a', origin: 'subagent' });
    await Promise.all(['itself', 'a', 'b'].map(turn));
    await store.close();
    const other = await startInspect(path);
    try {
      const labels = async (id: string) => {
        const answer = await rawGet(other.url, `/api/roots/${id}/tree`);
        return [answer.status, (JSON.parse(answer.body) as { nodes: { label?: string }[] }).nodes.map((node) => node.label)];
      };
      expect(await labels('itself')).toEqual([200, []]);
      expect(await labels('a')).toEqual([200, ['b']]);
      expect(await labels('b')).toEqual([200, ['a']]);
    } finally {
      expect(await other.stop()).toBe(0);
    }
  });

  it('keeps the loopback rules on any loopback address: no warning, and only loopback names are answered', async () => {
    for (const address of ['127.0.0.2', '0:0:0:0:0:0:0:1']) {
      const other = await startInspect(db, '--host', address);
      try {
        expect(other.output()).not.toContain('warning');
        const port = new URL(other.url).port;
        const refused = await rawGet(other.url, '/api/roots', { headers: { host: 'attacker.example' } });
        // The refusal names the address this server listens on, not one it does not.
        expect([refused.status, (JSON.parse(refused.body) as { error: { message: string } }).error.message]).toEqual([
          403,
          `only localhost or a loopback address names this server: use ${other.url}`,
        ]);
        for (const name of [`127.0.0.2:${port}`, `[::1]:${port}`, `localhost:${port}`]) {
          expect((await rawGet(other.url, '/api/roots', { headers: { host: name } })).status).toBe(200);
        }
      } finally {
        expect(await other.stop()).toBe(0);
      }
    }
  });

  it('warns when told to listen on an interface other than loopback', async () => {
    const other = await startInspect(db, '--host', '0.0.0.0');
    try {
      expect(other.output()).toMatch(/warning: listening on 0\.0\.0\.0/);
      // Exposed on purpose: a request naming any host is answered.
      const answer = await rawGet(other.url, '/api/roots', { headers: { host: 'inspector.lan:80' } });
      expect(answer.status).toBe(200);
    } finally {
      expect(await other.stop()).toBe(0);
    }
  });

  it('fails with exit code 1 and says so when the database does not exist, creating nothing', async () => {
    const missing = join(files.dir, 'missing.db');
    const failure = await promisify(execFile)(process.execPath, [cli, 'inspect', '--db', missing, '--port', '0']).then(
      () => undefined,
      (error: unknown) => error as { code: number; stderr: string },
    );
    expect(failure?.code).toBe(1);
    expect(failure?.stderr).toContain(`no database at ${missing}`);
    expect(existsSync(missing)).toBe(false);
  });

  it('rejects bad options with exit code 2', async () => {
    const failure = await promisify(execFile)(process.execPath, [cli, 'inspect', '--db', db, '--port', 'eighty']).catch((error: unknown) => error as { code: number });
    expect(failure).toMatchObject({ code: 2 });
  });

  it('rejects an unknown option with exit code 2, naming it, and shows the usage', async () => {
    const failure = await promisify(execFile)(process.execPath, [cli, 'inspect', '--db', db, '--colour']).catch((error: unknown) => error as { code: number; stderr: string });
    expect(failure).toMatchObject({ code: 2 });
    expect(failure?.stderr).toMatch(/^subagent-host inspect: .*'--colour'/);
    expect(failure?.stderr).toContain('--db FILE');
  });

  it('prints the usage on --help and exits 0 without serving', async () => {
    const { stdout } = await promisify(execFile)(process.execPath, [cli, 'inspect', '--help']);
    expect(stdout).toContain('--port N');
    expect(stdout).not.toContain('http://');
  });
});
