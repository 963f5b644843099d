// app.js — the playground: reads the form, streams a completion from
// POST /v1/completions and shows it as token chips with live figures.
//
// One conversation = one session_id.  "Generate" starts a new one; "Continue"
// sends prompt + completion under the same id so the server re-uses the
// session's KV cache (usage.prompt_tokens_details.cached_tokens says how much).
// It sends them as the token ids the server reported (return_token_ids), not
// as text: text does not always tokenize back to the tokens the model made,
// and the cache misses from the first one that differs.
//
// A constraint (constraint.js) shapes every answer of a Generate or a
// Continue, each one afresh; scoring a prompt generates nothing and sends
// none.

import { ApiError, getJSON, health, postJSON, streamCompletion } from "./api.js";
import {
  clearAnswer, clearConstraintError, isConstraintParam, readConstraint,
  showAnswer, showConstraintError, syncConstraint, wireConstraint,
} from "./constraint.js";
import { TokenView } from "./tokens.js";

const $ = (id) => document.getElementById(id);

const KEY_STORE = "gpt2d.apiKey";
const SETTINGS_STORE = "gpt2d.settings";
const SETTING_IDS = ["max_tokens", "temperature", "top_p", "top_k", "seed", "stop-seqs", "echo",
  "constraint", "constraint-text"];
// How many alternatives each token's tooltip asks for.
const ALTERNATIVES = 5;

const ui = {
  form: $("compose"),
  prompt: $("prompt"),
  generate: $("generate"),
  cont: $("continue"),
  stop: $("stop"),
  score: $("score"),
  echo: $("echo"),
  apiKey: $("api-key"),
  error: $("error"),
  tokens: $("tokens"),
  runStatus: $("run-status"),
  session: $("session-id"),
  newSession: $("new-session"),
  copyText: $("copy-text"),
  serverText: $("server-text"),
  server: $("server"),
  model: $("model"),
  modelPick: $("model-pick"),
};
const view = new TokenView(ui.tokens, $("tip"));

const state = {
  sessionId: null,
  running: null,        // {controller} while a request streams
  lastPrompt: "",       // the prompt of the last finished run, as text
  lastPromptIds: null,  // its token ids, as the server read it
  lastText: "",         // its completion text
  lastIds: [],          // the completion's token ids
  canContinue: false,
  turns: 0,
  maxContext: null,     // the model's context length, once known
  models: [],           // GET /v1/models' list
  shownText: "",        // the text of every chip shown, as the server sent it
};

// The view and the text it shows start over together.
function clearView() {
  view.clear();
  clearAnswer();
  state.shownText = "";
  ui.copyText.disabled = true;
}

// ---- storage (may be disabled: every access is guarded) ----

function load(key) {
  try {
    return window.localStorage.getItem(key);
  } catch {
    return null;
  }
}

function save(key, value) {
  try {
    if (value === null || value === "") window.localStorage.removeItem(key);
    else window.localStorage.setItem(key, value);
  } catch {
    /* private mode: the page still works, it just forgets */
  }
}

function restoreSettings() {
  ui.apiKey.value = load(KEY_STORE) ?? "";
  let saved = {};
  try {
    saved = JSON.parse(load(SETTINGS_STORE) ?? "{}") ?? {};
  } catch {
    saved = {};
  }
  for (const id of SETTING_IDS) {
    if (!(id in saved)) continue;
    const el = $(id);
    if (el.type === "checkbox") el.checked = Boolean(saved[id]);
    else el.value = String(saved[id]);
  }
  syncSliders();
  syncConstraint();
}

function saveSettings() {
  const out = {};
  for (const id of SETTING_IDS) {
    const el = $(id);
    out[id] = el.type === "checkbox" ? el.checked : el.value;
  }
  save(SETTINGS_STORE, JSON.stringify(out));
}

// Each slider mirrors the number box next to it (the box is the labelled
// control; the slider is a convenience for the mouse).
function syncSliders() {
  for (const id of ["temperature", "top_p"]) {
    const box = $(id);
    const range = $(`${id}-range`);
    if (box.value !== "") range.value = box.value;
  }
}

