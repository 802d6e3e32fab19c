// Batched append throughput of sqlitePersistence on a temp file, next to its floor: the same rows
// inserted with raw better-sqlite3 in transactions of the same size. Run after `npm run build`:
//   node bench/sqlite-append.js [events-per-append=100] [appends-per-flush=10] [total=100000]
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { sqlitePersistence } from '../dist/src/index.js';

const [perAppend = 100, perFlush = 10, total = 100_000] = process.argv.slice(2).map(Number);
const perCommit = perAppend * perFlush;
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sqlite-append-bench-'));

const chunk = (seq) => ({
  seq,
  time: Date.now(),
  type: 'assistant/chunk',
  data: { turn: 1, step: 0, chunk: { type: 'text-delta', text: `token ${seq} of a streamed answer` } },
});

async function ours() {
  const store = sqlitePersistence(path.join(dir, 'ours.db'));
  await store.create({ id: 's', createdAt: Date.now() });
  const start = performance.now();
  for (let seq = 0; seq < total; ) {
    const appended = [];
    for (let i = 0; i < perFlush && seq < total; i += 1) {
      const batch = Array.from({ length: Math.min(perAppend, total - seq) }, (_, k) => chunk(seq + k));
      seq += batch.length;
      appended.push(store.append('s', batch));
    }
    await store.flush();
    await Promise.all(appended);
  }
  const seconds = (performance.now() - start) / 1000;
  await store.close();
  return total / seconds;
}

function floor() {
  const db = new Database(path.join(dir, 'floor.db'));
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = FULL');
  db.exec('CREATE TABLE events (session_id TEXT, seq INTEGER, type TEXT, time REAL, data TEXT, PRIMARY KEY (session_id, seq)) STRICT');
  const insert = db.prepare('INSERT INTO events VALUES (?, ?, ?, ?, ?)');
  const commit = db.transaction((events) => {
    for (const e of events) insert.run('s', e.seq, e.type, e.time, JSON.stringify(e.data));
  });
  const start = performance.now();
  for (let seq = 0; seq < total; seq += perCommit) {
    commit.immediate(Array.from({ length: Math.min(perCommit, total - seq) }, (_, k) => chunk(seq + k)));
  }
  const seconds = (performance.now() - start) / 1000;
  db.close();
  return total / seconds;
}

try {
  const oursRate = await ours();
  const floorRate = floor();
  const fmt = (rate) => Math.round(rate).toLocaleString('en-US');
  console.log(`batch: ${perAppend} events/append, ${perCommit} events/commit, ${total} events`);
  console.log(`sqlitePersistence: ${fmt(oursRate)} events/s`);
  console.log(`raw better-sqlite3 floor: ${fmt(floorRate)} events/s (ours = ${(oursRate / floorRate).toFixed(2)}x)`);
} finally {
  fs.rmSync(dir, { recursive: true, force: true });
}
