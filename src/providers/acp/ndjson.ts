// The ACP wire over a pair of Node streams: newline-delimited JSON, one message per line, as the
// SDK's ndJsonStream, without its web-stream adapters and per-message writers; the messages of a
// burst (a turn's updates and its answer) leave in one write.
import type * as acp from '@agentclientprotocol/sdk';
import type { Readable, Writable } from 'node:stream';
import { LineWriter, type Batching } from './line-writer.js';

type AnyMessage = acp.AnyMessage;
/** What the wire takes from the (lazily loaded) SDK: its error vocabulary. */
type WireSdk = Pick<typeof acp, 'RequestError' | 'MessageTooLargeError'>;

export type { Batching } from './line-writer.js';

/** The SDK's default bound on one incoming line (its `DEFAULT_MAX_MESSAGE_BYTES`), which this wire keeps too. */
export const MAX_MESSAGE_BYTES = 32 * 1024 * 1024;
const NEWLINE = 0x0a;

/** The queue bound of the message stream the SDK reads: the queue is empty when `desiredSize` equals it. */
const QUEUE_BOUND = 64;

/**
 * How many answers the SDK may owe (see `owesAnswer`) before reading waits while the peer reads
 * none: it reads every message at once and queues each answer, so a peer that writes requests
 * and reads nothing would otherwise grow that queue without end. Far above what a peer has open.
 */
const OWED_BOUND = 1024;

/**
 * How long the end of a peer's input waits for answers the SDK still owes while the peer reads none of
 * the output they queue behind (each drain starts the wait again): one reading slowly gets them all.
 */
const STALL_MS = 2000;

/**
 * Whether the SDK answers `message` once: a request, or what it refuses (-32600); not a
 * notification, nor a response (or what looks like one: it drops it).
 */
function owesAnswer(message: object): boolean {
  const { jsonrpc, method } = message as { jsonrpc?: unknown; method?: unknown };
  if ('method' in message) return jsonrpc !== '2.0' || typeof method !== 'string' || 'id' in message;
  return !('id' in message || 'result' in message || 'error' in message);
}

/**
 * Takes a parsed message before the SDK sees it; returns true when it handled the message itself.
 * Asked only while the SDK has nothing it was handed and has not handled: its queue is empty, and
 * no earlier message of the same read went to it (a message handed to a read the SDK was waiting
 * in never shows in the queue, and is handled only after this read). So a message it takes never
 * overtakes one before it. Between reads the SDK handles what it was handed (microtasks).
 */
export type Intercept = (message: object) => boolean;

/**
 * `arrived` sees every parsed message, synchronously and in the order it arrived, before the SDK
 * does: the SDK tries each message on its handlers one after another, awaiting each, so a message
 * for a later-registered handler is handled after one that arrived after it. It returns true when
 * it spent the message, which the SDK then never sees. `sent` sees every message the SDK writes,
 * as it writes it: a response ends its request, whether a handler answered it or the SDK refused
 * it before any handler saw it (bad params). `inputEnded`, when given, is told that the peer's
 * input ended: the message stream ends (and the connection with it) once what it returns settles,
 * so the requests that arrived before the end may still be answered.
 */
export interface Observe {
  arrived(message: object): boolean | void;
  sent(message: AnyMessage): void;
  inputEnded?(): Promise<void>;
  /**
   * True for a request whose answer the messages after it wait for: they are read (and seen by
   * `arrived`) only once it is written. The SDK refuses every request but `initialize` until it
   * answered one, so a client that sends its first requests without waiting for that answer
   * would otherwise have them refused. Asked until one such request was answered with a result:
   * after that none holds anything back (its answer may wait behind output the peer does not
   * read, and a cancel sent after it must not).
   */
  answerFirst?(message: object): boolean;
}

/**
 * Splits incoming bytes into lines and parses each; malformed lines are answered like the SDK does.
 * `waitForOutput` is true when the peer is not reading (then `onResume`'s wake comes once it drained).
 */
