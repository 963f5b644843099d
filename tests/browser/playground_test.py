#!/usr/bin/env python3
"""playground_test.py — the playground page in a real headless Chromium.

    playground_test.py --base http://127.0.0.1:PORT/ --api-key KEY --out DIR
                       [--chromium /usr/bin/chromium]
                       [--chromedriver /usr/bin/chromedriver] [TEST...]

Drives Chromium through chromedriver's W3C WebDriver HTTP API with nothing
but the standard library (webdriver.py).  The daemon is started by test_playground.sh
with an API key; this script only talks to 127.0.0.1.

Each test is one behaviour a person relies on; they share one browser and run
in order (later ones build on the page state of earlier ones).  Screenshots
go to DIR (playground.png is the README picture).  Ends with the line
"N passed, N failed".
"""

import argparse
import json
import os
import re
import sys
import time
import urllib.error
import urllib.request

from webdriver import ELEMENT, add_browser_arguments, run_browser_tests

# ---- the daemon, directly ----

class Server:
    def __init__(self, base, key):
        self.base = base.rstrip("/")
        self.key = key

    def request(self, method, path, body=None, auth=True):
        headers = {"Content-Type": "application/json"}
        if auth:
            headers["Authorization"] = "Bearer " + self.key
        req = urllib.request.Request(
            self.base + path, method=method, headers=headers,
            data=None if body is None else json.dumps(body).encode())
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status, dict(resp.headers), resp.read()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read()

    def metric(self, name):
        status, _, body = self.request("GET", "/metrics")
        assert status == 200, "GET /metrics: %d" % status
        total = 0.0
        found = False
        for line in body.decode().splitlines():
            m = re.match(r"^%s(\{[^}]*\})?\s+(\S+)$" % re.escape(name), line)
            if m:
                total += float(m.group(2))
                found = True
        assert found, "metric %s missing from /metrics" % name
        return total


# ---- page state ----

def gen_chips(b):
    return b.js("return document.querySelectorAll('#tokens .chip.gen').length")


def running(b):
    return b.js("return document.body.classList.contains('running')")


def wait_idle(b, timeout=60):
    b.wait("the run to finish", lambda: not running(b), timeout)


def stat(b, name):
    return b.text("#stat-" + name)


def error_text(b):
    return b.js("const e = document.getElementById('error');"
                "return e.hidden ? '' : e.innerText")


def set_field(b, css, value):
    b.clear(css)
    if value != "":
        b.type(css, str(value))
    # A real `change` event, as leaving the field would fire.
    b.js("arguments[0].dispatchEvent(new Event('change', {bubbles: true}))",
         {ELEMENT: b.find(css)})


def visible(token):
    """A token as its chip shows it (tokens.js visibleToken)."""
    if token.startswith("bytes:"):
        return token[6:]
    out = token.replace("\n", "↵").replace("\t", "⇥")
    out = re.sub(r"[\x00-\x1f]", lambda m: chr(0x2400 + ord(m.group())), out)
    return out.replace("\x7f", "␡")


def set_prompt(b, text):
    b.clear("#prompt")
    b.type("#prompt", text)


# Records what the page sends to /v1/completions and the answer it gets
# (window.__sent[i], window.__answers[i]): the body is cloned before the
# page reads it.
RECORD_COMPLETIONS = """
if (!window.__recording) {
  window.__recording = true;
  window.__sent = [];
  window.__answers = [];
  const fetch0 = window.fetch;
  window.fetch = (url, init) => {
    const answer = fetch0(url, init);
    if (String(url).endsWith("v1/completions")) {
      const i = window.__sent.push(JSON.parse(init.body)) - 1;
      answer.then((resp) => resp.clone().text())
        .then((text) => { window.__answers[i] = text; })
        .catch(() => { window.__answers[i] = ""; });
    }
    return answer;
  };
}
return window.__sent.length;
"""


def recorded(b, i):
    """The i-th recorded request body and, once it is all in, its streamed
    answer as {prompt_ids, ids, text, finish, usage, tops} (choice 0; tops:
    each token's top_logprobs, prompt tokens first when echoed)."""
    b.wait("answer %d" % i, lambda: b.js(
        "return window.__answers[arguments[0]] !== undefined", i))
    sent, raw = b.js("return [window.__sent[arguments[0]],"
                     " window.__answers[arguments[0]]]", i)
    got = {"prompt_ids": None, "ids": [], "text": "", "finish": None,
           "usage": None, "tops": []}
    for event in raw.split("\n\n"):
        if not event.startswith("data: ") or event == "data: [DONE]":
            continue
        chunk = json.loads(event[6:])
        got["usage"] = chunk.get("usage") or got["usage"]
        for ch in chunk.get("choices") or []:
            if "prompt_token_ids" in ch:
                got["prompt_ids"] = ch["prompt_token_ids"]
            got["ids"] += ch.get("token_ids", [])
            got["tops"] += (ch.get("logprobs") or {}).get("top_logprobs") or []
            got["text"] += ch["text"]
            got["finish"] = ch["finish_reason"] or got["finish"]
    return sent, got


# ---- tests ----

def test_static_files_have_correct_types(ctx):
    srv = ctx["server"]
    want = {"/": "text/html", "/index.html": "text/html",
            "/app.js": "text/javascript", "/api.js": "text/javascript",
            "/constraint.js": "text/javascript",
            "/tokens.js": "text/javascript", "/style.css": "text/css",
            "/inside.js": "text/javascript", "/inside.css": "text/css",
            "/server.html": "text/html", "/server.js": "text/javascript",
            "/server.css": "text/css", "/favicon.svg": "image/svg+xml"}
    for path, ctype in want.items():
        status, headers, body = srv.request("GET", path, auth=False)
        assert status == 200, "%s: %d" % (path, status)
        got = headers.get("Content-Type", "")
        assert got.startswith(ctype), "%s served as %r" % (path, got)
        assert len(body) > 0, path


def test_page_loads_and_asks_for_the_api_key(ctx):
    b = ctx["browser"]
    b.go(ctx["base"])
    b.wait("the page title", lambda: b.js("return document.title") ==
           "gpt2d playground")
    b.wait("the server badge", lambda: "API key needed" in b.text("#server-text"))


