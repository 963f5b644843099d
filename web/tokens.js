// tokens.js — token chips: one focusable element per token, coloured by the
// probability the model gave it, with a tooltip listing the alternatives.
//
// Chips use a roving tabindex: Tab enters the list once, arrow keys / Home /
// End move between tokens, so a long completion is not hundreds of tab stops.

// Probabilities are spread over many decades (GPT-2's vocabulary has 50257
// entries), so colour follows log10(p) from 1e-6 (red) to 1 (green).
const LOG10_FLOOR = -6;

/** 0 (very surprising) … 1 (certain) for a probability. */
export function surprise01(p) {
  if (!(p > 0)) return 0;
  const t = 1 - Math.log10(p) / LOG10_FLOOR;
  return Math.min(1, Math.max(0, t));
}

/** The hue (0 red … 140 green) a chip of probability p gets. */
export function hueFor(p) {
  return Math.round(surprise01(p) * 140);
}

export function formatProb(p) {
  if (p == null || Number.isNaN(p)) return "–";
  const pct = p * 100;
  if (pct >= 10) return `${pct.toFixed(1)}%`;
  if (pct >= 0.1) return `${pct.toFixed(2)}%`;
  if (pct >= 0.001) return `${pct.toFixed(3)}%`;
  return `${pct.toExponential(1)}%`;
}

// What a token looks like on a chip: whitespace made visible where it would
// otherwise vanish, and raw byte pieces ("bytes:\xe2\x80") shown as bytes.
export function visibleToken(tok) {
  if (tok.startsWith("bytes:")) return tok.slice(6);
  return tok
    .replace(/\n/g, "↵")
    .replace(/\t/g, "⇥")
    // Other control characters as their Unicode "symbol for" glyphs.
    .replace(/[\u0000-\u001f]/g, (c) => String.fromCharCode(0x2400 + c.charCodeAt(0)))
    .replace(/\u007f/g, "␡");
}

const ENCODER = new TextEncoder();

// A token's bytes: UTF-8 of its text, or the bytes "bytes:\xNN…" names.
function tokenBytes(tok) {
  if (!tok.startsWith("bytes:")) return ENCODER.encode(tok);
  return Uint8Array.from(tok.slice(6).split("\\x").slice(1), (h) => parseInt(h, 16));
}

// The token as the tooltip names it: quoted, spaces shown as ␣.
export function quotedToken(tok) {
  if (tok.startsWith("bytes:")) return tok.slice(6);
  return `“${visibleToken(tok).replace(/ /g, "␣")}”`;
}

/**
 * A tooltip's list of alternatives: [token, probability] pairs, most likely
 * first, each with a bar; the entry equal to `chosen` is marked.
 */
export function altsList(entries, chosen) {
  const list = document.createElement("ol");
  list.className = "alts";
  for (const [alt, p] of entries) {
    const li = document.createElement("li");
    if (alt === chosen) li.className = "chosen";
    const label = document.createElement("span");
    label.className = "alt-token";
    label.textContent = quotedToken(alt);
    const bar = document.createElement("span");
    bar.className = "alt-bar";
    bar.style.setProperty("--w", `${Math.max(2, surprise01(p) * 100).toFixed(1)}%`);
    bar.style.setProperty("--h", String(hueFor(p)));
    const val = document.createElement("span");
    val.className = "alt-prob";
    val.textContent = formatProb(p);
    li.append(label, bar, val);
    list.append(li);
  }
  return list;
}

/**
 * The caption of a constrained token's alternatives: which constraint
 * allowed them and how many are listed.  The server lists the `asked` most
 * likely of the tokens the constraint allowed (and the chosen one, when it
 * was not among them), so fewer than asked means it allowed only those.
 */
function maskCaption({ by, asked }, shown) {
  const caption = document.createElement("span");
  caption.className = "mask-caption";
  const strong = document.createElement("strong");
  strong.textContent = `Allowed by ${by}:`;
  const count = document.createElement("span");
  count.className = "mask-count";
  count.dataset.shown = String(shown);
  count.textContent = shown >= asked ? ` ${shown} shown`
    : shown === 1 ? ` only this one (${asked} asked)`
      : ` only these ${shown} (${asked} asked)`;
  caption.append(strong, count);
  return caption;
}

/** Puts `tip` below the rectangle `r` (above when there is no room), inside the viewport. */
export function placeTip(tip, r) {
  const w = tip.offsetWidth;
  const h = tip.offsetHeight;
  const margin = 8;
  let left = Math.min(r.left, window.innerWidth - w - margin);
  left = Math.max(margin, left);
  let top = r.bottom + 6;
  if (top + h > window.innerHeight - margin && r.top - h - 6 > margin) top = r.top - h - 6;
  tip.style.left = `${left}px`;
  tip.style.top = `${top}px`;
}

/**
 * The chip list inside `container`, with its tooltip `tip`.
 * add() appends tokens; clear() empties; divider() marks a new turn.
 */
