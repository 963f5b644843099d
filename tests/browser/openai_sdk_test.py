#!/usr/bin/env python3
"""openai_sdk_test.py — the official OpenAI SDK (npm `openai`) in a web
page on another origin, calling gpt2d from headless Chromium.

    openai_sdk_test.py --sdk DIR --model DIR --gpt2d BIN --work DIR --out DIR
                       [--chromium /usr/bin/chromium]
                       [--chromedriver /usr/bin/chromedriver] [TEST...]

DIR of --sdk is the unpacked package (tests/data/fetch-openai-sdk.sh); the
page imports its ES modules (index.mjs).  This script serves that page on
one loopback port, starts gpt2d on another with an API key and
--cors-origin naming the page's origin, and drives Chromium with
webdriver.py: every call crosses origins, so the browser sends a CORS
preflight listing the SDK's x-stainless-* headers first, and the page reads
only the response headers gpt2d exposes.  Expected answers come from the
same requests sent to gpt2d directly (greedy, so the same bytes).  Ends
with the line "N passed, N failed".
"""

import argparse
import http.server
import os
import re
import sys
import threading
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

from gpt2d_client import Server  # noqa: E402
from webdriver import add_browser_arguments, run_browser_tests  # noqa: E402

KEY = "sk-page-%d" % os.getpid()

# The page: the SDK as a module, and the three calls the tests make.  Each
# returns plain JSON (what WebDriver can carry back), or the error the SDK
# threw, by class name.
PAGE = """<!doctype html>
<meta charset="utf-8">
<title>gpt2d from the OpenAI SDK</title>
<script type="module">
import OpenAI from "/sdk/index.mjs";

const base = new URLSearchParams(location.search).get("base");
function client(key) {
    return new OpenAI({apiKey: key, baseURL: base, maxRetries: 0,
                       dangerouslyAllowBrowser: true});
}
function failure(e) {
    return {error: e.constructor.name, status: e.status ?? null,
            code: e.code ?? null, message: String(e.message),
            request_id: e.requestID ?? null};
}
window.sdk = {
    async complete(key, body, headers) {
        try {
            const {data, request_id} = await client(key).completions
                .create(body, {headers}).withResponse();
            return {data, request_id};
        } catch (e) { return failure(e); }
    },
    async stream(key, body) {
        try {
            const {data, request_id} = await client(key).completions
                .create({...body, stream: true}).withResponse();
            const chunks = [];
            for await (const chunk of data)
                chunks.push(chunk);
            return {chunks, request_id};
        } catch (e) { return failure(e); }
    },
};
document.title = "ready";
</script>
"""

TYPES = {".mjs": "text/javascript", ".js": "text/javascript",
         ".json": "application/json", ".map": "application/json"}


class PageHandler(http.server.BaseHTTPRequestHandler):
    """The page at /, the SDK package under /sdk/: nothing else."""

    sdk_dir = None

    def log_message(self, *args):
        pass

    def do_GET(self):
        path = urllib.parse.urlsplit(self.path).path
        if path == "/":
            body, ctype = PAGE.encode(), "text/html; charset=utf-8"
        elif path.startswith("/sdk/"):
            rel = os.path.normpath(path[len("/sdk/"):])
            full = os.path.join(self.sdk_dir, rel)
            ext = os.path.splitext(rel)[1]
            if rel.startswith("..") or ext not in TYPES or not os.path.isfile(full):
                self.send_error(404)
                return
            with open(full, "rb") as f:
                body, ctype = f.read(), TYPES[ext]
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


# ---- page helpers ----

def open_page(ctx, host):
    """Loads the page from http://HOST:PAGE_PORT/ and waits for the SDK."""
    b = ctx["browser"]
    b.go("http://%s:%d/?base=%s" % (host, ctx["page_port"],
                                     urllib.parse.quote(ctx["api_base"], safe="")))
    b.wait("the SDK to load", lambda: b.js("return document.title") == "ready")


def page_call(ctx, method, *args):
    """window.sdk[method](*args) in the page, awaited."""
    return ctx["browser"].js(
        "return window.sdk[arguments[0]](...arguments[1])", method, list(args))


def direct(ctx, body):
    """The same completion sent to gpt2d directly."""
    r = ctx["server"].client(api_key=KEY).post("/v1/completions", body)
    assert r.status == 200, r
    return r.json


GREEDY = {"model": "tiny", "prompt": "The quick brown fox", "max_tokens": 8,
          "temperature": 0, "logit_bias": {"50256": -100}}


# ---- tests (in order: the first loads the page) ----

