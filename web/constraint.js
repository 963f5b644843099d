// constraint.js — the playground's Constraint box: which shape every answer
// must take (a JSON object, a JSON Schema, a regex, one of some choices, a
// GBNF grammar), the request fields that ask for it, the server's refusal of
// it shown beside the box, and what the finished answer is (parsed JSON, or
// cut short).
//
// The fields are the ones /v1/completions and /v1/chat/completions share:
// response_format for JSON (strict, as OpenAI's clients send it), vLLM's
// structured_outputs for the rest.  The server masks every token the
// constraint forbids, so the alternatives a token's tooltip lists are the
// ones it allowed, with probabilities over what it allowed.

import { ApiError } from "./api.js";

const $ = (id) => document.getElementById(id);

// Each kind: what the box holds, how a tooltip names the constraint, and an
// example that GPT-2 (even a small one) finishes within a few dozen tokens.
const KINDS = {
  none: { box: null },
  json_object: {
    box: null,
    unit: "any JSON object",
    by: "JSON mode",
    json: true,
  },
  json_schema: {
    box: "JSON Schema",
    unit: "sent as response_format, strict",
    by: "the schema",
    json: true,
    example: `{
  "type": "object",
  "properties": {
    "name": { "type": "string", "maxLength": 24 },
    "age": { "type": "integer", "minimum": 0, "maximum": 120 },
    "city": { "type": "string", "maxLength": 24 }
  },
  "required": ["name", "age", "city"],
  "additionalProperties": false
}`,
    exampleName: "a person",
  },
  regex: {
    box: "Regular expression",
    unit: "the whole answer matches it",
    by: "the regex",
    example: "\\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\\d|3[01])",
    exampleName: "a date",
  },
  choice: {
    box: "Choices",
    unit: "one a line; the answer is one of them",
    by: "the choices",
    example: "yes\nno",
    exampleName: "yes or no",
  },
  grammar: {
    box: "GBNF grammar",
    unit: "llama.cpp's GBNF; root is where it starts",
    by: "the grammar",
    example: `# a greeting with a name and an age
root     ::= greeting " " name "! You are " age "."
greeting ::= "Hello" | "Hi"
name     ::= [A-Z] [a-z]{1,8}
age      ::= [1-9] [0-9]?`,
    exampleName: "a greeting",
  },
};

const EXAMPLES = new Set(Object.values(KINDS).map((k) => k.example).filter(Boolean));

const ui = {
  kind: $("constraint"),
  spec: $("constraint-spec"),
  what: $("constraint-what"),
  unit: $("constraint-unit"),
  text: $("constraint-text"),
  example: $("constraint-example"),
  error: $("constraint-error"),
  answer: $("answer"),
};

function kindNow() {
  return KINDS[ui.kind.value] ? ui.kind.value : "none";
}

/** Shows the box the chosen kind needs (none for none and JSON object). */
export function syncConstraint() {
  if (!KINDS[ui.kind.value]) ui.kind.value = "none";
  const k = KINDS[kindNow()];
  ui.spec.hidden = k.box === null && !k.unit;
  ui.text.hidden = k.box === null;
  ui.example.hidden = !k.example;
  ui.what.textContent = k.box ?? "";
  ui.what.hidden = k.box === null;
  ui.unit.textContent = k.unit ?? "";
  if (k.example) ui.example.textContent = `Example: ${k.exampleName}`;
}

function loadExample() {
  ui.text.value = KINDS[kindNow()].example ?? "";
  // saved like any edit of the box
  ui.text.dispatchEvent(new Event("change", { bubbles: true }));
}

/** Wires the kind picker and the example button. */
export function wireConstraint() {
  ui.kind.addEventListener("change", () => {
    // An empty box, or another kind's untouched example, takes this kind's.
    const t = ui.text.value.trim();
    if (KINDS[kindNow()].example && (t === "" || EXAMPLES.has(t))) {
      ui.text.value = KINDS[kindNow()].example;
    }
    syncConstraint();
  });
  ui.example.addEventListener("click", loadExample);
  syncConstraint();
}

const formError = (message, param) => new ApiError(message, { param, type: "form_error" });

/**
 * The constraint in the form: null for none, else
 * {kind, by, json, fields} where `fields` go into the request body.
 * Throws an ApiError naming the field it would have been sent as.
 */