def test_every_control_is_labelled_and_shows_focus(ctx):
    b = ctx["browser"]
    unlabelled = b.js("""
        return [...document.querySelectorAll('input, textarea, button, select')]
          .filter(e => !(e.labels && e.labels.length) && !e.getAttribute('aria-label')
                       && !(e.tagName === 'BUTTON' && e.textContent.trim()))
          .map(e => e.id || e.outerHTML.slice(0, 60))""")
    assert unlabelled == [], unlabelled
    assert b.js("return document.getElementById('tokens').getAttribute('aria-live')") == "polite"
    # Tab from the prompt reaches Generate, with a visible focus ring.
    b.click("#prompt")
    b.keys("\ue004")                                    # Tab
    assert b.js("return document.activeElement.id") == "generate"
    ring = b.js("const s = getComputedStyle(document.activeElement);"
                "return [s.outlineStyle, parseFloat(s.outlineWidth)]")
    assert ring[0] != "none" and ring[1] >= 2, ring


def test_missing_key_shows_the_servers_401(ctx):
    b = ctx["browser"]
    b.click("#generate")
    b.wait("an error", lambda: error_text(b))
    wait_idle(b)
    msg = error_text(b)
    assert "401" in msg, msg
    assert "API key" in msg, msg
    assert b.js("return document.getElementById('api-key')"
                ".getAttribute('aria-invalid')") == "true"


def test_api_key_is_kept_in_the_browser(ctx):
    b = ctx["browser"]
    set_field(b, "#api-key", ctx["key"])
    b.go(ctx["base"])                                   # reload
    b.wait("the model name", lambda: b.text("#server-text").startswith(
        ctx["model_id"]))
    assert b.js("return document.getElementById('api-key').value") == ctx["key"]


def test_generate_streams_token_chips(ctx):
    b = ctx["browser"]
    set_prompt(b, ctx["prompt"])
    set_field(b, "#max_tokens", 12)
    set_field(b, "#temperature", 0)
    set_field(b, "#seed", 7)
    b.click("#generate")
    b.wait("the first token chip", lambda: gen_chips(b) >= 1)
    wait_idle(b)
    assert error_text(b) == "", error_text(b)
    n = gen_chips(b)
    assert 1 <= n <= 12, n
    assert stat(b, "gen") == str(n), (stat(b, "gen"), n)
    assert stat(b, "finish") in ("length", "stop"), stat(b, "finish")
    assert re.match(r"^\d+ ms$|^\d+\.\d\d s$", stat(b, "ttft")), stat(b, "ttft")
    if n >= 2:
        assert float(stat(b, "rate")) > 0, stat(b, "rate")
    # Every chip has a probability and a colour from it.
    probs = b.js("return [...document.querySelectorAll('#tokens .chip.gen')]"
                 ".map(c => [c.dataset.p, c.style.getPropertyValue('--h')])")
    for p, hue in probs:
        assert 0 < float(p) <= 1, p
        assert 0 <= int(hue) <= 140, hue
    # The chips are the tokens the API gives for the same greedy request.
    status, _, body = ctx["server"].request("POST", "/v1/completions", {
        "prompt": ctx["prompt"], "max_tokens": 12, "temperature": 0,
        "seed": 7, "logprobs": 5})
    assert status == 200, body
    want = json.loads(body)["choices"][0]["logprobs"]["tokens"]
    got = b.js("return [...document.querySelectorAll('#tokens .chip.gen')]"
               ".map(c => c.textContent)")
    want_shown = [visible(t) for t in want]
    assert got == want_shown, (got, want_shown)


def test_the_model_picker_sends_the_picked_model(ctx):
    """The server has two models (test_playground.sh): the picker lists
    both, the default picked; picking the other shows its context, starts
    a new conversation and generates with it, token for token as the API
    does for that model."""
    b = ctx["browser"]
    b.wait("the model picker", lambda: b.js(
        "return !document.getElementById('model-pick').hidden"))
    ids = b.js("return [...document.querySelectorAll('#model option')]"
               ".map(o => o.value)")
    assert ids == [ctx["model_id"], "second"], ids
    assert b.js("return document.getElementById('model').value") == \
        ctx["model_id"]
    session = b.text("#session-id")
    pick(b, "#model", "second")
    b.wait("the second model's context", lambda: b.text(
        "#server-text") == "second · context 64")
    assert b.text("#session-id") != session
    set_prompt(b, ctx["prompt"])
    set_field(b, "#max_tokens", 6)
    set_field(b, "#temperature", 0)
    b.click("#generate")
    b.wait("the first token chip", lambda: gen_chips(b) >= 1)
    wait_idle(b)
    assert error_text(b) == "", error_text(b)
    status, _, body = ctx["server"].request("POST", "/v1/completions", {
        "model": "second", "prompt": ctx["prompt"], "max_tokens": 6,
        "temperature": 0, "logprobs": 1})
    assert status == 200, body
    want = [visible(t) for t in
            json.loads(body)["choices"][0]["logprobs"]["tokens"]]
    got = b.js("return [...document.querySelectorAll('#tokens .chip.gen')]"
               ".map(c => c.textContent)")
    assert got == want, (got, want)
    pick(b, "#model", ctx["model_id"])
    b.wait("the default model again", lambda: b.text(
        "#server-text").startswith(ctx["model_id"]))


def test_hovering_a_chip_shows_alternatives(ctx):
    b = ctx["browser"]
    chips = b.finds("#tokens .chip.gen")
    b.hover(chips[min(2, len(chips) - 1)])
    b.wait("the tooltip", lambda: b.displayed("#tip"))
    tip = b.text("#tip")
    assert "Top alternatives" in tip, tip
    rows = b.js("return document.querySelectorAll('#tip .alts li').length")
    assert rows == 5, rows
    assert len(re.findall(r"\d%", tip)) >= 6, tip   # the token's own + 5


def test_chips_are_keyboard_reachable(ctx):
    b = ctx["browser"]
    b.js("document.querySelector('#tokens .chip[tabindex=\"0\"]').focus()")
    b.wait("the tooltip on focus", lambda: b.displayed("#tip"))
    b.keys("\ue014")                                    # ArrowRight
    idx = b.js("const c = [...document.querySelectorAll('#tokens .chip')];"
               "return c.indexOf(document.activeElement)")
    assert idx == 1, idx
    assert b.js("return document.activeElement.tabIndex") == 0
    assert b.displayed("#tip")
    b.keys("\ue00c")                                    # Escape
    assert not b.displayed("#tip")