def test_completion_from_another_origin(ctx):
    open_page(ctx, "127.0.0.1")
    got = page_call(ctx, "complete", KEY, GREEDY)
    assert "error" not in got, got
    want = direct(ctx, GREEDY)
    data = got["data"]
    assert data["object"] == "text_completion", data
    assert data["choices"][0]["text"] == want["choices"][0]["text"], (data, want)
    # (cached_tokens differ: the page and this script share a key, so the
    # second of the two requests finds the first one's prefix)
    for field in ("prompt_tokens", "completion_tokens", "total_tokens"):
        assert data["usage"][field] == want["usage"][field], (data, want)
    # X-Request-Id is exposed: the SDK read it, and it is the completion's id
    assert re.fullmatch(r"cmpl-[0-9a-f]{24}", data["id"]), data
    assert got["request_id"] == data["id"], got


def test_streamed_completion_from_another_origin(ctx):
    got = page_call(ctx, "stream", KEY, GREEDY)
    assert "error" not in got, got
    chunks = got["chunks"]
    want = direct(ctx, GREEDY)["choices"][0]["text"]
    assert "".join(c["choices"][0]["text"] for c in chunks) == want, chunks
    assert chunks[-1]["choices"][0]["finish_reason"] == "length", chunks[-1]
    assert {c["id"] for c in chunks} == {got["request_id"]}, got


def test_session_and_request_id_headers_are_allowed(ctx):
    """X-Session-Id (README: for nginx's affinity) and the page's own
    X-Request-Id pass the preflight; the session is the page's key's."""
    body = dict(GREEDY, session_id="page-chat-1")
    got = page_call(ctx, "complete", KEY, body,
                    {"X-Session-Id": "page-chat-1", "X-Request-Id": "page-req-42"})
    assert "error" not in got, got
    assert got["request_id"] == "page-req-42", got
    r = ctx["server"].client(api_key=KEY).get("/v1/sessions")
    assert r.status == 200, r
    assert "page-chat-1" in [s["id"] for s in r.json["data"]], r.json


def test_an_error_reaches_the_page_whole(ctx):
    """A 401 is the SDK's AuthenticationError with the server's code and
    request id, not an opaque network failure."""
    got = page_call(ctx, "complete", "sk-wrong", GREEDY)
    assert got.get("error") == "AuthenticationError", got
    assert got["status"] == 401 and got["code"] == "invalid_api_key", got
    assert re.fullmatch(r"req-[0-9a-f]{24}", got["request_id"] or ""), got


def test_an_origin_not_configured_is_refused(ctx):
    """The same page from http://localhost:PORT, another origin than
    --cors-origin: the browser gives the SDK nothing to read."""
    open_page(ctx, "localhost")
    try:
        for method in ("complete", "stream"):
            got = page_call(ctx, method, KEY, GREEDY)
            assert got.get("error") == "APIConnectionError", (method, got)
    finally:
        open_page(ctx, "127.0.0.1")


TESTS = [
    test_completion_from_another_origin,
    test_streamed_completion_from_another_origin,
    test_session_and_request_id_headers_are_allowed,
    test_an_error_reaches_the_page_whole,
    test_an_origin_not_configured_is_refused,
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sdk", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--gpt2d", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    add_browser_arguments(ap)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)

    PageHandler.sdk_dir = a.sdk
    pages = http.server.ThreadingHTTPServer(("127.0.0.1", 0), PageHandler)
    threading.Thread(target=pages.serve_forever, daemon=True).start()
    page_port = pages.server_address[1]

    server = Server(a.gpt2d, a.model, a.work,
                    ["--slots", "2", "--threads", "1",
                     "--cors-origin", "http://127.0.0.1:%d" % page_port],
                    env={"GPT2D_API_KEY": KEY}, name="gpt2d")
    try:
        server.start()
    except RuntimeError as e:
        print("FAIL: gpt2d did not start: %s\n0 passed, 1 failed" % e)
        return 1
    ctx = {"server": server, "page_port": page_port,
           "api_base": "http://127.0.0.1:%d/v1" % server.port}
    rc = 1
    try:
        rc = run_browser_tests(TESTS, ctx, a.select, a.chromium,
                               a.chromedriver, a.out)
    finally:
        t0 = time.monotonic()
        stop_rc, _ = server.stop()
        pages.shutdown()
        pages.server_close()
        report = server.sanitizer_report()
        if stop_rc != 0 or report:
            print("FAIL: gpt2d exited %r after SIGTERM (%.1fs)\n%s"
                  % (stop_rc, time.monotonic() - t0, report or server.log_tail()))
            rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