export function readConstraint() {
  const kind = kindNow();
  const k = KINDS[kind];
  if (kind === "none") return null;
  const text = ui.text.value;
  let fields;
  if (kind === "json_object") {
    fields = { response_format: { type: "json_object" } };
  } else if (kind === "json_schema") {
    const param = "response_format.json_schema.schema";
    if (text.trim() === "") throw formError("The JSON Schema box is empty.", param);
    let schema;
    try {
      schema = JSON.parse(text);
    } catch (err) {
      throw formError(`The schema is not JSON: ${err.message}`, param);
    }
    // OpenAI's rule for a schema's name; the title when it fits it.
    const name = typeof schema?.title === "string" && /^[A-Za-z0-9_-]{1,64}$/.test(schema.title)
      ? schema.title : "playground";
    fields = { response_format: { type: "json_schema", json_schema: { name, strict: true, schema } } };
  } else if (kind === "choice") {
    const choices = text.split("\n").filter((l) => l !== "");
    if (choices.length === 0) {
      throw formError("Write at least one choice, one a line.", "structured_outputs.choice");
    }
    fields = { structured_outputs: { choice: choices } };
  } else {
    // a line break typed after the last line is not part of the pattern
    const spec = text.replace(/[\r\n]+$/, "");
    if (spec.trim() === "") {
      throw formError(`The ${k.box} box is empty.`, `structured_outputs.${kind}`);
    }
    fields = { structured_outputs: { [kind]: spec } };
  }
  return { kind, by: k.by, json: Boolean(k.json), fields };
}

/** Whether a request field named by an error is the constraint's. */
export function isConstraintParam(param) {
  return typeof param === "string" &&
    /^(response_format|structured_outputs)(\.|\[|$)/.test(param);
}

/** An error about the constraint, beside the box, and the box marked. */
export function showConstraintError(err) {
  ui.error.replaceChildren();
  const msg = document.createElement("p");
  msg.textContent = err.message;
  const param = document.createElement("p");
  param.className = "param";
  param.textContent = err.param;
  ui.error.append(msg, param);
  ui.error.hidden = false;
  (ui.text.hidden ? ui.kind : ui.text).setAttribute("aria-invalid", "true");
}

export function clearConstraintError() {
  ui.error.hidden = true;
  ui.error.replaceChildren();
}

// ---- the finished answer ----

export function clearAnswer() {
  ui.answer.hidden = true;
  ui.answer.replaceChildren();
}

function note(text, cls) {
  const p = document.createElement("p");
  p.className = `answer-note ${cls}`;
  p.textContent = text;
  return p;
}

/**
 * What a constrained answer came to, below the tokens: JSON pretty-printed
 * in a collapsible "Parsed" view marked valid, or why there is none.
 * `finish`: the finish_reason, or "stopped" when Stop ended it.
 */
export function showAnswer(constraint, text, finish) {
  clearAnswer();
  if (!constraint) return;
  const parts = [];
  let value;
  let parseError = null;
  if (constraint.json) {
    try {
      value = JSON.parse(text);
    } catch (err) {
      parseError = err.message;
    }
  }
  if (constraint.json && parseError === null) {
    const details = document.createElement("details");
    details.className = "parsed";
    details.open = true;
    const summary = document.createElement("summary");
    summary.textContent = "Parsed";
    const badge = document.createElement("span");
    badge.className = "badge ok";
    badge.textContent = "valid JSON";
    summary.append(" ", badge);
    const pre = document.createElement("pre");
    pre.textContent = JSON.stringify(value, null, 2);
    details.append(summary, pre);
    parts.push(details);
  }
  if (finish === "length") {
    parts.push(note(constraint.json && parseError !== null
      ? "Cut at max_tokens (finish_reason \"length\"): the JSON is incomplete. Raise max_tokens and generate again."
      : "Cut at max_tokens (finish_reason \"length\"): the answer may be unfinished.",
    "cut"));
  } else if (finish === "stopped") {
    parts.push(note("Stopped before the answer was finished: it may be incomplete.", "cut"));
  } else if (constraint.json && parseError !== null) {
    parts.push(note(`Not valid JSON: ${parseError}`, "bad"));
  } else if (finish === "stop" && !constraint.json) {
    parts.push(note(`Complete (finish_reason "stop"): it ended where ${constraint.by} let it end.`, "good"));
  }
  if (parts.length === 0) return;
  ui.answer.append(...parts);
  ui.answer.hidden = false;
}