def test_score_my_prompt_marks_prompt_tokens(ctx):
    b = ctx["browser"]
    b.click("#echo")
    b.click("#generate")
    wait_idle(b)
    assert error_text(b) == "", error_text(b)
    n_prompt = b.js("return document.querySelectorAll('#tokens .chip.prompt').length")
    assert str(n_prompt) == stat(b, "prompt"), (n_prompt, stat(b, "prompt"))
    # The first prompt token has nothing before it; the rest are scored.
    unscored = b.js("return [...document.querySelectorAll('#tokens .chip.prompt')]"
                    ".map(c => c.classList.contains('unscored'))")
    assert unscored[0] and not any(unscored[1:]), unscored
    chips = b.finds("#tokens .chip.prompt")
    b.hover(chips[1])
    b.wait("the prompt tooltip", lambda: "The model expected" in b.text("#tip"))
    b.click("#echo")                                    # back off


def test_score_prompt_scores_without_generating(ctx):
    b = ctx["browser"]
    b.click("#score")
    wait_idle(b)
    assert error_text(b) == "", error_text(b)
    n_prompt = b.js("return document.querySelectorAll('#tokens .chip.prompt').length")
    assert n_prompt >= 2 and str(n_prompt) == stat(b, "prompt"), (n_prompt, stat(b, "prompt"))
    assert gen_chips(b) == 0
    assert stat(b, "gen") == "0", stat(b, "gen")


def test_ctrl_enter_in_the_prompt_generates(ctx):
    b = ctx["browser"]
    b.click("#prompt")
    b.chord("\ue009", "\ue007")                        # Control+Enter
    b.wait("chips from the keyboard", lambda: gen_chips(b) >= 1)
    wait_idle(b)
    assert error_text(b) == "", error_text(b)
    assert b.js("return document.getElementById('prompt').value") == ctx["prompt"]


def test_continue_reuses_the_session_cache(ctx):
    """Continue sends the first turn as the token ids the server reported
    for its prompt and completion (the same ids a request of its own gets),
    and the server reuses all of them but the last from the session."""
    b = ctx["browser"]
    first = b.js(RECORD_COMPLETIONS)
    b.click("#generate")
    wait_idle(b)
    before = b.js("return document.getElementById('prompt').value")
    session = b.text("#session-id")
    b.click("#continue")
    wait_idle(b)
    assert error_text(b) == "", error_text(b)
    after = b.js("return document.getElementById('prompt').value")
    assert after.startswith(before) and len(after) > len(before), (before, after)
    assert b.text("#session-id") == session
    _, turn1 = recorded(b, first)
    sent, turn2 = recorded(b, first + 1)
    assert turn1["prompt_ids"] is not None, "no token ids: %r" % turn1
    history = turn1["prompt_ids"] + turn1["ids"]
    assert sent["prompt"] == history, (sent["prompt"], history)
    assert turn2["prompt_ids"] == history, (turn2["prompt_ids"], history)
    assert after == before + turn1["text"], (after, before, turn1["text"])
    # the same greedy request made without the page gives the same ids
    status, _, body = ctx["server"].request("POST", "/v1/completions", {
        "prompt": ctx["prompt"], "max_tokens": 12, "temperature": 0,
        "return_token_ids": True})
    assert status == 200, body
    alone = json.loads(body)["choices"][0]
    assert history == alone["prompt_token_ids"] + alone["token_ids"], (history, alone)
    cached = int(b.js("return document.getElementById('stat-cached').dataset.cached"))
    assert cached == len(history) - 1, (cached, len(history))
    assert stat(b, "cached") == "%d of %d" % (cached, len(history)), stat(b, "cached")
    assert b.js("return document.querySelectorAll('#tokens .turn').length") == 1


def test_stop_cancels_on_the_server(ctx):
    b = ctx["browser"]
    srv = ctx["server"]
    cancelled = srv.metric("gpt2d_requests_cancelled_total")
    set_prompt(b, "A long story:")
    set_field(b, "#max_tokens", ctx["long_tokens"])
    set_field(b, "#temperature", 1)
    b.click("#generate")
    b.wait("tokens to stream", lambda: gen_chips(b) >= 3)
    b.click("#stop")
    wait_idle(b, 10)
    n = gen_chips(b)
    assert n < ctx["long_tokens"], "stop came too late: %d tokens" % n
    assert stat(b, "finish") == "stopped", stat(b, "finish")
    assert "Stopped" in b.text("#run-status"), b.text("#run-status")
    assert error_text(b) == "", error_text(b)
    b.wait("the server to count the cancellation",
           lambda: srv.metric("gpt2d_requests_cancelled_total") > cancelled, 15)
    b.wait("the slot to be freed",
           lambda: srv.metric("gpt2d_slots_busy") == 0, 15)
    assert b.js("return document.getElementById('generate').disabled") is False
    assert b.js("return document.getElementById('continue').disabled") is False


def test_server_field_errors_are_shown_with_their_param(ctx):
    b = ctx["browser"]
    set_field(b, "#max_tokens", 8)
    set_field(b, "#temperature", 5)
    b.click("#generate")
    b.wait("an error", lambda: error_text(b))
    wait_idle(b)
    msg = error_text(b)
    assert "400" in msg and "temperature" in msg, msg
    assert b.js("return document.getElementById('temperature')"
                ".getAttribute('aria-invalid')") == "true"
    set_field(b, "#temperature", 0.8)


def chip_count(b):
    return b.js("return document.querySelectorAll('#tokens .chip').length")


def test_a_form_mistake_keeps_the_last_conversation(ctx):
    """A value the form cannot send is refused before anything is cleared:
    text a number box cannot parse is an error, not the server's default,
    and so is a seed past 2^53, which JavaScript cannot carry exactly."""
    b = ctx["browser"]
    set_field(b, "#max_tokens", 6)
    b.click("#generate")
    wait_idle(b)
    chips, session = chip_count(b), b.text("#session-id")
    assert chips > 0
    for css, value, param in (("#temperature", "1e400", "temperature"),
                              ("#seed", "99999999999999999999", "seed")):
        set_field(b, css, value)
        b.click("#generate")
        b.wait("the form error", lambda: error_text(b))
        assert param in error_text(b), error_text(b)
        assert b.js("return document.getElementById(arguments[0])"
                    ".getAttribute('aria-invalid')", param) == "true"
        assert chip_count(b) == chips and b.text("#session-id") == session
        set_field(b, css, "0.8" if param == "temperature" else "")


