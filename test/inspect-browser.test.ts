// The inspect page in a real browser (Debian's chromium driven by playwright-core) over a database
// written by a real demo run: tree, timeline, transcript, live updates, session text as text, and a
// transcript with a long output cut and a damaged row, one of many events shown a page at a time,
// and a file empty when the page opened.
import { execFile } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import Database from 'better-sqlite3';
import { chromium, type BrowserContext, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHost, inProcessProvider, text, type Host, type ScriptedStep } from 'subagent-host';
import { holdTool, tempFiles } from './helpers.js';
import { cli, startInspect, storedAgent, storedParentWithChild, type InspectProcess } from './inspect-helpers.js';

const PAYLOAD = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=1</script>';
const ARTIFACTS = new URL('../test-artifacts/', import.meta.url).pathname;
const LONG = 120_000;
// What a page renders on a loaded machine: far past expect.poll's default second, within a test's time.
const POLL = { timeout: 15_000 };

interface DemoJson {
  parentId: string;
  db: string;
  children: { id: string; stopReason: string }[];
}

const files = tempFiles('inspect-browser-');
const db = files.file();
const profile = mkdtempSync(join(tmpdir(), 'inspect-chromium-'));
let report: DemoJson;
let server: InspectProcess;
let context: BrowserContext;
let page: Page;

