// server.js — the Server page: reads GET /metrics every two seconds and
// draws the last two minutes as small charts (tokens a second, requests,
// time to first token, the gaps between tokens, the KV cache's blocks,
// bytes and hits by tier) and a table of the keys (requests, tokens,
// refusals, pauses).
//
// Everything comes from /metrics, which any valid key may read (README:
// Metrics): the page shows what that shows, the keys by the names the keys
// file gives them, never a key itself.  The key is the playground's (kept
// in this browser by the playground page).

import { ApiError, getText } from "./api.js";

const $ = (id) => document.getElementById(id);
const KEY_STORE = "gpt2d.apiKey";
const EVERY_MS = 2000;
const POINTS = 60;           // two minutes at one reading every 2 s
const WINDOW = 5;            // readings back for rates and percentiles: 10 s

// ---- the Prometheus text format ----

// {name: [{labels: {k: v}, value}]} of every sample line.
export function parseMetrics(text) {
  const out = new Map();
  for (const line of text.split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)$/.exec(line);
    if (!m) continue;
    const labels = {};
    if (m[3]) {
      for (const l of m[3].matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) {
        labels[l[1]] = l[2].replace(/\\(.)/g, (_, c) => (c === "n" ? "\n" : c));
      }
    }
    const value = Number(m[4]);
    if (!out.has(m[1])) out.set(m[1], []);
    out.get(m[1]).push({ labels, value });
  }
  return out;
}

// The sum of `name`'s samples whose labels include `match`.
function total(snap, name, match = {}) {
  let sum = 0;
  for (const s of snap.get(name) ?? []) {
    if (Object.entries(match).every(([k, v]) => s.labels[k] === v)) sum += s.value;
  }
  return sum;
}

// Per second between two readings (0 when there is only one).
function rate(now, then, name, match) {
  if (!then) return 0;
  const dt = (now.t - then.t) / 1000;
  const d = total(now.m, name, match) - total(then.m, name, match);
  return dt > 0 && d > 0 ? d / dt : 0;
}

// The q-quantile of what histogram `name` counted between two readings,
// interpolated within its bucket as Prometheus's histogram_quantile does;
// null when it counted nothing.
function quantile(now, then, name, q) {
  if (!then) return null;
  const buckets = new Map();
  for (const [snap, sign] of [[now.m, 1], [then.m, -1]]) {
    for (const s of snap.get(name + "_bucket") ?? []) {
      const le = s.labels.le === "+Inf" ? Infinity : Number(s.labels.le);
      buckets.set(le, (buckets.get(le) ?? 0) + sign * s.value);
    }
  }
  const les = [...buckets.keys()].sort((a, b) => a - b);
  const count = buckets.get(Infinity) ?? 0;
  if (count <= 0) return null;
  const rank = q * count;
  let below = 0;
  let lower = 0;
  for (const le of les) {
    const c = buckets.get(le);
    if (c >= rank) {
      if (le === Infinity) return lower;
      return lower + (le - lower) * ((rank - below) / Math.max(c - below, 1e-9));
    }
    below = c;
    lower = le;
  }
  return lower;
}

// ---- the charts ----

function seconds(v) {
  if (v === null) return "–";
  return v < 1 ? `${Math.round(v * 1000)} ms` : `${v.toFixed(2)} s`;
}
function count(v) {
  return v === null ? "–" : v >= 100 ? String(Math.round(v)) : String(Math.round(v * 10) / 10);
}
function bytes(v) {
  if (v === null) return "–";
  const units = ["B", "kB", "MB", "GB", "TB"];
  let i = 0;
  while (v >= 1000 && i < units.length - 1) { v /= 1000; i++; }
  return `${v >= 100 || i === 0 ? Math.round(v) : v.toFixed(1)} ${units[i]}`;
}