def test_continue_keeps_edits_and_survives_a_refusal(ctx):
    """Text added to the prompt box goes after the last completion: the
    turn is sent as that conversation's ids, then the added text's ids
    from /tokenize.  A turn the server refuses (over the context) leaves no
    empty divider, and Continue stays available to retry with other
    settings."""
    b = ctx["browser"]
    first = b.js(RECORD_COMPLETIONS)
    set_prompt(b, ctx["prompt"])
    set_field(b, "#max_tokens", 4)
    b.click("#generate")
    wait_idle(b)
    b.type("#prompt", " EDIT")
    set_field(b, "#max_tokens", 100000)
    b.click("#continue")
    b.wait("the refusal", lambda: error_text(b))
    wait_idle(b)
    assert "400" in error_text(b) and "max_tokens" in error_text(b), error_text(b)
    assert b.js("return document.querySelectorAll('#tokens .turn').length") == 0
    assert b.js("return document.getElementById('continue').disabled") is False
    set_field(b, "#max_tokens", 4)
    b.click("#continue")
    wait_idle(b)
    assert error_text(b) == "", error_text(b)
    assert b.js("return document.querySelectorAll('#tokens .turn').length") == 1
    _, turn1 = recorded(b, first)
    refused, _ = recorded(b, first + 1)
    sent, turn2 = recorded(b, first + 2)
    status, _, body = ctx["server"].request("POST", "/tokenize",
                                            {"content": " EDIT"})
    assert status == 200, body
    assert turn1["prompt_ids"] is not None, "no token ids: %r" % turn1
    history = turn1["prompt_ids"] + turn1["ids"]
    want = history + json.loads(body)["tokens"]
    assert refused["prompt"] == want and sent["prompt"] == want, (sent, want)
    assert turn2["prompt_ids"] == want
    box = b.js("return document.getElementById('prompt').value")
    assert box == ctx["prompt"] + turn1["text"] + " EDIT", (box, turn1["text"])
    # all of the history is cached but its last token, unless the model
    # computed it too (an end of text after it)
    cached = int(b.js("return document.getElementById('stat-cached').dataset.cached"))
    assert cached == len(history) - (turn1["finish"] == "length"), (cached, turn1)


def test_continue_after_editing_earlier_text_sends_text(ctx):
    """When the earlier text was changed, the ids no longer say what the
    box says: Continue sends the box's text and the completion as text."""
    b = ctx["browser"]
    first = b.js(RECORD_COMPLETIONS)
    set_prompt(b, ctx["prompt"])
    b.click("#generate")
    wait_idle(b)
    set_prompt(b, "Then " + ctx["prompt"])
    b.click("#continue")
    wait_idle(b)
    assert error_text(b) == "", error_text(b)
    _, turn1 = recorded(b, first)
    sent, _ = recorded(b, first + 1)
    want = "Then " + ctx["prompt"] + turn1["text"]
    assert sent["prompt"] == want, (sent["prompt"], want)
    assert b.js("return document.getElementById('prompt').value") == want


def test_new_conversation_stops_a_running_one(ctx):
    """'New conversation' mid-stream cancels the stream: nothing more lands
    in the cleared view, and the server frees the slot."""
    b = ctx["browser"]
    srv = ctx["server"]
    cancelled = srv.metric("gpt2d_requests_cancelled_total")
    set_field(b, "#max_tokens", ctx["long_tokens"])
    b.click("#generate")
    b.wait("tokens to stream", lambda: gen_chips(b) >= 3)
    b.click("#new-session")
    wait_idle(b, 10)
    b.wait("the server to count the cancellation",
           lambda: srv.metric("gpt2d_requests_cancelled_total") > cancelled, 15)
    assert chip_count(b) == 0, chip_count(b)
    assert b.js("return document.getElementById('continue').disabled") is True
    assert b.js("return document.getElementById('generate').disabled") is False
    set_field(b, "#max_tokens", 8)


def test_copy_text_copies_the_text_not_the_markers(ctx):
    """'Copy text' gives the completion as the server wrote it (no ↵ or
    byte escapes): here a greedy one, checked against the same request
    made without the page."""
    b = ctx["browser"]
    srv = ctx["server"]
    prompt = "Line one\nand then"
    b.js("document.getElementById('prompt').value = arguments[0];"
         "window.__copied = null;"
         "navigator.clipboard.writeText = (t) => {"
         "  window.__copied = t; return Promise.resolve(); };", prompt)
    set_field(b, "#max_tokens", 12)
    set_field(b, "#temperature", 0)
    b.click("#generate")
    wait_idle(b)
    b.click("#copy-text")
    b.wait("the copy", lambda: b.js("return window.__copied") is not None)
    status, _, body = srv.request("POST", "/v1/completions", {
        "prompt": prompt, "max_tokens": 12, "temperature": 0})
    assert status == 200, body
    want = json.loads(body)["choices"][0]["text"]
    assert b.js("return window.__copied") == want, (b.js("return window.__copied"), want)
    assert "Copied" in b.text("#run-status"), b.text("#run-status")
    set_field(b, "#temperature", 0.8)
    set_prompt(b, ctx["prompt"])


def test_byte_tokens_show_the_character_they_complete(ctx):
    """CJK text is split into byte tokens; the chip that completes a
    character shows it, rather than only its escaped bytes."""
    b = ctx["browser"]
    b.js("document.getElementById('prompt').value = arguments[0];", "日本語です")
    b.click("#score")
    wait_idle(b)
    assert error_text(b) == "", error_text(b)
    shown = b.js("return Array.from(document.querySelectorAll('#tokens .chip'),"
                 " (c) => c.textContent).join('|')")
    for ch in "日本語です":
        assert ch in shown, (ch, shown)
    set_prompt(b, ctx["prompt"])


# ---- the constraint box ----

ASKED = 5       # the alternatives the page asks for (app.js ALTERNATIVES)


def set_constraint_text(b, text):
    b.js("const t = document.getElementById('constraint-text');"
         "t.value = arguments[0];"
         "t.dispatchEvent(new Event('change', {bubbles: true}))", text)


def constraint_text(b):
    return b.js("return document.getElementById('constraint-text').value")


def no_constraint(b):
    b.js("const k = document.getElementById('constraint'); k.value = 'none';"
         "k.dispatchEvent(new Event('change', {bubbles: true}))")


def constraint_error(b):
    """[message, param] beside the constraint box, or None when hidden."""
    return b.js("const e = document.getElementById('constraint-error');"
                "return e.hidden ? null : Array.from(e.querySelectorAll('p'),"
                " (p) => p.textContent)")


