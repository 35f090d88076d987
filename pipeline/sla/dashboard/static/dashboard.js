// Babel Stream SLA dashboard: SlaWindow records arrive as server-sent events
// (one "snapshot", then one "window" per new or updated window; late-row counts
// as "late-snapshot" / "late") and are charted per pair and priority class with
// Chart.js: one line per figure and window definition (runs of the job with other
// window sizes write to the same topic), in window order whatever order the records
// came in, broken where windows are missing. The server renders the windows it has
// into the page, so the first paint shows them; this script takes over from the
// embedded JSON. What is charted is also exposed for tests and tools:
// window.babelstream.charts[key][name].data, data-* attributes, and a table
// (key = pair id for interactive series, "bulk:" + pair id for bulk ones).
"use strict";

const TABLE_ROWS = 20;
const state = { series: new Map(), late: new Map(), charts: {}, windows: 0, pairs: new Set() };
window.babelstream = state;

const timeLabel = (ms) => new Date(ms).toLocaleTimeString([], { hour12: false });
const pct = (v) => (v * 100).toFixed(1) + "%";
const seriesKey = (w) => (w.priority === "bulk" ? "bulk:" : "") + w.pair;
const windowKey = (w) => `${w.window_start}|${w.window_end}`;
const lateKey = (pair, priority, start, end) => `${priority}|${pair}|${start}|${end}`;
const lengthOf = (w) => w.window_end - w.window_start;
const span = (ms) => (ms < 120000 ? `${ms / 1000} s` : `${ms / 60000} min`);
const priorityShown = () => document.getElementById("priority").value;
const byWindow = (a, b) => a.window_end - b.window_end || lengthOf(a) - lengthOf(b);
const gcd = (a, b) => (b === 0 ? a : gcd(b, a % b));

// The lines of each chart: a figure (field) each, drawn once per window definition.
const FIGURES = {
  latency: [
    { label: "P95", field: "p95_ms", color: "#2f6fdf" },
    { label: "P99", field: "p99_ms", color: "#d4452c" },
  ],
  timeouts: [{ label: "timeout ratio", field: "timeout_ratio", color: "#b35900" }],
  throughput: [{ label: "count", field: "count", color: "#1a7f37" }],
  cache: [{ label: "cache-hit ratio", field: "cache_hit_ratio", color: "#7a3fd1" }],
  burn: [
    { label: "1 h", field: "burn_rate_1h", color: "#d4452c" },
    { label: "6 h", field: "burn_rate_6h", color: "#5a6473" },
  ],
};
const DASHES = [[], [6, 3], [2, 2], [8, 3, 2, 3]];

function lineChart(canvas, yOptions) {
  return new Chart(canvas, {
    type: "line",
    data: { datasets: [] },
    options: {
      animation: false,
      maintainAspectRatio: false,
      parsing: false,
      normalized: true,
      spanGaps: false,
      scales: {
        x: { type: "linear", ticks: { callback: timeLabel, maxTicksLimit: 6 } },
        y: { beginAtZero: true, ...yOptions },
      },
      plugins: { legend: { display: true } },
    },
  });
}

// One definition's points of one figure, in window order, with a null point (a break in
// the line) where windows are missing: consecutive ends further apart than the
// definition's step (its slide: the largest step all ends keep, at most the length).
function points(windows, field) {
  const present = windows.filter((w) => w[field] != null);
  const ends = present.map((w) => w.window_end);
  const steps = ends.slice(1).map((end, i) => end - ends[i]).filter((d) => d > 0);
  const step = Math.min(lengthOf(windows[0]), steps.reduce(gcd, 0) || Infinity);
  const out = [];
  present.forEach((w, i) => {
    if (i > 0 && w.window_end - ends[i - 1] > step) out.push({ x: ends[i - 1] + step, y: null });
    out.push({ x: w.window_end, y: w[field] });
  });
  return out;
}

function datasets(figures, definitions) {
  return definitions.flatMap(([length, windows], d) => figures.map((f) => ({
    label: `${f.label} · ${span(length)}`,
    data: points(windows, f.field),
    borderColor: f.color,
    borderDash: DASHES[d % DASHES.length],
    pointRadius: 2,
    borderWidth: 2,
  })));
}

function sectionId(pair, priority) {
  return (priority === "bulk" ? "bulk-" : "pair-") + pair;
}

function pairSection(key, pair, priority) {
  const template = document.getElementById("pair-template");
  const node = document.importNode(template.content, true).firstElementChild;
  node.dataset.pair = pair;
  node.dataset.priority = priority;
  node.id = sectionId(pair, priority);
  node.hidden = priority !== priorityShown();
  node.querySelector(".pair-title").textContent =
    pair.replace("_", " → ") + (priority === "bulk" ? " (bulk)" : "");
  document.getElementById("empty")?.remove();
  const main = document.getElementById("pairs");
  // the server's first-paint section (a table only) makes way for the full one
  const rendered = document.getElementById(node.id);
  const after = [...main.children].find((s) => s !== rendered && s.dataset.pair > pair);
  main.insertBefore(node, rendered || after || null); // in the document before Chart.js measures it
  rendered?.remove();
  const canvas = (name) => node.querySelector(`canvas[data-chart="${name}"]`);
  const ratio = { min: 0, max: 1, ticks: { callback: pct } };
  state.charts[key] = {
    latency: lineChart(canvas("latency"), {}),
    timeouts: lineChart(canvas("timeouts"), ratio),
    throughput: lineChart(canvas("throughput"), {}),
    cache: lineChart(canvas("cache"), ratio),
    burn: lineChart(canvas("burn"), {}),
  };
  if (!node.hidden) loadSummary(node);
  return node;
}