// Each chart: its series, each read from the newest reading and the one
// WINDOW readings before (or the one just before, for `recent`).
const CHARTS = [
  { id: "tokens", title: "Tokens/s", fmt: count, series: [
    { label: "generated", read: (n, p) => rate(n, p, "gpt2d_generated_tokens_total") },
    { label: "prompt", read: (n, p) => rate(n, p, "gpt2d_prompt_tokens_total") },
  ] },
  { id: "requests", title: "Sequences", fmt: count, series: [
    { label: "running", read: (n) => total(n.m, "gpt2d_sequences_running") },
    { label: "queued", read: (n) => total(n.m, "gpt2d_queue_depth") },
    { label: "slots", read: (n) => total(n.m, "gpt2d_slots_total") },
  ] },
  { id: "ttft", title: "Time to first token (10 s)", fmt: seconds, series: [
    { label: "p50", read: (n, p) => quantile(n, p, "gpt2d_time_to_first_token_seconds", 0.5) },
    { label: "p95", read: (n, p) => quantile(n, p, "gpt2d_time_to_first_token_seconds", 0.95) },
  ] },
  { id: "gap", title: "Between tokens (10 s)", fmt: seconds, series: [
    { label: "p50", read: (n, p) => quantile(n, p, "gpt2d_inter_token_latency_seconds", 0.5) },
    { label: "p95", read: (n, p) => quantile(n, p, "gpt2d_inter_token_latency_seconds", 0.95) },
  ] },
  { id: "blocks", title: "KV blocks in RAM", fmt: count, series: [
    { label: "in use", read: (n) => total(n.m, "gpt2d_kv_blocks", { state: "in_use" }) },
    { label: "cached", read: (n) => total(n.m, "gpt2d_kv_blocks", { state: "cached" }) },
    { label: "free", read: (n) => total(n.m, "gpt2d_kv_blocks", { state: "free" }) },
  ] },
  { id: "bytes", title: "KV bytes", fmt: bytes, series: [
    { label: "RAM", read: (n) => total(n.m, "gpt2d_kv_bytes", { tier: "ram" }) },
    { label: "disk", read: (n) => total(n.m, "gpt2d_kv_bytes", { tier: "disk" }) },
  ] },
  { id: "hits", title: "Prompt tokens/s from the cache", fmt: count, series: [
    { label: "RAM", read: (n, p) => rate(n, p, "gpt2d_kv_hit_tokens_total", { tier: "ram" }) },
    { label: "disk", read: (n, p) => rate(n, p, "gpt2d_kv_hit_tokens_total", { tier: "disk" }) },
  ] },
];

const SVG = "http://www.w3.org/2000/svg";

function svg(tag, attrs) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  return el;
}

// Builds each chart's figure once: caption, drawing, legend.
function buildCharts() {
  for (const c of CHARTS) {
    const fig = document.querySelector(`[data-chart="${c.id}"]`);
    c.points = c.series.map(() => []);
    const cap = document.createElement("figcaption");
    const title = document.createElement("strong");
    title.textContent = c.title;
    c.scale = document.createElement("span");
    cap.append(title, c.scale);
    c.draw = svg("svg", { viewBox: `0 0 ${POINTS - 1} 100`, preserveAspectRatio: "none", role: "img" });
    c.draw.append(svg("line", { x1: 0, y1: 100, x2: POINTS - 1, y2: 100, class: "axis" }));
    c.lines = c.series.map((_, i) => {
      const line = svg("polyline", { class: `s${i}`, points: "" });
      c.draw.append(line);
      return line;
    });
    c.legend = document.createElement("ul");
    c.legend.className = "legend";
    c.values = c.series.map((s, i) => {
      const li = document.createElement("li");
      li.className = `s${i}`;
      const v = document.createElement("span");
      v.dataset.series = s.label;
      li.append(`${s.label} `, v);
      c.legend.append(li);
      return v;
    });
    fig.append(cap, c.draw, c.legend);
  }
}

function drawCharts(now, then) {
  for (const c of CHARTS) {
    c.series.forEach((s, i) => {
      const v = s.read(now, then);
      c.points[i].push(v);
      if (c.points[i].length > POINTS) c.points[i].shift();
      c.values[i].textContent = c.fmt(v);
    });
    const max = Math.max(1e-9, ...c.points.flat().filter((v) => v !== null));
    c.scale.textContent = `max ${c.fmt(max)}`;
    c.points.forEach((pts, i) => {
      const x0 = POINTS - pts.length;
      c.lines[i].setAttribute("points", pts.map((v, k) =>
        `${x0 + k},${(100 - ((v ?? 0) / max) * 96).toFixed(1)}`).join(" "));
    });
    c.draw.setAttribute("aria-label", `${c.title}, last two minutes: now ` +
      c.series.map((s, i) => `${s.label} ${c.values[i].textContent}`).join(", "));
  }
}