function wireSliders() {
  for (const id of ["temperature", "top_p"]) {
    const box = $(id);
    const range = $(`${id}-range`);
    range.addEventListener("input", () => {
      box.value = range.value;
      saveSettings();
    });
    box.addEventListener("input", () => {
      if (box.value !== "") range.value = box.value;
    });
  }
}

// ---- the request ----

function numberField(id, { integer = false } = {}) {
  const el = $(id);
  // A number box that holds something it cannot parse ("abc", "1e400")
  // reports value "": that is an error, not "use the server's default".
  const bad = () => new ApiError(
    `${id} must be ${integer ? "a whole number" : "a number"}` +
      (integer ? ` from ${Number.MIN_SAFE_INTEGER} to ${Number.MAX_SAFE_INTEGER}.` : "."),
    { param: id, type: "form_error" });
  if (el.validity?.badInput) throw bad();
  if (el.value.trim() === "") return undefined;
  const v = Number(el.value);
  // past 2^53 a JavaScript number is no longer the integer typed in
  if (!Number.isFinite(v) || (integer && !Number.isSafeInteger(v))) throw bad();
  return v;
}

function stopSequences() {
  const lines = $("stop-seqs").value.split("\n").filter((l) => l !== "");
  const seqs = lines.map((l) => l.replace(/\\n/g, "\n").replace(/\\t/g, "\t"));
  if (seqs.length > 4) {
    throw new ApiError("At most 4 stop sequences.", { param: "stop", type: "form_error" });
  }
  return seqs;
}

// The request body for the sampling settings shown in the form.  Fields left
// empty are not sent, so the server's defaults apply.  `constraint` (from
// readConstraint) adds its fields.
function requestBody(prompt, { echo, maxTokens }, constraint = null) {
  const body = {
    model: ui.model.value || undefined,
    prompt,
    max_tokens: maxTokens ?? numberField("max_tokens", { integer: true }) ?? 16,
    temperature: numberField("temperature"),
    top_p: numberField("top_p"),
    top_k: numberField("top_k", { integer: true }),
    seed: numberField("seed", { integer: true }),
    logprobs: ALTERNATIVES,
    echo,
    return_token_ids: true,
    session_id: state.sessionId,
    stream_options: { include_usage: true },
  };
  const stop = stopSequences();
  if (stop.length > 0) body.stop = stop;
  if (body.top_k === 0) delete body.top_k;
  if (constraint) Object.assign(body, constraint.fields);
  for (const k of Object.keys(body)) if (body[k] === undefined) delete body[k];
  return body;
}

function newSessionId() {
  const bytes = new Uint8Array(12);
  crypto.getRandomValues(bytes);   // randomUUID needs a secure context; this does not
  return `pg-${Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("")}`;
}

function startConversation() {
  state.sessionId = newSessionId();
  state.turns = 0;
  state.canContinue = false;
  ui.session.textContent = state.sessionId;
}

// ---- live figures ----

const stat = {
  rate: $("stat-rate"),
  ttft: $("stat-ttft"),
  prompt: $("stat-prompt"),
  cached: $("stat-cached"),
  gen: $("stat-gen"),
  finish: $("stat-finish"),
};

function resetStats() {
  for (const el of Object.values(stat)) el.textContent = "–";
}

function ms(t) {
  return t < 1000 ? `${Math.round(t)} ms` : `${(t / 1000).toFixed(2)} s`;
}

function showTiming(run) {
  if (run.firstAt != null) stat.ttft.textContent = ms(run.firstAt - run.startedAt);
  stat.gen.textContent = String(run.generated);
  // Decode speed: tokens after the first over the time since the first.
  if (run.generated >= 2 && run.lastAt > run.firstAt) {
    stat.rate.textContent = ((run.generated - 1) / ((run.lastAt - run.firstAt) / 1000)).toFixed(1);
  }
}

function showUsage(usage) {
  stat.prompt.textContent = String(usage.prompt_tokens);
  const cached = usage.prompt_tokens_details?.cached_tokens ?? 0;
  stat.cached.textContent = usage.prompt_tokens > 0
    ? `${cached} of ${usage.prompt_tokens}`
    : String(cached);
  stat.cached.dataset.cached = String(cached);
  stat.gen.textContent = String(usage.completion_tokens);
}

// ---- errors ----

