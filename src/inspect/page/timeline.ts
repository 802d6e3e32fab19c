// The timeline: one lane per child, nested by depth, with a bar from its creation to its settling,
// coloured by stop reason. A running child's bar ends at "now", so it grows as the page redraws.
import type { ChildNode } from '../api-types.js';
import { duration, el, reasonClass, visible } from './dom.js';

const TICKS = 5;

/** Where a child's bar ends: when it settled, or now while a turn is open. */
function endOf(node: ChildNode, now: number): number {
  // Never before its start: wall-clock times from a clock that stepped back would draw a negative bar.
  if (node.settledAt !== undefined) return Math.max(node.settledAt, node.createdAt);
  if (node.activity === 'running') return Math.max(now, node.lastEventAt ?? node.createdAt, node.createdAt);
  return Math.max(node.lastEventAt ?? node.createdAt, node.createdAt);
}

/** Renders `nodes` (pre-order) as lanes into `container`; a click on a lane calls `onSelect`. */
export function renderTimeline(
  container: HTMLElement,
  nodes: readonly ChildNode[],
  now: number,
  selected: string | undefined,
  onSelect: (id: string) => void,
): void {
  if (nodes.length === 0) {
    container.replaceChildren(el('p', { className: 'muted', text: 'Nothing to show yet.' }));
    return;
  }
  const start = Math.min(...nodes.map((node) => node.createdAt));
  const end = Math.max(...nodes.map((node) => endOf(node, now)));
  const span = Math.max(1, end - start);
  const percent = (time: number): string => `${(((time - start) / span) * 100).toFixed(3)}%`;

  const axis = el('div', { className: 'axis' });
  for (let index = 0; index <= TICKS; index++) {
    const tick = el('span', { text: duration((span * index) / TICKS) });
    tick.style.left = `${(index / TICKS) * 100}%`;
    axis.append(tick);
  }
  const lanes = nodes.map((node) => {
    const stop = endOf(node, now);
    const reason = reasonClass(node.activity, node.stopReason);
    const bar = el('div', {
      className: `bar ${reason}${node.activity === 'running' ? ' running' : ''}`,
      title: `${visible(node.label ?? node.id)}: ${node.activity === 'running' ? 'running' : (node.stopReason ?? 'settled')} after ${duration(stop - node.createdAt)}`,
      data: { childId: node.id },
    });
    bar.style.left = percent(node.createdAt);
    bar.style.width = `calc(${percent(stop)} - ${percent(node.createdAt)})`;
    const tag = el('span', { className: 'tag', text: visible(node.label ?? node.id), title: visible(node.id) });
    tag.style.paddingLeft = `${(node.depth - 1) * 14}px`;
    const lane = el('div', { className: node.id === selected ? 'lane selected' : 'lane', data: { laneId: node.id } }, tag, el('div', { className: 'track' }, bar));
    lane.addEventListener('click', () => onSelect(node.id));
    return lane;
  });
  const legend = el(
    'div',
    { className: 'legend' },
    ...['completed', 'running', 'aborted', 'error', 'other'].map((name) =>
      el('span', {}, el('span', { className: `dot reason-${name}` }), name),
    ),
  );
  container.replaceChildren(axis, ...lanes, legend);
}
