// The task stream chart of Scaler's web monitor and of its performance reports (scaler/protocol/task_chart.py):
// one row per worker (more rows where its runs overlap: a task that waits for the tasks it submitted, slots
// beside each other), one bar per run from its start to its end, coloured by function, failures red-edged and
// marked. Zoom with the mouse wheel, drag to pan, double-click to see everything again. No library: a canvas.
"use strict";

const TASK_CHART_STATES = ["success", "failed", "cancelled", "worker died", "rejected", "running"];

// The runs of the compact form `task_chart.compact` writes, as objects.
function decodeTaskRuns(compact) {
  const runs = [];
  const origin = compact.origin;
  for (let i = 0; i < compact.task.length; i++) {
    const end = compact.e[i];
    runs.push({
      task: compact.task[i],
      function: compact.functions[compact.f[i]],
      worker: compact.workers[compact.w[i]],
      client: compact.clients[compact.c[i]],
      state: TASK_CHART_STATES[compact.s[i]],
      queued: origin + compact.q[i],
      started: origin + compact.b[i],
      ended: end === null ? null : origin + end,
      error: compact.error[i] || "",
    });
  }
  return runs;
}

// The 2-D context of ``canvas`` for drawing ``width`` x ``height`` CSS pixels, sharp on any screen, cleared
// (the dashboard's charts draw with it too).
function fitCanvas(canvas, width, height) {
  const ratio = window.devicePixelRatio || 1;
  if (canvas.width !== width * ratio || canvas.height !== height * ratio) {
    canvas.width = width * ratio;
    canvas.height = height * ratio;
  }
  const g = canvas.getContext("2d");
  g.setTransform(ratio, 0, 0, ratio, 0, 0);
  g.clearRect(0, 0, width, height);
  g.font = "11px system-ui, sans-serif";
  return g;
}

// A colour per function name: the same name has the same colour on every page and report.
function functionColor(name) {
  let hash = 2166136261;
  for (let i = 0; i < name.length; i++) hash = Math.imul(hash ^ name.charCodeAt(i), 16777619);
  const hue = (hash >>> 0) % 360;
  return `hsl(${hue}, 62%, ${48 + ((hash >>> 9) % 3) * 6}%)`;
}

function formatClock(seconds, span) {
  const date = new Date(seconds * 1000);
  const text = date.toLocaleTimeString("en-GB", {hour12: false});
  return span < 10 ? text + "." + String(date.getMilliseconds()).padStart(3, "0") : text;
}

function formatDuration(seconds) {
  if (seconds < 0.001) return (seconds * 1e6).toFixed(0) + " µs";
  if (seconds < 1) return (seconds * 1e3).toFixed(1) + " ms";
  if (seconds < 120) return seconds.toFixed(2) + " s";
  return (seconds / 60).toFixed(1) + " min";
}

class TaskChart {
  // options: {live: follow now, keeping `window` seconds; tooltip: an element to show a run's details in}
  constructor(canvas, options) {
    this.canvas = canvas;
    this.live = !!options.live;
    this.window = options.window || 300;
    this.tooltip = options.tooltip || null;
    this.runs = [];
    this.view = null;  // [start, end] chosen by zoom or pan; null: follow (live) or everything (report)
    this.now = Date.now() / 1000;
    this.rowHeight = 14;
    this.placed = [];  // [run, x0, x1, y] as drawn, for the tooltip
    this._drag = null;
    canvas.addEventListener("wheel", (event) => this._zoom(event), {passive: false});
    canvas.addEventListener("mousedown", (event) => { this._drag = {x: event.clientX, view: this.currentView()}; });
    window.addEventListener("mouseup", () => { this._drag = null; });
    canvas.addEventListener("mousemove", (event) => this._move(event));
    canvas.addEventListener("mouseleave", () => this._hideTooltip());
    canvas.addEventListener("dblclick", () => { this.view = null; this.draw(); });
  }

  setRuns(runs, now) {
    this.runs = runs;
    this.now = now || Date.now() / 1000;
    this.draw();
  }

  // The time range shown: the one chosen, else (live) the last `window` seconds, or less where no run is older,
  // else the runs' whole range.
  currentView() {
    if (this.view) return this.view;
    let start = Infinity, end = -Infinity;
    if (this.live) {
      for (const run of this.runs) start = Math.min(start, run.started);
      const earliest = Math.max(this.now - this.window, start - Math.max(1, (this.now - start) * 0.02));
      return [Math.min(earliest, this.now - 10), this.now];
    }
    for (const run of this.runs) {
      start = Math.min(start, run.started);
      end = Math.max(end, run.ended === null ? this.now : run.ended);
    }
    if (start === Infinity) return [this.now - 60, this.now];
    const margin = Math.max((end - start) * 0.02, 0.001);
    return [start - margin, end + margin];
  }

  // Rows: each worker's runs, packed into as few lanes as keep them apart. Runs placed from different messages may
  // overlap by the time those messages waited on their way (docs/monitoring.md, "Clocks"): an overlap narrower
  // than `slack` seconds (two pixels) opens no lane.
  _rows(start, end, slack) {
    const byWorker = new Map();
    for (const run of this.runs) {
      const stop = run.ended === null ? this.now : run.ended;
      if (stop < start || run.started > end) continue;
      if (!byWorker.has(run.worker)) byWorker.set(run.worker, []);
      byWorker.get(run.worker).push(run);
    }
    const rows = [];
    for (const worker of [...byWorker.keys()].sort()) {
      const runs = byWorker.get(worker).sort((a, b) => a.started - b.started);
      const lanes = [];  // the end of the last run of each lane
      const laneOf = new Map();
      for (const run of runs) {
        const stop = run.ended === null ? this.now : run.ended;
        let lane = lanes.findIndex((laneEnd) => laneEnd <= run.started + slack);
        if (lane < 0) { lane = lanes.length; lanes.push(stop); } else lanes[lane] = stop;
        laneOf.set(run, lane);
      }
      rows.push({worker, runs, laneOf, lanes: Math.max(1, lanes.length)});
    }
    return rows;
  }