def want_caption(by, shown):
    """What a constrained token's tooltip says above its alternatives: the
    server lists ASKED of the allowed tokens (one more when the chosen one
    was not among them), so fewer means the constraint allowed no more."""
    if shown >= ASKED:
        return "Allowed by %s: %d shown" % (by, shown)
    if shown == 1:
        return "Allowed by %s: only this one (%d asked)" % (by, ASKED)
    return "Allowed by %s: only these %d (%d asked)" % (by, shown, ASKED)


def chip_tip(b, i):
    """Hovers generated chip i: [caption, alternatives shown, footnote]."""
    hover_still(b, b.finds("#tokens .chip.gen")[i])
    b.wait("the tooltip", lambda: b.displayed("#tip"))
    return b.js("const t = document.getElementById('tip');"
                "const foot = t.querySelector('.tip-foot');"
                "return [t.querySelector('.tip-note').textContent,"
                " Array.from(t.querySelectorAll('.alts .alt-token'), (a) => a.textContent),"
                " foot ? foot.textContent : '']")


def shown_alt(token):
    """An alternative as the tooltip names it (tokens.js quotedToken)."""
    if token.startswith("bytes:"):
        return token[6:]
    return "“%s”" % visible(token).replace(" ", "␣")


def generate_constrained(b):
    """Generates with the form as it is; the request sent and its answer."""
    b.click("#generate")
    wait_idle(b)
    assert error_text(b) == "", error_text(b)
    n = b.js("return window.__sent.length")
    return recorded(b, n - 1)


def test_json_schema_preset_answers_valid_json(ctx):
    """JSON Schema with its example (a person): sent strict as
    response_format, the answer parses and obeys the schema (checked by
    python3-jsonschema), is shown parsed and marked valid; each token's
    tooltip says its alternatives are the ones the schema allowed and how
    many the server listed (fewer than asked where it allowed fewer).  Cut
    at max_tokens, the page says so."""
    import jsonschema
    b = ctx["browser"]
    first = b.js(RECORD_COMPLETIONS)
    pick(b, "#constraint", "json_schema")
    assert b.displayed("#constraint-text")
    b.click("#constraint-example")
    schema = json.loads(constraint_text(b))
    assert set(schema["required"]) == {"name", "age", "city"}, schema
    set_prompt(b, "A person, as JSON:")
    set_field(b, "#max_tokens", 200)
    set_field(b, "#temperature", 0.8)
    set_field(b, "#seed", 5)
    sent, got = generate_constrained(b)
    assert sent["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "playground", "strict": True, "schema": schema},
    }, sent
    assert "structured_outputs" not in sent, sent
    assert got["finish"] == "stop", got
    answer = json.loads(got["text"])
    jsonschema.validate(answer, schema)

    assert b.displayed("#answer .parsed pre")
    assert "valid JSON" in b.text("#answer .parsed summary"), b.text("#answer")
    shown = b.js("return document.querySelector('#answer .parsed pre').textContent")
    assert json.loads(shown) == answer and "\n  \"name\": " in shown, shown

    tops = got["tops"]
    assert gen_chips(b) == len(tops), (gen_chips(b), len(tops))
    assert b.js("return document.querySelectorAll('#tokens .chip.gen:not(.masked)').length") == 0
    few = [i for i, t in enumerate(tops) if len(t) < ASKED]
    many = [i for i, t in enumerate(tops) if len(t) >= ASKED]
    assert few and many, [len(t) for t in tops]    # the keys are forced, the values free
    for i in (few[0], many[0]):
        caption, alts, foot = chip_tip(b, i)
        assert caption == want_caption("the schema", len(tops[i])), (i, caption, tops[i])
        assert sorted(alts) == sorted(shown_alt(t) for t in tops[i]), (alts, tops[i])
        assert "the schema allowed" in foot, foot
    b.screenshot(os.path.join(ctx["out"], "structured.png"))

    set_field(b, "#max_tokens", 5)
    sent, got = generate_constrained(b)
    assert got["finish"] == "length", got
    note = b.text("#answer")
    assert "Cut at max_tokens" in note and "valid JSON" not in note, note


def test_a_bad_schema_shows_the_param_beside_the_box(ctx):
    """A schema the server refuses: its 400, message and param (down to the
    keyword at fault) beside the constraint box, which is marked.  A schema
    that is not JSON is refused before sending, named as the field it would
    have been; a regex that does not compile names structured_outputs.regex;
    a good one clears the mark."""
    b = ctx["browser"]
    srv = ctx["server"]
    b.js(RECORD_COMPLETIONS)
    pick(b, "#constraint", "json_schema")
    schema = {"type": "object", "properties": {"age": {"type": "integr"}}}
    set_constraint_text(b, json.dumps(schema, indent=2))
    b.click("#generate")
    b.wait("the refusal", lambda: error_text(b))
    wait_idle(b)
    status, _, body = srv.request("POST", "/v1/completions", {
        "prompt": "x", "response_format": {"type": "json_schema", "json_schema": {
            "name": "playground", "strict": True, "schema": schema}}})
    assert status == 400, body
    want = json.loads(body)["error"]
    assert want["param"] == "response_format.json_schema.schema.properties.age.type", want
    assert "400" in error_text(b) and want["param"] in error_text(b), error_text(b)
    assert constraint_error(b) == [want["message"], want["param"]], constraint_error(b)
    assert b.js("return document.getElementById('constraint-text')"
                ".getAttribute('aria-invalid')") == "true"

    sent = b.js("return window.__sent.length")
    set_constraint_text(b, '{"type": "object",')
    b.click("#generate")
    b.wait("the form error", lambda: constraint_error(b) and
           constraint_error(b)[0].startswith("The schema is not JSON"))
    assert constraint_error(b)[1] == "response_format.json_schema.schema"
    assert b.js("return window.__sent.length") == sent, "a bad schema was sent"

    pick(b, "#constraint", "regex")
    set_constraint_text(b, "[0-9")
    b.click("#generate")
    b.wait("the regex refusal", lambda: error_text(b))
    wait_idle(b)
    assert "400" in error_text(b), error_text(b)
    assert constraint_error(b)[1] == "structured_outputs.regex", constraint_error(b)
    assert b.js("return document.getElementById('constraint-text')"
                ".getAttribute('aria-invalid')") == "true"

    set_constraint_text(b, "[0-9]+")
    set_field(b, "#max_tokens", 4)
    first = b.js("return window.__sent.length")
    _, got = generate_constrained(b)
    assert re.fullmatch(r"[0-9]+", got["text"]), got
    assert constraint_error(b) is None
    assert b.js("return document.getElementById('constraint-text')"
                ".getAttribute('aria-invalid')") is None


