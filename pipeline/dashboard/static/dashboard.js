// Babel Stream SLA dashboard: SlaWindow records arrive as server-sent events
// (one "snapshot", then one "window" per new or updated window) and are charted
// per pair with Chart.js. What is charted is also exposed for tests and tools:
// window.babelstream.charts[pair][name].data, data-* attributes, and a table.
"use strict";

const TABLE_ROWS = 20;
const state = { pairs: new Map(), charts: {}, windows: 0 };
window.babelstream = state;

const timeLabel = (ms) => new Date(ms).toLocaleTimeString([], { hour12: false });
const pct = (v) => (v * 100).toFixed(1) + "%";

function lineChart(canvas, datasets, yOptions) {
  return new Chart(canvas, {
    type: "line",
    data: { datasets: datasets.map((d) => ({ ...d, data: [], pointRadius: 2, borderWidth: 2 })) },
    options: {
      animation: false,
      maintainAspectRatio: false,
      parsing: false,
      normalized: true,
      scales: {
        x: { type: "linear", ticks: { callback: timeLabel, maxTicksLimit: 6 } },
        y: { beginAtZero: true, ...yOptions },
      },
      plugins: { legend: { display: datasets.length > 1 } },
    },
  });
}

function pairSection(pair) {
  const template = document.getElementById("pair-template");
  const node = document.importNode(template.content, true).firstElementChild;
  node.dataset.pair = pair;
  node.id = "pair-" + pair;
  node.querySelector(".pair-title").textContent = pair.replace("_", " → ");
  document.getElementById("empty")?.remove();
  const main = document.getElementById("pairs");
  const after = [...main.children].find((s) => s.dataset.pair > pair);
  main.insertBefore(node, after || null); // in the document before Chart.js measures it
  const canvas = (name) => node.querySelector(`canvas[data-chart="${name}"]`);
  const ratio = { min: 0, max: 1, ticks: { callback: pct } };
  state.charts[pair] = {
    latency: lineChart(canvas("latency"), [
      { label: "P95", borderColor: "#2f6fdf" },
      { label: "P99", borderColor: "#d4452c" },
    ], {}),
    timeouts: lineChart(canvas("timeouts"), [{ label: "timeout ratio", borderColor: "#b35900" }], ratio),
    throughput: lineChart(canvas("throughput"), [{ label: "count", borderColor: "#1a7f37" }], {}),
    cache: lineChart(canvas("cache"), [{ label: "cache-hit ratio", borderColor: "#7a3fd1" }], ratio),
  };
  return node;
}

function render(pair) {
  const windows = [...state.pairs.get(pair).values()].sort((a, b) => a.window_start - b.window_start);
  const section = document.getElementById("pair-" + pair) || pairSection(pair);
  const charts = state.charts[pair];
  const series = (field) => windows.map((w) => ({ x: w.window_end, y: w[field] }));
  charts.latency.data.datasets[0].data = series("p95_ms");
  charts.latency.data.datasets[1].data = series("p99_ms");
  charts.timeouts.data.datasets[0].data = series("timeout_ratio");
  charts.throughput.data.datasets[0].data = series("count");
  charts.cache.data.datasets[0].data = series("cache_hit_ratio");
  for (const chart of Object.values(charts)) chart.update("none");
  for (const canvas of section.querySelectorAll("canvas")) canvas.dataset.points = windows.length;

  const tbody = section.querySelector("tbody");
  tbody.replaceChildren(...windows.slice(-TABLE_ROWS).reverse().map((w) => {
    const row = document.createElement("tr");
    row.dataset.windowStart = w.window_start;
    row.dataset.windowEnd = w.window_end;
    row.dataset.count = w.count;
    row.dataset.p95 = w.p95_ms;
    row.dataset.p99 = w.p99_ms;
    row.dataset.timeoutRatio = w.timeout_ratio;
    row.dataset.cacheHitRatio = w.cache_hit_ratio;
    for (const text of [timeLabel(w.window_end), w.count, w.p50_ms.toFixed(0), w.p95_ms.toFixed(0),
      w.p99_ms.toFixed(0), pct(w.timeout_ratio), pct(w.error_ratio), pct(w.cache_hit_ratio)]) {
      const cell = document.createElement("td");
      cell.textContent = text;
      row.appendChild(cell);
    }
    return row;
  }));
  section.dataset.windows = windows.length;
  document.body.dataset.windowCount = state.windows;
  document.body.dataset.pairCount = state.pairs.size;
}

function accept(windows) {
  const touched = new Set();
  for (const w of windows) {
    if (!state.pairs.has(w.pair)) state.pairs.set(w.pair, new Map());
    const byStart = state.pairs.get(w.pair);
    if (!byStart.has(w.window_start)) state.windows += 1;
    byStart.set(w.window_start, w); // a re-emitted window replaces the earlier figures
    touched.add(w.pair);
  }
  for (const pair of touched) render(pair);
}

function connect() {
  const status = document.getElementById("status");
  const source = new EventSource("/events");
  source.addEventListener("snapshot", (e) => {
    accept(JSON.parse(e.data));
    status.dataset.state = "live";
    status.textContent = "live";
  });
  source.addEventListener("window", (e) => accept([JSON.parse(e.data)]));
  source.onerror = () => {
    status.dataset.state = "connecting";
    status.textContent = "reconnecting…";
  };
}

connect();
