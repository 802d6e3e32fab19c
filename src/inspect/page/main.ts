// The inspector page: root sessions, the selected root's tree and timeline, and the selected
// child's transcript. It refetches when the server's change stream says the database changed and
// redraws running bars as time passes; it never reloads. Selection lives in the URL hash.
import type { ChildNode, ErrorResponse, RootSummary, TranscriptResponse, TreeResponse } from '../api-types.js';
import { byId, el, shortId, visible } from './dom.js';
import { renderTimeline } from './timeline.js';
import { renderTranscript, type TranscriptView } from './transcript.js';
import { renderTree } from './tree.js';

const GROW_MS = 250;

interface State {
  roots: RootSummary[];
  root: string | undefined;
  child: string | undefined;
  tree: TreeResponse | undefined;
  /** Server clock minus page clock, so "now" for running bars is the server's. */
  skew: number;
  transcript: TranscriptView | undefined;
}

const state: State = { roots: [], root: undefined, child: undefined, tree: undefined, skew: 0, transcript: undefined };

async function get<T>(path: string): Promise<T> {
  const response = await fetch(path, { headers: { accept: 'application/json' } });
  const body = (await response.json()) as T | ErrorResponse;
  if (!response.ok) throw new Error((body as ErrorResponse).error?.message ?? `${path}: HTTP ${response.status}`);
  return body as T;
}

const now = (): number => Date.now() + state.skew;

function readHash(): void {
  const params = new URLSearchParams(location.hash.slice(1));
  state.root = params.get('root') ?? undefined;
  state.child = params.get('child') ?? undefined;
}

function writeHash(): void {
  const params = new URLSearchParams();
  if (state.root !== undefined) params.set('root', state.root);
  if (state.child !== undefined) params.set('child', state.child);
  history.replaceState(null, '', `#${params.toString()}`);
}

function renderRoots(): void {
  const buttons = state.roots.map((root) => {
    const button = el(
      'button',
      { className: root.id === state.root ? 'selected' : '', title: visible(root.id), data: { rootId: root.id } },
      el('span', { className: 'id', text: shortId(root.id) }),
      ` · ${root.children} ${root.children === 1 ? 'child' : 'children'} · ${new Date(root.createdAt).toLocaleTimeString()}`,
      el('span', { className: 'title', text: visible(root.title ?? '(no messages of its own)') }),
    );
    button.addEventListener('click', () => void selectRoot(root.id));
    return button;
  });
  byId('roots').replaceChildren(...(buttons.length > 0 ? buttons : [el('p', { className: 'muted', text: 'No sessions yet.' })]));
}

function renderRootHead(tree: TreeResponse): void {
  const { root } = tree;
  byId('root-head').replaceChildren(
    el('h2', { text: 'Root session' }),
    el('div', {}, el('span', { className: 'mono', text: visible(root.id) }), ` · ${new Date(root.createdAt).toLocaleString()} · ${tree.total} descendants`),
    el('div', { className: 'muted', text: visible(root.title ?? '') }),
    ...(tree.nodes.length < tree.total
      ? [el('p', { className: 'cut more-nodes', text: `Showing the first ${tree.nodes.length.toLocaleString('en')} of ${tree.total.toLocaleString('en')} descendants (the rest: /api/roots/:id/tree?offset=${tree.nodes.length})` })]
      : []),
  );
}

function drawTree(): void {
  const nodes = state.tree?.nodes ?? [];
  renderTree(byId('tree'), nodes, now(), state.child, (id) => void selectChild(id));
  renderTimeline(byId('timeline'), nodes, now(), state.child, (id) => void selectChild(id));
}

function nodeOf(id: string): ChildNode | undefined {
  return state.tree?.nodes.find((node) => node.id === id);
}

/**
 * The selected child's transcript: from its start for a child not shown yet, else the entries after
 * those shown. While the server has left entries out (`more`), a change loads nothing: the reader
 * asks for them (`force`).
 */