def test_choice_mode_gives_one_of_the_choices(ctx):
    """Choice (one a line): the answer is exactly one of them, every
    time; the yes/no example is sent as two choices."""
    b = ctx["browser"]
    first = b.js(RECORD_COMPLETIONS)
    pick(b, "#constraint", "choice")
    b.click("#constraint-example")
    set_prompt(b, "Is the sky blue? Answer:")
    set_field(b, "#max_tokens", 8)
    sent, got = generate_constrained(b)
    assert sent["structured_outputs"] == {"choice": ["yes", "no"]}, sent
    assert "response_format" not in sent, sent
    assert got["text"] in ("yes", "no") and got["finish"] == "stop", got
    assert "Complete" in b.text("#answer"), b.text("#answer")
    caption, alts, _ = chip_tip(b, 0)
    assert caption == want_caption("the choices", len(got["tops"][0])), (caption, got["tops"])
    assert len(alts) == len(got["tops"][0])

    set_constraint_text(b, "red\ngreen\nblue\n")
    for seed in (1, 2, 3):
        set_field(b, "#seed", seed)
        sent, got = generate_constrained(b)
        assert sent["structured_outputs"] == {"choice": ["red", "green", "blue"]}, sent
        assert got["text"] in ("red", "green", "blue") and got["finish"] == "stop", got


def test_regex_and_grammar_examples_match(ctx):
    """The date regex and the GBNF greeting: every answer matches, checked
    with Python's re (the regex as sent; the grammar transcribed by hand)."""
    b = ctx["browser"]
    first = b.js(RECORD_COMPLETIONS)
    set_prompt(b, "Date:")
    set_field(b, "#max_tokens", 40)
    pick(b, "#constraint", "regex")
    b.click("#constraint-example")
    for seed in (1, 2):
        set_field(b, "#seed", seed)
        sent, got = generate_constrained(b)
        regex = sent["structured_outputs"]["regex"]
        assert regex == r"\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])", regex
        assert re.fullmatch(regex, got["text"], re.ASCII), got
        assert got["finish"] == "stop", got

    pick(b, "#constraint", "grammar")
    b.click("#constraint-example")
    greeting = r"(Hello|Hi) [A-Z][a-z]{1,8}! You are [1-9][0-9]?\."
    for seed in (1, 2):
        set_field(b, "#seed", seed)
        sent, got = generate_constrained(b)
        assert sent["structured_outputs"] == {"grammar": constraint_text(b)}, sent
        assert re.fullmatch(greeting, got["text"], re.ASCII), got
        assert got["finish"] == "stop", got
    caption, _, _ = chip_tip(b, 0)
    assert caption.startswith("Allowed by the grammar: "), caption


def test_the_constraint_is_kept_and_scoring_sends_none(ctx):
    """The constraint is kept like the other settings; scoring a prompt
    generates nothing and sends none; "none" sends none and the tooltip
    is the plain one again."""
    b = ctx["browser"]
    try:
        pick(b, "#constraint", "grammar")
        text = constraint_text(b)
        b.go(ctx["base"])                               # reload
        b.wait("the model name", lambda: b.text("#server-text").startswith(
            ctx["model_id"]))
        assert b.js("return document.getElementById('constraint').value") == "grammar"
        assert constraint_text(b) == text and b.displayed("#constraint-text")
        first = b.js(RECORD_COMPLETIONS)
        b.click("#score")
        wait_idle(b)
        sent, _ = recorded(b, first)
        assert sent["max_tokens"] == 0, sent
        assert "structured_outputs" not in sent and "response_format" not in sent, sent

        pick(b, "#constraint", "none")
        assert not b.displayed("#constraint-spec")
        set_field(b, "#max_tokens", 6)
        sent, _ = generate_constrained(b)
        assert "structured_outputs" not in sent and "response_format" not in sent, sent
        assert not b.displayed("#answer")
        caption, _, foot = chip_tip(b, 0)
        assert caption == "Top alternatives:" and foot == "", (caption, foot)
    finally:
        no_constraint(b)
        set_field(b, "#max_tokens", 8)
        set_field(b, "#seed", "")
        set_prompt(b, ctx["prompt"])


def inspect_api(ctx, body):
    status, _, raw = ctx["server"].request("POST", "/v1/inspect", body)
    assert status == 200, (status, raw[:300])
    return json.loads(raw)


def pick(b, select, value):
    """Chooses an option of a <select> with the mouse."""
    b.click("%s option[value='%s']" % (select, value))


def scroll_to(b, element, block="center"):
    """Scrolls an element into view and waits for the page's scroll event:
    it comes a frame later, and hides any tooltip (as it should)."""
    moved = b.js("const y = window.scrollY; window.gpt2dScrolled = false;"
                 "addEventListener('scroll', () => { window.gpt2dScrolled = true; },"
                 " {once: true});"
                 "arguments[0].scrollIntoView({block: arguments[1]});"
                 "return window.scrollY !== y", {ELEMENT: element}, block)
    if moved:
        b.wait("the scroll", lambda: b.js("return window.gpt2dScrolled"))


def hover_still(b, element):
    """Hovers an element once it is in view and the page is still."""
    scroll_to(b, element)
    b.hover(element)


def inside_weights(b):
    return b.js("return Array.from(document.querySelectorAll('#inside-tokens .itok'),"
                " (t) => Number(t.dataset.weight))")


