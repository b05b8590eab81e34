// The Scaler web monitor: reads the server-sent events of /events and draws the page. No library: the charts
// are drawn on canvases (the task stream by task_chart.js, which the performance reports share), the tables are
// plain DOM, the task table asks /tasks.json.
"use strict";

const HISTORY_SECONDS = 600;

const CHARTS = {
  "chart-rates": {
    series: [
      {key: "received_per_second", name: "received", color: "#2563eb"},
      {key: "succeeded_per_second", name: "succeeded", color: "#16a34a"},
      {key: "failed_per_second", name: "failed", color: "#dc2626"},
    ],
    format: (v) => formatNumber(v) + "/s",
  },
  "chart-queue": {series: [{key: "queued", name: "queued", color: "#9333ea"}], format: formatNumber, integer: true},
  "chart-workers": {series: [{key: "workers", name: "workers", color: "#0891b2"}], format: formatNumber, integer: true},
  "chart-scheduler": {
    series: [
      {key: "scheduler_cpu", name: "CPU %", color: "#ea580c"},
      {key: "scheduler_rss_bytes", name: "memory", color: "#475569", right: true},
    ],
    format: (v) => formatNumber(v) + "%",
    formatRight: formatBytes,
  },
};

const MEBIBYTE = 1024 * 1024;

// The smallest of 1, 2, 2.5, 5 times a power of ten that is at least `value`: the top of a chart's axis.
function niceCeil(value) {
  if (value <= 0) return 1;
  const power = Math.pow(10, Math.floor(Math.log10(value)));
  const fraction = value / power;
  const nice = fraction <= 1 ? 1 : fraction <= 2 ? 2 : fraction <= 2.5 ? 2.5 : fraction <= 5 ? 5 : 10;
  return nice * power;
}

const points = [];  // chart history: one object per snapshot, oldest first
const sortState = {};  // table id -> {key, ascending}
let latest = null;  // the last page state

const STREAM_SECONDS = 600;  // of ended runs kept for the task stream
const STREAM_RUNS = 50000;  // at most
const SEARCH_EVERY_MS = 2000;  // the task table follows the log this often
const LARGEST_SHOWN = 10;  // of the largest objects the scheduler was told of
let streamRuns = [];  // ended runs, oldest first
let runningRuns = [];  // the runs going on, as of the last snapshot
let taskChart = null;
let lastSearch = 0;

function formatNumber(value) {
  if (value === null || value === undefined) return "–";
  const abs = Math.abs(value);
  if (abs >= 1e9) return (value / 1e9).toFixed(1) + "G";
  if (abs >= 1e6) return (value / 1e6).toFixed(1) + "M";
  if (abs >= 1e4) return (value / 1e3).toFixed(1) + "k";
  if (Number.isInteger(value)) return value.toLocaleString("en-US");
  return value.toFixed(abs >= 100 ? 0 : 1);
}

function formatBytes(value) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit += 1; }
  return (unit === 0 ? value.toFixed(0) : value.toFixed(1)) + " " + units[unit];
}

function formatSeconds(value) {
  if (value < 0.001) return (value * 1e6).toFixed(0) + " µs";
  if (value < 1) return (value * 1e3).toFixed(1) + " ms";
  return value.toFixed(2) + " s";
}

const FORMATS = {
  percent: (v) => v.toFixed(1) + "%",
  bytes: formatBytes,
  seconds: formatSeconds,
  number: (v) => v.toLocaleString("en-US"),
};

// ------------------------------------------------------------------ charts