  draw() {
    const canvas = this.canvas;
    const [start, end] = this.currentView();
    const left = 150, right = 10, top = 6, bottom = 22;
    const width = canvas.clientWidth;
    const rows = this._rows(start, end, (2 * (end - start)) / Math.max(1, width - left - right));
    const lanes = rows.reduce((sum, row) => sum + row.lanes, 0);
    const height = Math.max(120, top + bottom + lanes * this.rowHeight + rows.length * 3);
    canvas.style.height = height + "px";
    const g = fitCanvas(canvas, width, height);
    const plot = width - left - right;
    const x = (t) => left + ((t - start) / (end - start)) * plot;

    g.fillStyle = "#6b7484";
    g.strokeStyle = "#e2e5ea";
    for (let i = 0; i <= 6; i++) {
      const t = start + ((end - start) * i) / 6;
      g.beginPath(); g.moveTo(x(t), top); g.lineTo(x(t), height - bottom); g.stroke();
      g.textAlign = i === 6 ? "right" : "center";
      g.fillText(formatClock(t, end - start), x(t), height - 6);
    }
    this.placed = [];
    const drawn = new Set();
    let bars = 0, failures = 0, y = top;
    for (const row of rows) {
      g.fillStyle = "#1d2430";
      g.textAlign = "right";
      let label = row.worker;
      while (label.length > 4 && g.measureText(label).width > left - 10) label = label.slice(0, -2) + "…";
      g.fillText(label, left - 6, y + this.rowHeight - 3);
      for (const run of row.runs) {
        const laneY = y + row.laneOf.get(run) * this.rowHeight;
        const stop = run.ended === null ? this.now : run.ended;
        const x0 = Math.max(left, x(run.started));
        const x1 = Math.max(x0 + 1, Math.min(left + plot, x(stop)));
        g.fillStyle = functionColor(run.function);
        g.globalAlpha = run.state === "running" ? 0.55 : 1;
        g.fillRect(x0, laneY + 1, x1 - x0, this.rowHeight - 3);
        g.globalAlpha = 1;
        if (run.state !== "success" && run.state !== "running") {
          failures += 1;
          g.strokeStyle = "#dc2626";
          g.lineWidth = 2;
          g.strokeRect(x0, laneY + 1, Math.max(2, x1 - x0), this.rowHeight - 3);
          g.fillStyle = "#dc2626";
          g.fillRect(x1 - 1, laneY, 3, this.rowHeight - 1);
          g.lineWidth = 1;
        }
        this.placed.push([run, x0, x1, laneY]);
        drawn.add(run.function);
        bars += 1;
      }
      y += row.lanes * this.rowHeight + 3;
    }
    if (!rows.length) {
      g.fillStyle = "#6b7484";
      g.textAlign = "center";
      g.fillText("no task ran in this time range", left + plot / 2, top + 40);
    }
    canvas.dataset.bars = String(bars);
    canvas.dataset.failures = String(failures);
    canvas.dataset.functions = [...drawn].sort().join("\n");
  }

  _zoom(event) {
    event.preventDefault();
    const [start, end] = this.currentView();
    const rect = this.canvas.getBoundingClientRect();
    const fraction = Math.min(1, Math.max(0, (event.clientX - rect.left - 150) / (rect.width - 160)));
    const at = start + (end - start) * fraction;
    const factor = event.deltaY > 0 ? 1.25 : 0.8;
    const span = Math.max(0.0005, (end - start) * factor);
    this.view = [at - span * fraction, at + span * (1 - fraction)];
    this.draw();
  }

  _move(event) {
    if (this._drag) {
      const [start, end] = this._drag.view;
      const shift = ((this._drag.x - event.clientX) / (this.canvas.clientWidth - 160)) * (end - start);
      this.view = [start + shift, end + shift];
      this.draw();
      return;
    }
    const rect = this.canvas.getBoundingClientRect();
    const px = event.clientX - rect.left, py = event.clientY - rect.top;
    const hit = this.placed.find(([, x0, x1, y]) => px >= x0 - 1 && px <= x1 + 1 && py >= y && py <= y + this.rowHeight);
    if (!hit) { this._hideTooltip(); return; }
    this._showTooltip(hit[0], event.clientX, event.clientY);
  }

  _showTooltip(run, clientX, clientY) {
    const tip = this.tooltip;
    if (!tip) return;
    const stop = run.ended === null ? this.now : run.ended;
    const lines = [
      run.function,
      `${run.state} · ran ${formatDuration(stop - run.started)} · queued ${formatDuration(run.started - run.queued)}`,
      `task ${run.task}`,
      `worker ${run.worker}`,
      `client ${run.client}`,
    ];
    if (run.error) lines.push(run.error);
    tip.replaceChildren(...lines.map((line) => { const div = document.createElement("div"); div.textContent = line; return div; }));
    tip.style.display = "block";
    tip.style.left = (clientX + 12 + window.scrollX) + "px";
    tip.style.top = (clientY + 12 + window.scrollY) + "px";
  }

  _hideTooltip() {
    if (this.tooltip) this.tooltip.style.display = "none";
  }
}