def test_inside_view_shows_attention_and_the_logit_lens(ctx):
    """"Look inside": the prompt's tokens, the lens grid (each cell the
    layer's best guess, as the API gives it); pick a layer and a head, hover
    a token: the tokens are shaded by that head's attention row; all heads
    average it; a lens cell's tooltip lists the alternatives."""
    b = ctx["browser"]
    prompt = "The quick brown fox jumps over the lazy dog"
    set_prompt(b, prompt)
    b.click("#inside-run")
    b.wait("the Inside view", lambda: b.js(
        "return document.getElementById('inside-heatmap').dataset.layer !== undefined"
        " && document.getElementById('inside-run').disabled === false"))
    assert b.js("return document.getElementById('inside-error').hidden"), \
        b.text("#inside-error")
    want = inspect_api(ctx, {"prompt": prompt, "logit_lens": 5})
    ids = [t["id"] for t in want["tokens"]]
    n, n_layer = len(ids), len(want["layers"])
    shown = b.js("return Array.from(document.querySelectorAll('#inside-tokens .itok'),"
                 " (t) => t.textContent)")
    assert shown == [visible(t["text"]) for t in want["tokens"]], shown
    grid = b.js("return Array.from(document.querySelectorAll('#inside-lens tbody tr'),"
                " (r) => Array.from(r.querySelectorAll('td'), (c) => c.textContent))")
    assert len(grid) == n_layer and all(len(r) == n for r in grid), grid
    for i in range(n_layer):
        for p in range(n):
            best = want["logit_lens"][i][p][0]["text"]
            assert grid[i][p] == visible(best).replace(" ", "␣"), (i, p, grid[i][p], best)

    pick(b, "#inside-layer", "0")
    b.wait("layer 0", lambda: b.js(
        "return document.getElementById('inside-heatmap').dataset.layer") == "0")
    pick(b, "#inside-head", "1")
    b.wait("head 1", lambda: b.js(
        "return document.getElementById('inside-heatmap').dataset.head") == "1")
    heads = inspect_api(ctx, {"prompt": ids, "attention": True, "layers": [0]})["attention"][0]
    q = n - 1
    hover_still(b, b.finds("#inside-tokens .itok")[q])
    b.wait("the token's tooltip", lambda: b.displayed("#inside-tip"))
    assert b.js("return document.querySelectorAll('#inside-tokens .itok')[arguments[0]]"
                ".classList.contains('query')", q)
    got = inside_weights(b)
    for k in range(n):
        assert abs(got[k] - heads[1][q][k]) < 1e-5, (k, got[k], heads[1][q][k])
    pick(b, "#inside-head", "avg")
    b.wait("all heads", lambda: b.js(
        "return document.getElementById('inside-heatmap').dataset.head") == "avg")
    got = inside_weights(b)
    for k in range(n):
        mean = sum(h[q][k] for h in heads) / len(heads)
        assert abs(got[k] - mean) < 1e-5, (k, got[k], mean)

    # the section at the top of the window, so that nothing scrolls (and
    # hides the tooltip) before the picture
    scroll_to(b, b.find(".inside"), "start")
    q = 4
    b.hover(b.finds("#inside-tokens .itok")[q])
    b.hover(b.finds("#inside-lens td")[n * (n_layer - 1) + q])
    b.wait("the cell's tooltip", lambda: b.displayed("#inside-tip"))
    alts = b.js("return Array.from(document.querySelectorAll('#inside-tip .alts li'),"
                " (li) => li.querySelector('.alt-token').textContent)")
    want_alts = [g["text"] for g in want["logit_lens"][n_layer - 1][q]]
    assert len(alts) == 5 and alts[0].strip("“”") == visible(want_alts[0]).replace(" ", "␣"), \
        (alts, want_alts)
    b.screenshot(os.path.join(ctx["out"], "inside.png"), b.find(".inside"))


