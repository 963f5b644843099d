// inside.js — the playground's "Inside the model" view: which tokens each
// token of the prompt attends to, and the logit lens, from POST /v1/inspect.
//
// "Look inside" asks for the logit lens of every layer (the grid); the
// attention of one layer at a time is asked for when that layer is picked,
// and kept: an answer for one layer stays small for every model size (an
// answer for all of gpt2-xl's would be hundreds of megabytes).  Later asks
// send the token ids of the first answer, so every answer is about the same
// tokens.  A newer run drops whatever an older one still brings.

import { ApiError, postJSON } from "./api.js";
import { altsList, formatProb, hueFor, placeTip, quotedToken, visibleToken } from "./tokens.js";

const LENS_K = 5;
const AVERAGE = "avg";

const $ = (id) => document.getElementById(id);

const ui = {
  run: $("inside-run"),
  layer: $("inside-layer"),
  head: $("inside-head"),
  error: $("inside-error"),
  status: $("inside-status"),
  body: $("inside-body"),
  tokens: $("inside-tokens"),
  map: $("inside-heatmap"),
  lens: $("inside-lens"),
  tip: $("inside-tip"),
  prompt: $("prompt"),
  apiKey: $("api-key"),
};

const view = {
  run: 0,               // the run whose answers are shown; older ones are dropped
  controller: null,
  ids: [],              // the prompt's token ids
  texts: [],            // and their text, as the server names them
  layers: [],           // the model's layers (the lens grid's rows)
  lens: [],             // [layer][position] -> guesses
  attention: new Map(), // layer -> [head][query][key]
  query: null,          // the token whose attention is shaded
};

function say(text) {
  ui.status.textContent = text;
}

function showError(err) {
  ui.error.replaceChildren();
  const title = document.createElement("strong");
  title.textContent = err.status ? `Error · ${err.status}` : "Error";
  const msg = document.createElement("p");
  msg.textContent = err.message;
  ui.error.append(title, msg);
  if (err.param) {
    const p = document.createElement("p");
    p.className = "param";
    p.textContent = `Field: ${err.param}`;
    ui.error.append(p);
  }
  ui.error.hidden = false;
}

// The model the playground's picker names (empty: the server's default).
function inspect(body) {
  const model = $("model")?.value;
  if (model) body = { ...body, model };
  return postJSON("v1/inspect", body, {
    apiKey: ui.apiKey.value.trim(), signal: view.controller.signal,
  });
}

// ---- runs ----

async function lookInside() {
  view.controller?.abort();
  view.controller = new AbortController();
  const run = ++view.run;
  ui.error.hidden = true;
  ui.run.disabled = true;
  say("Looking inside…");
  try {
    const a = await inspect({ prompt: ui.prompt.value, logit_lens: LENS_K });
    if (run !== view.run) return;
    view.ids = a.tokens.map((t) => t.id);
    view.texts = a.tokens.map((t) => t.text);
    view.layers = a.layers;
    view.lens = a.logit_lens;
    view.attention.clear();
    view.query = null;
    fillLayerPicker();
    drawTokens();
    drawLens();
    ui.body.hidden = false;
    await showLayer(run);
  } catch (err) {
    if (err.name === "AbortError" || run !== view.run) return;
    showError(err instanceof ApiError ? err : new ApiError(String(err?.message ?? err)));
    say("Failed.");
  } finally {
    if (run === view.run) ui.run.disabled = false;
  }
}

// The picked layer's attention, asked for once.
async function showLayer(run) {
  const layer = Number(ui.layer.value);
  if (!view.attention.has(layer)) {
    say(`Reading layer ${layer}'s attention…`);
    const a = await inspect({ prompt: view.ids, attention: true, layers: [layer] });
    if (run !== view.run) return;
    view.attention.set(layer, a.attention[0]);
    fillHeadPicker(a.attention[0].length);
  }
  drawMap();
  shade(view.query);
  say(`${view.ids.length} tokens, ${view.layers.length} layers.`);
}

async function pickLayer() {
  const run = view.run;
  try {
    await showLayer(run);
  } catch (err) {
    if (err.name === "AbortError" || run !== view.run) return;
    showError(err instanceof ApiError ? err : new ApiError(String(err?.message ?? err)));
  }
}

function fillLayerPicker() {
  ui.layer.replaceChildren(...view.layers.map((l) => new Option(String(l), String(l))));
  ui.layer.value = String(view.layers[view.layers.length - 1]);
  ui.layer.disabled = false;
}

function fillHeadPicker(nHead) {
  if (ui.head.options.length === nHead + 1) return;
  const keep = ui.head.value || AVERAGE;
  const options = [new Option("all (average)", AVERAGE)];
  for (let h = 0; h < nHead; h++) options.push(new Option(String(h), String(h)));
  ui.head.replaceChildren(...options);
  ui.head.value = Number(keep) < nHead ? keep : AVERAGE;
  ui.head.disabled = false;
}