function drawChart(id) {
  const canvas = document.getElementById(id);
  const chart = CHARTS[id];
  const width = canvas.clientWidth, height = canvas.clientHeight;
  const g = fitCanvas(canvas, width, height);  // task_chart.js

  const left = 56, right = chart.formatRight ? 64 : 12, top = 8, bottom = 20;
  const plotWidth = width - left - right, plotHeight = height - top - bottom;
  const now = points.length ? points[points.length - 1].time : Date.now() / 1000;
  const start = now - HISTORY_SECONDS;
  const x = (time) => left + ((time - start) / HISTORY_SECONDS) * plotWidth;

  const scales = {};
  for (const side of ["left", "right"]) {
    const keys = chart.series.filter((s) => (side === "right") === !!s.right).map((s) => s.key);
    let max = 0;
    for (const point of points) for (const key of keys) max = Math.max(max, point[key] || 0);
    if (side === "right") scales.right = niceCeil(max / MEBIBYTE) * MEBIBYTE;  // the right axis holds bytes
    else if (chart.integer) scales.left = Math.max(4, Math.ceil(niceCeil(max) / 4) * 4);  // whole ticks
    else scales.left = niceCeil(max);
  }

  g.strokeStyle = "#e2e5ea";
  g.fillStyle = "#6b7484";
  g.lineWidth = 1;
  for (let i = 0; i <= 4; i++) {
    const y = top + plotHeight - (i / 4) * plotHeight;
    g.beginPath(); g.moveTo(left, y); g.lineTo(left + plotWidth, y); g.stroke();
    g.textAlign = "right";
    g.fillText(chart.format((scales.left * i) / 4), left - 6, y + 4);
    if (chart.formatRight) {
      g.textAlign = "left";
      g.fillText(chart.formatRight((scales.right * i) / 4), left + plotWidth + 6, y + 4);
    }
  }
  g.textAlign = "center";
  for (let minutes = 10; minutes >= 0; minutes -= 2) {
    g.fillText(minutes ? `-${minutes} min` : "now", x(now - minutes * 60), height - 5);
  }

  for (const series of chart.series) {
    const scale = series.right ? scales.right : scales.left;
    g.strokeStyle = series.color;
    g.lineWidth = 1.8;
    g.beginPath();
    let drawn = 0;
    for (const point of points) {
      if (point.time < start) continue;
      const px = x(point.time), py = top + plotHeight - ((point[series.key] || 0) / scale) * plotHeight;
      if (drawn === 0) g.moveTo(px, py); else g.lineTo(px, py);
      drawn += 1;
    }
    if (drawn === 1) g.lineTo(left + plotWidth, top + plotHeight - ((points[points.length - 1][series.key] || 0) / scale) * plotHeight);
    g.stroke();
  }
  canvas.dataset.points = String(points.filter((p) => p.time >= start).length);
}

function drawLegends() {
  for (const [id, chart] of Object.entries(CHARTS)) {
    const legend = document.querySelector(`.legend[data-for="${id}"]`);
    legend.replaceChildren();
    for (const series of chart.series) {
      const mark = document.createElement("i");
      mark.style.background = series.color;
      legend.append(mark, series.name + (series.right ? " (right)" : ""));
    }
  }
}

function drawCharts() {
  for (const id of Object.keys(CHARTS)) drawChart(id);
}

// ------------------------------------------------------------------ tables

function fillSortable(id, rows) {
  const table = document.getElementById(id);
  const headers = [...table.querySelectorAll("th")];
  const sort = sortState[id] || {key: headers[0].dataset.key, ascending: true};
  sortState[id] = sort;
  const sorted = [...rows].sort((a, b) => {
    const left = a[sort.key], right = b[sort.key];
    const order = typeof left === "string" ? left.localeCompare(right) : left - right;
    return sort.ascending ? order : -order;
  });
  for (const th of headers) {
    th.classList.toggle("sorted", th.dataset.key === sort.key);
    th.classList.toggle("ascending", th.dataset.key === sort.key && sort.ascending);
  }
  const body = table.tBodies[0];
  body.replaceChildren(...sorted.map((row) => {
    const tr = document.createElement("tr");
    for (const th of headers) {
      const td = document.createElement("td");
      const value = row[th.dataset.key];
      if (th.dataset.type === "text") {
        td.className = "text";
        td.textContent = value;
      } else {
        td.textContent = FORMATS[th.dataset.format || "number"](value);
      }
      tr.append(td);
    }
    return tr;
  }));
}

function fillCounters(id, counters) {
  const body = document.getElementById(id).tBodies[0];
  body.replaceChildren(...Object.entries(counters).map(([name, value]) => {
    const tr = document.createElement("tr");
    const label = document.createElement("td"), number = document.createElement("td");
    label.textContent = name;
    number.textContent = value.toLocaleString("en-US");
    tr.append(label, number);
    return tr;
  }));
}

function setupSorting() {
  for (const table of document.querySelectorAll("table.sortable")) {
    for (const th of table.querySelectorAll("th")) {
      th.addEventListener("click", () => {
        const current = sortState[table.id];
        const text = th.dataset.type === "text";
        sortState[table.id] = current && current.key === th.dataset.key
          ? {key: th.dataset.key, ascending: !current.ascending}
          : {key: th.dataset.key, ascending: text};  // numbers: largest first
        if (latest && latest.snapshot) fillTables(latest.snapshot);
      });
    }
  }
}

function fillTables(snapshot) {
  fillSortable("workers", snapshot.workers);
  fillSortable("managers", snapshot.managers);
  fillSortable("groups", snapshot.groups);
  fillSortable("functions", snapshot.functions);
  fillSortable("clients", snapshot.clients);
  fillCounters("task-states", snapshot.task_states);
  fillCounters("messages-sent", snapshot.messages_sent);
  fillCounters("messages-received", snapshot.messages_received);
}