beforeAll(async () => {
  // --chaos cancels every child still running at its deadline (2 s by default): a loaded machine can keep an
  // ordinary child past that, so the deadline here is long enough that only the runaway child meets it.
  const args = ['demo', '--json', '--chaos', '--children', '3', '--deadline', '15000', '--db', db];
  const { stdout } = await promisify(execFile)(process.execPath, [cli, ...args], { timeout: LONG });
  report = JSON.parse(stdout) as DemoJson;
  server = await startInspect(db);
  context = await chromium.launchPersistentContext(profile, {
    executablePath: '/usr/bin/chromium',
    headless: true,
    viewport: { width: 1280, height: 860 },
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  page = context.pages()[0] ?? (await context.newPage());
  page.setDefaultTimeout(60_000);
  await page.goto(`${server.url}#root=${report.parentId}`);
}, LONG);

afterAll(async () => {
  await context?.close();
  await server?.stop();
  rmSync(profile, { recursive: true, force: true });
});

/** The demo's children that got a session (a child whose start failed has no id and no session). */
function started(): DemoJson['children'] {
  return report.children.filter((child) => child.id !== '');
}

/** A host writing to the same database as the demo, with a child started under the demo's parent. */
async function startChild(host: Host, label: string, steps: ScriptedStep[]): Promise<{ id: string; result: Promise<unknown>; dispose(): Promise<void> }> {
  host.subagents.registerProvider(inProcessProvider(host));
  const { agent: parent } = await host.agents.resume({ sessionId: report.parentId });
  return host.subagents.start('in-process', {
    label,
    prompt: [text(`run ${label}`)],
    parent,
    signal: new AbortController().signal,
    agentOptions: { model: { kind: 'scripted', steps } },
  });
}

describe('subagent-host inspect in a browser', () => {
  it('shows the demo run as the selected root and the demo wrote where --db said', async () => {
    expect(report.db).toBe(db);
    await page.waitForSelector(`#roots button.selected[data-root-id="${report.parentId}"]`);
  });

  it('shows every child of the demo run in the tree, with the stop reason the run reported', async () => {
    await page.waitForSelector('#tree .row[data-child-id]');
    const rows = await page.$$eval('#tree .row[data-child-id]', (elements) =>
      elements.map((row) => [row.getAttribute('data-child-id'), row.querySelector('.reason')?.textContent] as const),
    );
    // Other tests here start children under the same parent, before or after this one: they may be listed too.
    expect(Object.fromEntries(rows)).toMatchObject(Object.fromEntries(started().map((child) => [child.id, child.stopReason])));
    expect(report.children.map((child) => child.stopReason)).toEqual(expect.arrayContaining(['completed', 'error', 'aborted']));
  });

  it('draws one timeline bar per child, coloured by stop reason, and saves a screenshot of tree and timeline', async () => {
    const bars = await page.$$eval('#timeline .bar[data-child-id]', (elements) => elements.map((bar) => [bar.getAttribute('data-child-id'), bar.className] as const));
    expect(Object.fromEntries(bars)).toMatchObject(Object.fromEntries(started().map((child) => [child.id, `bar reason-${child.stopReason}`])));
    const rows = await page.$$eval('#tree .row[data-child-id]', (elements) => elements.map((row) => row.getAttribute('data-child-id')));
    expect(bars.map(([id]) => id).sort()).toEqual(rows.sort());
    // The page redraws on live updates; a bar caught mid-redraw may not be laid out yet, a missing one stays missing.
    const widths = () => page.$$eval('#timeline .bar', (bars) => bars.map((bar) => bar.getBoundingClientRect().width));
    await expect.poll(async () => (await widths()).filter((width) => width > 0).length, { timeout: 30_000 }).toBe(bars.length);
    mkdirSync(ARTIFACTS, { recursive: true });
    await page.screenshot({ path: join(ARTIFACTS, 'inspect-tree-timeline.png'), fullPage: true });
  });

  it('shows the transcript of a child that is clicked, with long outputs folded', async () => {
    const child = report.children.find((entry) => entry.stopReason === 'completed')!.id;
    await page.click(`#tree .row[data-child-id="${child}"]`);
    await expect.poll(() => page.textContent('#transcript .mono'), POLL).toBe(child);
    await page.waitForSelector('#transcript .entry[data-kind="turn-end"]');
    const kinds = await page.$$eval('#transcript .entry', (entries) => entries.map((entry) => entry.getAttribute('data-kind')));
    expect(kinds).toEqual(expect.arrayContaining(['message', 'assistant', 'tool-call', 'tool-result', 'turn-end']));
    expect(await page.textContent('#transcript .entry[data-kind="turn-end"]')).toContain('completed');
    expect(await page.$('#transcript .entry[data-kind="tool-result"] details')).not.toBeNull();
  });

  it('shows a child started while the page is open, growing while it runs, without a reload', async () => {
    await page.evaluate(() => ((globalThis as { __sameDocument?: number }).__sameDocument = 1));
    const gate = holdTool('gate');
    const host = await createHost({ providers: false, persistence: { sqlite: db }, tools: [gate.tool] });
    try {
      const run = await startChild(host, 'live child', [{ toolCalls: [{ name: 'gate', input: {} }] }, { text: 'done' }]);
      await gate.entered;
      await host.persistence!.flush();
      const bar = `#timeline .bar.running[data-child-id="${run.id}"]`;
      await page.waitForSelector(bar);
      expect(await page.textContent(`#tree .row[data-child-id="${run.id}"] .activity`)).toBe('running');
      const first = await page.$eval(bar, (element) => element.getBoundingClientRect().width);
      await expect.poll(() => page.$eval(bar, (element) => element.getBoundingClientRect().width), { timeout: 60_000 }).toBeGreaterThan(first);
      gate.release();
      await run.result;
      await run.dispose();
      await page.waitForSelector(`#timeline .bar.reason-completed[data-child-id="${run.id}"]`);
      expect(await page.evaluate(() => (globalThis as { __sameDocument?: number }).__sameDocument)).toBe(1);
    } finally {
      gate.release();
      await host.close();
    }
  });

  it('renders session text as text: a child whose label and output are HTML runs nothing', async () => {
    const host = await createHost({ providers: false, persistence: { sqlite: db } });
    let id: string;
    try {
      const run = await startChild(host, PAYLOAD, [{ text: PAYLOAD }]);
      await run.result;
      await run.dispose();
      id = run.id;
    } finally {
      await host.close();
    }
    await page.click(`#tree .row[data-child-id="${id}"]`);
    // The transcript shown before (another child's, with its own assistant entries) stays until this one came.
    await expect.poll(() => page.textContent('#transcript .mono'), POLL).toBe(id);
    await page.waitForSelector('#transcript .entry[data-kind="assistant"]');
    expect(await page.textContent('#transcript .entry[data-kind="assistant"] pre')).toBe(PAYLOAD);
    expect(await page.textContent(`#tree .row[data-child-id="${id}"] .label`)).toBe(PAYLOAD);
    expect(await page.$$('#app img, #app script')).toHaveLength(0);
    expect(await page.evaluate(() => (globalThis as { __pwned?: unknown }).__pwned)).toBeUndefined();
  });

  it('shows the control characters of a label escaped, as ls does: a right-to-left override cannot reverse the text around it', async () => {
    const label = '\u202egnp.exe\nforged\u001b[2J';
    const shown = '\\u202egnp.exe\\x0aforged\\x1b[2J';
    const host = await createHost({ providers: false, persistence: { sqlite: db } });
    let id: string;
    try {
      const run = await startChild(host, label, [{ text: 'done' }]);
      await run.result;
      await run.dispose();
      id = run.id;
    } finally {
      await host.close();
    }
    await expect.poll(() => page.textContent(`#tree .row[data-child-id="${id}"] .label`), POLL).toBe(shown);
    expect(await page.textContent(`#timeline .lane[data-lane-id="${id}"] .tag`)).toBe(shown);
    await page.click(`#tree .row[data-child-id="${id}"]`);
    await expect.poll(() => page.textContent('#transcript .mono'), POLL).toBe(id);
    expect(await page.textContent('#transcript strong')).toBe(`Transcript of ${shown}`);
  });

  it('shows the ids in transcript entry titles with their control characters escaped: a sender id cannot reverse its title', async () => {
    const sender = 'R\u202etroper\nforged';
    const host = await createHost({ providers: false, persistence: { sqlite: db } });
    let id: string;
    try {
      const agent = await host.createAgent({ header: { parentSession: report.parentId } });
      id = agent.id;
      agent.followup([text('from the coordinator')], { source: { kind: 'coordinator', senderSessionId: sender } });
      await agent.whenIdle();
    } finally {
      await host.close();
    }
    await expect.poll(() => page.locator(`#tree .row[data-child-id="${id}"]`).count(), POLL).toBe(1);
    await page.click(`#tree .row[data-child-id="${id}"]`);
    await expect.poll(() => page.textContent('#transcript .entry.message .title'), POLL).toMatch(/^message from coordinator R\\u202etroper\\x0aforged\+/);
  });

  it('shows a long output cut, with a link to its whole text, and a damaged row as unreadable among the others', async () => {
    const long = `${'x'.repeat(70_000)} the end`;
    const host = await createHost({ providers: false, persistence: { sqlite: db } });
    let id: string;
    try {
      const run = await startChild(host, 'long output', [{ text: long }]);
      await run.result;
      await run.dispose();
      id = run.id;
    } finally {
      await host.close();
    }
    const file = new Database(db);
    file.prepare("UPDATE events SET data = '{damaged' WHERE session_id = ? AND type = 'turn/start'").run(id);
    file.close();
    await page.click(`#tree .row[data-child-id="${id}"]`);
    await expect.poll(() => page.textContent('#transcript .mono'), POLL).toBe(id);
    await page.waitForSelector('#transcript .entry[data-kind="turn-end"]');
    expect(await page.textContent('#transcript .entry.unreadable.error .title')).toMatch(/^event \d+ is unreadable/);
    const kinds = await page.$$eval('#transcript .entry', (entries) => entries.map((entry) => entry.getAttribute('data-kind')));
    expect(kinds).toEqual(expect.arrayContaining(['message', 'unreadable', 'assistant', 'turn-end']));
    const assistant = '#transcript .entry[data-kind="assistant"]';
    expect(await page.textContent(`${assistant} .cut`)).toBe(`… ${(long.length - 64 * 1024).toLocaleString('en')} more characters not shown · open the full text`);
    const [tab] = await Promise.all([context.waitForEvent('page'), page.click(`${assistant} .cut a`)]);
    try {
      await tab.waitForLoadState();
      expect(await tab.textContent('body')).toBe(long);
    } finally {
      await tab.close();
    }
  });

  it('shows a log of many events 1,000 entries at a time, loads more on a click, then follows what is appended', async () => {
    const id = await storedAgent(db);
    const append = (from: number, count: number): void => {
      const file = new Database(db);
      try {
        file.transaction(() => {
          const next = file.prepare('SELECT next_seq FROM sessions WHERE id = ?').pluck().get(id) as number;
          const insert = file.prepare("INSERT INTO events (session_id, seq, type, time, data) VALUES (?, ?, 'user/message', ?, ?)");
          for (let index = 0; index < count; index++) {
            insert.run(id, next + index, Date.now(), JSON.stringify({ id: `m${from + index}`, source: { kind: 'user' }, content: [{ type: 'text', text: `message ${from + index}` }] }));
          }
          file.prepare('UPDATE sessions SET next_seq = next_seq + ? WHERE id = ?').run(count, id);
        })();
      } finally {
        file.close();
      }
    };
    append(0, 1500);
    const entries = '#transcript .entry';
    await page.goto(`${server.url}#root=${report.parentId}&child=${id}`);
    await expect.poll(() => page.locator(entries).count(), POLL).toBe(1000);
    expect(await page.textContent('#transcript button.more')).toBe('Showing 1,000 entries; the log has more: load more');
    await page.click('#transcript button.more');
    await expect.poll(() => page.locator(entries).count(), POLL).toBe(1500);
    expect(await page.$$('#transcript button.more')).toHaveLength(0);
    // Everything shown: what is written next is appended once, without a click.
    append(1500, 3);
    await expect.poll(() => page.locator(entries).count(), POLL).toBe(1503);
    const texts = await page.$$eval(entries, (all) => all.map((entry) => entry.querySelector('pre')?.textContent));
    expect(texts).toEqual(Array.from({ length: 1503 }, (_, index) => `message ${index}`));
  });

  it('shows the tree of the first sessions written into a file that was empty when the page opened', async () => {
    const written = files.file();
    const { childId } = await storedParentWithChild(written, 'first child');
    const empty = files.file();
    writeFileSync(empty, '');
    const other = await startInspect(empty);
    const tab = await context.newPage();
    try {
      await tab.goto(other.url);
      await expect.poll(() => tab.textContent('#roots'), POLL).toBe('No sessions yet.');
      await tab.waitForSelector('#live.on');
      // Filled in place, at once: the page hears of one change, and its first roots choose the tree shown.
      copyFileSync(written, empty);
      await tab.waitForSelector(`#tree .row[data-child-id="${childId}"]`);
    } finally {
      await tab.close();
      await other.stop();
    }
  });

  it('follows a link to another selection in the same tab: the hash changes, the page does not reload', async () => {
    await page.evaluate(() => ((globalThis as { __sameDocument?: number }).__sameDocument = 2));
    const [first, second] = started();
    // Any stored session can be the root of a view.
    await page.goto(`${server.url}#root=${first!.id}`);
    await expect.poll(() => page.textContent('#root-head .mono'), POLL).toBe(first!.id);
    await page.goto(`${server.url}#root=${report.parentId}&child=${second!.id}`);
    await expect.poll(() => page.textContent('#root-head .mono'), POLL).toBe(report.parentId);
    await expect.poll(() => page.textContent('#transcript .mono'), POLL).toBe(second!.id);
    await page.waitForSelector(`#tree .row.selected[data-child-id="${second!.id}"]`);
    expect(await page.evaluate(() => (globalThis as { __sameDocument?: number }).__sameDocument)).toBe(2);
  });
});