function lineReader(
  input: Readable,
  sdk: WireSdk,
  reply: (message: AnyMessage) => void,
  waitForOutput: () => boolean,
  intercept?: Intercept,
  observe?: Observe,
  onResume?: (wake: () => void) => void,
  onAnswer?: (answered: (message: AnyMessage) => void) => void,
  /** Resolves at the output's next drain: the peer read output that was backed up. */
  outputDrained?: () => Promise<void>,
): ReadableStream<AnyMessage> {
  const errors = sdk.RequestError;
  // Thrown into the connection (which then closes), as the SDK's own stream does.
  const tooLarge = () => new sdk.MessageTooLargeError(MAX_MESSAGE_BYTES);
  let pending: Buffer[] = [];
  let pendingBytes = 0;
  /**
   * Some message went to the SDK since the last turn of the event loop: later ones follow it there
   * until the SDK has handled it (by the next `setImmediate`: its handling runs on microtasks). Not
   * tied to reads: a stream that resumes emits its buffered chunks one after another in one tick.
   */
  let handedOver = false;
  const handOver = () => {
    if (handedOver) return;
    handedOver = true;
    setImmediate(() => (handedOver = false));
  };
  /** The stream failed or was cancelled (the connection closed): the rest of a chunk is dropped. */
  let stopped = false;
  let detach = () => undefined as void;
  /**
   * A reply to a malformed line, or the answers the SDK owes (past OWED_BOUND), wait for the peer to
   * read: reading stops meanwhile, as in the SDK's stream for a malformed line.
   */
  let replying = false;
  /** Answers the SDK owes for the messages it was handed: each response it writes pays one. */
  let owed = 0;
  /** Told once `owed` is back to 0. */
  let paidUp: (() => void) | undefined;
  /** Resolves once the SDK owes no answer, or the peer read none of the output for STALL_MS (it may read nothing). */
  const answersWritten = async (): Promise<void> => {
    while (owed > 0 && !stopped) {
      let timer: NodeJS.Timeout | undefined;
      const paid = new Promise<void>((resolve) => (paidUp = resolve));
      const stalled = new Promise<'stalled'>((resolve) => (timer = setTimeout(() => resolve('stalled'), STALL_MS)));
      const drained = outputDrained?.().then(() => 'drained' as const, () => 'stalled' as const);
      const outcome = await Promise.race([paid, stalled, ...(drained ? [drained] : [])]);
      clearTimeout(timer);
      if (outcome === 'stalled') return;
    }
  };
  let queue: ReadableStreamDefaultController<AnyMessage> | undefined;
  /** The id of a request (see `Observe.answerFirst`) not answered yet: the messages after it wait in `held`. */
  let awaited: { id: unknown } | undefined;
  const held: object[] = [];
  /** A request `answerFirst` named was answered with a result: it is asked no more. */
  let answeredFirst = false;
  /** The input ended while messages were held: the stream ends once they went to the SDK. */
  let endHeld: (() => void) | undefined;
  /** Reading goes on unless a reply, an answer or the SDK's full queue (whose next pull resumes it) holds it. */
  const resumeReading = () => {
    if (!replying && awaited === undefined && (queue?.desiredSize ?? 1) > 0) input.resume();
  };
  onResume?.(() => {
    if (!replying) return;
    replying = false;
    resumeReading();
  });
  const holdForOutput = () => {
    if (replying || !waitForOutput()) return;
    replying = true;
    input.pause();
  };
  const answer = (message: AnyMessage) => {
    reply(message);
    holdForOutput();
  };
  const take = (controller: ReadableStreamDefaultController<AnyMessage>, message: object) => {
    if (observe?.arrived(message) === true) return;
    if (intercept !== undefined && !handedOver && controller.desiredSize === QUEUE_BOUND && intercept(message)) return;
    // Either may close the connection, which cancels this stream: it takes no more messages.
    if (stopped) return;
    handOver();
    controller.enqueue(message as AnyMessage);
    if (owesAnswer(message) && ++owed >= OWED_BOUND) holdForOutput();
    if (!answeredFirst && observe?.answerFirst?.(message) === true) awaited = { id: (message as { id?: unknown }).id };
  };
  onAnswer?.((message) => {
    if (!('method' in message) && 'id' in message) owed = Math.max(0, owed - 1);
    if (owed === 0) paidUp?.();
    if (awaited === undefined || 'method' in message || !('id' in message) || message.id !== awaited.id) return;
    awaited = undefined;
    if ('result' in message) answeredFirst = true;
    // The SDK has recorded the answer before writing it: the held messages go to it in order, up to the next that waits.
    while (queue !== undefined && awaited === undefined && !stopped && held.length > 0) take(queue, held.shift()!);
    if (awaited !== undefined) return;
    if (endHeld !== undefined) endHeld();
    else if (input.isPaused()) resumeReading();
  });
  const parse = (controller: ReadableStreamDefaultController<AnyMessage>, text: string) => {
    const line = text.trim();
    if (line === '') return;
    let message: unknown;
    try {
      message = JSON.parse(line);
    } catch {
      answer({ jsonrpc: '2.0', id: null, error: errors.parseError().toErrorResponse() });
      return;
    }
    if (Array.isArray(message)) answer({ jsonrpc: '2.0', id: null, error: errors.invalidRequest(undefined, 'JSON-RPC batches are not supported').toErrorResponse() });
    else if (message !== null && typeof message === 'object') {
      if (awaited) held.push(message);
      else take(controller, message);
    }
    else answer({ jsonrpc: '2.0', id: null, error: errors.invalidRequest(message).toErrorResponse() });
  };
  return new ReadableStream<AnyMessage>(
    {
      start(controller) {
        queue = controller;
        const onData = (chunk: Buffer) => {
          let start = 0;
          let end = chunk.indexOf(NEWLINE);
          while (end !== -1) {
            if (pendingBytes + end - start > MAX_MESSAGE_BYTES) return fail(tooLarge());
            // Line ends are single bytes, so a line's UTF-8 is never split by cutting here.
            const text = pending.length === 0 ? chunk.toString('utf8', start, end) : Buffer.concat([...pending, chunk.subarray(start, end)]).toString('utf8');
            pending = [];
            pendingBytes = 0;
            parse(controller, text);
            if (stopped) return;
            start = end + 1;
            end = chunk.indexOf(NEWLINE, start);
          }
          if (start < chunk.length) {
            pendingBytes += chunk.length - start;
            if (pendingBytes > MAX_MESSAGE_BYTES) return fail(tooLarge());
            pending.push(chunk.subarray(start));
          }
          if ((controller.desiredSize ?? 1) <= 0 || awaited !== undefined) input.pause();
        };
        const onEnd = () => {
          detach();
          if (pendingBytes > 0) parse(controller, Buffer.concat(pending).toString('utf8'));
          pending = [];
          endHeld = () => {
            endHeld = undefined;
            const close = () => void (stopped || controller.close());
            const answering = observe?.inputEnded?.();
            // The handlers done, the SDK may still owe answers queued behind output the peer reads slowly.
            if (answering) void answering.then(answersWritten, answersWritten).then(close, close);
            else close();
          };
          if (awaited === undefined) endHeld();
        };
        const fail = (error: unknown) => {
          stopped = true;
          detach();
          pending = [];
          controller.error(error);
          input.destroy();
        };
        detach = () => {
          input.off('data', onData).off('end', onEnd).off('error', fail);
        };
        input.on('data', onData).once('end', onEnd).once('error', fail);
      },
      pull() {
        if (input.isPaused() && !replying && awaited === undefined) input.resume();
      },
      cancel() {
        stopped = true;
        held.length = 0;
        detach();
        pending = [];
        input.destroy();
      },
    },
    { highWaterMark: QUEUE_BOUND },
  );
}