function tableRow(w, late) {
  const row = document.createElement("tr");
  row.dataset.windowStart = w.window_start;
  row.dataset.windowEnd = w.window_end;
  row.dataset.windowLength = lengthOf(w);
  row.dataset.count = w.count;
  row.dataset.p95 = w.p95_ms;
  row.dataset.p99 = w.p99_ms;
  row.dataset.timeoutRatio = w.timeout_ratio;
  row.dataset.cacheHitRatio = w.cache_hit_ratio;
  row.dataset.duplicates = w.duplicates;
  row.dataset.late = late;
  const missed = Object.entries(w.met || {}).filter(([, ok]) => !ok).map(([name]) => name).sort();
  for (const text of [timeLabel(w.window_end), span(lengthOf(w)), w.count, w.p50_ms.toFixed(0),
    w.p95_ms.toFixed(0),
    w.p99_ms.toFixed(0), pct(w.timeout_ratio), pct(w.error_ratio), pct(w.cache_hit_ratio),
    w.duplicates, late, missed.join(",") || "-", "final"]) {
    const cell = document.createElement("td");
    cell.textContent = text;
    row.appendChild(cell);
  }
  return row;
}

function render(key) {
  const windows = [...state.series.get(key).values()].sort(byWindow);
  const { pair, priority } = windows[0];
  const existing = document.getElementById(sectionId(pair, priority));
  const section = existing && state.charts[key] ? existing : pairSection(key, pair, priority);
  const charts = state.charts[key];
  const definitions = new Map();
  for (const w of windows) {
    if (!definitions.has(lengthOf(w))) definitions.set(lengthOf(w), []);
    definitions.get(lengthOf(w)).push(w);
  }
  const byLength = [...definitions.entries()].sort((a, b) => a[0] - b[0]);
  for (const [name, chart] of Object.entries(charts)) {
    chart.data.datasets = datasets(FIGURES[name], byLength);
    chart.update("none");
  }
  for (const canvas of section.querySelectorAll("canvas")) canvas.dataset.points = windows.length;

  const lateOf = (w) =>
    state.late.get(lateKey(w.pair, w.priority, w.window_start, w.window_end)) || 0;
  section.querySelector("tbody").replaceChildren(
    ...windows.slice(-TABLE_ROWS).reverse().map((w) => tableRow(w, lateOf(w))));
  const newest = windows[windows.length - 1];
  section.querySelector(".final").textContent =
    `final through ${timeLabel(newest.window_end)}; ` +
    `late rows so far: ${windows.reduce((n, w) => n + lateOf(w), 0)}`;
  section.dataset.windows = windows.length;
  document.body.dataset.windowCount = state.windows;
  document.body.dataset.pairCount = state.pairs.size;
}

function accept(windows) {
  const touched = new Set();
  for (const w of windows) {
    const key = seriesKey(w);
    if (!state.series.has(key)) state.series.set(key, new Map());
    const stored = state.series.get(key);
    if (!stored.has(windowKey(w))) state.windows += 1;
    stored.set(windowKey(w), w); // a re-emitted window replaces the earlier figures
    state.pairs.add(w.pair);
    touched.add(key);
  }
  for (const key of touched) render(key);
}

function acceptLate(entries) {
  const touched = new Set();
  for (const e of entries) {
    state.late.set(lateKey(e.pair, e.priority, e.window_start, e.window_end), e.late);
    const key = seriesKey(e);
    if (state.series.has(key)) touched.add(key);
  }
  for (const key of touched) render(key);
}

async function loadSummary(section) {
  const { pair, priority } = section.dataset;
  const period = document.getElementById("period").value;
  const target = section.querySelector(".summary");
  try {
    const response = await fetch(`/api/report?pair=${encodeURIComponent(pair)}` +
      `&priority=${priority}&period=${period}`);
    const r = await response.json();
    const ms = (v) => (v == null ? "-" : v.toFixed(0) + " ms");
    const met = Object.entries(r.met).map(([name, ok]) => `${name} ${ok ? "met" : "MISSED"}`);
    target.textContent = r.windows === 0 ? `${period}: no windows in the history` :
      `${period}: ${r.count} results in ${r.windows} windows, P50 ${ms(r.p50_ms)} ` +
      `P95 ${ms(r.p95_ms)} P99 ${ms(r.p99_ms)} (±${(r.rank_error * 100).toFixed(1)}% rank), ` +
      `timeout ${pct(r.timeout_ratio || 0)}; ${met.join(", ")}`;
    section.dataset.summary = JSON.stringify(r);
  } catch (err) {
    target.textContent = `${period}: summary unavailable (${err})`;
  }
}

function showPriority() {
  const priority = priorityShown();
  for (const section of document.querySelectorAll("section.pair")) {
    section.hidden = section.dataset.priority !== priority;
    if (!section.hidden && state.charts[seriesKey(section.dataset)]) loadSummary(section);
  }
}

function connect() {
  const status = document.getElementById("status");
  const source = new EventSource("/events");
  source.addEventListener("snapshot", (e) => {
    accept(JSON.parse(e.data));
    status.dataset.state = "live";
    status.textContent = "live";
  });
  source.addEventListener("late-snapshot", (e) => acceptLate(JSON.parse(e.data)));
  source.addEventListener("window", (e) => accept([JSON.parse(e.data)]));
  source.addEventListener("late", (e) => acceptLate([JSON.parse(e.data)]));
  source.onerror = () => {
    status.dataset.state = "connecting";
    status.textContent = "reconnecting…";
  };
}

const initial = document.getElementById("initial-state");
if (initial) {
  const { windows, late } = JSON.parse(initial.textContent);
  acceptLate(late);
  accept(windows);
}
document.getElementById("priority").addEventListener("change", showPriority);
document.getElementById("period").addEventListener("change", showPriority);
connect();