// The picked layer and head's attention rows: [query][key], keys 0..query;
// "all" averages the heads.
function rows() {
  const heads = view.attention.get(Number(ui.layer.value));
  if (!heads) return null;
  if (ui.head.value !== AVERAGE) return heads[Number(ui.head.value)];
  return heads[0].map((row, q) => row.map((_, k) => {
    let sum = 0;
    for (const h of heads) sum += h[q][k];
    return sum / heads.length;
  }));
}

// ---- the tokens and their shading ----

function drawTokens() {
  const frag = document.createDocumentFragment();
  view.texts.forEach((text, i) => {
    const t = document.createElement("span");
    t.className = "chip itok";
    t.textContent = visibleToken(text);
    t.dataset.pos = String(i);
    t.tabIndex = i === 0 ? 0 : -1;
    t.setAttribute("aria-describedby", ui.tip.id);
    frag.append(t);
  });
  ui.tokens.replaceChildren(frag);
}

// Shades every token by the attention the token at `query` pays it, and
// marks its row on the map.
function shade(query) {
  const moved = query !== view.query;
  view.query = query;
  if (moved) drawMap();
  const r = query == null ? null : rows()?.[query];
  for (const t of ui.tokens.children) {
    const k = Number(t.dataset.pos);
    const w = r && k <= query ? r[k] : 0;
    t.style.setProperty("--a", String(Math.sqrt(w)));
    t.dataset.weight = w.toPrecision(6);
    t.classList.toggle("query", k === query);
  }
}

function tokenAt(target) {
  return target?.classList?.contains("itok") ? Number(target.dataset.pos) : null;
}

function showTokenTip(el, query) {
  const r = rows()?.[query];
  if (!r) return;
  const best = r.map((p, k) => [view.texts[k], p]).sort((a, b) => b[1] - a[1]).slice(0, 5);
  fillTip(`${quotedToken(view.texts[query])} attends to`, "", best, null);
  placeTip(ui.tip, el.getBoundingClientRect());
}

function onTokenKey(e) {
  const i = tokenAt(e.target);
  if (i === null) return;
  const to = { ArrowRight: i + 1, ArrowLeft: i - 1, Home: 0, End: view.texts.length - 1 }[e.key];
  if (e.key === "Escape") ui.tip.hidden = true;
  if (to === undefined || to < 0 || to >= view.texts.length) return;
  e.preventDefault();
  e.target.tabIndex = -1;
  const next = ui.tokens.children[to];
  next.tabIndex = 0;
  next.focus();
}

// ---- the attention map ----

function drawMap() {
  const r = rows();
  const n = view.ids.length;
  const canvas = ui.map;
  const size = Math.max(1, Math.round(canvas.clientWidth * (window.devicePixelRatio || 1)));
  canvas.width = size;
  canvas.height = size;
  canvas.dataset.layer = ui.layer.value;
  canvas.dataset.head = ui.head.value;
  const ctx = canvas.getContext("2d");
  ctx.clearRect(0, 0, size, size);
  if (!r) return;
  const cell = size / n;
  const accent = getComputedStyle(canvas).getPropertyValue("--accent").trim() || "#2f5bd3";
  ctx.fillStyle = accent;
  for (let q = 0; q < n; q++) {
    for (let k = 0; k <= q; k++) {
      // square root: small weights stay visible beside a dominant one
      ctx.globalAlpha = Math.sqrt(r[q][k]);
      ctx.fillRect(Math.floor(k * cell), Math.floor(q * cell),
        Math.ceil(cell), Math.ceil(cell));
    }
  }
  ctx.globalAlpha = 1;
  if (view.query != null) {
    ctx.strokeStyle = getComputedStyle(canvas).getPropertyValue("--focus").trim() || "#b36b00";
    ctx.lineWidth = Math.max(1, Math.min(3, cell / 4));
    ctx.strokeRect(0, view.query * cell, (view.query + 1) * cell, cell);
  }
  canvas.setAttribute("aria-label", `Attention map of layer ${ui.layer.value}, ` +
    `${ui.head.value === AVERAGE ? "all heads averaged" : `head ${ui.head.value}`}: ` +
    `${n} rows of query tokens, ${n} columns of the tokens they attend to.`);
}

function onMapMove(e) {
  const r = rows();
  if (!r) return;
  const box = ui.map.getBoundingClientRect();
  const n = view.ids.length;
  const q = Math.floor(((e.clientY - box.top) / box.height) * n);
  const k = Math.floor(((e.clientX - box.left) / box.width) * n);
  if (q < 0 || q >= n || k < 0 || k >= n) return;
  shade(q);
  if (k > q) {
    ui.tip.hidden = true;
    return;
  }
  fillTip(`${quotedToken(view.texts[q])} → ${quotedToken(view.texts[k])}`,
    formatProb(r[q][k]), null, null);
  placeTip(ui.tip, { left: e.clientX, right: e.clientX, top: e.clientY, bottom: e.clientY + 12 });
}

