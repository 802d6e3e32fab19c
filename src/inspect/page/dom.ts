// The page's only way to build elements: every string becomes a text node or an attribute value,
// never markup, so session text cannot turn into HTML. Ids and labels are shown as `ls` shows them:
// a control character escaped, so a bidirectional override cannot show the text around it reversed.
import { visible } from '../../seam/visible.js';

export { visible };

interface Props {
  className?: string;
  /** Set as `textContent`. */
  text?: string;
  /** Tooltip. */
  title?: string;
  /** `data-*` attributes. */
  data?: Record<string, string>;
}

/** A new element with text and attributes set through the DOM, and `children` appended. */
export function el<K extends keyof HTMLElementTagNameMap>(tag: K, props: Props = {}, ...children: (Node | string)[]): HTMLElementTagNameMap[K] {
  const element = document.createElement(tag);
  if (props.className !== undefined) element.className = props.className;
  if (props.text !== undefined) element.textContent = props.text;
  if (props.title !== undefined) element.title = props.title;
  for (const [key, value] of Object.entries(props.data ?? {})) element.dataset[key] = value;
  for (const child of children) element.append(typeof child === 'string' ? document.createTextNode(child) : child);
  return element;
}

/** The element with this id, which the page shell guarantees. */
export function byId(id: string): HTMLElement {
  const element = document.getElementById(id);
  if (element === null) throw new Error(`the page has no #${id}`);
  return element;
}

/** Milliseconds as a short duration: 840 ms, 12.3 s, 4 min 05 s. */
export function duration(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(ms < 10_000 ? 2 : 1)} s`;
  const minutes = Math.floor(ms / 60_000);
  return `${minutes} min ${String(Math.round((ms % 60_000) / 1000)).padStart(2, '0')} s`;
}

/** The colour class of a child: its stop reason, or running. */
export function reasonClass(activity: string, stopReason: string | undefined): string {
  if (activity === 'running') return 'reason-running';
  if (stopReason === 'completed' || stopReason === 'aborted' || stopReason === 'interrupted' || stopReason === 'error') return `reason-${stopReason}`;
  return 'reason-other';
}

/** A short form of a session id for narrow columns (the full id is in the tooltip), shown as `visible` shows it. */
export function shortId(id: string): string {
  return visible(id.length > 8 ? id.slice(0, 8) : id);
}