/**
 * The writable side the SDK sees. The SDK takes a writer for each message and releases it after
 * the write; a web stream's writer builds an Error and a rejected promise on every release, so this
 * side hands out light writers instead, with the same outcomes: writes in order through the line
 * writer, one writer at a time, and no writes once closed or aborted (the Node stream is left as is).
 */
function messageWritable(writer: LineWriter, sent: (message: AnyMessage) => void): WritableStream<AnyMessage> {
  let holder: object | undefined;
  let closed = false;
  const refuse = () => Promise.reject(new TypeError('the ACP message stream is closed'));
  return {
    get locked() {
      return holder !== undefined;
    },
    getWriter() {
      if (holder !== undefined) throw new TypeError('the ACP message stream is locked to a writer');
      const lease = {
        write: (message: AnyMessage) => {
          // Seen even once closed: a handler that finished has answered, whether or not it is sent.
          sent(message);
          return closed ? refuse() : writer.write(message);
        },
        close: () => (closed ? refuse() : ((closed = true), Promise.resolve())),
        abort: () => ((closed = true), Promise.resolve()),
        releaseLock: () => void (holder === lease && (holder = undefined)),
      };
      holder = lease;
      return lease;
    },
  } as unknown as WritableStream<AnyMessage>;
}

/**
 * An ACP stream over `input` (what the peer writes) and `output` (where this side writes);
 * `intercept` may take incoming messages before the SDK (see {@link Intercept}).
 */
export function ndJsonNodeStream(
  sdk: WireSdk,
  output: Writable,
  input: Readable,
  batching: Batching,
  intercept?: Intercept,
  observe?: Observe,
): acp.Stream {
  const writer = new LineWriter(output, batching);
  let resume: (() => void) | undefined;
  const reply = (message: AnyMessage) => void writer.write(message).catch(() => undefined);
  // False when the peer reads (or the output is gone); true when reading should wait for `resume`.
  const waitForOutput = (): boolean => {
    if (!writer.backedUp) return false;
    void writer.drained().then(() => resume?.(), () => resume?.());
    return true;
  };
  let answered: ((message: AnyMessage) => void) | undefined;
  const drained = () => writer.nextDrain();
  const readable = lineReader(input, sdk, reply, waitForOutput, intercept, observe, (wake) => (resume = wake), (release) => (answered = release), drained);
  const sent = (message: AnyMessage) => {
    observe?.sent(message);
    answered?.(message);
  };
  return { readable, writable: messageWritable(writer, sent) };
}