// ---- the logit lens ----

function drawLens() {
  const head = document.createElement("thead");
  const hr = head.insertRow();
  hr.append(document.createElement("th"));
  for (const text of view.texts) {
    const th = document.createElement("th");
    th.scope = "col";
    th.textContent = visibleToken(text).replace(/ /g, "␣");
    hr.append(th);
  }
  const body = document.createElement("tbody");
  view.layers.forEach((layer, i) => {
    const tr = body.insertRow();
    const th = document.createElement("th");
    th.scope = "row";
    th.textContent = i === view.layers.length - 1 ? `${layer} (output)` : String(layer);
    tr.append(th);
    view.lens[i].forEach((guesses, p) => {
      const td = tr.insertCell();
      const best = guesses[0];
      td.textContent = visibleToken(best.text).replace(/ /g, "␣");
      td.style.setProperty("--h", String(hueFor(best.prob)));
      td.dataset.layer = String(i);
      td.dataset.pos = String(p);
      td.dataset.prob = best.prob.toPrecision(6);
      td.tabIndex = i === 0 && p === 0 ? 0 : -1;
      td.setAttribute("aria-describedby", ui.tip.id);
    });
  });
  ui.lens.replaceChildren(head, body);
}

function cellAt(target) {
  return target?.tagName === "TD" && target.dataset.layer !== undefined ? target : null;
}

function showCellTip(td) {
  const i = Number(td.dataset.layer);
  const p = Number(td.dataset.pos);
  const guesses = view.lens[i][p];
  fillTip(`Layer ${view.layers[i]}, after ${quotedToken(view.texts[p])}`,
    formatProb(guesses[0].prob), guesses.map((g) => [g.text, g.prob]), guesses[0].text);
  placeTip(ui.tip, td.getBoundingClientRect());
}

function onLensKey(e) {
  const td = cellAt(e.target);
  if (!td) return;
  const i = Number(td.dataset.layer);
  const p = Number(td.dataset.pos);
  const move = { ArrowRight: [0, 1], ArrowLeft: [0, -1], ArrowDown: [1, 0], ArrowUp: [-1, 0] }[e.key];
  if (e.key === "Escape") ui.tip.hidden = true;
  if (!move) return;
  const next = ui.lens.querySelector(`td[data-layer="${i + move[0]}"][data-pos="${p + move[1]}"]`);
  if (!next) return;
  e.preventDefault();
  td.tabIndex = -1;
  next.tabIndex = 0;
  next.focus();
}

// ---- the tooltip ----

function fillTip(title, value, entries, chosen) {
  const head = document.createElement("div");
  head.className = "tip-head";
  const name = document.createElement("span");
  name.className = "tip-token";
  name.textContent = title;
  const prob = document.createElement("span");
  prob.className = "tip-prob";
  prob.textContent = value;
  head.append(name, prob);
  ui.tip.replaceChildren(head);
  if (entries) ui.tip.append(altsList(entries, chosen));
  ui.tip.hidden = false;
}

// ---- wiring ----

ui.run.addEventListener("click", lookInside);
ui.layer.addEventListener("change", pickLayer);
ui.head.addEventListener("change", () => {
  drawMap();
  shade(view.query);
});
ui.tokens.addEventListener("mouseover", (e) => {
  const q = tokenAt(e.target);
  if (q === null) return;
  shade(q);
  showTokenTip(e.target, q);
});
ui.tokens.addEventListener("focusin", (e) => {
  const q = tokenAt(e.target);
  if (q === null) return;
  shade(q);
  showTokenTip(e.target, q);
});
ui.tokens.addEventListener("keydown", onTokenKey);
ui.tokens.addEventListener("mouseleave", () => { ui.tip.hidden = true; });
ui.tokens.addEventListener("focusout", () => { ui.tip.hidden = true; });
ui.map.addEventListener("pointermove", onMapMove);
ui.map.addEventListener("pointerleave", () => { ui.tip.hidden = true; });
ui.lens.addEventListener("mouseover", (e) => {
  const td = cellAt(e.target);
  if (td) showCellTip(td);
});
ui.lens.addEventListener("focusin", (e) => {
  const td = cellAt(e.target);
  if (td) showCellTip(td);
});
ui.lens.addEventListener("keydown", onLensKey);
ui.lens.addEventListener("mouseleave", () => { ui.tip.hidden = true; });
ui.lens.addEventListener("focusout", () => { ui.tip.hidden = true; });
window.addEventListener("resize", () => {
  ui.tip.hidden = true;
  if (!ui.body.hidden) drawMap();
});
window.addEventListener("scroll", () => { ui.tip.hidden = true; }, { passive: true });