def test_inside_view_fits_a_narrow_screen(ctx):
    """375 px: nothing scrolls sideways but the lens grid, inside itself."""
    b = ctx["browser"]
    b.set_window(375, 900)
    try:
        b.wait("the narrow layout", lambda: b.js("return window.innerWidth") <= 380)
        overflow = b.js("return document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, "page is %dpx wider than the screen" % overflow
        wrap = b.js("const w = document.querySelector('.lens-wrap');"
                    "return [w.scrollWidth, w.clientWidth]")
        assert wrap[0] > wrap[1], "the lens grid should scroll inside its box: %r" % wrap
        side = b.js("const c = document.getElementById('inside-heatmap');"
                    "return [c.clientWidth, c.clientHeight]")
        assert 200 <= side[0] <= 375 and side[0] == side[1], side
        b.screenshot(os.path.join(ctx["out"], "inside-narrow.png"))
    finally:
        b.set_window(1280, 1000)


def test_screenshot_of_a_scored_completion(ctx):
    """The README picture: a scored prompt, a sampled completion, a tooltip."""
    b = ctx["browser"]
    set_prompt(b, "In a shocking finding, scientists discovered a herd of "
                  "unicorns living in a remote, previously unexplored valley "
                  "in the Andes Mountains.")
    set_field(b, "#max_tokens", 40)
    set_field(b, "#temperature", 0.9)
    set_field(b, "#seed", 42)
    b.click("#echo")
    b.click("#generate")
    wait_idle(b)
    b.click("#echo")
    assert error_text(b) == "", error_text(b)
    chips = b.finds("#tokens .chip.gen")
    assert len(chips) >= 10, len(chips)
    b.hover(chips[9])
    b.wait("the tooltip", lambda: b.displayed("#tip"))
    path = os.path.join(ctx["out"], "playground.png")
    b.screenshot(path)
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_narrow_screen_has_no_sideways_scroll(ctx):
    b = ctx["browser"]
    set_prompt(b, ctx["prompt"])
    b.click("#generate")
    wait_idle(b)
    b.set_window(390, 900)
    b.wait("the narrow layout", lambda: b.js("return window.innerWidth") <= 400)
    overflow = b.js("return document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, "page is %dpx wider than the screen" % overflow
    b.screenshot(os.path.join(ctx["out"], "playground-narrow.png"))
    b.set_window(1280, 1000)


# ---- the Server page ----

def readings(b):
    return int(b.js("return Number(document.body.dataset.readings || 0)"))


def chart_value(b, chart, series):
    return b.js("const v = document.querySelector("
                "'[data-chart=\"' + arguments[0] + '\"] [data-series=\"'"
                " + arguments[1] + '\"]'); return v ? v.textContent : null",
                chart, series)


def test_server_page_draws_the_metrics_and_follows_the_load(ctx):
    """Server (server.html) reads /metrics with the playground's key every
    2 s: its charts follow a load the test makes, and agree with /metrics."""
    b = ctx["browser"]
    b.go(ctx["base"] + "server.html")
    b.wait("the page title", lambda: b.js("return document.title") ==
           "gpt2d server")
    b.wait("a reading", lambda: readings(b) >= 1)
    assert b.text("#server-text").startswith(ctx["model_id"]), \
        b.text("#server-text")
    charts = b.js("return [...document.querySelectorAll('.chart')].map(c => "
                  "[c.dataset.chart, c.querySelectorAll('polyline').length,"
                  " c.querySelector('svg').getAttribute('aria-label')])")
    assert [c[0] for c in charts] == ["tokens", "requests", "ttft", "gap",
                                      "blocks", "bytes", "hits"], charts
    assert all(n >= 2 and "last two minutes: now " in label
               for _, n, label in charts), charts
    slots = ctx["server"].metric("gpt2d_slots_total")
    b.wait("the slots", lambda: chart_value(b, "requests", "slots") ==
           str(int(slots)))
    # a load: generated tokens a second and first-token times appear
    seen = readings(b)
    for i in range(4):
        status, _, body = ctx["server"].request("POST", "/v1/completions", {
            "prompt": "Load %d" % i, "max_tokens": 24, "seed": i,
            "logit_bias": {"50256": -100}})
        assert status == 200, body
    b.wait("a reading after the load", lambda: readings(b) >= seen + 1)
    b.wait("generated tokens a second", lambda: float(
        chart_value(b, "tokens", "generated") or 0) > 0, 10)
    assert re.match(r"^\d+ ms$|^\d+\.\d\d s$",
                    chart_value(b, "ttft", "p50")), chart_value(b, "ttft", "p50")
    row = b.js("const r = document.querySelector('#keys tr[data-key=\"playground\"]');"
               "return r ? [...r.cells].map(c => c.textContent) : null")
    assert row is not None and row[3] == "0", row
    # the key itself is nowhere on the page
    assert ctx["key"] not in b.js("return document.body.innerText")


def test_server_page_shows_a_keys_refusals(ctx):
    """A key that spends its token budget gets 429s: the keys table shows
    them by reason, and the row stands out."""
    b = ctx["browser"]
    tight = Server(ctx["base"], ctx["tight_key"])
    codes = [tight.request("POST", "/v1/completions",
                           {"prompt": "Tight", "max_tokens": 12})[0]
             for _ in range(6)]
    assert 429 in codes, codes
    b.wait("the refusal in the keys table", lambda: b.js(
        "const r = document.querySelector('#keys tr[data-key=\"tight\"]');"
        "return r && r.classList.contains('refused') && "
        "r.querySelector('.refusals').textContent.startsWith('token_budget ')"),
        10)
    shown = b.js("return document.querySelector('#keys tr[data-key=\"tight\"]"
                 " .refusals').textContent")
    want = ctx["server"].metric('gpt2d_key_refused_total{key="tight",'
                                'reason="token_budget"}')
    assert shown == "token_budget %d" % want, (shown, want)
    assert ctx["tight_key"] not in b.js("return document.body.innerText")


def test_server_page_pauses_by_keyboard_and_fits_a_narrow_screen(ctx):
    b = ctx["browser"]
    b.js("document.getElementById('pause').focus()")
    b.keys("\ue007")                                    # Enter
    assert b.js("return document.getElementById('pause')"
                ".getAttribute('aria-pressed')") == "true"
    n = readings(b)
    time.sleep(4.5)
    assert readings(b) == n, "readings went on while paused"
    b.keys("\ue007")
    b.wait("readings again", lambda: readings(b) > n, 10)
    b.set_window(375, 900)
    b.wait("the narrow layout", lambda: b.js("return window.innerWidth") <= 400)
    overflow = b.js("return document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, "the page is %dpx wider than the screen" % overflow
    b.screenshot(os.path.join(ctx["out"], "server-narrow.png"))
    b.set_window(1280, 1000)
    b.screenshot(os.path.join(ctx["out"], "server.png"))
    b.go(ctx["base"])                                   # back to the playground


def test_no_console_errors(ctx):
    """No script error and no Content-Security-Policy violation all along."""
    entries = ctx["browser"].console()
    messages = [e.get("message", "") for e in entries]
    # The log works: the 401 that the key test provoked on purpose is there.
    assert any("401" in m for m in messages), messages
    bad = [m for e, m in zip(entries, messages) if e.get("level") == "SEVERE"
           and not re.search(r"status of (401|400) ", m)]
    assert not bad, bad


TESTS = [
    test_static_files_have_correct_types,
    test_page_loads_and_asks_for_the_api_key,
    test_every_control_is_labelled_and_shows_focus,
    test_missing_key_shows_the_servers_401,
    test_api_key_is_kept_in_the_browser,
    test_the_model_picker_sends_the_picked_model,
    test_generate_streams_token_chips,
    test_hovering_a_chip_shows_alternatives,
    test_chips_are_keyboard_reachable,
    test_score_my_prompt_marks_prompt_tokens,
    test_score_prompt_scores_without_generating,
    test_ctrl_enter_in_the_prompt_generates,
    test_continue_reuses_the_session_cache,
    test_stop_cancels_on_the_server,
    test_server_field_errors_are_shown_with_their_param,
    test_a_form_mistake_keeps_the_last_conversation,
    test_continue_keeps_edits_and_survives_a_refusal,
    test_continue_after_editing_earlier_text_sends_text,
    test_new_conversation_stops_a_running_one,
    test_copy_text_copies_the_text_not_the_markers,
    test_byte_tokens_show_the_character_they_complete,
    test_json_schema_preset_answers_valid_json,
    test_a_bad_schema_shows_the_param_beside_the_box,
    test_choice_mode_gives_one_of_the_choices,
    test_regex_and_grammar_examples_match,
    test_the_constraint_is_kept_and_scoring_sends_none,
    test_inside_view_shows_attention_and_the_logit_lens,
    test_inside_view_fits_a_narrow_screen,
    test_screenshot_of_a_scored_completion,
    test_narrow_screen_has_no_sideways_scroll,
    test_server_page_draws_the_metrics_and_follows_the_load,
    test_server_page_shows_a_keys_refusals,
    test_server_page_pauses_by_keyboard_and_fits_a_narrow_screen,
    test_no_console_errors,
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True)
    ap.add_argument("--api-key", required=True)
    ap.add_argument("--tight-key", required=True,
                    help="a key with a small token budget (name=tight)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--long-tokens", type=int, default=900)
    add_browser_arguments(ap)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)

    server = Server(a.base, a.api_key)
    deadline = time.monotonic() + 30
    while True:
        try:
            if server.request("GET", "/health", auth=False)[0] == 200:
                break
        except OSError:
            pass
        if time.monotonic() > deadline:
            print("FAIL: gpt2d never became healthy\n0 passed, 1 failed")
            return 1
        time.sleep(0.1)
    status, _, body = server.request("GET", "/v1/models")
    model_id = json.loads(body)["data"][0]["id"] if status == 200 else "?"

    ctx = {"server": server, "base": a.base,
           "key": a.api_key, "tight_key": a.tight_key, "out": a.out,
           "model_id": model_id,
           "prompt": "The quick brown fox jumps over",
           "long_tokens": a.long_tokens}
    return run_browser_tests(TESTS, ctx, a.select, a.chromium, a.chromedriver,
                             a.out)


if __name__ == "__main__":
    sys.exit(main())
