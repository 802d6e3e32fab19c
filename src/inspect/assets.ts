// The inspector's static assets besides the bundled script: the HTML shell and its stylesheet.
// Nothing here comes from a session; the page fills itself in with text nodes only.

/** The page shell; `page.js` builds everything inside `#app`. */
export const INDEX_HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>subagent-host inspect</title>
<link rel="stylesheet" href="/page.css">
<script defer src="/page.js"></script>
</head>
<body>
<header><strong>subagent-host inspect</strong> <span id="db"></span> <span id="live" class="live">connecting…</span></header>
<div id="app">
  <nav id="roots" aria-label="root sessions"></nav>
  <main>
    <section id="root-head"></section>
    <section><h2>Tree</h2><div id="tree" class="tree"></div></section>
    <section><h2>Timeline</h2><div id="timeline" class="timeline"></div></section>
    <section><h2>Transcript</h2><div id="transcript" class="transcript"><p class="muted">Click a child to read its transcript.</p></div></section>
  </main>
</div>
</body>
</html>
`;

/** Colours by stop reason: green completed, amber aborted/interrupted, red error, blue running. */
export const PAGE_CSS = `
:root { --bg: #fbfbfc; --fg: #1d2128; --muted: #6b7280; --line: #e3e5e9; --sel: #e8f0fe;
  --completed: #2e9d5b; --running: #3b82f6; --aborted: #d9911a; --interrupted: #d9911a; --error: #d64545;
  --other: #8b5cf6; font: 13px/1.45 system-ui, sans-serif; color: var(--fg); background: var(--bg); }
* { box-sizing: border-box; }
body { margin: 0; }
header { padding: 8px 16px; border-bottom: 1px solid var(--line); background: #fff; display: flex; gap: 12px; align-items: baseline; }
header #db { color: var(--muted); font-family: ui-monospace, monospace; }
.live { margin-left: auto; color: var(--muted); }
.live.on::before { content: '● '; color: var(--completed); }
#app { display: grid; grid-template-columns: 280px 1fr; min-height: calc(100vh - 38px); }
nav { border-right: 1px solid var(--line); overflow-y: auto; max-height: calc(100vh - 38px); background: #fff; }
nav button { display: block; width: 100%; text-align: left; border: 0; border-bottom: 1px solid var(--line); background: none; padding: 8px 12px; cursor: pointer; font: inherit; color: inherit; }
nav button.selected { background: var(--sel); }
nav .id, .mono { font-family: ui-monospace, monospace; font-size: 12px; }
nav .title { display: block; color: var(--muted); overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
main { padding: 8px 16px 32px; min-width: 0; }
h2 { font-size: 13px; text-transform: uppercase; letter-spacing: .04em; color: var(--muted); margin: 16px 0 6px; }
.muted { color: var(--muted); }
.tree .row { display: grid; grid-template-columns: minmax(220px, 2fr) 90px 80px 110px 1fr; gap: 8px; padding: 3px 6px; border-radius: 4px; cursor: pointer; align-items: center; }
.tree .row:hover, .timeline .lane:hover { background: #f1f3f6; }
.tree .row.selected, .timeline .lane.selected { background: var(--sel); }
.tree .head { color: var(--muted); cursor: default; font-weight: 600; }
.tree .head:hover { background: none; }
.tree .name { overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.dot { display: inline-block; width: 9px; height: 9px; border-radius: 50%; margin-right: 6px; background: var(--other); }
.reason-completed { --c: var(--completed); } .reason-running { --c: var(--running); } .reason-aborted { --c: var(--aborted); }
.reason-interrupted { --c: var(--interrupted); } .reason-error { --c: var(--error); } .reason-other { --c: var(--other); }
.dot, .bar { background: var(--c, var(--other)); }
.timeline { position: relative; border: 1px solid var(--line); border-radius: 6px; background: #fff; padding: 6px 0; }
.timeline .lane { position: relative; height: 22px; cursor: pointer; }
.timeline .lane .tag { position: absolute; left: 8px; top: 3px; width: 200px; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; color: var(--muted); }
.timeline .track { position: absolute; left: 216px; right: 12px; top: 0; bottom: 0; }
.timeline .bar { position: absolute; top: 4px; height: 14px; min-width: 2px; border-radius: 3px; opacity: .9; }
.timeline .bar.running { background-image: repeating-linear-gradient(45deg, transparent 0 6px, rgba(255,255,255,.35) 6px 12px); }
.timeline .axis { position: relative; height: 16px; margin-left: 216px; margin-right: 12px; color: var(--muted); font-size: 11px; }
.timeline .axis span { position: absolute; transform: translateX(-50%); white-space: nowrap; }
.timeline .axis span:first-child { transform: none; } .timeline .axis span:last-child { transform: translateX(-100%); }
.legend { display: flex; gap: 14px; color: var(--muted); margin-top: 4px; }
.transcript .entry { border-left: 3px solid var(--line); padding: 4px 10px; margin: 6px 0; background: #fff; }
.transcript .entry.assistant { border-color: var(--running); } .transcript .entry.tool-call, .transcript .entry.tool-result { border-color: var(--other); }
.transcript .entry.report, .transcript .entry.notice { border-color: var(--completed); }
.transcript .entry.error { border-color: var(--error); }
.transcript .entry.unreadable { background: #fdf0f0; }
.transcript .cut { margin: 4px 0 0; color: var(--muted); font-style: italic; }
.transcript .title { font-weight: 600; } .transcript .time { color: var(--muted); margin-left: 8px; font-weight: 400; }
.transcript pre { white-space: pre-wrap; word-break: break-word; margin: 4px 0 0; font: 12px/1.4 ui-monospace, monospace; }
.transcript details summary { cursor: pointer; color: var(--muted); overflow-wrap: anywhere; }
.transcript .turn-start, .transcript .turn-end, .transcript .inbox { background: none; }
`;