function showError(err) {
  const box = ui.error;
  box.replaceChildren();
  const title = document.createElement("strong");
  const bits = [];
  if (err.status) bits.push(String(err.status));
  if (err.type) bits.push(err.type.replace(/_/g, " "));
  title.textContent = bits.length ? `Error · ${bits.join(" · ")}` : "Error";
  const msg = document.createElement("p");
  msg.textContent = err.message;
  box.append(title, msg);
  if (err.param) {
    const p = document.createElement("p");
    p.className = "param";
    p.textContent = `Field: ${err.param}`;
    box.append(p);
  }
  if (err.status === 401) {
    const p = document.createElement("p");
    p.textContent = ui.apiKey.value.trim() === ""
      ? "This server needs an API key: enter it under Connection."
      : "The server did not accept this API key: check it under Connection.";
    box.append(p);
  }
  box.hidden = false;
  if (isConstraintParam(err.param)) showConstraintError(err);
  // Point at the offending control when it is one of ours.
  const field = err.param === "stop" ? $("stop-seqs") : err.param && $(err.param);
  if (field instanceof HTMLElement && (field === ui.prompt || field.closest("#params"))) {
    field.setAttribute("aria-invalid", "true");
  }
  if (err.status === 401) ui.apiKey.setAttribute("aria-invalid", "true");
}

function clearError() {
  ui.error.hidden = true;
  ui.error.replaceChildren();
  clearConstraintError();
  for (const el of document.querySelectorAll("[aria-invalid]")) el.removeAttribute("aria-invalid");
}

// ---- running a completion ----

function setRunning(running) {
  ui.generate.disabled = running;
  ui.score.disabled = running;
  ui.cont.disabled = running || !state.canContinue;
  ui.stop.disabled = !running;
  ui.tokens.setAttribute("aria-busy", String(running));
  document.body.classList.toggle("running", running);
}

function say(text) {
  ui.runStatus.textContent = text;
}

// The request for the form as it stands and the constraint in it, or null
// after showing why there is none (checked before a new conversation clears
// the last one).  Scoring (max_tokens 0) is never constrained.
function checkedRequest(prompt, options) {
  clearError();
  try {
    const constraint = options.maxTokens === 0 ? null : readConstraint();
    return { body: requestBody(prompt, options, constraint), constraint };
  } catch (err) {
    showError(err);
    return null;
  }
}

// What a run leaves to continue from: its prompt and completion, as text
// and as token ids (none when no chunk came).
function finishTurn(prompt, r, scoring) {
  state.lastPrompt = prompt;
  state.lastPromptIds = r.promptIds;
  state.lastText = r.text;
  state.lastIds = r.ids;
  state.canContinue = true;
  if (!scoring) state.turns += 1;
}

// Reads one streamed completion into the view.  `prompt` is what is sent
// (text or token ids), `text` what it reads as (the prompt itself when it
// is text).  maxTokens 0 with echo scores the prompt.  `label` marks a turn
// of a conversation, drawn when its first chunk arrives (a refused turn
// leaves no empty divider).
async function run({ prompt, text = prompt, echo, maxTokens, label }) {
  const request = checkedRequest(prompt, { echo, maxTokens });
  if (request === null) return;
  const { body, constraint } = request;
  saveSettings();
  const scoring = maxTokens === 0;
  const conversation = state.sessionId;
  const couldContinue = state.canContinue;
  const controller = new AbortController();
  const r = {
    startedAt: performance.now(), firstAt: null, lastAt: null,
    generated: 0, text: "", finish: null, echoPending: echo,
    promptIds: null, ids: [],
    // what each generated chip's alternatives were allowed by
    mask: constraint && { by: constraint.by, asked: ALTERNATIVES },
  };
  state.running = controller;
  state.canContinue = false;
  setRunning(true);
  resetStats();
  clearAnswer();
  let divider = label;
  say(scoring ? "Scoring…" : "Generating…");
  try {
    for await (const chunk of streamCompletion(body, { apiKey: ui.apiKey.value.trim(), signal: controller.signal })) {
      if (state.sessionId !== conversation) break;    // a new conversation began
      if (divider) view.divider(divider);
      divider = null;
      if (chunk.usage) showUsage(chunk.usage);
      for (const choice of chunk.choices ?? []) take(r, choice);
      showTiming(r);
    }
    if (state.sessionId !== conversation) return;
    stat.finish.textContent = r.finish ?? "–";
    say(scoring ? `Scored ${stat.prompt.textContent} prompt tokens.`
      : r.finish === "length" ? "Done: reached max_tokens."
        : r.finish === "stop" ? "Done: stopped naturally." : "Done.");
    showAnswer(constraint, r.text, r.finish);
    finishTurn(text, r, scoring);
    if (label) ui.prompt.value = text;     // the conversation so far
  } catch (err) {
    if (state.sessionId !== conversation) return;
    if (err.name === "AbortError") {
      stat.finish.textContent = "stopped";
      say(`Stopped after ${r.generated} tokens.`);
      showAnswer(constraint, r.text, "stopped");
      finishTurn(text, r, scoring);
      if (label) ui.prompt.value = text;
    } else {
      showError(err instanceof ApiError ? err : new ApiError(String(err?.message ?? err)));
      say("Failed.");
      state.canContinue = couldContinue;     // the last turn still stands
      if (err.type === "network_error") refreshServer();
    }
  } finally {
    if (state.running === controller) state.running = null;
    setRunning(state.running !== null);
  }
}