// ---- the keys ----

function drawKeys(now, then) {
  const names = new Set((now.m.get("gpt2d_key_requests_total") ?? []).map((s) => s.labels.key));
  const body = $("keys").tBodies[0];
  body.replaceChildren();
  if (names.size === 0) {
    const row = body.insertRow();
    const cell = row.insertCell();
    cell.colSpan = 5;
    cell.className = "empty";
    cell.textContent = "No request yet.";
    return;
  }
  for (const key of [...names].sort()) {
    const row = body.insertRow();
    row.dataset.key = key;
    const refused = (now.m.get("gpt2d_key_refused_total") ?? []).filter((s) => s.labels.key === key && s.value > 0);
    const cells = [
      key,
      count(rate(now, then, "gpt2d_key_requests_total", { key })),
      count(rate(now, then, "gpt2d_key_tokens_total", { key })),
      refused.length ? refused.map((s) => `${s.labels.reason} ${s.value}`).join(", ") : "0",
      String(total(now.m, "gpt2d_key_pauses_total", { key })),
    ];
    cells.forEach((text, i) => {
      const cell = i === 0 ? document.createElement("th") : row.insertCell();
      if (i === 0) { cell.scope = "row"; row.append(cell); }
      cell.textContent = text;
      if (i === 3) cell.className = "refusals";
    });
    if (refused.length) row.classList.add("refused");
  }
}

// ---- reading ----

const readings = [];
let paused = false;

function showServer(state, text) {
  $("server").dataset.state = state;
  $("server-text").textContent = text;
}

function uptime(snap) {
  const start = total(snap, "gpt2d_start_time_seconds");
  if (!start) return "";
  const s = Math.max(0, Date.now() / 1000 - start);
  const parts = s < 3600 ? `${Math.floor(s / 60)} min` : `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  return `, up ${parts}`;
}

async function read() {
  const key = (() => { try { return window.localStorage.getItem(KEY_STORE) ?? ""; } catch { return ""; } })();
  try {
    const m = parseMetrics(await getText("metrics", key));
    $("board-error").hidden = true;
    const now = { t: performance.now(), m };
    readings.push(now);
    if (readings.length > WINDOW + 1) readings.shift();
    const then = readings.length > 1 ? readings[Math.max(0, readings.length - 1 - WINDOW)] : null;
    drawCharts(now, then);
    drawKeys(now, then);
    const models = (m.get("gpt2d_model_loaded") ?? []).filter((s) => s.value > 0).map((s) => s.labels.model);
    showServer("ready", `${models.join(", ") || "no model loaded"}${uptime(m)}`);
    document.body.dataset.readings = String(Number(document.body.dataset.readings ?? 0) + 1);
  } catch (err) {
    const e = err instanceof ApiError ? err : new ApiError(String(err?.message ?? err));
    const box = $("board-error");
    box.hidden = false;
    if (e.status === 401) {
      showServer("locked", "API key needed");
      box.replaceChildren("The server wants an API key: enter it on the ",
        Object.assign(document.createElement("a"), { href: "index.html", textContent: "playground" }),
        " (it is kept in this browser), then come back.");
    } else {
      showServer("down", e.type === "network_error" ? "Not reachable" : `Error ${e.status}`);
      box.textContent = e.message;
    }
  }
}

function loop() {
  if (!paused) read();
  setTimeout(loop, EVERY_MS);
}

function wire() {
  buildCharts();
  const btn = $("pause");
  btn.addEventListener("click", () => {
    paused = !paused;
    btn.setAttribute("aria-pressed", String(paused));
    btn.textContent = paused ? "Resume" : "Pause";
    $("board-status").textContent = paused ? "Paused." : "Reading /metrics every 2 s.";
  });
  loop();
}

wire();