// ------------------------------------------------------------------ the feed

function setText(id, text) {
  document.getElementById(id).textContent = text;
}

function setStatus(kind, text) {
  const status = document.getElementById("status");
  status.className = "status " + kind;
  status.textContent = text;
}

function addPoint(point) {
  if (!point || (points.length && point.time <= points[points.length - 1].time)) return;
  points.push(point);
  while (points.length && points[0].time < point.time - HISTORY_SECONDS - 5) points.shift();
}

function showState(state) {
  latest = state;
  setText("address", state.address);
  const snapshot = state.snapshot;
  if (!snapshot) {
    setStatus("waiting", "no snapshot from " + state.address + " yet");
    return;
  }
  setStatus("live", "live · " + new Date().toLocaleTimeString());
  addPoint(snapshot.point);
  const states = snapshot.task_states;
  setText("card-workers", formatNumber(snapshot.scheduler.workers));
  setText("card-clients", formatNumber(snapshot.scheduler.clients));
  const quotas = snapshot.scheduler;
  setText("client-quotas", quotas.client_task_quota ? `quotas of each client: ${formatNumber(quotas.client_task_quota)} ` +
    `tasks in the scheduler, ${formatBytes(quotas.client_memory_quota)} of objects in storage` : "");
  setText("tasks-received", snapshot.tasks_received.toLocaleString("en-US"));
  setText("tasks-succeeded", (states.success || 0).toLocaleString("en-US"));
  setText("tasks-failed", ((states.failed || 0) + (states.rejected || 0)).toLocaleString("en-US"));
  setText("tasks-queued", (states.queued || 0).toLocaleString("en-US"));
  setText("card-cpu", snapshot.scheduler.cpu.toFixed(1) + "%");
  setText("card-rss", formatBytes(snapshot.scheduler.rss_bytes));
  setText("workers-count", `(${snapshot.workers.length})`);
  setText("managers-count", `(${snapshot.managers.length})`);
  fillTables(snapshot);
  drawCharts();
  const now = snapshot.stream.origin;
  addStreamRuns(snapshot.stream, now);
  runningRuns = decodeTaskRuns(snapshot.running);
  drawStream(now);
  fillProgress(snapshot.progress);
  fillEvents(snapshot.events);
  fillObjects(snapshot.objects);
  if (Date.now() - lastSearch >= SEARCH_EVERY_MS) searchTasks();
}

// ------------------------------------------------------------------ tasks

function clock(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  const date = new Date(seconds * 1000);
  return date.toLocaleTimeString("en-GB", {hour12: false}) + "." + String(date.getMilliseconds()).padStart(3, "0");
}

function cell(text, className) {
  const td = document.createElement("td");
  td.textContent = text;
  if (className) td.className = className;
  return td;
}

function addStreamRuns(compact, now) {
  streamRuns.push(...decodeTaskRuns(compact));
  const since = now - STREAM_SECONDS;
  let drop = 0;
  while (drop < streamRuns.length && (streamRuns[drop].ended < since || streamRuns.length - drop > STREAM_RUNS)) drop++;
  if (drop) streamRuns = streamRuns.slice(drop);
}

function drawStream(now) {
  taskChart.setRuns([...streamRuns, ...runningRuns], now);
  const legend = document.getElementById("stream-legend");
  const names = (taskChart.canvas.dataset.functions || "").split("\n").filter((name) => name);
  legend.replaceChildren(...names.slice(0, 24).map((name) => {
    const item = document.createElement("span");
    const mark = document.createElement("i");
    mark.style.background = functionColor(name);
    item.append(mark, name);
    return item;
  }));
}

function fillProgress(rows) {
  const body = document.getElementById("progress").tBodies[0];
  body.replaceChildren(...rows.map((row) => {
    const tr = document.createElement("tr");
    tr.dataset.function = row.function;
    const total = Math.max(1, row.done + row.running + row.waiting);
    const bar = document.createElement("div");
    bar.className = "bar";
    for (const [kind, count] of [["done", row.done - row.failed], ["failed", row.failed], ["running", row.running],
                                 ["waiting", row.waiting]]) {
      const part = document.createElement("span");
      part.className = kind;
      part.style.width = (100 * count / total) + "%";
      bar.append(part);
    }
    const barCell = document.createElement("td");
    barCell.className = "bar-cell";
    barCell.append(bar);
    tr.append(cell(row.function || "(not named)", "text"), barCell, cell(formatNumber(row.done)),
              cell(formatNumber(row.failed)), cell(formatNumber(row.running)), cell(formatNumber(row.waiting)));
    return tr;
  }));
}