async function loadTranscript(force = false): Promise<void> {
  const id = state.child;
  if (id === undefined) return;
  const view = state.transcript?.id === id ? state.transcript : undefined;
  if (view?.more === true && !force) return;
  const after = view?.through;
  const response = await get<TranscriptResponse>(`/api/sessions/${encodeURIComponent(id)}${after === undefined ? '' : `?after=${after}`}`);
  // Another child was selected, or another load showed these entries meanwhile.
  if (state.child !== id || (state.transcript?.id === id ? state.transcript : undefined) !== view) return;
  const node = nodeOf(id);
  state.transcript = renderTranscript(byId('transcript'), response, `Transcript of ${visible(node?.label ?? 'session')}`, view, () => void show(loadTranscript(true)));
}

async function loadTree(): Promise<void> {
  const id = state.root;
  if (id === undefined) return;
  const tree = await get<TreeResponse>(`/api/roots/${encodeURIComponent(id)}/tree`);
  if (state.root !== id) return;
  state.tree = tree;
  state.skew = tree.now - Date.now();
  renderRootHead(tree);
  drawTree();
}

async function selectRoot(id: string): Promise<void> {
  state.root = id;
  state.child = undefined;
  state.tree = undefined;
  state.transcript = undefined;
  byId('transcript').replaceChildren(el('p', { className: 'muted', text: 'Click a child to read its transcript.' }));
  writeHash();
  renderRoots();
  await show(loadTree());
}

async function selectChild(id: string): Promise<void> {
  state.child = id;
  writeHash();
  drawTree();
  await show(loadTranscript());
}

/** A link or an edited address naming another selection (`replaceState` never fires this). */
function followHash(): void {
  const shown = { root: state.root, child: state.child };
  readHash();
  state.root ??= shown.root;
  writeHash();
  if (state.child !== shown.child) {
    state.transcript = undefined;
    byId('transcript').replaceChildren(el('p', { className: 'muted', text: 'Click a child to read its transcript.' }));
    void show(loadTranscript());
  }
  if (state.root === shown.root) return drawTree();
  state.tree = undefined;
  renderRoots();
  void show(loadTree());
}

/** Shows a failed load in the header instead of leaving a stale page silently. */
async function show(work: Promise<void>): Promise<void> {
  try {
    await work;
  } catch (error) {
    byId('live').textContent = `error: ${error instanceof Error ? error.message : String(error)}`;
  }
}

/** Roots from the server; the default root is the newest one with messages of its own. */
async function loadRoots(): Promise<void> {
  state.roots = await get<RootSummary[]>('/api/roots');
  if (state.root === undefined) state.root = (state.roots.find((root) => root.title !== undefined && root.children > 0) ?? state.roots[0])?.id;
  renderRoots();
}

// One refresh at a time; changes arriving meanwhile cause exactly one more.
let refreshing: Promise<void> | undefined;
let again = false;

function refresh(): void {
  if (refreshing !== undefined) {
    again = true;
    return;
  }
  // Roots first: the first roots of a database that had none choose the root whose tree loads.
  refreshing = show(loadRoots().then(() => Promise.all([loadTree(), loadTranscript()])).then(() => undefined)).finally(() => {
    refreshing = undefined;
    if (again) {
      again = false;
      refresh();
    }
  });
}

function listen(): void {
  const live = byId('live');
  const source = new EventSource('/api/changes');
  const on = () => {
    live.textContent = 'live';
    live.className = 'live on';
  };
  source.addEventListener('open', () => on());
  source.addEventListener('hello', () => refresh());
  source.addEventListener('change', () => {
    on();
    refresh();
  });
  // The file was deleted or replaced: what is shown is its last content until a new one is read.
  source.addEventListener('gone', (event) => {
    live.textContent = `${(event as MessageEvent<string>).data}: showing what it held`;
    live.className = 'live';
  });
  source.addEventListener('error', () => {
    live.textContent = 'reconnecting…';
    live.className = 'live';
  });
}

async function start(): Promise<void> {
  readHash();
  void get<{ db: string }>('/api/info').then((info) => (byId('db').textContent = info.db), () => undefined);
  await show(loadRoots());
  writeHash();
  await show(loadTree());
  await show(loadTranscript());
  listen();
  window.addEventListener('hashchange', followHash);
  // Running bars end at "now": redraw while any child runs.
  setInterval(() => {
    if (state.tree?.nodes.some((node) => node.activity === 'running')) drawTree();
  }, GROW_MS);
}

void start();
