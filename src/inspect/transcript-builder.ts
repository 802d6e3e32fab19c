// A transcript response built one stored row at a time. A row that does not decode becomes an
// `unreadable` entry (the rest of the log is still shown), and texts are cut to a cap per text and a
// budget per response, so neither the answer nor the memory that builds it grows with the log's text.
import { decodeEvent } from '../persistence/sqlite-schema.js';
import { describeError } from '../seam/errors.js';
import type { SessionEvent } from '../seam/session-types.js';
import type { TranscriptEntry } from './api-types.js';
import { entryOf } from './transcript.js';

/** Characters of one entry's text sent at most; the rest is at `GET /api/sessions/:id/events/:seq`. */
const TEXT_CAP = 64 * 1024;
/** Characters of text one response sends in all (once spent, each entry keeps only a preview). */
const RESPONSE_BUDGET = 2 * 1024 * 1024;
/** Characters every entry's text keeps, the budget spent or not, so each still shows how it starts. */
const PREVIEW_CHARS = 256;
/** Characters of a title (a tool name or an error message the model or a tool chose). */
const TITLE_CAP = 500;
/**
 * Rows one response reads at most: rows the transcript leaves out (stream chunks, step marks) add
 * no entry, and the server answers no one else while it reads.
 */
const TRANSCRIPT_ROWS = 100_000;

/** One `events` row as SQLite returns it (a STRICT table: seq is an integer, time a number). */
export interface EventRow {
  seq: number;
  type: string;
  time: number;
  data: string;
}

/**
 * `text` cut to at most `limit` characters, never between the halves of a surrogate pair. The cut is
 * a copy: V8's `slice` would keep the whole text alive behind the part kept.
 */
function cut(text: string, limit: number): string {
  if (text.length <= limit) return text;
  const last = text.charCodeAt(limit - 1);
  return JSON.parse(JSON.stringify(text.slice(0, last >= 0xd800 && last <= 0xdbff ? limit - 1 : limit))) as string;
}

/** The fork seed's entry while its rows arrive: the characters it may keep, and the length its whole text has. */
interface Seed {
  entry: TranscriptEntry & { text: string };
  limit: number;
  length: number;
}

/** Collects a log's entries from its rows, in seq order. */
export class TranscriptBuilder {
  readonly #id: string;
  readonly #seedLength: number;
  readonly #entries: TranscriptEntry[] = [];
  #budget = RESPONSE_BUDGET;
  #rows = 0;
  #time: number;
  #seed: Seed | undefined;

  constructor(id: string, createdAt: number, seedLength: number) {
    this.#id = id;
    this.#time = createdAt;
    this.#seedLength = seedLength;
  }

  /** Adds the next row of the log (in seq order). */
  add(row: EventRow): void {
    const index = this.#rows++;
    if (index < this.#seedLength) this.#seed ??= this.#openSeed(row.time);
    let event: SessionEvent;
    try {
      event = decodeEvent(this.#id, row);
    } catch (error) {
      const time = Number.isFinite(row.time) ? row.time : this.#time;
      this.#push({ seq: row.seq, time, kind: 'unreadable', title: `event ${row.seq} is unreadable`, text: describeError(error), isError: true });
      return;
    }
    this.#time = event.time;
    if (index < this.#seedLength) this.#addToSeed(event);
    else {
      const entry = entryOf(event);
      if (entry !== undefined) this.#push(entry);
    }
  }

  /**
   * Whether the next row would add a `limit + 1`th entry or be read past {@link TRANSCRIPT_ROWS}
   * (rows of a fork's seed add to its one entry, which is never cut short).
   */
  full(limit: number): boolean {
    return (this.#entries.length >= limit || this.#rows >= TRANSCRIPT_ROWS) && this.#rows >= this.#seedLength;
  }

  /** The entries of the rows added. */
  finish(): TranscriptEntry[] {
    const seed = this.#seed;
    if (seed !== undefined) {
      seed.entry.title = `${Math.min(this.#seedLength, this.#rows)} events inherited from the parent (fork seed)`;
      if (seed.length > seed.entry.text.length) seed.entry.omitted = seed.length - seed.entry.text.length;
    }
    return this.#entries;
  }

  /** The characters the next text may keep. */
  #allowance(): number {
    return Math.min(TEXT_CAP, Math.max(this.#budget, PREVIEW_CHARS));
  }

  #push(entry: TranscriptEntry): void {
    if (entry.title.length > TITLE_CAP) entry.title = `${cut(entry.title, TITLE_CAP)}…`;
    if (entry.text !== undefined) {
      const kept = cut(entry.text, this.#allowance());
      this.#budget -= kept.length;
      if (kept.length < entry.text.length) entry.omitted = entry.text.length - kept.length;
      entry.text = kept;
    }
    this.#entries.push(entry);
  }

  /** The seed's entry, first of the transcript; its text grows as its rows arrive. */
  #openSeed(time: number): Seed {
    const entry = { seq: 0, time: Number.isFinite(time) ? time : this.#time, kind: 'seed' as const, title: '', text: '' };
    this.#entries.push(entry);
    return { entry, limit: this.#allowance(), length: 0 };
  }

  #addToSeed(event: SessionEvent): void {
    const seed = this.#seed!;
    const entry = entryOf(event);
    if (entry === undefined) return;
    const part = `${seed.length === 0 ? '' : '\n\n'}[${entry.title}]${entry.text === undefined ? '' : `\n${entry.text}`}`;
    seed.length += part.length;
    const kept = cut(part, seed.limit - seed.entry.text.length);
    this.#budget -= kept.length;
    seed.entry.text += kept;
  }
}