export class TokenView {
  constructor(container, tip) {
    this.container = container;
    this.tip = tip;
    this.info = new WeakMap();       // chip → {token, logprob, top, kind}
    this.active = null;              // the chip that holds tabindex=0
    // Byte tokens are pieces of a character: the chip that completes one
    // shows it (the decoder carries the pieces, as the server's does).
    this.utf8 = new TextDecoder("utf-8");
    container.addEventListener("mouseover", (e) => this.#showFor(e.target));
    // Leaving a chip with the mouse gives the tip back to the focused chip,
    // if there is one: keyboard users keep what they were reading.
    container.addEventListener("mouseout", (e) => {
      if (!e.target.classList?.contains("chip")) return;
      const focused = document.activeElement;
      if (focused?.classList?.contains("chip") && container.contains(focused)) this.#showFor(focused);
      else this.hideTip();
    });
    container.addEventListener("focusin", (e) => this.#showFor(e.target));
    container.addEventListener("focusout", () => this.hideTip());
    container.addEventListener("keydown", (e) => this.#onKey(e));
    window.addEventListener("resize", () => this.hideTip());
    window.addEventListener("scroll", () => this.hideTip(), { passive: true });
  }

  clear() {
    this.container.replaceChildren();
    this.active = null;
    this.utf8 = new TextDecoder("utf-8");
    this.hideTip();
  }

  /** A line between turns of a conversation. */
  divider(label) {
    const d = document.createElement("span");
    d.className = "turn";
    d.setAttribute("role", "separator");
    d.textContent = label;
    this.container.append(d);
  }

  /**
   * Appends tokens from one logprobs object.  kind: "prompt" | "gen".
   * `mask` ({by, asked}) says a constraint chose what the model could
   * write, so each token's alternatives are the ones it allowed ("the
   * schema"), of `asked` requested.  Returns the number of chips added.
   */
  add(logprobs, kind, mask = null) {
    const frag = document.createDocumentFragment();
    const n = logprobs.tokens.length;
    for (let i = 0; i < n; i++) {
      const token = logprobs.tokens[i] ?? "";
      const lp = logprobs.token_logprobs?.[i];
      const top = logprobs.top_logprobs?.[i] ?? null;
      frag.append(this.#chip(token, lp, top, kind, mask));
      if (token.endsWith("\n")) frag.append(document.createElement("br"));
    }
    this.container.append(frag);
    return n;
  }

  /** Where the prompt ends and the completion begins. */
  boundary() {
    this.utf8 = new TextDecoder("utf-8");   // the completion decodes afresh
    const b = document.createElement("span");
    b.className = "boundary";
    b.title = "the completion starts here";
    b.setAttribute("aria-hidden", "true");
    this.container.append(b);
  }

  /** A chip for text that came without token information. */
  addPlain(text, kind) {
    if (text) this.container.append(this.#chip(text, null, null, kind));
  }

  #chip(token, logprob, top, kind, mask = null) {
    const chip = document.createElement("span");
    chip.className = `chip ${kind}`;
    const text = this.utf8.decode(tokenBytes(token), { stream: true });
    // a byte token shows the character it completes, or its bytes until then
    chip.textContent = visibleToken(token.startsWith("bytes:") && text !== "" ? text : token);
    chip.tabIndex = this.active ? -1 : 0;
    if (!this.active) this.active = chip;
    chip.setAttribute("aria-describedby", this.tip.id);
    if (token.startsWith("bytes:")) chip.classList.add("bytes");
    if (logprob == null) {
      chip.classList.add("unscored");
    } else {
      const p = Math.exp(logprob);
      chip.style.setProperty("--h", String(hueFor(p)));
      chip.dataset.p = p.toPrecision(4);
    }
    if (mask) chip.classList.add("masked");
    this.info.set(chip, { token, logprob, top, kind, mask });
    return chip;
  }

  #chips() {
    return Array.from(this.container.querySelectorAll(".chip"));
  }

  #onKey(e) {
    const chip = e.target;
    if (!chip.classList?.contains("chip")) return;
    if (e.key === "Escape") {
      this.hideTip();
      return;
    }
    const chips = this.#chips();
    const i = chips.indexOf(chip);
    const to = {
      ArrowRight: i + 1, ArrowDown: i + 1, ArrowLeft: i - 1, ArrowUp: i - 1,
      Home: 0, End: chips.length - 1,
    }[e.key];
    if (to === undefined || to < 0 || to >= chips.length) return;
    e.preventDefault();
    chip.tabIndex = -1;
    chips[to].tabIndex = 0;
    this.active = chips[to];
    chips[to].focus();
  }

  #showFor(chip) {
    const info = chip?.classList?.contains("chip") ? this.info.get(chip) : null;
    if (!info) return;
    this.#fillTip(info);
    this.tip.hidden = false;
    this.#place(chip);
  }

  hideTip() {
    this.tip.hidden = true;
  }

  #fillTip({ token, logprob, top, kind, mask }) {
    const tip = this.tip;
    tip.replaceChildren();
    const head = document.createElement("div");
    head.className = "tip-head";
    const name = document.createElement("span");
    name.className = "tip-token";
    name.textContent = quotedToken(token);
    const prob = document.createElement("span");
    prob.className = "tip-prob";
    head.append(name, prob);
    tip.append(head);
    if (logprob == null) {
      prob.textContent = kind === "prompt" ? "first token" : "";
      const note = document.createElement("p");
      note.className = "tip-note";
      note.textContent = kind === "prompt"
        ? "Nothing comes before it, so the model did not predict it."
        : "No probabilities for this text.";
      tip.append(note);
      return;
    }
    prob.textContent = `${formatProb(Math.exp(logprob))} · logprob ${logprob.toFixed(2)}`;
    const entries = Object.entries(top ?? {}).sort((a, b) => b[1] - a[1]);
    if (entries.length === 0) return;
    const title = document.createElement("p");
    title.className = "tip-note";
    title.textContent = kind === "prompt" ? "The model expected:" : "Top alternatives:";
    if (mask) title.replaceChildren(maskCaption(mask, entries.length));
    tip.append(title, altsList(entries.map(([alt, altLp]) => [alt, Math.exp(altLp)]), token));
    if (mask) {
      const foot = document.createElement("p");
      foot.className = "tip-foot";
      foot.textContent = `Probabilities are over what ${mask.by} allowed; it masked every other token.`;
      tip.append(foot);
    }
  }

  #place(chip) {
    placeTip(this.tip, chip.getBoundingClientRect());
  }
}