// One choice of one chunk: the echoed prompt (first, when asked for), then
// one generated token per chunk, then a final chunk with finish_reason.
function take(r, choice) {
  const lp = choice.logprobs;
  if (choice.prompt_token_ids) r.promptIds = choice.prompt_token_ids;
  if (choice.token_ids) r.ids.push(...choice.token_ids);
  if (choice.text) {
    state.shownText += choice.text;
    ui.copyText.disabled = false;
  }
  if (r.echoPending) {
    r.echoPending = false;
    if (lp) view.add(lp, "prompt");
    else view.addPlain(choice.text, "prompt");
    view.boundary();
    return;
  }
  if (choice.text) r.text += choice.text;
  if (lp && lp.tokens.length > 0) {
    const now = performance.now();
    if (r.firstAt == null) r.firstAt = now;
    r.lastAt = now;
    r.generated += view.add(lp, "gen", r.mask);
  }
  if (choice.finish_reason) r.finish = choice.finish_reason;
}

// A new conversation, once the form is known to be good: a mistake in it
// must not wipe the last conversation off the screen.
function startFresh(options) {
  if (state.running || checkedRequest(ui.prompt.value, options) === null) return;
  startConversation();
  clearView();
  run({ prompt: ui.prompt.value, ...options });
}

function generate() {
  startFresh({ echo: ui.echo.checked });
}

// The ids of text the user added, from /tokenize; null after showing why
// there are none (or when Stop or a new conversation came first).  The
// page counts as running meanwhile, so nothing else starts.
async function tokenize(text) {
  const conversation = state.sessionId;
  const controller = new AbortController();
  clearError();
  state.running = controller;
  setRunning(true);
  say("Tokenizing the added text…");
  try {
    const { tokens } = await postJSON("tokenize", { content: text },
      { apiKey: ui.apiKey.value.trim(), signal: controller.signal });
    return state.sessionId === conversation ? tokens : null;
  } catch (err) {
    if (state.sessionId !== conversation) {
      /* a new conversation took over, and says so */
    } else if (err.name === "AbortError") {
      say("Stopped.");
    } else {
      showError(err instanceof ApiError ? err : new ApiError(String(err?.message ?? err)));
      say("Failed.");
    }
    return null;
  } finally {
    if (state.running === controller) state.running = null;
    setRunning(state.running !== null);
  }
}

// The box holds the conversation before the last completion.  While its
// text still starts with that conversation, the next turn is sent as the
// token ids the server reported for it and its completion, then the text
// added at the end of the box (tokenized by /tokenize): every earlier token
// is reused from the cache.  When the earlier text was edited, the box's
// text and the completion go as text, and the cache reuses what still
// matches.
async function continueConversation() {
  if (state.running || !state.canContinue) return;
  const box = ui.prompt.value;
  const label = `turn ${state.turns + 1}`;
  if (state.lastPromptIds === null || !box.startsWith(state.lastPrompt)) {
    run({ prompt: box + state.lastText, echo: false, label });
    return;
  }
  const added = box.slice(state.lastPrompt.length);
  const addedIds = added === "" ? [] : await tokenize(added);
  if (addedIds === null) return;
  run({
    prompt: [...state.lastPromptIds, ...state.lastIds, ...addedIds],
    text: state.lastPrompt + state.lastText + added,
    echo: false,
    label,
  });
}