function fillEvents(events) {
  setText("events-count", `(${events.length})`);
  const body = document.getElementById("events").tBodies[0];
  body.replaceChildren(...events.map((event) => {
    const tr = document.createElement("tr");
    tr.dataset.subject = event.subject;
    tr.append(cell(clock(event.time), "text"), cell(event.kind, "text"), cell(event.text, "wrap"));
    return tr;
  }));
}

function fillObjects(objects) {
  setText("objects-total", `(${formatBytes(objects.memory_bytes)} in memory, ` +
    `${formatBytes(objects.spilled_bytes)} spilled to disk)`);
  const owners = document.getElementById("objects").tBodies[0];
  owners.replaceChildren(...objects.owners.map((row) => {
    const tr = document.createElement("tr");
    tr.append(cell(row.owner, "text"), cell(formatBytes(row.memory_bytes)), cell(formatBytes(row.spilled_bytes)));
    return tr;
  }));
  const largest = document.getElementById("largest-objects").tBodies[0];
  largest.replaceChildren(...objects.largest.slice(0, LARGEST_SHOWN).map((row) => {
    const tr = document.createElement("tr");
    tr.append(cell(row.object, "text id"), cell(row.owner, "text"), cell(formatBytes(row.bytes)),
      cell(row.spilled ? "disk" : "memory", "text"));
    return tr;
  }));
}

async function searchTasks() {
  lastSearch = Date.now();
  const form = new FormData(document.getElementById("task-search"));
  const query = new URLSearchParams(form).toString();
  let found;
  try {
    const response = await fetch("tasks.json?" + query);
    if (!response.ok) {  // a refused search (a task ID that is not hexadecimal...) says why, in place of the runs
      setText("tasks-count", `(${(await response.text()).trim()})`);
      document.getElementById("tasks").tBodies[0].replaceChildren();
      return;
    }
    found = await response.json();
  } catch (error) {
    return;
  }
  const kept = latest && latest.snapshot ? latest.snapshot.tasks_kept : 0;
  setText("tasks-count", `(${formatNumber(found.matched)} match, ${formatNumber(found.tasks.length)} shown; ` +
                         `the last ${formatNumber(kept)} runs are kept)`);
  const body = document.getElementById("tasks").tBodies[0];
  body.replaceChildren(...found.tasks.map((run) => {
    const tr = document.createElement("tr");
    tr.dataset.state = run.state;
    const end = run.ended === null ? Date.now() / 1000 : run.ended;
    tr.append(cell(run.function, "text"), cell(run.state, "text"), cell(run.client, "text"),
              cell(run.worker, "text"), cell(clock(run.queued)), cell(clock(run.started)), cell(clock(run.ended)),
              cell(formatSeconds(end - run.started)), cell(run.error, "text error"), cell(run.task_id, "text id"));
    tr.cells[8].title = run.error;
    return tr;
  }));
}

function setupTasks() {
  taskChart = new TaskChart(document.getElementById("task-stream"), {
    live: true, window: 300, tooltip: document.getElementById("tooltip"),
  });
  for (const button of document.querySelectorAll("#stream-range button")) {
    button.addEventListener("click", () => {
      for (const other of document.querySelectorAll("#stream-range button")) other.classList.toggle("chosen", other === button);
      taskChart.window = Number(button.dataset.seconds);
      taskChart.view = null;
      taskChart.draw();
    });
  }
  let pending = null;
  const form = document.getElementById("task-search");
  form.addEventListener("input", () => { clearTimeout(pending); pending = setTimeout(searchTasks, 250); });
  form.addEventListener("submit", (event) => { event.preventDefault(); searchTasks(); });
}

function connect() {
  const events = new EventSource("events");
  events.addEventListener("history", (event) => {
    points.length = 0;
    for (const point of JSON.parse(event.data)) addPoint(point);
    drawCharts();
  });
  events.addEventListener("stream", (event) => {
    streamRuns = [];
    const compact = JSON.parse(event.data);
    addStreamRuns(compact, compact.origin);
  });
  events.addEventListener("state", (event) => showState(JSON.parse(event.data)));
  events.onerror = () => setStatus("lost", "connection to scaler_ui lost, retrying");
}

drawLegends();
setupSorting();
setupTasks();
drawCharts();
window.addEventListener("resize", () => { drawCharts(); taskChart.draw(); });
connect();
