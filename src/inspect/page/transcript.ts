// A child's transcript: messages, tool calls and results, reports, notices and turn ends, appended
// as the log grows. Long bodies are folded behind a summary that shows their first line; a body the
// server cut says how much it left out and links to the whole of it.
import type { TranscriptEntry, TranscriptResponse } from '../api-types.js';
import { duration, el, visible } from './dom.js';

const FOLD_CHARS = 600;
const FOLD_LINES = 12;
const PREVIEW_CHARS = 160;

function body(text: string): HTMLElement {
  const lines = text.split('\n').length;
  if (text.length <= FOLD_CHARS && lines <= FOLD_LINES) return el('pre', { text });
  const first = text.slice(0, PREVIEW_CHARS).split('\n')[0] ?? '';
  return el(
    'details',
    {},
    el('summary', { text: `${first}${first.length < text.length ? '…' : ''} (${text.length} characters, ${lines} lines)` }),
    el('pre', { text }),
  );
}

/** How much of an entry's text the server left out, and a link to the whole of it (a seed's spans many events: none). */
function cutNote(entry: TranscriptEntry, omitted: number, session: string): HTMLElement {
  const note = el('p', { className: 'cut', text: `… ${omitted.toLocaleString('en')} more characters not shown` });
  if (entry.kind !== 'seed') {
    const link = el('a', { text: 'open the full text' });
    link.href = `/api/sessions/${encodeURIComponent(session)}/events/${entry.seq}`;
    link.target = '_blank';
    link.rel = 'noopener';
    note.append(' · ', link);
  }
  return note;
}

function entryElement(entry: TranscriptEntry, session: string, createdAt: number): HTMLElement {
  // A title names ids (a message's sender) and the model's words (a tool's name): shown as ids and labels are.
  const title = el('div', { className: 'title' }, visible(entry.title), el('span', { className: 'time', text: `+${duration(Math.max(0, entry.time - createdAt))}` }));
  const box = el('div', { className: `entry ${entry.kind}${entry.isError === true ? ' error' : ''}`, data: { seq: String(entry.seq), kind: entry.kind } }, title);
  if (entry.text !== undefined && entry.text !== '') box.append(body(entry.text));
  if (entry.omitted !== undefined) box.append(cutNote(entry, entry.omitted, session));
  return box;
}

/** What is on screen: whose transcript, the last event read, and whether the log has more. */
export interface TranscriptView {
  id: string;
  shown: number;
  /** The `through` of the last answer shown: the next one asks `?after=` it. */
  through: number | undefined;
  /** The server left entries out at its limit: they load on a click, not as the log changes. */
  more: boolean;
}

function usageText(response: TranscriptResponse): string {
  return response.usage === undefined ? '' : ` · ${response.usage.inputTokens} in / ${response.usage.outputTokens} out tokens`;
}

/**
 * Shows `response` in `container`: the first answer of a session, or the next one of `view` (the
 * entries of events after those shown, so folds the reader opened stay open). A button at the end
 * loads more when the server left entries out. Returns the new view.
 */
export function renderTranscript(
  container: HTMLElement,
  response: TranscriptResponse,
  heading: string,
  view: TranscriptView | undefined,
  onMore: () => void,
): TranscriptView {
  if (view === undefined || view.id !== response.id) {
    container.replaceChildren(
      el('p', { className: 'muted' }, el('strong', { text: heading }), ' ', el('span', { className: 'mono', text: visible(response.id) }), el('span', { className: 'usage', text: usageText(response) })),
    );
    view = { id: response.id, shown: 0, through: undefined, more: false };
  }
  const usage = container.querySelector('.usage');
  if (usage !== null) usage.textContent = usageText(response);
  container.querySelector('.more')?.remove();
  if (response.entries.length > 0) container.querySelector('.empty')?.remove();
  for (const entry of response.entries) container.append(entryElement(entry, response.id, response.createdAt));
  const shown = view.shown + response.entries.length;
  if (shown === 0 && container.querySelector('.empty') === null) container.append(el('p', { className: 'muted empty', text: 'No events yet.' }));
  if (response.more === true) {
    const button = el('button', { className: 'more', text: `Showing ${shown.toLocaleString('en')} entries; the log has more: load more` });
    button.addEventListener('click', () => {
      button.disabled = true;
      onMore();
    });
    container.append(button);
  }
  return { id: response.id, shown, through: response.through ?? view.through, more: response.more === true };
}