function scorePrompt() {
  startFresh({ echo: true, maxTokens: 0 });
}

function stop() {
  state.running?.abort();
}

// The chips show markers (↵, ␣ in tips, byte escapes); this copies the text
// itself.  The clipboard API needs a secure context (localhost is one);
// elsewhere a selected textarea and the copy command do it.
async function copyText() {
  const text = state.shownText;
  try {
    await navigator.clipboard.writeText(text);
  } catch {
    const area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.style.position = "fixed";
    area.style.opacity = "0";
    document.body.append(area);
    area.select();
    const ok = document.execCommand("copy");
    area.remove();
    if (!ok) {
      say("Copying is not allowed here: select the prompt box text instead.");
      return;
    }
  }
  say(`Copied ${Array.from(text).length} characters.`);
}

// ---- the server's state ----

let refreshTimer = null;

// Polls /health until the daemon is ready (it answers 503 while loading),
// then names the model.
async function refreshServer() {
  clearTimeout(refreshTimer);
  const status = await health();
  ui.server.dataset.state = status;
  if (status !== "ready") {
    ui.serverText.textContent = status === "loading" ? "Model loading…" : "Server unreachable";
    refreshTimer = setTimeout(refreshServer, 3000);
    return;
  }
  try {
    const models = await getJSON("v1/models", ui.apiKey.value.trim());
    showModels(models.data ?? []);
  } catch (err) {
    ui.server.dataset.state = err.status === 401 ? "locked" : "down";
    ui.serverText.textContent = err.status === 401 ? "Ready · API key needed" : "Server error";
  }
}

// The models the server has: a picker when there are several (the one
// picked stays picked; the server's default first), and the picked one's
// context.
function showModels(list) {
  state.models = list;
  const picked = ui.model.value;
  ui.model.replaceChildren(...list.map((m) => {
    const o = document.createElement("option");
    o.value = m.id;
    o.textContent = m.state === "loaded" || !m.state ? m.id : `${m.id} (${m.state})`;
    return o;
  }));
  const keep = list.find((m) => m.id === picked) ?? list.find((m) => m.default) ?? list[0];
  if (keep) ui.model.value = keep.id;
  ui.modelPick.hidden = list.length < 2;
  showModel();
}

function showModel() {
  const m = state.models.find((x) => x.id === ui.model.value);
  if (!m) return;
  state.maxContext = m.max_model_len ?? null;
  ui.serverText.textContent = state.maxContext ? `${m.id} · context ${state.maxContext}` : m.id;
  if (state.maxContext) $("max_tokens").max = String(state.maxContext);
}

// ---- wiring ----

function wire() {
  ui.form.addEventListener("submit", (e) => {
    e.preventDefault();
    generate();
  });
  ui.cont.addEventListener("click", continueConversation);
  ui.stop.addEventListener("click", stop);
  ui.copyText.addEventListener("click", copyText);
  ui.score.addEventListener("click", scorePrompt);
  // another model: its own context, and conversations of its own
  ui.model.addEventListener("change", () => {
    showModel();
    startConversation();
    stop();
    clearView();
    resetStats();
    clearError();
    say(`Model ${ui.model.value}: a new conversation.`);
  });
  ui.newSession.addEventListener("click", () => {
    startConversation();      // a run still streaming sees the new id and stops
    stop();
    clearView();
    resetStats();
    clearError();
    say("New conversation.");
  });
  ui.prompt.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) {
      e.preventDefault();
      generate();
    }
  });
  document.addEventListener("keydown", (e) => {
    if (e.key === "Escape" && state.running) stop();
  });
  ui.apiKey.addEventListener("input", () => save(KEY_STORE, ui.apiKey.value.trim()));
  ui.apiKey.addEventListener("change", refreshServer);
  $("params").addEventListener("change", saveSettings);
  $("params").addEventListener("submit", (e) => e.preventDefault());
  wireSliders();
  wireConstraint();
}

restoreSettings();
wire();
startConversation();
setRunning(false);
refreshServer();
