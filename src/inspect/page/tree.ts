// The tree of a root's descendants: one row per child, indented by depth, with its mode, activity,
// stop reason, label and (when the log has them) timing and token usage.
import type { ChildNode } from '../api-types.js';
import { duration, el, reasonClass, shortId, visible } from './dom.js';

/** The "time / usage" cell: how long the child took (or has run), and tokens once reported. */
function cost(node: ChildNode, now: number): string {
  const end = node.settledAt ?? (node.activity === 'running' ? now : node.lastEventAt);
  const parts: string[] = [];
  if (end !== undefined) parts.push(duration(Math.max(0, end - node.createdAt)));
  if (node.usage !== undefined) parts.push(`${node.usage.inputTokens} in / ${node.usage.outputTokens} out tokens`);
  return parts.join(' · ');
}

/** Renders `nodes` (pre-order) into `container`; a click on a row calls `onSelect` with its id. */
export function renderTree(
  container: HTMLElement,
  nodes: readonly ChildNode[],
  now: number,
  selected: string | undefined,
  onSelect: (id: string) => void,
): void {
  if (nodes.length === 0) {
    container.replaceChildren(el('p', { className: 'muted', text: 'This session has no children yet.' }));
    return;
  }
  const head = el(
    'div',
    { className: 'row head' },
    el('span', { text: 'child' }),
    el('span', { text: 'mode' }),
    el('span', { text: 'activity' }),
    el('span', { text: 'stop reason' }),
    el('span', { text: 'time · usage' }),
  );
  const rows = nodes.map((node) => {
    const name = el(
      'span',
      { className: 'name', title: visible(node.id) },
      el('span', { className: `dot ${reasonClass(node.activity, node.stopReason)}` }),
      el('span', { className: 'label', text: visible(node.label ?? '(no label)') }),
      ' ',
      el('span', { className: 'mono muted', text: shortId(node.id) }),
    );
    name.style.paddingLeft = `${(node.depth - 1) * 18}px`;
    const row = el(
      'div',
      { className: node.id === selected ? 'row selected' : 'row', data: { childId: node.id } },
      name,
      el('span', { className: 'mode', text: node.mode ?? node.problem ?? 'session' }),
      el('span', { className: 'activity', text: node.activity }),
      el('span', { className: 'reason', text: node.stopReason ?? (node.activity === 'running' ? '…' : '') }),
      el('span', { className: 'cost muted', text: cost(node, now) }),
    );
    row.addEventListener('click', () => onSelect(node.id));
    return row;
  });
  container.replaceChildren(head, ...rows);
}
