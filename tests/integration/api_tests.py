#!/usr/bin/env python3
"""api_tests.py — the HTTP API of a live gpt2d, checked against the spec and
the numpy reference (tests/reference/gpt2_numpy.py).

Run by tests/integration/test_api.sh, which starts the main server (the
`tiny` model, --slots 4) and passes it in the environment:

    GPT2D_API_PORT                  the main server
    GPT2D_API_WORKDIR               scratch directory (extra servers, models)
    GPT2D_BUILDDIR, GPT2D_SRCDIR, GPT2D_TEST_DATA
    GPT2D_API_SUMMARY               optional: file that receives "PASSED FAILED"

    api_tests.py [SUBSTRING...]     only the tests whose name contains one

Some behaviours need their own server (API key + small body limit; one slot
and a one-request queue; a drain on SIGTERM); those start it here, with a
generated model whose context (1024) is long enough to keep a request busy
for a while.  Expected values come from the reference model wherever the
output is deterministic (greedy, penalties, logit_bias, echo scoring); seeded
sampling is checked for self-consistency (same seed, stream vs. not, alone vs.
concurrent, cached vs. cold).
"""

import http.client
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from gpt2d_client import (EOT, NO_EOT, Client, Server, StreamError,  # noqa: E402
                          Vocab, http_request, metric_sum, read_response)
import testlib  # noqa: E402
from testlib import (GPT2D, SRCDIR, TINY,  # noqa: E402
                     long_context_model, run_module, wait_for)

sys.path.insert(0, os.path.join(SRCDIR, "tests", "reference"))
import gpt2_numpy  # noqa: E402

WORKDIR = os.environ.get("GPT2D_API_WORKDIR", tempfile.gettempdir())
MAIN_PORT = int(os.environ.get("GPT2D_API_PORT", "0"))

TOL = 1e-3          # |logprob difference| a float32 server may show
MIN_MARGIN = 5e-3   # greedy steps compared only where argmax is unambiguous
N_CTX = 64          # the tiny model's context
VOCAB_SIZE = 50257  # GPT-2's tokens, the fixtures' too
# A preflight's Access-Control-Allow-Headers when the browser lists none
# (or a list that is not header names): the OpenAI and Anthropic SDKs'.
DEFAULT_ALLOW_HEADERS = ("Authorization, Content-Type, x-api-key, "
                         "anthropic-version, anthropic-beta, "
                         "anthropic-dangerous-direct-browser-access")
# Bytes of one of tiny's KV blocks (2 layers, 64 wide, floats): K and V of
# 16 positions, then their scores (kv_layout.h: 40 + 16 x 168 bytes and a
# 64-float residual, to a whole number of 64-byte lines).
TINY_BLOCK = 2 * 2 * 64 * 16 * 4 + (40 + 16 * 168 + 64 * 4 + 63) // 64 * 64
BYTE_C3, BYTE_A9 = 127, 102   # byte-level tokens of b"\xc3" and b"\xa9" ("é")

# ---------------------------------------------------------------- reference

_ref = None
_vocab = None


def ref():
    global _ref
    if _ref is None:
        _ref = gpt2_numpy.GPT2(TINY)
    return _ref


def vocab():
    global _vocab
    if _vocab is None:
        _vocab = Vocab(os.path.join(TINY, "vocab.json"))
    return _vocab


def text_of(ids):
    return vocab().decode(ids).decode("utf-8")


def log_softmax(x):
    x = np.asarray(x, dtype=np.float64)
    m = x.max()
    return x - m - math.log(np.exp(x - m).sum())


def ref_greedy(prompt, n, bias=None, presence=0.0, frequency=0.0,
               repetition=1.0, model=None):
    """Greedy generation with the sampler's processors (logit_bias, then
    repetition over prompt+output, then presence/frequency over output),
    by `model` (default: the tiny model's reference).  Returns (tokens, raw
    logits per step, smallest top-2 margin)."""
    m = model or ref()
    cache = m.new_cache()
    logits = m.forward(prompt, cache)[-1]
    out, steps, margin = [], [], float("inf")
    for _ in range(n):
        w = logits.copy()
        for t, b in (bias or {}).items():
            w[int(t)] += b
        if repetition != 1.0:
            for t in set(prompt) | set(out):
                w[t] = w[t] / repetition if w[t] > 0 else w[t] * repetition
        if presence or frequency:
            for t in set(out):
                w[t] -= presence + frequency * out.count(t)
        top2 = np.partition(w, -2)[-2:]
        margin = min(margin, float(top2[1] - top2[0]))
        tok = int(np.argmax(w))
        out.append(tok)
        steps.append(logits)
        if tok == EOT or len(out) == n:
            break
        logits = m.forward([tok], cache)[-1]
    return out, steps, margin


_words = None


def word_prompt(seed, n):
    """n tokens of lower-case English-like words (" abc"), from a seeded
    choice: ASCII text whose per-token strings are known exactly."""
    global _words
    if _words is None:
        _words = sorted(i for s, i in vocab().id_of.items()
                        if re.fullmatch("\u0120[a-z]{3,7}", s))
    rng = np.random.default_rng(seed)
    return [int(_words[k]) for k in rng.integers(0, len(_words), n)]


def valid_tokens(ids):
    try:
        for t in ids:
            vocab().bytes_of[t].decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def token_string(t):
    """A token as the API names it: its text when its bytes are UTF-8
    (without NUL), else "bytes:\\xNN..." (api_token_string)."""
    b = vocab().bytes_of[t]
    try:
        text = b.decode("utf-8")
        if "\x00" not in text:
            return text
    except UnicodeDecodeError:
        pass
    return "bytes:" + "".join("\\x%02x" % c for c in b)


def best_ids(lp, k):
    """The k most likely tokens of log-probabilities lp, best first."""
    return [int(i) for i in np.argsort(-lp, kind="stable")[:k]]


_greedy_cache = {}


def greedy_case(key, n_prompt, n_gen, differs=False, **processors):
    """A word prompt whose reference greedy continuation of n_gen tokens is
    unambiguous (margin), has no end-of-text and is valid UTF-8 token by
    token.  With `differs`, the processors must change the plain greedy
    output.  Returns (prompt ids, generated ids, step logits).  `key` keeps
    cases of different tests apart (distinct first tokens avoid accidental
    prefix-cache hits between tests)."""
    ck = (key, n_prompt, n_gen, differs, tuple(sorted(processors.items())))
    if ck in _greedy_cache:
        return _greedy_cache[ck]
    for attempt in range(200):
        prompt = word_prompt(hash_seed(key) + attempt, n_prompt)
        out, steps, margin = ref_greedy(prompt, n_gen, **processors)
        if (len(out) == n_gen and EOT not in out and margin >= MIN_MARGIN
                and valid_tokens(out)
                and not (differs and out == ref_greedy(prompt, n_gen)[0])):
            _greedy_cache[ck] = (prompt, out, steps)
            return _greedy_cache[ck]
    raise AssertionError("no unambiguous greedy case for %r" % (key,))


def hash_seed(key):
    return sum((i + 1) * ord(c) for i, c in enumerate(key)) * 1000


# ---------------------------------------------------------------- helpers

def main_client(**kw):
    return Client("127.0.0.1", MAIN_PORT, **kw)


class ApiCase(testlib.Case):
    """Assertions shared by every group (testlib.Case's, and these)."""

    def assert_ok_shape(self, body, n_choices=1):
        self.assertIsInstance(body.get("id"), str)
        self.assertTrue(body["id"])
        self.assertEqual(body.get("object"), "text_completion")
        self.assertIsInstance(body.get("created"), int)
        self.assertLess(abs(body["created"] - time.time()), 300)
        self.assertEqual(body.get("model"), "tiny")
        self.assertEqual(len(body["choices"]), n_choices)
        for i, c in enumerate(body["choices"]):
            self.assertEqual(c["index"], i)
            self.assertIsInstance(c["text"], str)
            self.assertIn("logprobs", c)
            self.assertIn(c["finish_reason"], ("stop", "length"))
        u = body["usage"]
        self.assertEqual(u["total_tokens"],
                         u["prompt_tokens"] + u["completion_tokens"])
        self.assertIsInstance(u["prompt_tokens_details"]["cached_tokens"], int)

    def assert_close(self, got, want, what):
        self.assertIsNotNone(got, what)
        self.assertLessEqual(abs(got - want), TOL,
                             "%s: got %r, reference %r" % (what, got, want))


def stream_events(client, path, body):
    """Runs a streaming request to its end; returns (events, the stream)."""
    es = client.open_stream(path, body)
    events = []
    try:
        for ev in es:
            events.append(ev)
    finally:
        es.close()
    return events, es


def collect_stream(client, body):
    """Runs a streaming request; returns (events, texts per index,
    finish_reason per index, usage or None, saw [DONE], raw payloads)."""
    events, es = stream_events(client, "/v1/completions", body)
    texts, finish, usage = {}, {}, None
    for ev in events:
        if ev.get("usage"):
            usage = ev["usage"]
        for c in ev.get("choices") or []:
            texts[c["index"]] = texts.get(c["index"], "") + c["text"]
            if c.get("finish_reason"):
                finish[c["index"]] = c["finish_reason"]
    return events, texts, finish, usage, es.done, es.raw, es.headers


# The built-in chat template (README, etc/chat-template.json): each message
# is its role's prefix, content and suffix; the prompt ends with the
# assistant's prefix, and a reply ends at a stop string.
CHAT_TEMPLATE = {"system": ("System: ", "\n"), "user": ("User: ", "\n"),
                 "assistant": ("Assistant:", "\n")}
CHAT_STOP = ["\nUser:", "\nSystem:"]
HELLO = 18435       # " Hello"


def render_chat(messages, template=CHAT_TEMPLATE):
    roles = {"developer": "system"}
    text = ""
    for m in messages:
        prefix, suffix = template[roles.get(m["role"], m["role"])]
        text += prefix + m["content"] + suffix
    return text + template["assistant"][0]


def collect_chat_stream(client, body):
    """Runs a streaming chat request; returns (events, content per index,
    logprobs entries per index, finish_reason per index, usage or None, saw
    [DONE])."""
    events, es = stream_events(client, "/v1/chat/completions", body)
    content, entries, finish, usage = {}, {}, {}, None
    for ev in events:
        if ev.get("usage"):
            usage = ev["usage"]
        for c in ev.get("choices") or []:
            i = c["index"]
            content[i] = content.get(i, "") + c["delta"].get("content", "")
            if c.get("logprobs"):
                entries.setdefault(i, []).extend(c["logprobs"]["content"])
            if c.get("finish_reason"):
                finish[i] = c["finish_reason"]
    return events, content, entries, finish, usage, es.done

# ================================================================ main server

class T1Endpoints(ApiCase):
    """Everything besides /v1/completions, on the main server."""

    def test_health_ready_returns_200(self):
        r = main_client().get("/health")
        self.assertEqual(r.status, 200, r)

    def test_models_lists_the_loaded_model(self):
        r = main_client().get("/v1/models")
        self.assertEqual(r.status, 200, r)
        body = r.json
        self.assertEqual(body["object"], "list")
        self.assertEqual(len(body["data"]), 1, body)
        m = body["data"][0]
        self.assertEqual(m["id"], "tiny")
        self.assertEqual(m["object"], "model")
        self.assertIsInstance(m.get("created"), int)
        self.assertIsInstance(m.get("owned_by"), str)
        self.assertEqual(m.get("max_model_len"), 64)
        # the tiny model is F32 and the suite's server keeps the defaults
        self.assertEqual(m.get("dtype"), "float32")
        self.assertEqual(m.get("kv_dtype"), "float32")

    def test_tokenize_matches_gpt2_ids(self):
        r = main_client().post("/tokenize", {"content": "Hello world"})
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json["tokens"], [15496, 995])
        # one model answers whatever a request names
        for path, body, want in (
                ("/tokenize", {"content": "Hello world"},
                 {"tokens": [15496, 995]}),
                ("/detokenize", {"tokens": [15496, 995]},
                 {"content": "Hello world"})):
            with self.subTest(path=path):
                r = main_client().post(path, dict(body,
                                                  model="some-other-name"))
                self.assertEqual((r.status, r.json), (200, want))

    def test_tokenize_detokenize_round_trip_unicode(self):
        text = "Héllo wörld — 日本語 ✓ <|endoftext|> tabs\tand\nlines"
        c = main_client()
        r = c.post("/tokenize", {"content": text})
        self.assertEqual(r.status, 200, r)
        ids = r.json["tokens"]
        self.assertIn(EOT, ids)
        self.assertEqual(vocab().decode(ids).decode("utf-8"), text)
        r = c.post("/detokenize", {"tokens": ids})
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json["content"], text)

    def test_tokenize_rejects_non_string_content(self):
        r = main_client().post("/tokenize", {"content": 5})
        self.assert_error(r, 400, "content")

    def test_detokenize_rejects_unknown_token(self):
        r = main_client().post("/detokenize", {"tokens": [15496, 60000]})
        self.assert_error(r, 400, "tokens")

    def test_metrics_exposes_required_series(self):
        c = main_client()
        c.complete(prompt=word_prompt(1, 4), max_tokens=2)
        r = c.get("/metrics")
        self.assertEqual(r.status, 200, r)
        self.assertIn("text/plain", r.headers.get("content-type", ""))
        text = r.body.decode("utf-8")
        names = set(re.findall(r"^(gpt2d_\w+)", text, re.M))
        for pattern in (r"requests", r"prompt_tokens", r"(generated|completion)_tokens",
                        r"ttft|time_to_first", r"(token|inter).*(latency|seconds)",
                        r"queue", r"slots_busy", r"cached", r"batch",
                        r"requests_cancelled_total"):
            self.assertTrue(any(re.search(pattern, n) for n in names),
                            "no metric matching %r in %s" % (pattern, sorted(names)))
        # requests by status: some series carries a 200 label
        self.assertRegex(text, r'gpt2d_\w*requests\w*\{[^}]*"200"')
        # histograms are complete: buckets with le="+Inf", _sum and _count
        hist = set(re.findall(r"^(gpt2d_\w+)_bucket\{", text, re.M))
        self.assertTrue(any("ttft" in h or "first" in h for h in hist), hist)
        for h in hist:
            self.assertRegex(text, re.escape(h) + r'_bucket\{[^}]*le="\+Inf"')
            self.assertIn(h + "_sum", text)
            self.assertIn(h + "_count", text)

    def test_metrics_count_prompt_and_generated_tokens(self):
        c = main_client()
        before = c.metrics()
        prompt = word_prompt(2, 7)
        c.complete(prompt=prompt, max_tokens=5, logit_bias=NO_EOT)
        after = c.metrics()

        def delta(pattern):
            names = {re.sub(r"\{.*", "", k) for k in after}
            names = [n for n in names if re.search(pattern, n)
                     and not n.endswith(("_bucket", "_sum", "_count"))]
            self.assertTrue(names, pattern)
            return {n: metric_sum(after, n) - metric_sum(before, n)
                    for n in names}

        self.assertIn(7.0, delta(r"prompt_tokens").values())
        self.assertIn(5.0, delta(r"(generated|completion)_tokens").values())

        def grew(key):
            return after.get(key, 0.0) - before.get(key, 0.0)
        # one first token, four gaps between five tokens, one 200
        self.assertEqual(grew("gpt2d_time_to_first_token_seconds_count"), 1)
        self.assertEqual(grew("gpt2d_inter_token_latency_seconds_count"), 4)
        # The request is counted when libmicrohttpd reports the connection's
        # request complete, which may come a moment after the client has read
        # the response: poll briefly rather than race it.
        deadline = time.monotonic() + 2.0
        while True:
            ok = [k for k in after if k.startswith("gpt2d_requests_total{")
                  and "completions" in k and '"200"' in k]
            if (len(ok) == 1 and grew(ok[0]) >= 1) or time.monotonic() > deadline:
                break
            time.sleep(0.02)
            after = c.metrics()
        self.assertEqual(len(ok), 1, sorted(after))
        self.assertEqual(grew(ok[0]), 1)
        self.assertEqual(after.get("gpt2d_slots_total"), 4)   # --slots 4
        self.assertEqual(after.get("gpt2d_slots_busy"), 0)
        self.assertEqual(after.get("gpt2d_queue_depth"), 0)


class T2Completions(ApiCase):
    """Every /v1/completions parameter, with an observable effect."""

    def test_response_has_openai_shape(self):
        prompt, _, _ = greedy_case("shape", 5, 4)
        body = main_client().complete(prompt=prompt, max_tokens=4,
                                      temperature=0)
        self.assert_ok_shape(body)
        self.assertIsNone(body["choices"][0]["logprobs"])
        self.assertEqual(body["usage"]["prompt_tokens"], 5)
        self.assertEqual(body["usage"]["completion_tokens"], 4)

    def test_model_field_accepted_and_loaded_id_reported(self):
        body = main_client().complete(model="some-other-name",
                                      prompt=word_prompt(3, 3), max_tokens=1)
        self.assertEqual(body["model"], "tiny")

    def test_temperature_0_matches_reference_greedy(self):
        prompt, want, steps = greedy_case("greedy", 6, 20)
        body = main_client().complete(prompt=prompt, max_tokens=20,
                                      temperature=0, logprobs=1)
        ch = body["choices"][0]
        self.assertEqual(ch["text"], text_of(want))
        self.assertEqual(ch["finish_reason"], "length")
        lp = ch["logprobs"]
        self.assertEqual(lp["tokens"], [text_of([t]) for t in want])
        for i, (t, logits) in enumerate(zip(want, steps)):
            self.assert_close(lp["token_logprobs"][i],
                              log_softmax(logits)[t], "step %d" % i)

    def check_half_server(self, name, args, log_words, dtypes, **rounding):
        """A server started with `args` generates what the reference that
        rounds (or quantizes) the same values (`rounding`: matrices=, kv=)
        does, and
        /v1/models reports `dtypes`."""
        half = gpt2_numpy.GPT2(TINY, **rounding)
        for attempt in range(200):
            prompt = word_prompt(hash_seed(name) + attempt, 6)
            want, steps, margin = ref_greedy(prompt, 12, model=half)
            if (len(want) == 12 and EOT not in want
                    and margin >= MIN_MARGIN and valid_tokens(want)):
                break
        else:
            self.fail("no unambiguous greedy case for %s" % name)
        srv = Server(GPT2D, TINY, WORKDIR, list(args) + [
            "--slots", "1", "--threads", "1"], name=name).start()
        try:
            body = srv.client().complete(prompt=prompt, max_tokens=12,
                                         temperature=0, logprobs=1)
            models = srv.client().get("/v1/models").json
        finally:
            rc, _ = srv.stop()
        self.assertEqual(rc, 0, srv.log_tail())
        self.assert_clean_log(srv)
        with open(srv.log_path, encoding="utf-8") as f:
            self.assertIn(log_words, f.read())
        ch = body["choices"][0]
        self.assertEqual(ch["text"], text_of(want))
        for i, (t, logits) in enumerate(zip(want, steps)):
            self.assert_close(ch["logprobs"]["token_logprobs"][i],
                              log_softmax(logits)[t], "step %d" % i)
        self.assertEqual({k: models["data"][0][k] for k in dtypes}, dtypes)

    def test_dtype_float16_matches_reference_with_half_matrices(self):
        self.check_half_server("half", ["--dtype", "float16"],
                               "float16 weights",
                               {"dtype": "float16", "kv_dtype": "float32"},
                               matrices=np.float16)

    def test_dtype_int8_matches_reference_with_quantized_matrices(self):
        self.check_half_server("int8", ["--dtype", "int8"],
                               "int8 weights",
                               {"dtype": "int8", "kv_dtype": "float32"},
                               matrices="int8")

    def test_kv_dtype_float16_matches_reference_with_half_cache(self):
        self.check_half_server("kvhalf", ["--kv-dtype", "float16"],
                               "MB, float16)",
                               {"dtype": "float32", "kv_dtype": "float16"},
                               kv=np.float16)

    def test_max_tokens_gives_exact_count_and_finish_length(self):
        for n in (1, 5, 13):
            body = main_client().complete(prompt=word_prompt(4, 4),
                                          max_tokens=n, logit_bias=NO_EOT,
                                          logprobs=0)
            self.assertEqual(body["usage"]["completion_tokens"], n)
            self.assertEqual(body["choices"][0]["finish_reason"], "length")
            self.assertEqual(len(body["choices"][0]["logprobs"]["tokens"]), n)

    def test_max_tokens_defaults_to_16(self):
        body = main_client().complete(prompt=word_prompt(5, 4),
                                      logit_bias=NO_EOT)
        self.assertEqual(body["usage"]["completion_tokens"], 16)
        self.assertEqual(body["choices"][0]["finish_reason"], "length")

    def test_null_fields_mean_their_defaults(self):
        # OpenAI clients send null for unset optional fields
        body = main_client().complete(
            prompt=word_prompt(5, 4), max_tokens=None, stop=None, seed=None,
            logprobs=None, n=None, user=None, suffix=None, best_of=None,
            logit_bias=NO_EOT)
        self.assertEqual(body["usage"]["completion_tokens"], 16)
        self.assertEqual(len(body["choices"]), 1)
        self.assertIsNone(body["choices"][0]["logprobs"])

    def test_prompt_filling_context_finishes_with_length(self):
        body = main_client().complete(prompt=word_prompt(6, N_CTX - 3),
                                      max_tokens=3, logit_bias=NO_EOT)
        self.assertEqual(body["usage"]["completion_tokens"], 3)
        self.assertEqual(body["choices"][0]["finish_reason"], "length")

    def test_end_of_text_finishes_with_stop(self):
        body = main_client().complete(prompt=word_prompt(7, 4), max_tokens=8,
                                      logit_bias={str(EOT): 100})
        ch = body["choices"][0]
        self.assertEqual(ch["finish_reason"], "stop")
        self.assertEqual(ch["text"], "")
        self.assertLessEqual(body["usage"]["completion_tokens"], 1)

    def test_logit_bias_plus_100_forces_token(self):
        the = vocab().id_of["\u0120the"]
        body = main_client().complete(prompt=word_prompt(8, 4), max_tokens=6,
                                      temperature=1.0, seed=3,
                                      logit_bias={str(the): 100})
        self.assertEqual(body["choices"][0]["text"], " the" * 6)

    def test_logit_bias_minus_100_bans_greedy_tokens(self):
        prompt, free, _ = greedy_case("ban", 5, 8)
        banned = {str(t): -100 for t in set(free[:3])}
        want, _, margin = ref_greedy(prompt, 8, bias=banned)
        self.assertGreaterEqual(margin, MIN_MARGIN, "ambiguous case")
        body = main_client().complete(prompt=prompt, max_tokens=8,
                                      temperature=0, logit_bias=banned)
        text = body["choices"][0]["text"]
        self.assertEqual(text, text_of(want))
        for t in set(free[:3]):
            self.assertNotIn(int(t), want)

    def test_seed_repeats_and_different_seeds_differ(self):
        c = main_client()
        req = dict(prompt=word_prompt(9, 5), max_tokens=12, temperature=1.5,
                   logit_bias=NO_EOT)
        a = c.complete(seed=11, **req)["choices"][0]["text"]
        b = c.complete(seed=11, **req)["choices"][0]["text"]
        self.assertEqual(a, b)
        others = {c.complete(seed=s, **req)["choices"][0]["text"]
                  for s in (12, 13, 14)}
        self.assertTrue(others - {a}, "three other seeds all gave %r" % a)

    def test_sampling_at_temperature_departs_from_greedy(self):
        prompt, want, _ = greedy_case("temp", 5, 10)
        greedy = text_of(want)
        texts = {main_client().complete(prompt=prompt, max_tokens=10,
                                        temperature=2.0, seed=s,
                                        logit_bias=NO_EOT)["choices"][0]["text"]
                 for s in range(3)}
        self.assertTrue(texts - {greedy}, "temperature 2 stayed greedy")

    def _assert_filter_is_greedy(self, key, **filt):
        prompt, want, _ = greedy_case(key, 5, 10)
        for seed in (1, 2, 3):
            body = main_client().complete(prompt=prompt, max_tokens=10,
                                          temperature=1.5, seed=seed, **filt)
            self.assertEqual(body["choices"][0]["text"], text_of(want),
                             "%r seed %d" % (filt, seed))

    def test_top_k_1_is_greedy(self):
        self._assert_filter_is_greedy("topk", top_k=1)

    def test_top_p_below_best_probability_is_greedy(self):
        # The random model's distributions are flat (the best token may hold
        # far less than 0.1%), so the nucleus threshold comes from the
        # reference: half the smallest top probability over the steps, at
        # the request's temperature.
        prompt, _, steps = greedy_case("topp", 5, 10)
        p_max = min(float(np.exp(log_softmax(np.asarray(s) / 1.5).max()))
                    for s in steps)
        self._assert_filter_is_greedy("topp", top_p=p_max / 2)

    def test_min_p_1_is_greedy(self):
        self._assert_filter_is_greedy("minp", min_p=1.0)

    def test_presence_and_frequency_penalties_match_reference(self):
        for key, pen in (("presence", dict(presence=1.5)),
                         ("frequency", dict(frequency=0.7)),
                         ("both", dict(presence=0.5, frequency=-0.4))):
            prompt, want, _ = greedy_case("pen-" + key, 5, 16, differs=True,
                                          **pen)
            req = {"presence_penalty": pen.get("presence", 0.0),
                   "frequency_penalty": pen.get("frequency", 0.0)}
            body = main_client().complete(prompt=prompt, max_tokens=16,
                                          temperature=0, **req)
            self.assertEqual(body["choices"][0]["text"], text_of(want), key)

    def test_repetition_penalty_matches_reference(self):
        prompt, want, _ = greedy_case("rep", 5, 16, differs=True,
                                      repetition=1.8)
        body = main_client().complete(prompt=prompt, max_tokens=16,
                                      temperature=0, repetition_penalty=1.8)
        self.assertEqual(body["choices"][0]["text"], text_of(want))

    def _spanning_stop(self, key):
        """A greedy case and a stop string made of the end of token i and
        the start of token i+1, first occurring there."""
        for k in range(20):
            prompt, gen, _ = greedy_case(key + str(k), 5, 16)
            text = text_of(gen)
            for i in range(3, len(gen) - 2):
                left = text_of(gen[:i + 1])
                a, b = text_of([gen[i]]), text_of([gen[i + 1]])
                if len(a) < 2 or len(b) < 2:
                    continue
                stop = a[-2:] + b[:2]
                cut = len(left) - 2
                if text.find(stop) == cut:
                    return prompt, gen, text, stop, cut
        raise AssertionError("no stop string spanning tokens found")

    def test_stop_string_spanning_tokens_cuts_before_it(self):
        prompt, _, text, stop, cut = self._spanning_stop("stop")
        body = main_client().complete(prompt=prompt, max_tokens=16,
                                      temperature=0, stop=stop)
        ch = body["choices"][0]
        self.assertEqual(ch["text"], text[:cut])
        self.assertEqual(ch["finish_reason"], "stop")
        self.assertNotIn(stop, ch["text"])

    def test_stop_list_earliest_match_wins(self):
        prompt, _, text, stop, cut = self._spanning_stop("stoplist")
        late = text[cut + 3:cut + 6]
        body = main_client().complete(prompt=prompt, max_tokens=16,
                                      temperature=0,
                                      stop=["never-in-here", late, stop, "\u2603"])
        ch = body["choices"][0]
        want = text[:min(cut, text.find(late))]
        self.assertEqual(ch["text"], want)
        self.assertEqual(ch["finish_reason"], "stop")

    def test_stop_in_stream_cuts_identically(self):
        prompt, _, text, stop, cut = self._spanning_stop("stopstream")
        events, texts, finish, _, done, _, _ = collect_stream(main_client(), {
            "prompt": prompt, "max_tokens": 16, "temperature": 0,
            "stop": [stop], "stream": True})
        self.assertTrue(done)
        self.assertEqual(texts[0], text[:cut])
        self.assertEqual(finish[0], "stop")
        for ev in events:
            for c in ev.get("choices") or []:
                self.assertNotIn(stop, c["text"])

    def test_n_returns_n_indexed_choices(self):
        body = main_client().complete(prompt=word_prompt(10, 4), max_tokens=8,
                                      n=3, temperature=1.2, seed=5,
                                      logit_bias=NO_EOT)
        self.assert_ok_shape(body, 3)
        self.assertEqual(body["usage"]["completion_tokens"], 24)
        self.assertGreater(len({c["text"] for c in body["choices"]}), 1)

    def test_best_of_picks_highest_cumulative_logprob(self):
        c = main_client()
        req = dict(prompt=word_prompt(11, 4), max_tokens=8, temperature=1.3,
                   seed=21, logit_bias=NO_EOT)
        all3 = c.complete(n=3, logprobs=1, **req)["choices"]
        ranked = sorted(all3, key=lambda ch: -sum(ch["logprobs"]["token_logprobs"]))
        self.assertGreater(len({ch["text"] for ch in all3}), 1,
                           "samples identical; ranking untestable")
        best = c.complete(n=1, best_of=3, **req)
        self.assertEqual(len(best["choices"]), 1)
        self.assertEqual(best["choices"][0]["index"], 0)
        self.assertEqual(best["choices"][0]["text"], ranked[0]["text"])
        two = c.complete(n=2, best_of=3, **req)["choices"]
        self.assertEqual([ch["index"] for ch in two], [0, 1])
        self.assertEqual(sorted(ch["text"] for ch in two),
                         sorted(ch["text"] for ch in ranked[:2]))

    def test_echo_prepends_prompt_text(self):
        prompt, gen, _ = greedy_case("echo", 5, 6)
        body = main_client().complete(prompt=prompt, max_tokens=6,
                                      temperature=0, echo=True)
        self.assertEqual(body["choices"][0]["text"], text_of(prompt + gen))

    def test_logprobs_shape(self):
        prompt, gen, steps = greedy_case("lpshape", 5, 10)
        body = main_client().complete(prompt=prompt, max_tokens=10,
                                      temperature=0, logprobs=3)
        lp = body["choices"][0]["logprobs"]
        for key in ("tokens", "token_logprobs", "top_logprobs", "text_offset"):
            self.assertEqual(len(lp[key]), 10, key)
        offs = lp["text_offset"]
        for i in range(1, 10):
            self.assertGreaterEqual(offs[i], offs[i - 1])
            if lp["tokens"][i - 1].isascii():
                self.assertEqual(offs[i] - offs[i - 1],
                                 len(lp["tokens"][i - 1]))
        # counted from the prompt's start, as OpenAI does without echo
        self.assertEqual(offs[0], len(text_of(prompt)))
        for i, top in enumerate(lp["top_logprobs"]):
            self.assertIsInstance(top, dict)
            self.assertTrue(1 <= len(top) <= 3, top)
            want = log_softmax(steps[i])
            # greedy: the chosen token is the most likely one
            self.assert_close(max(top.values()), want.max(), "top %d" % i)
            self.assert_close(lp["token_logprobs"][i], want.max(), "tok %d" % i)
            best3 = np.sort(want)[::-1][:3]
            for v in top.values():
                self.assertTrue(np.min(np.abs(best3 - v)) <= TOL, (v, best3))

    def test_echo_logprobs_max_tokens_0_scores_prompt_like_reference(self):
        prompt = word_prompt(12, 14)
        body = main_client().complete(prompt=prompt, max_tokens=0, echo=True,
                                      logprobs=2)
        ch = body["choices"][0]
        self.assertEqual(ch["text"], text_of(prompt))
        self.assertEqual(body["usage"]["completion_tokens"], 0)
        self.assertEqual(body["usage"]["prompt_tokens"], 14)
        lp = ch["logprobs"]
        self.assertEqual(lp["tokens"], [text_of([t]) for t in prompt])
        self.assertIsNone(lp["token_logprobs"][0])
        self.assertIsNone(lp["top_logprobs"][0])
        self.assertEqual(lp["text_offset"][0], 0)
        logits = ref().full(prompt)
        for i in range(1, len(prompt)):
            want = log_softmax(logits[i - 1])
            self.assert_close(lp["token_logprobs"][i], want[prompt[i]],
                              "prompt token %d" % i)
            top = lp["top_logprobs"][i]
            # the 2 best and the prompt token itself
            self.assertEqual(len(top), 2 if prompt[i] in best_ids(want, 2) else 3,
                             top)
            self.assert_close(max(top.values()), want.max(), "top of %d" % i)
            self.assert_close(top[text_of([prompt[i]])], want[prompt[i]],
                              "prompt token %d in its top" % i)
            self.assertEqual(lp["text_offset"][i],
                             len(text_of(prompt[:i])))

    def test_echo_logprobs_with_generation_scores_both(self):
        prompt, gen, steps = greedy_case("echogen", 6, 4)
        body = main_client().complete(prompt=prompt, max_tokens=4, echo=True,
                                      logprobs=1, temperature=0)
        lp = body["choices"][0]["logprobs"]
        self.assertEqual(len(lp["tokens"]), 10)
        self.assertIsNone(lp["token_logprobs"][0])
        logits = ref().full(prompt)
        self.assert_close(lp["token_logprobs"][5],
                          log_softmax(logits[4])[prompt[5]], "last prompt")
        for i, (t, s) in enumerate(zip(gen, steps)):
            self.assert_close(lp["token_logprobs"][6 + i],
                              log_softmax(s)[t], "generated %d" % i)

    def test_prompt_string_equals_token_id_prompt(self):
        c = main_client()
        prompt, gen, _ = greedy_case("strprompt", 6, 8)
        text = text_of(prompt)
        ids = c.post("/tokenize", {"content": text}).json["tokens"]
        a = c.complete(prompt=text, max_tokens=8, temperature=0)
        b = c.complete(prompt=ids, max_tokens=8, temperature=0)
        self.assertEqual(a["choices"][0]["text"], b["choices"][0]["text"])
        self.assertEqual(a["usage"]["prompt_tokens"], len(ids))
        if ids == prompt:
            self.assertEqual(a["choices"][0]["text"], text_of(gen))

    def test_prompt_list_of_strings_gives_one_choice_set_each(self):
        c = main_client()
        p1, g1, _ = greedy_case("list1", 5, 6)
        p2, g2, _ = greedy_case("list2", 7, 6)
        s1, s2 = text_of(p1), text_of(p2)
        solo = [c.complete(prompt=s, max_tokens=6, temperature=0)
                ["choices"][0]["text"] for s in (s1, s2)]
        body = c.complete(prompt=[s1, s2], max_tokens=6, temperature=0, n=2)
        self.assert_ok_shape(body, 4)
        texts = [ch["text"] for ch in body["choices"]]
        self.assertEqual(texts, [solo[0], solo[0], solo[1], solo[1]])
        self.assertEqual(body["usage"]["completion_tokens"], 24)

    def test_prompt_list_of_token_lists(self):
        p1, g1, _ = greedy_case("tl1", 4, 5)
        p2, g2, _ = greedy_case("tl2", 9, 5)
        body = main_client().complete(prompt=[p1, p2], max_tokens=5,
                                      temperature=0)
        self.assert_ok_shape(body, 2)
        self.assertEqual([ch["text"] for ch in body["choices"]],
                         [text_of(g1), text_of(g2)])
        self.assertEqual(body["usage"]["prompt_tokens"], 13)

    def test_user_field_accepted_without_effect(self):
        prompt, gen, _ = greedy_case("user", 4, 5)
        body = main_client().complete(prompt=prompt, max_tokens=5,
                                      temperature=0, user="alice@example")
        self.assertEqual(body["choices"][0]["text"], text_of(gen))


class T3Streaming(ApiCase):

    def test_stream_equals_non_stream_for_seeded_request(self):
        c = main_client()
        req = {"prompt": word_prompt(13, 5), "max_tokens": 20,
               "temperature": 0.9, "seed": 77, "n": 2, "top_k": 50,
               "logit_bias": NO_EOT}
        plain = c.complete(**req)
        _, texts, finish, _, done, _, _ = collect_stream(c, dict(req, stream=True))
        self.assertTrue(done)
        self.assertEqual(texts, {ch["index"]: ch["text"] for ch in plain["choices"]})
        self.assertEqual(finish, {0: "length", 1: "length"})

    def test_speculative_decoding_never_changes_the_answer(self):
        """Prompt lookup's drafts (on by default; this server verifies
        every one found, --test-speculate-always) are checked by the model
        and kept only where they are its own tokens: greedy and seeded
        answers, streamed or not, n = 2, logprobs and all, are those of the
        same request with "speculative": false.  usage counts the drafts
        as Predicted Outputs do; the metrics count them by position."""
        c = main_client()
        words = word_prompt(31, 6)
        prompt = words * 4 + words[:3]  # repeats: lookup finds drafts
        drafted = 0
        for extra in ({"temperature": 0},
                      {"temperature": 0.8, "seed": 5, "n": 2,
                       "frequency_penalty": 0.3}):
            req = dict({"prompt": prompt, "max_tokens": 24, "logprobs": 2,
                        "logit_bias": NO_EOT}, **extra)
            plain = c.complete(**dict(req, speculative=False))
            spec = c.complete(**dict(req, speculative=True))
            self.assertEqual([ch["text"] for ch in spec["choices"]],
                             [ch["text"] for ch in plain["choices"]])
            self.assertEqual([ch["logprobs"] for ch in spec["choices"]],
                             [ch["logprobs"] for ch in plain["choices"]])
            d = plain["usage"]["completion_tokens_details"]
            self.assertEqual(d, {"accepted_prediction_tokens": 0,
                                 "rejected_prediction_tokens": 0})
            d = spec["usage"]["completion_tokens_details"]
            drafted += (d["accepted_prediction_tokens"] +
                        d["rejected_prediction_tokens"])
            _, texts, _, usage, done, _, _ = collect_stream(
                c, dict(req, stream=True, speculative=True,
                        stream_options={"include_usage": True}))
            self.assertTrue(done)
            self.assertEqual(texts, {ch["index"]: ch["text"]
                                     for ch in plain["choices"]})
            self.assertIn("completion_tokens_details", usage)
        self.assertGreater(drafted, 0)
        m = c.metrics()
        self.assertGreater(metric_sum(m, "gpt2d_spec_draft_tokens_total"), 0)
        self.assertIn('gpt2d_spec_accepted_tokens_total{position="1"}', m)
        chat = c.post("/v1/chat/completions", {
            "messages": [{"role": "user", "content": "again and again"}],
            "max_tokens": 4, "speculative": False})
        self.assertEqual(chat.status, 200)
        for bad in ("yes", 1):
            r = c.post("/v1/completions", {"prompt": "x", "speculative": bad})
            self.assert_error(r, 400, "speculative")

    def test_prediction_speeds_the_answer_it_predicts_and_changes_nothing(self):
        """OpenAI's Predicted Outputs: `prediction` is proposed first.  The
        answer itself as the prediction (its token ids, or an answer whose
        text tokenizes back to its own tokens: a random model's often does
        not) is accepted whole; another text is rejected; the answer is the same in
        every case, on both endpoints.  Bad shapes are 400s naming the
        field."""
        c = main_client()
        base = {"max_tokens": 20, "temperature": 0, "logit_bias": NO_EOT,
                "return_token_ids": True}
        for path, key, text_of in (
                ("/v1/completions", "prompt",
                 lambda b: b["choices"][0]["text"]),
                ("/v1/chat/completions", "messages",
                 lambda b: b["choices"][0]["message"]["content"])):
            for words in range(40):
                text = vocab().decode(word_prompt(100 + words, 4)).decode()
                req = dict(base, **{key: text if key == "prompt" else
                                    [{"role": "user", "content": text}]})
                plain = c.post(path, dict(req, speculative=False))
                self.assertEqual(plain.status, 200, plain.body[:200])
                answer = text_of(plain.json)
                ids = plain.json["choices"][0]["token_ids"]
                if c.post("/tokenize", {"content": answer}).json["tokens"] == ids:
                    break
            else:
                self.fail("no answer of %s tokenizes back to itself" % path)
            for prediction, whole in (
                    ({"type": "content", "content": answer}, True),
                    ({"type": "content",
                      "content": [{"type": "text", "text": answer[:5]},
                                  {"type": "text", "text": answer[5:]}]},
                     True),
                    ({"type": "content", "content": ids}, True),
                    ({"type": "content", "content": " zebra" * 30}, False)):
                r = c.post(path, dict(req, prediction=prediction))
                self.assertEqual(r.status, 200, r.body[:200])
                self.assertEqual(text_of(r.json), answer)
                d = r.json["usage"]["completion_tokens_details"]
                if whole:
                    # after the first token each step keeps 8 and its own
                    after_first = len(ids) - 1
                    self.assertEqual(d, {
                        "accepted_prediction_tokens":
                            after_first - (after_first + 8) // 9,
                        "rejected_prediction_tokens": 0})
                else:
                    self.assertGreater(d["rejected_prediction_tokens"], 0)
        for bad, param in (("text", "prediction"),
                           ({"type": "text", "content": "x"}, "prediction.type"),
                           ({"type": "content", "content": 5},
                            "prediction.content"),
                           ({"type": "content", "content": [{"type": "image"}]},
                            "prediction.content"),
                           ({"type": "content", "content": " a" * 100},
                            "prediction"),
                           ({"type": "content", "content": [1, "x"]},
                            "prediction.content"),
                           ({"type": "content", "content": [1, -1]},
                            "prediction.content"),
                           ({"type": "content", "content": [VOCAB_SIZE]},
                            "prediction.content"),
                           ({"type": "content", "content": [1] * 100},
                            "prediction")):
            r = c.post("/v1/completions", {"prompt": "x", "prediction": bad})
            self.assert_error(r, 400, param)

    def test_text_offsets_index_the_text_received(self):
        """text_offset counts characters of the text the client receives,
        from the prompt's start, echoed or not.  Token bytes that are not
        UTF-8 render as Python renders them (U+FFFD per maximal subpart), a
        lone byte is one such character, and a character split over tokens
        counts where it starts.  Streamed and whole responses agree."""
        c = main_client()
        # 223 is the lone byte 0x81; 158 224 105 are the three bytes of "€"
        prompt = [15496, 223, 15496, 158, 224, 105, 15496, 158]

        def render(data):
            return data.decode("utf-8", "replace")

        def token_bytes(s):
            if s.startswith("bytes:"):
                return bytes(int(h, 16) for h in s[6:].split("\\x")[1:])
            return s.encode("utf-8")

        pbytes = vocab().decode(prompt)
        for echo in (False, True):
            req = {"prompt": prompt, "max_tokens": 8, "temperature": 0,
                   "echo": echo, "logprobs": 0, "logit_bias": NO_EOT}
            ch = c.complete(**req)["choices"][0]
            lp = ch["logprobs"]
            gbytes = [token_bytes(t) for t in lp["tokens"][len(prompt) if echo else 0:]]
            self.assertEqual(len(gbytes), 8)
            want = [len(render(vocab().decode(prompt[:i])))
                    for i in range(len(prompt))] if echo else []
            want += [len(render(pbytes)) + len(render(b"".join(gbytes[:i])))
                     for i in range(8)]
            self.assertEqual(lp["text_offset"], want, "echo=%s" % echo)
            self.assertEqual(ch["text"], (render(pbytes) if echo else "") +
                             render(b"".join(gbytes)))
            events = collect_stream(c, dict(req, stream=True))[0]
            streamed = [o for ev in events for chs in ev.get("choices") or []
                        if chs.get("logprobs")
                        for o in chs["logprobs"]["text_offset"]]
            self.assertEqual(streamed, want, "streamed, echo=%s" % echo)

    def test_stream_chunk_shape_usage_chunk_and_done(self):
        c = main_client()
        prompt = word_prompt(14, 6)
        events, texts, finish, usage, done, raw, headers = collect_stream(c, {
            "prompt": prompt, "max_tokens": 7, "temperature": 0,
            "logprobs": 1, "logit_bias": NO_EOT, "stream": True,
            "stream_options": {"include_usage": True}})
        self.assertIn("text/event-stream", headers.get("content-type", ""))
        self.assertTrue(done, "no data: [DONE]")
        self.assertEqual(raw[-1], b"[DONE]")
        ids = {ev["id"] for ev in events}
        self.assertEqual(len(ids), 1, "chunks carry different ids")
        content = [ev for ev in events if ev.get("choices")]
        for ev in events:
            self.assertEqual(ev["object"], "text_completion")
            self.assertEqual(ev["model"], "tiny")
            self.assertIsInstance(ev["created"], int)
        # every chunk but the last content chunk is unfinished
        for ev in content[:-1]:
            self.assertIsNone(ev["choices"][0]["finish_reason"], ev)
        self.assertEqual(content[-1]["choices"][0]["finish_reason"], "length")
        self.assertLessEqual(len(content), 8)
        n_scored = sum(len(ev["choices"][0]["logprobs"]["tokens"])
                       for ev in content if ev["choices"][0].get("logprobs"))
        self.assertEqual(n_scored, 7)
        # the usage chunk comes last, after every choice finished
        last = events[-1]
        self.assertEqual(last.get("choices"), [])
        self.assertEqual(usage, last["usage"])
        self.assertEqual(usage["prompt_tokens"], 6)
        self.assertEqual(usage["completion_tokens"], 7)
        self.assertEqual(usage["total_tokens"], 13)
        plain = c.complete(prompt=prompt, max_tokens=7, temperature=0,
                           logit_bias=NO_EOT)
        self.assertEqual(texts[0], plain["choices"][0]["text"])

    def test_stream_without_include_usage_has_no_usage_chunk(self):
        events, _, _, usage, done, _, _ = collect_stream(main_client(), {
            "prompt": word_prompt(15, 3), "max_tokens": 3, "stream": True})
        self.assertTrue(done)
        self.assertTrue(all(ev.get("choices") for ev in events))
        self.assertIsNone(usage)

    # Both byte tokens of "é" forced, c3 slightly ahead; a frequency
    # penalty of 2 then makes greedy alternate c3 a9 c3 a9 ...
    UTF8_BIAS = {str(BYTE_C3): 100, str(BYTE_A9): 99}
    UTF8_FREQ = 2.0

    def _utf8_case(self, n):
        """A word prompt for which that request yields n/2 times "é"."""
        bias = {int(k): float(v) for k, v in self.UTF8_BIAS.items()}
        for attempt in range(100):
            prompt = word_prompt(50000 + attempt, 4)
            out, _, margin = ref_greedy(prompt, n, bias=bias,
                                        frequency=self.UTF8_FREQ)
            if out == [BYTE_C3, BYTE_A9] * (n // 2) and margin >= MIN_MARGIN:
                return prompt
        raise AssertionError("no prompt alternates the bytes of 'é'")

    def test_stream_holds_back_split_utf8(self):
        prompt = self._utf8_case(6)
        req = {"prompt": prompt, "max_tokens": 6, "temperature": 0,
               "logit_bias": self.UTF8_BIAS,
               "frequency_penalty": self.UTF8_FREQ}
        c = main_client()
        events, texts, _, _, done, raw, _ = collect_stream(c, dict(req, stream=True))
        self.assertTrue(done)
        for payload in raw:
            payload.decode("utf-8")         # raises on a raw half character
        for ev in events:
            for ch in ev.get("choices") or []:
                self.assertNotIn("\ufffd", ch["text"], ev)
        self.assertEqual(texts[0], "ééé")
        body = c.complete(**req)
        self.assertEqual(body["choices"][0]["text"], "ééé")
        # a stop sequence whose characters arrive byte by byte
        plain = c.complete(stop="éé", **req)["choices"][0]
        self.assertEqual((plain["text"], plain["finish_reason"]), ("", "stop"))
        _, texts, finish, _, _, _, _ = collect_stream(
            c, dict(req, stop=["éé"], stream=True))
        self.assertEqual((texts.get(0, ""), finish[0]), ("", "stop"))

    def test_text_ending_mid_character_is_still_valid_utf8(self):
        # one forced byte c3: the generation ends inside a character
        r = main_client().post("/v1/completions", {
            "prompt": word_prompt(16, 3), "max_tokens": 1,
            "logit_bias": {str(BYTE_C3): 100}, "logprobs": 1})
        self.assertEqual(r.status, 200, r)
        r.body.decode("utf-8")
        es = main_client().open_stream("/v1/completions", {
            "prompt": word_prompt(16, 3), "max_tokens": 3, "stream": True,
            "logit_bias": {str(BYTE_C3): 100}})
        list(es)
        es.close()
        self.assertTrue(es.done)
        for payload in es.raw:
            payload.decode("utf-8")


TOP_MAX = 5          # logprobs at most
# Ranks whose logprobs lie further apart than this are ordered alike by a
# float32 server and the reference (their error is ~1e-6).
TOP_MARGIN = 2 * TOL


def ranks_apart(lp):
    """Whether the TOP_MAX + 1 most likely tokens of log-probabilities lp
    are TOP_MARGIN apart, so the k best are the same set for any k."""
    best = np.sort(lp)[::-1][:TOP_MAX + 1]
    return bool(np.all(best[:-1] - best[1:] >= TOP_MARGIN))


_top_cases = {}


def top_case(key):
    """A prompt, a forced token and the reference's rows for the two
    requests of the top_logprobs tests, all of whose rows have their best
    tokens TOP_MARGIN apart.  The prompt is 6 words and then the
    reference's greedy continuation of 3 tokens, so echo scores tokens the
    model ranks first as well as tokens far down its list; the forced
    token (logit_bias +100 on a word) is generated where the model would
    not pick it.  Returns (prompt, forced, rows of the prompt's tokens 1..,
    rows of 4 forced tokens, greedy tokens of 4 more, their rows)."""
    if key in _top_cases:
        return _top_cases[key]
    for attempt in range(300):
        words = word_prompt(hash_seed(key) + attempt, 7)
        head, forced = words[:6], words[6]
        cont, _, _ = ref_greedy(head, 3)
        prompt = head + cont
        if EOT in cont or forced in prompt:
            continue
        full = ref().full(prompt + [forced] * 3)
        scored = [log_softmax(full[i - 1]) for i in range(1, len(prompt))]
        forced_rows = [log_softmax(full[len(prompt) - 1 + i]) for i in range(4)]
        gen, steps, _ = ref_greedy(prompt, 4, bias={EOT: -100})
        gen_rows = [log_softmax(x) for x in steps]
        if len(gen) == 4 and all(ranks_apart(r) for r in
                                 scored + forced_rows + gen_rows):
            _top_cases[key] = (prompt, forced, scored, forced_rows, gen,
                               gen_rows)
            return _top_cases[key]
    raise AssertionError("no prompt whose best tokens are apart: %r" % key)


def streamed_logprobs(events):
    """The logprobs arrays of choice 0's chunks, joined."""
    out = {"tokens": [], "token_logprobs": [], "top_logprobs": [],
           "text_offset": []}
    for ev in events:
        for ch in ev.get("choices") or []:
            for k in out:
                out[k] += (ch.get("logprobs") or {}).get(k, [])
    return out


class T3aTopLogprobs(ApiCase):
    """top_logprobs hold the token itself (OpenAI's contract: up to
    logprobs + 1 entries), checked key by key against the reference."""

    def assert_tops(self, tops, tokens, rows, k, what):
        """Each entry is the k most likely tokens of its reference row and
        the token itself: k entries when it is one of them, else k + 1.
        Returns how many tokens were among the k best."""
        self.assertEqual(len(tops), len(tokens), what)
        among = 0
        for i, (top, t, lp) in enumerate(zip(tops, tokens, rows)):
            best = best_ids(lp, k)
            among += t in best
            self.assertEqual(len(top), k if t in best else k + 1,
                             "%s %d: %r" % (what, i, top))
            want = {token_string(j): float(lp[j]) for j in best + [t]}
            self.assertEqual(sorted(top), sorted(want), "%s %d" % (what, i))
            for key, v in want.items():
                self.assert_close(top[key], v, "%s %d %r" % (what, i, key))
        return among

    def test_top_logprobs_hold_the_token_for_logprobs_0_to_5(self):
        prompt, forced, scored, forced_rows, gen, gen_rows = top_case("top")
        c = main_client()
        for k in range(TOP_MAX + 1):
            # echo: the prompt scored, then the forced token 4 times
            req = {"prompt": prompt, "max_tokens": 4, "temperature": 0,
                   "echo": True, "logprobs": k,
                   "logit_bias": {str(forced): 100}}
            lp = c.complete(**req)["choices"][0]["logprobs"]
            self.assertIsNone(lp["top_logprobs"][0])
            tokens = prompt[1:] + [forced] * 4
            among = self.assert_tops(lp["top_logprobs"][1:], tokens,
                                     scored + forced_rows, k,
                                     "echo, logprobs %d" % k)
            if k > 0:           # the case has both kinds of entry
                self.assertTrue(0 < among < len(tokens), among)
            events = collect_stream(c, dict(req, stream=True))[0]
            self.assertEqual(streamed_logprobs(events), lp, "streamed echo")
            # greedy: the token is the most likely one
            req = {"prompt": prompt, "max_tokens": 4, "temperature": 0,
                   "logprobs": k, "logit_bias": NO_EOT}
            lp = c.complete(**req)["choices"][0]["logprobs"]
            self.assertEqual(lp["tokens"], [token_string(t) for t in gen])
            self.assert_tops(lp["top_logprobs"], gen, gen_rows, k,
                             "greedy, logprobs %d" % k)
            events = collect_stream(c, dict(req, stream=True))[0]
            self.assertEqual(streamed_logprobs(events), lp, "streamed greedy")
            for top, t, v in zip(lp["top_logprobs"], lp["tokens"],
                                 lp["token_logprobs"]):
                self.assertEqual(top[t], v)


class T3bTokenIds(ApiCase):
    """return_token_ids (vLLM's extension): the prompt's ids and each
    choice's generated ids, whole and per chunk, so that a conversation
    continues from exactly the tokens the model saw."""

    def test_return_token_ids_gives_prompt_and_generated_ids(self):
        c = main_client()
        p1, g1, _ = greedy_case("ids1", 5, 6)
        p2, g2, _ = greedy_case("ids2", 7, 6)
        body = c.complete(prompt=[p1, p2], max_tokens=6, temperature=0, n=2,
                          return_token_ids=True)
        self.assert_ok_shape(body, 4)
        for ch in body["choices"]:
            p = ch["index"] // 2
            self.assertEqual(ch["prompt_token_ids"], [p1, p2][p])
            self.assertEqual(ch["token_ids"], [g1, g2][p])
        self.assertEqual(body["usage"]["completion_tokens"], 24)
        # a text prompt's ids are its tokenization; with echo the prompt is
        # in the text, and token_ids stay the generated ones
        text = text_of(p1)
        ch = c.complete(prompt=text, max_tokens=6, temperature=0, echo=True,
                        return_token_ids=True)["choices"][0]
        ids = c.post("/tokenize", {"content": text}).json["tokens"]
        self.assertEqual(ch["prompt_token_ids"], ids)
        if ids == p1:
            self.assertEqual(ch["text"], text_of(p1 + g1))
            self.assertEqual(ch["token_ids"], g1)
        # not asked for: OpenAI's shape, nothing added
        ch = c.complete(prompt=p1, max_tokens=2, return_token_ids=False)["choices"][0]
        self.assertNotIn("token_ids", ch)
        self.assertNotIn("prompt_token_ids", ch)

    def test_stop_and_end_of_text_keep_ids_and_completion_tokens_alike(self):
        """token_ids are the tokens counted in completion_tokens: those of
        a matched stop sequence too (the text leaves it out), never the
        <|endoftext|> that ends a generation."""
        c = main_client()
        prompt, gen, _ = greedy_case("idstop", 5, 6)
        stop = text_of(gen[3:5])
        body = c.complete(prompt=prompt, max_tokens=6, temperature=0,
                          stop=stop, return_token_ids=True)
        ch = body["choices"][0]
        self.assertEqual(ch["finish_reason"], "stop")
        self.assertEqual(ch["text"], text_of(gen[:3]))
        self.assertEqual(ch["token_ids"], gen[:5])
        self.assertEqual(body["usage"]["completion_tokens"], 5)
        body = c.complete(prompt=prompt, max_tokens=6, temperature=0,
                          logit_bias={str(EOT): 100}, return_token_ids=True)
        ch = body["choices"][0]
        self.assertEqual((ch["finish_reason"], ch["token_ids"]), ("stop", []))
        self.assertEqual(body["usage"]["completion_tokens"], 0)

    def test_streamed_chunks_carry_their_own_ids(self):
        """Each chunk names the ids of the tokens it carries, and each
        choice's first chunk the prompt's, once; joined they are the whole
        response's."""
        c = main_client()
        p1, _, _ = greedy_case("idstream1", 5, 6)
        p2, _, _ = greedy_case("idstream2", 6, 6)
        for echo in (False, True):
            req = {"prompt": [p1, p2], "max_tokens": 6, "temperature": 0.9,
                   "seed": 5, "n": 2, "logprobs": 1, "echo": echo,
                   "logit_bias": NO_EOT, "return_token_ids": True}
            whole = c.complete(**req)["choices"]
            events = collect_stream(c, dict(req, stream=True))[0]
            ids, prompts = {}, {}
            for ev in events:
                for ch in ev.get("choices") or []:
                    i = ch["index"]
                    if "prompt_token_ids" in ch:
                        self.assertNotIn(i, prompts, "prompt ids sent twice")
                        self.assertNotIn(i, ids, "prompt ids after the first chunk")
                        prompts[i] = ch["prompt_token_ids"]
                    # only chunks that carry tokens name them: never []
                    if "token_ids" in ch:
                        self.assertTrue(ch["token_ids"], ch)
                    ids[i] = ids.get(i, []) + ch.get("token_ids", [])
                    scored = (ch["logprobs"] or {}).get("tokens", [])
                    if not (echo and "prompt_token_ids" in ch):
                        self.assertEqual(len(ch.get("token_ids", [])), len(scored), ch)
                    if ch["finish_reason"] is not None:
                        self.assertNotIn("token_ids", ch)
            self.assertEqual(prompts, {ch["index"]: ch["prompt_token_ids"]
                                       for ch in whole}, "echo=%s" % echo)
            self.assertEqual(ids, {ch["index"]: ch["token_ids"] for ch in whole},
                             "echo=%s" % echo)
            self.assertEqual([len(v) for v in ids.values()], [6] * 4)

    def test_continuing_from_ids_reuses_every_cached_token(self):
        """A session's second turn sent as the first turn's prompt and
        completion ids is all cached but its last token (the one whose
        logits start the completion)."""
        c = main_client()
        sid = "ids-%d" % os.getpid()
        text = text_of(word_prompt(31, 9)) + " é€ 日本"
        t1 = c.complete(prompt=text, max_tokens=12, temperature=1.0, seed=3,
                        session_id=sid, logit_bias=NO_EOT,
                        return_token_ids=True)["choices"][0]
        history = t1["prompt_token_ids"] + t1["token_ids"]
        self.assertEqual(len(t1["token_ids"]), 12)
        t2 = c.complete(prompt=history, max_tokens=4, session_id=sid,
                        return_token_ids=True)
        self.assertEqual(t2["choices"][0]["prompt_token_ids"], history)
        self.assertEqual(t2["usage"]["prompt_tokens"], len(history))
        self.assertEqual(t2["usage"]["prompt_tokens_details"]["cached_tokens"],
                         len(history) - 1)
        c.delete("/v1/sessions/" + sid)


class T4Sessions(ApiCase):

    def _sessions(self, c):
        r = c.get("/v1/sessions")
        self.assertEqual(r.status, 200, r)
        found = {}

        def walk(x):
            if isinstance(x, dict):
                sid = x.get("id", x.get("session_id"))
                if isinstance(sid, str):
                    found[sid] = x
                for v in x.values():
                    walk(v)
            elif isinstance(x, list):
                for v in x:
                    walk(v)
        walk(r.json)
        return found

    def test_session_turn_two_reuses_prefix_and_matches_cold(self):
        c = main_client()
        sid = "conv-%d" % os.getpid()
        p1, g1, _ = greedy_case("sess1", 8, 6)
        t1 = c.complete(prompt=p1, max_tokens=6, temperature=0, session_id=sid)
        self.assertEqual(t1["choices"][0]["text"], text_of(g1))
        self.assertEqual(t1["usage"]["prompt_tokens_details"]["cached_tokens"], 0)
        # turn two: the first turn's prompt, two of its tokens, new words
        p2 = p1 + g1[:2] + word_prompt(777, 5)
        req = dict(prompt=p2, max_tokens=8, temperature=0.8, seed=9,
                   logprobs=1, logit_bias=NO_EOT)
        t2 = c.complete(session_id=sid, **req)
        self.assertEqual(t2["usage"]["prompt_tokens_details"]["cached_tokens"],
                         len(p1) + 2)
        self.assertEqual(t2["usage"]["prompt_tokens"], len(p2))
        listed = self._sessions(c)
        self.assertIn(sid, listed)
        info = listed[sid]
        # the slot holds turn two's prompt and (all but maybe the last of)
        # its 8 generated tokens, and is idle now
        self.assertIn(info.get("n_tokens"), range(len(p2) + 7, len(p2) + 9), info)
        self.assertIs(info.get("busy"), False, info)
        self.assertGreaterEqual(info.get("idle_seconds"), 0, info)
        r = c.delete("/v1/sessions/" + sid)
        self.assertIn(r.status, (200, 204), r)
        self.assertNotIn(sid, self._sessions(c))
        # a cold run on a fresh server (nothing cached) gives the same
        fresh = Server(GPT2D, TINY, WORKDIR, ["--slots", "1", "--threads", "1"],
                       name="cold")
        fresh.start()
        try:
            cold = fresh.client().complete(**req)
        finally:
            rc, _ = fresh.stop()
        self.assertEqual(rc, 0, fresh.log_tail())
        self.assert_clean_log(fresh)
        self.assertEqual(cold["usage"]["prompt_tokens_details"]["cached_tokens"], 0)
        self.assertEqual(cold["choices"][0]["text"], t2["choices"][0]["text"])
        for a, b in zip(cold["choices"][0]["logprobs"]["token_logprobs"],
                        t2["choices"][0]["logprobs"]["token_logprobs"]):
            self.assertLessEqual(abs(a - b), TOL)

    def test_delete_unknown_session_is_404(self):
        r = main_client().delete("/v1/sessions/no-such-session")
        self.assert_error(r, 404)

    def test_deleted_session_is_gone(self):
        c = main_client()
        c.complete(prompt=word_prompt(17, 4), max_tokens=2, session_id="gone")
        self.assertIn("gone", self._sessions(c))
        self.assertIn(c.delete("/v1/sessions/gone").status, (200, 204))
        self.assert_error(c.delete("/v1/sessions/gone"), 404)

    def test_sessions_outlive_the_slots_and_memory_pressure_takes_lru(self):
        """Three sessions on two slots are all kept; when the KV memory (6
        blocks of 16 positions here) runs short, the least recently used
        sessions' history goes, the last used one stays."""
        block = TINY_BLOCK
        srv = Server(GPT2D, TINY, WORKDIR,
                     ["--slots", "2", "--threads", "1",
                      "--kv-memory", str(6 * block)], name="lru").start()
        try:
            c = srv.client()
            hist = {}

            def turn(sid, prompt):
                body = c.complete(prompt=prompt, max_tokens=2, temperature=0,
                                  session_id=sid, logit_bias=NO_EOT)
                hist[sid] = prompt + c.post("/tokenize", {
                    "content": body["choices"][0]["text"]}).json["tokens"]
                return body["usage"]["prompt_tokens_details"]["cached_tokens"]
            for i, sid in enumerate("abc"):
                self.assertEqual(turn(sid, list(range(1000 * (i + 1),
                                                      1000 * (i + 1) + 10))), 0)
            listed = self._sessions(c)
            for sid in "abc":
                self.assertEqual(listed[sid]["n_tokens"], 11, listed)
            # a's next turn takes over its own partial block (no copy)
            self.assertEqual(turn("a", hist["a"] + [1100, 1101]), 11)
            # 4 blocks for a plain prompt: the 3 free, then b's history, the
            # least recently used
            c.complete(prompt=list(range(5000, 5060)), max_tokens=4)
            listed = self._sessions(c)
            self.assertEqual(listed["b"]["n_tokens"], 0, listed)
            self.assertEqual(listed["c"]["n_tokens"], 11, listed)
            self.assertEqual(listed["a"]["n_tokens"], 15, listed)
            self.assertEqual(turn("b", hist["b"] + [2100]), 0)
            self.assertEqual(turn("c", hist["c"] + [3100]), 11)
            self.assertEqual(turn("a", hist["a"] + [1102]), 15)
            m = c.metrics()
            self.assertGreaterEqual(metric_sum(m, "gpt2d_kv_evictions_total"), 1)
        finally:
            rc, _ = srv.stop()
        self.assertEqual(rc, 0, srv.log_tail())
        self.assert_clean_log(srv)

    def test_automatic_prefix_reuse_without_session(self):
        c = main_client()
        p, g, _ = greedy_case("auto", 12, 3)
        c.complete(prompt=p, max_tokens=3, temperature=0)
        p2 = p + word_prompt(778, 4)
        b = c.complete(prompt=p2, max_tokens=5, temperature=0)
        self.assertEqual(b["usage"]["prompt_tokens_details"]["cached_tokens"],
                         len(p))
        want, _, margin = ref_greedy(p2, 5)
        if margin >= MIN_MARGIN and valid_tokens(want) and EOT not in want:
            self.assertEqual(b["choices"][0]["text"], text_of(want))
        m = c.metrics()
        hits = [v for k, v in m.items() if "cached" in k and "bucket" not in k]
        self.assertTrue(any(v >= len(p) for v in hits), hits)


class T5Concurrency(ApiCase):

    def test_concurrent_seeded_requests_match_solo(self):
        c = main_client()
        reqs = [{"prompt": word_prompt(100 + i, 3 + i), "max_tokens": 12,
                 "temperature": 1.0, "seed": 1000 + i, "logit_bias": NO_EOT}
                for i in range(8)]
        solo = [c.complete(**r)["choices"][0]["text"] for r in reqs]
        got = [None] * 8
        errors = []

        def run(i):
            try:
                cl = main_client()
                if i % 2:
                    _, texts, _, _, _, _, _ = collect_stream(
                        cl, dict(reqs[i], stream=True))
                    got[i] = texts.get(0)
                else:
                    got[i] = cl.complete(**reqs[i])["choices"][0]["text"]
            except Exception as e:  # reported below, with the index
                errors.append((i, repr(e)))

        threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        self.assertEqual(errors, [])
        self.assertEqual(got, solo)


class T5bChat(ApiCase):
    """POST /v1/chat/completions: the chat shapes over the one completion
    path, tied to /v1/completions of the rendered transcript and so to the
    numpy reference."""

    def chat(self, c, **body):
        r = c.post("/v1/chat/completions", body)
        self.assertEqual(r.status, 200, r)
        return r.json

    def assert_chat_shape(self, body, n_choices=1):
        self.assertTrue(body["id"].startswith("chatcmpl-"), body["id"])
        self.assertEqual(body["object"], "chat.completion")
        self.assertIsInstance(body["created"], int)
        self.assertEqual(body["model"], "tiny")
        self.assertEqual(len(body["choices"]), n_choices)
        for i, ch in enumerate(body["choices"]):
            self.assertEqual(ch["index"], i)
            self.assertEqual(ch["message"]["role"], "assistant")
            self.assertIsInstance(ch["message"]["content"], str)
            # required (as null) by the OpenAI SDK's types
            self.assertIsNone(ch["message"]["refusal"])
            if ch["logprobs"] is not None:
                self.assertEqual(set(ch["logprobs"]), {"content", "refusal"})
                self.assertIsNone(ch["logprobs"]["refusal"])
            self.assertIn(ch["finish_reason"], ("stop", "length"))
        u = body["usage"]
        self.assertEqual(u["total_tokens"], u["prompt_tokens"] + u["completion_tokens"])
        self.assertIsInstance(u["prompt_tokens_details"]["cached_tokens"], int)

    def test_chat_greedy_matches_reference_on_its_transcript(self):
        c = main_client()
        for attempt in range(100):
            words = text_of(word_prompt(hash_seed("chatref") + attempt, 4))
            messages = [{"role": "system", "content": "Be brief."},
                        {"role": "user", "content": words.strip()}]
            prompt = c.post("/tokenize", {"content": render_chat(messages)}).json["tokens"]
            want, steps, margin = ref_greedy(prompt, 6)
            text = text_of(want) if valid_tokens(want) else ""
            if (margin >= MIN_MARGIN and EOT not in want and len(want) == 6
                    and valid_tokens(want) and not any(s in text for s in CHAT_STOP)):
                break
        else:
            self.fail("no unambiguous greedy chat case")
        body = self.chat(c, messages=messages, max_tokens=6, temperature=0,
                         logprobs=True, top_logprobs=20)
        self.assert_chat_shape(body)
        ch = body["choices"][0]
        self.assertEqual(ch["message"]["content"], text)
        self.assertEqual(ch["finish_reason"], "length")
        self.assertEqual(body["usage"]["prompt_tokens"], len(prompt))
        self.assertEqual(body["usage"]["completion_tokens"], 6)
        entries = ch["logprobs"]["content"]
        self.assertEqual(len(entries), 6)
        for i, e in enumerate(entries):
            self.assertEqual(bytes(e["bytes"]), vocab().bytes_of[want[i]])
            self.assertEqual(e["token"], text_of([want[i]]))
            lsm = log_softmax(steps[i])
            self.assert_close(e["logprob"], lsm[want[i]], "logprob %d" % i)
            self.assertEqual(len(e["top_logprobs"]), 20)   # OpenAI's most
            best = np.argsort(lsm)[::-1][:20]
            for k, t in enumerate(e["top_logprobs"]):
                self.assertEqual(bytes(t["bytes"]), vocab().bytes_of[int(best[k])])
                self.assert_close(t["logprob"], lsm[best[k]], "top %d.%d" % (i, k))
                self.assertEqual(set(t), {"token", "logprob", "bytes"})

    def test_chat_equals_completion_of_its_transcript(self):
        """Same seed, same rendered prompt and the template's stop strings:
        the chat reply is /v1/completions' text, token for token."""
        c = main_client()
        messages = [{"role": "developer", "content": "You answer."},
                    {"role": "user", "content": "Tell me"},
                    {"role": "assistant", "content": " Sure."},
                    {"role": "user", "content": [{"type": "text", "text": "More"},
                                                 {"type": "text", "text": "please"}]}]
        flat = messages[:3] + [{"role": "user", "content": "More\nplease"}]
        sampling = {"temperature": 1.0, "top_k": 40, "seed": 321, "n": 2,
                    "max_tokens": 12, "logit_bias": NO_EOT}
        chat = self.chat(c, messages=messages, logprobs=True, top_logprobs=3,
                         **sampling)
        self.assert_chat_shape(chat, 2)
        plain = c.complete(prompt=render_chat(flat), stop=CHAT_STOP, logprobs=3,
                           **sampling)
        self.assertEqual(chat["usage"]["prompt_tokens"], plain["usage"]["prompt_tokens"])
        self.assertEqual(chat["usage"]["completion_tokens"],
                         plain["usage"]["completion_tokens"])
        for ch, pc in zip(chat["choices"], plain["choices"]):
            self.assertEqual(ch["message"]["content"], pc["text"])
            self.assertEqual(ch["finish_reason"], pc["finish_reason"])
            entries, lp = ch["logprobs"]["content"], pc["logprobs"]
            self.assertEqual([e["token"] for e in entries], lp["tokens"])
            self.assertEqual([e["logprob"] for e in entries], lp["token_logprobs"])
            for e, top in zip(entries, lp["top_logprobs"]):
                self.assertEqual(len(e["top_logprobs"]), 3)
                for t in e["top_logprobs"]:
                    self.assertEqual(top.get(t["token"]), t["logprob"], top)

    def test_chat_stream_equals_whole_in_chat_chunks(self):
        c = main_client()
        req = {"messages": [{"role": "user", "content": "Count with me"}],
               "max_completion_tokens": 9, "temperature": 0.8, "seed": 5, "n": 2,
               "logprobs": True, "top_logprobs": 1, "logit_bias": NO_EOT}
        whole = self.chat(c, **req)
        events, content, entries, finish, usage, done = collect_chat_stream(
            c, dict(req, stream=True, stream_options={"include_usage": True}))
        self.assertTrue(done)
        self.assertEqual(len({ev["id"] for ev in events}), 1)
        self.assertTrue(events[0]["id"].startswith("chatcmpl-"))
        for ev in events:
            self.assertEqual(ev["object"], "chat.completion.chunk")
            self.assertEqual(ev["model"], "tiny")
        # each choice opens with the role, before any content
        for i in (0, 1):
            mine = [ch for ev in events for ch in ev["choices"] if ch["index"] == i]
            self.assertEqual(mine[0]["delta"], {"role": "assistant", "content": "",
                                                "refusal": None})
            for ch in mine:
                if ch["logprobs"] is not None:
                    self.assertIsNone(ch["logprobs"]["refusal"])
            self.assertTrue(all("role" not in ch["delta"] for ch in mine[1:]))
            self.assertIsNone(mine[0]["finish_reason"])
            self.assertEqual(mine[-1]["finish_reason"], "length")
            self.assertTrue(all(ch["finish_reason"] is None for ch in mine[:-1]))
        self.assertEqual(events[-1]["choices"], [])
        # the same counts (cached_tokens: the second run finds the first's)
        for k in ("prompt_tokens", "completion_tokens", "total_tokens"):
            self.assertEqual(usage[k], whole["usage"][k], k)
        for ch in whole["choices"]:
            i = ch["index"]
            self.assertEqual(content[i], ch["message"]["content"])
            self.assertEqual(finish[i], ch["finish_reason"])
            self.assertEqual(entries[i], ch["logprobs"]["content"])

    def test_session_turn_two_reuses_the_whole_previous_transcript(self):
        c = main_client()
        sid = "chat-%d" % os.getpid()
        turn1 = [{"role": "system", "content": "Be kind."},
                 {"role": "user", "content": "Greet me"}]
        first = self.chat(c, messages=turn1, max_tokens=4, temperature=0,
                          logit_bias={str(HELLO): 100}, session_id=sid)
        reply = first["choices"][0]["message"]["content"]
        self.assertEqual(reply, " Hello" * 4)
        self.assertEqual(first["usage"]["prompt_tokens_details"]["cached_tokens"], 0)
        said = c.post("/tokenize", {"content": render_chat(turn1) + reply}).json["tokens"]
        turn2 = turn1 + [{"role": "assistant", "content": reply},
                         {"role": "user", "content": "Again"}]
        req = {"messages": turn2, "max_tokens": 8, "temperature": 0.9, "seed": 8,
               "logprobs": True, "logit_bias": NO_EOT}
        second = self.chat(c, session_id=sid, **req)
        # every token of the last prompt and reply but the reply's last
        # (sampled, never run through the model) comes from the cache
        self.assertEqual(second["usage"]["prompt_tokens_details"]["cached_tokens"],
                         len(said) - 1)
        self.assertEqual(second["usage"]["prompt_tokens"], len(c.post(
            "/tokenize", {"content": render_chat(turn2)}).json["tokens"]))
        # cached and cold give the same reply
        cold = self.chat(c, cache_salt="cold-%d" % os.getpid(), **req)
        self.assertEqual(cold["usage"]["prompt_tokens_details"]["cached_tokens"], 0)
        self.assertEqual(cold["choices"][0]["message"]["content"],
                         second["choices"][0]["message"]["content"])
        for a, b in zip(cold["choices"][0]["logprobs"]["content"],
                        second["choices"][0]["logprobs"]["content"]):
            self.assertLessEqual(abs(a["logprob"] - b["logprob"]), TOL)
        self.assertEqual(c.delete("/v1/sessions/" + sid).status, 200)

    def test_chat_return_token_ids_name_the_transcript_and_the_reply(self):
        """return_token_ids on a chat: the rendered transcript's ids and
        the reply's, whole and streamed, as on /v1/completions."""
        c = main_client()
        messages = [{"role": "user", "content": "Name it"}]
        req = {"messages": messages, "max_tokens": 6, "temperature": 0.7,
               "seed": 4, "logit_bias": NO_EOT, "return_token_ids": True}
        whole = self.chat(c, **req)["choices"][0]
        prompt = c.post("/tokenize", {"content": render_chat(messages)}).json["tokens"]
        self.assertEqual(whole["prompt_token_ids"], prompt)
        self.assertEqual(len(whole["token_ids"]), 6)
        plain = c.complete(prompt=prompt, max_tokens=6, temperature=0.7, seed=4,
                           logit_bias=NO_EOT, stop=CHAT_STOP,
                           return_token_ids=True)["choices"][0]
        self.assertEqual(whole["token_ids"], plain["token_ids"])
        self.assertEqual(whole["message"]["content"], plain["text"])
        events = collect_chat_stream(c, dict(req, stream=True))[0]
        mine = [ch for ev in events for ch in ev["choices"]]
        with_prompt = [ch for ch in mine if "prompt_token_ids" in ch]
        self.assertEqual(len(with_prompt), 1)
        self.assertEqual(with_prompt[0]["prompt_token_ids"], prompt)
        self.assertEqual([t for ch in mine for t in ch.get("token_ids", [])],
                         whole["token_ids"])
        # the opening and finish chunks carry no tokens, so no token_ids
        self.assertTrue(all(ch["token_ids"] for ch in mine if "token_ids" in ch), mine)
        self.assertNotIn("token_ids", mine[-1])
        self.assertEqual(mine[-1]["finish_reason"], "length")

    def test_chat_refuses_what_it_cannot_honour_naming_the_field(self):
        c = main_client()
        msg = [{"role": "user", "content": "Hi"}]
        cases = [
            ({"messages": msg, "tools": [{"type": "function",
                                          "function": {"name": "f g"}}]},
             "tools[0].function.name"),
            ({"messages": msg, "tool_choice": "required"}, "tool_choice"),
            ({"messages": msg, "response_format": {"type": "xml"}},
             "response_format.type"),
            ({"messages": [{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": "https://x/y.png"}}]}]},
             "messages[0].content[0].type"),
            ({"messages": [{"role": "user", "content": [
                {"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}]}]},
             "messages[0].content[0].type"),
            ({"messages": [{"role": "tool", "content": "42", "tool_call_id": "1"}]},
             "messages[0].tool_call_id"),
            ({"messages": msg, "n": 5}, "n"),
            ({"messages": msg, "top_logprobs": 2}, "top_logprobs"),
            ({"messages": msg, "max_completion_tokens": 100}, "max_completion_tokens"),
            ({"messages": []}, "messages"),
        ]
        for body, param in cases:
            with self.subTest(param=param):
                self.assert_error(c.post("/v1/chat/completions", body), 400, param)

    def test_chat_ignores_unknown_fields_as_completions_does(self):
        c = main_client()
        body = self.chat(c, messages=[{"role": "user", "content": "Hi", "name": "ann"}],
                         max_tokens=2, store=False, metadata={"a": "b"},
                         reasoning_effort="low", tools=[], tool_choice="none",
                         response_format={"type": "text"})
        self.assert_chat_shape(body)
        self.assertLessEqual(body["usage"]["completion_tokens"], 2)

    def test_template_file_writes_the_prompt_and_its_stop_ends_the_reply(self):
        """--chat-template FILE: its prefixes and suffixes write the prompt
        (the reply is /v1/completions' greedy text of that prompt) and the
        reply ends where the model writes one of its stop strings."""
        c = main_client()
        template = {"system": ("<|system|>", "</s>"), "user": ("<|user|> ", "</s>\n"),
                    "assistant": ("<|assistant|>", "</s>\n")}
        messages = [{"role": "user", "content": "Write"}]
        prompt = render_chat(messages, template)
        free = c.complete(prompt=prompt, max_tokens=12, temperature=0, logprobs=0,
                          logit_bias=NO_EOT)
        tokens = free["choices"][0]["logprobs"]["tokens"]
        text = free["choices"][0]["text"]
        # a stop string the greedy reply writes from its fourth token on
        stop = "".join(tokens[3:5])
        self.assertTrue(stop and stop in text and "bytes:" not in stop, tokens)
        path = os.path.join(WORKDIR, "chat-template.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump({role: {"prefix": p, "suffix": x}
                       for role, (p, x) in template.items()} | {"stop": [stop]}, f)
        srv = Server(GPT2D, TINY, WORKDIR, ["--slots", "1", "--threads", "1",
                                            "--chat-template", path],
                     name="chat-template").start()
        try:
            r = srv.client().post("/v1/chat/completions", {
                "messages": messages, "max_tokens": 12, "temperature": 0,
                "logit_bias": NO_EOT})
        finally:
            rc, _ = srv.stop()
        self.assertEqual(rc, 0, srv.log_tail())
        self.assert_clean_log(srv)
        self.assertEqual(r.status, 200, r)
        ch = r.json["choices"][0]
        self.assertEqual(ch["message"]["content"], text[:text.index(stop)])
        self.assertEqual(ch["finish_reason"], "stop")
        self.assertEqual(r.json["usage"]["prompt_tokens"], len(
            c.post("/tokenize", {"content": prompt}).json["tokens"]))

    def test_bad_template_file_stops_the_start_naming_it(self):
        path = os.path.join(WORKDIR, "bad-template.json")
        with open(path, "w", encoding="utf-8") as f:
            f.write('{"system": {"prefix": "", "suffix": ""},\n "stop": [}\n')
        for arg, where in ((path, path + ":2:"),
                           (path + ".missing", path + ".missing: No such file")):
            with self.subTest(arg=arg):
                p = subprocess.run([GPT2D, "--model", TINY, "--port", "0",
                                    "--chat-template", arg],
                                   capture_output=True, text=True, timeout=30)
                self.assertEqual(p.returncode, 2, p.stderr)
                self.assertIn("chat-template " + where, p.stderr)
                self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)

    def test_chat_requests_are_counted_under_their_own_endpoint(self):
        c = main_client()
        key = 'gpt2d_requests_total{endpoint="chat",code="200"}'
        before = c.metrics().get(key, 0.0)
        self.chat(c, messages=[{"role": "user", "content": "Hi"}], max_tokens=1)
        # counted when libmicrohttpd reports the request complete, a moment
        # after the client has read the answer
        wait_for(lambda: c.metrics().get(key, 0.0) > before, 2)
        self.assertEqual(c.metrics().get(key, 0.0), before + 1)


class T6Errors(ApiCase):
    """Every error path of the main server."""

    def test_bad_json_is_400(self):
        c = main_client()
        for raw in (b"{not json", b"", b"[1, 2]", b'"just a string"'):
            r = c.post("/v1/completions", raw=raw,
                       headers={"Content-Type": "application/json"})
            self.assert_error(r, 400)

    def test_wrong_types_name_the_param(self):
        base = {"prompt": "Hello", "max_tokens": 2}
        cases = {
            "prompt": [5, {"a": 1}, [1, "a"], [[1], "a"], True],
            "max_tokens": ["ten", 2.5, True],
            "temperature": ["hot"],
            "top_p": ["x"],
            "n": ["2", 1.5],
            "best_of": ["3"],
            "stop": [3, ["a", 4]],
            "presence_penalty": ["x"],
            "frequency_penalty": [[1]],
            "logit_bias": [[1], "x", {"15": "up"}],
            "seed": ["x", 1.5],
            "user": [5],
            "echo": ["yes"],
            "logprobs": ["1", 1.5],
            "stream": ["yes"],
            "stream_options": ["x"],
            "top_k": ["x"],
            "min_p": ["x"],
            "repetition_penalty": ["x"],
            "session_id": [5],
            "return_token_ids": ["yes", 1],
        }
        c = main_client()
        for param, values in cases.items():
            for v in values:
                body = dict(base)
                body[param] = v
                with self.subTest(param=param, value=v):
                    r = c.post("/v1/completions", body)
                    self.assert_error(r, 400, param)

    def test_out_of_range_values_name_the_param(self):
        base = {"prompt": "Hello", "max_tokens": 2}
        cases = [
            ("temperature", 2.5), ("temperature", -0.1),
            ("top_p", 1.5), ("top_p", -0.1),
            ("n", 0), ("n", -1),
            ("best_of", 0),
            ("logprobs", 6), ("logprobs", -1),
            ("max_tokens", -1),
            ("logit_bias", {"15": 101}), ("logit_bias", {"15": -100.5}),
            ("logit_bias", {"abc": 1}), ("logit_bias", {"99999": 1}),
            ("stop", ["a", "b", "c", "d", "e"]),
            ("prompt", [1, 99999]), ("prompt", [-1]), ("prompt", []),
            ("prompt", [[]]),
            ("presence_penalty", 2.5), ("frequency_penalty", -2.5),
            ("min_p", 1.5), ("min_p", -0.5), ("top_k", -1),
            ("repetition_penalty", 0), ("repetition_penalty", -1),
            ("n", 1000), ("stop", ""), ("stop", ["a", ""]),
            ("session_id", ""), ("session_id", "x" * 200),
        ]
        c = main_client()
        for param, v in cases:
            body = dict(base)
            body[param] = v
            with self.subTest(param=param, value=v):
                self.assert_error(c.post("/v1/completions", body), 400, param)

    def test_best_of_below_n_is_400(self):
        r = main_client().post("/v1/completions", {
            "prompt": "Hi", "max_tokens": 2, "n": 3, "best_of": 2})
        self.assert_error(r, 400, ("best_of", "n"))

    def test_best_of_with_stream_is_400(self):
        r = main_client().post("/v1/completions", {
            "prompt": "Hi", "max_tokens": 2, "best_of": 2, "stream": True})
        self.assert_error(r, 400, ("best_of", "stream"))

    def test_prompt_over_context_is_400_with_numbers(self):
        r = main_client().post("/v1/completions", {
            "prompt": word_prompt(18, 60), "max_tokens": 10})
        e = self.assert_error(r, 400, ("prompt", "max_tokens", None))
        self.assertIn(str(N_CTX), e["message"])
        self.assertTrue(re.search(r"\b(60|70)\b", e["message"]), e["message"])
        r = main_client().post("/v1/completions", {
            "prompt": word_prompt(18, 70), "max_tokens": 0, "echo": True})
        e = self.assert_error(r, 400, ("prompt", "max_tokens", None))
        self.assertIn("70", e["message"])

    def test_suffix_is_refused(self):
        r = main_client().post("/v1/completions", {
            "prompt": "Hi", "suffix": "there", "max_tokens": 2})
        e = self.assert_error(r, 400, "suffix")
        self.assertIn("suffix", e["message"])

    def test_unknown_path_is_404(self):
        c = main_client()
        for path in ("/v1/nothing", "/v1/completions/x"):
            self.assert_error(c.get(path), 404)
        # outside the API the playground's static files answer
        self.assertEqual(c.get("/v2/no-such-file.js").status, 404)
        self.assert_error(c.post("/v1/chat/completion", {"messages": []}), 404)

    def test_wrong_method_is_405(self):
        c = main_client()
        for method, path in (("GET", "/v1/completions"),
                             ("PUT", "/v1/completions"),
                             ("GET", "/v1/chat/completions"),
                             ("POST", "/v1/models"),
                             ("DELETE", "/v1/models"),
                             ("POST", "/health"),
                             ("GET", "/tokenize"),
                             ("POST", "/v1/sessions")):
            with self.subTest(method=method, path=path):
                raw = b"{}" if method in ("POST", "PUT") else None
                r = c.request(method, path, raw=raw)
                self.assert_error(r, 405)


# ================================================================ own servers

def long_model():
    """tiny's shape with a 1024-token context: a request can run long
    enough to be cancelled, queued behind or drained."""
    return long_context_model(os.path.join(WORKDIR, "long-model"), TINY, 5)


LONG_REQ = {"prompt": "Once upon a time", "max_tokens": 1000,
            "temperature": 1.0, "seed": 1, "logit_bias": NO_EOT}


class ServerCase(testlib.ServerCase, ApiCase):
    """A group with its own server; subclasses set NAME, ARGS, ENV, MODEL."""

    WORKDIR = WORKDIR


class T7AuthAndLimits(ServerCase):
    NAME = "auth"
    KEY = "sk-test-%d" % os.getpid()
    ARGS = ("--slots", "2", "--threads", "1", "--max-body", "2048")
    ENV = {"GPT2D_API_KEY": KEY}

    def test_missing_key_is_401(self):
        c = self.server.client()
        self.assert_error(c.post("/v1/completions", {"prompt": "Hi"}), 401)
        self.assert_error(c.get("/v1/models"), 401)

    def test_wrong_key_is_401(self):
        c = self.server.client(api_key="sk-wrong")
        self.assert_error(c.post("/v1/completions", {"prompt": "Hi"}), 401)

    def test_right_key_is_served(self):
        c = self.server.client(api_key=self.KEY)
        body = c.complete(prompt="Hi", max_tokens=2)
        self.assertEqual(body["usage"]["completion_tokens"], 2)
        self.assertEqual(c.get("/v1/models").status, 200)

    def test_health_is_open_without_key(self):
        self.assertEqual(self.server.client().get("/health").status, 200)

    def test_sighup_reloads_api_key_file(self):
        key_file = os.path.join(WORKDIR, "keys")
        with open(key_file, "w", encoding="ascii") as f:
            f.write("# test keys\nsk-first\n")
        srv = Server(GPT2D, TINY, WORKDIR, ["--slots", "1", "--threads", "1",
                                            "--api-key-file", key_file],
                     name="sighup").start()
        try:
            def status(key):
                return srv.client(api_key=key).get("/v1/models").status
            self.assertEqual(status("sk-first"), 200)
            self.assertEqual(status("sk-second"), 401)
            with open(key_file, "w", encoding="ascii") as f:
                f.write("sk-second\n")
            os.kill(srv.pid, signal.SIGHUP)
            self.assertTrue(wait_for(lambda: status("sk-second") == 200, 2),
                            srv.log_tail())
            self.assertEqual(status("sk-first"), 401)
            # a file without keys is refused; the keys in force stay
            with open(key_file, "w", encoding="ascii") as f:
                f.write("# nothing\n")
            os.kill(srv.pid, signal.SIGHUP)
            time.sleep(0.2)
            self.assertIsNone(srv.proc.poll(), "SIGHUP stopped the server")
            self.assertEqual(status("sk-second"), 200)
        finally:
            rc, _ = srv.stop()
        self.assertEqual(rc, 0, srv.log_tail())
        self.assert_clean_log(srv)

    def test_body_over_max_body_is_413(self):
        c = self.server.client(api_key=self.KEY)
        r = c.post("/v1/completions", {"prompt": "x" * 4000, "max_tokens": 1})
        self.assert_error(r, 413)
        body = c.complete(prompt="y" * 100, max_tokens=1)
        self.assertEqual(len(body["choices"]), 1)


class T7dChatOnASmallKvCache(ServerCase):
    """A KV cache of one context (4 blocks of 16 positions) on 4 slots: a
    chat that names no max runs with what the cache holds for its n
    sequences; one that does is refused naming the field it sent."""
    NAME = "chatkv"
    BLOCK = TINY_BLOCK
    ARGS = ("--slots", "4", "--threads", "1", "--kv-memory", str(4 * BLOCK))
    HI = [{"role": "user", "content": "hi"}]

    def test_default_max_is_what_the_cache_holds_for_n(self):
        c = self.client()
        r = c.post("/v1/chat/completions", {"messages": self.HI, "n": 2,
                                             "logit_bias": NO_EOT})
        self.assertEqual(r.status, 200, r)
        prompt = r.json["usage"]["prompt_tokens"]
        # 4 blocks for 2 sequences sharing no full block: 2 blocks each
        for ch in r.json["choices"]:
            self.assertEqual(ch["finish_reason"], "length", ch)
        self.assertEqual(r.json["usage"]["completion_tokens"], 2 * (32 - prompt))

    def test_a_max_sent_is_named_as_sent(self):
        c = self.client()
        for field in ("max_completion_tokens", "max_tokens"):
            with self.subTest(field=field):
                r = c.post("/v1/chat/completions", {"messages": self.HI, "n": 2,
                                                     field: 40})
                self.assert_error(r, 400, field)
                msg = r.json["error"]["message"]
                self.assertIn("lower %s or n" % field, msg)
                self.assertNotIn("best_of", msg)
        # completions keeps its own names
        r = c.post("/v1/completions", {"prompt": "hi", "n": 2, "max_tokens": 40})
        self.assert_error(r, 400, "max_tokens")
        self.assertIn("lower max_tokens or n/best_of", r.json["error"]["message"])

    def test_a_prompt_n_sequences_cannot_hold_names_n(self):
        long_msg = [{"role": "user", "content": " a" * 40}]
        r = self.client().post("/v1/chat/completions", {"messages": long_msg, "n": 4})
        self.assert_error(r, 400, "n")
        self.assertIn("lower n or the messages", r.json["error"]["message"])


GENERATED_ID = r"req-[0-9a-f]{24}"


class T7cCorsAndRequestIds(ServerCase):
    """A page on another origin may call the API (issue 15): the preflight
    allows the headers its browser asks for, when they are header names and
    the page is the configured origin; every answer says which headers the
    page may read.  Every answer carries X-Request-Id, and so does its
    access log line.  (The real SDK in a real browser:
    tests/browser/test_openai_sdk.sh.)"""
    NAME = "cors"
    KEY = "sk-cors-%d" % os.getpid()
    ORIGIN = "http://app.example:3000"
    ARGS = ("--slots", "2", "--threads", "1", "--max-body", "4096",
            "--cors-origin", ORIGIN)
    ENV = {"GPT2D_API_KEY": KEY}
    # what openai@6 sends from a browser, as Chromium lists it
    SDK_HEADERS = ("authorization,content-type,x-session-id,x-stainless-arch,"
                   "x-stainless-lang,x-stainless-os,x-stainless-package-version,"
                   "x-stainless-retry-count,x-stainless-runtime,"
                   "x-stainless-runtime-version,x-stainless-timeout")

    def preflight(self, origin, asked=None):
        """OPTIONS /v1/completions; returns (status, headers as a list of
        (lower-case name, value), in order)."""
        headers = {"Origin": origin, "Access-Control-Request-Method": "POST"}
        if asked is not None:
            headers["Access-Control-Request-Headers"] = asked
        conn = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=30)
        try:
            conn.request("OPTIONS", "/v1/completions", headers=headers)
            resp = conn.getresponse()
            resp.read()
            return resp.status, [(k.lower(), v) for k, v in resp.getheaders()]
        finally:
            conn.close()

    @staticmethod
    def field(headers, name):
        values = [v for k, v in headers if k == name]
        return values[0] if len(values) == 1 else values or None

    def test_preflight_allows_the_headers_the_browser_asks_for(self):
        status, h = self.preflight(self.ORIGIN, self.SDK_HEADERS)
        self.assertEqual(status, 204, h)
        self.assertEqual(self.field(h, "access-control-allow-origin"), self.ORIGIN)
        self.assertEqual(self.field(h, "access-control-allow-headers"), self.SDK_HEADERS)
        self.assertEqual(self.field(h, "access-control-allow-methods"),
                         "GET, POST, DELETE, OPTIONS")
        self.assertEqual(self.field(h, "access-control-max-age"), "600")
        vary = {v.strip() for k, val in h if k == "vary" for v in val.split(",")}
        self.assertEqual(vary, {"Origin", "Access-Control-Request-Headers"})
        # spaces after the commas, as other browsers and proxies write it
        status, h = self.preflight(self.ORIGIN, "Authorization, X-Session-Id,\tX-Request-Id")
        self.assertEqual(self.field(h, "access-control-allow-headers"),
                         "Authorization, X-Session-Id,\tX-Request-Id")

    def test_preflight_echoes_only_a_list_of_header_names(self):
        for asked in ("x-a, x b", "x-a,,x-b", "x-a,", ",x-a", "x-(a)", "x-a;q=1",
                      "x-\u00e9", "x-a" + ",x-a" * 700, ""):
            with self.subTest(asked=asked):
                status, h = self.preflight(self.ORIGIN, asked)
                self.assertEqual(status, 204, h)
                self.assertEqual(self.field(h, "access-control-allow-headers"),
                                 DEFAULT_ALLOW_HEADERS)
        # without the header: the plain default
        status, h = self.preflight(self.ORIGIN)
        self.assertEqual(self.field(h, "access-control-allow-headers"),
                         DEFAULT_ALLOW_HEADERS)

    def test_preflight_from_another_origin_gets_no_permission(self):
        for origin in ("http://evil.example", "http://app.example:3001",
                       self.ORIGIN + "/", "null"):
            with self.subTest(origin=origin):
                status, h = self.preflight(origin, self.SDK_HEADERS)
                self.assertEqual(status, 204, h)
                names = {k for k, _ in h}
                for absent in ("access-control-allow-headers",
                               "access-control-allow-methods",
                               "access-control-max-age"):
                    self.assertNotIn(absent, names, h)
                # the browser's error message names the origin allowed
                self.assertEqual(self.field(h, "access-control-allow-origin"),
                                 self.ORIGIN)

    def test_preflights_are_counted_as_preflights(self):
        """A browser's preflights are not answers of the endpoint they ask
        about: they count under endpoint="preflight", code 204."""
        c = self.client(api_key=self.KEY)
        preflights = 'gpt2d_requests_total{endpoint="preflight",code="204"}'
        # earlier tests' preflights may still be on their way to the count
        # (counted when libmicrohttpd reports each done): start from a
        # count that has stopped moving
        before = c.metrics()
        for _ in range(20):
            time.sleep(0.05)
            now = c.metrics()
            if now.get(preflights, 0) == before.get(preflights, 0):
                break
            before = now
        for _ in range(3):
            self.assertEqual(self.preflight(self.ORIGIN, "authorization")[0], 204)
        # counted when libmicrohttpd reports each request done
        after = {}

        def counted():
            after.update(c.metrics())
            return after.get(preflights, 0) - before.get(preflights, 0) >= 3
        self.assertTrue(wait_for(counted, 2), after)
        self.assertEqual(after[preflights] - before.get(preflights, 0), 3)
        # not under the route they ask about (OPTIONS /v1/completions)
        other = 'gpt2d_requests_total{endpoint="completions",code="other"}'
        self.assertEqual(after.get(other, 0) - before.get(other, 0), 0)

    def test_every_answer_says_what_a_page_may_read(self):
        c = self.client(api_key=self.KEY)
        answers = [c.get("/v1/models"), self.client().get("/v1/models"),
                   c.get("/v1/nothing"), c.post("/v1/completions", {"prompt": 5}),
                   c.post("/v1/completions", {"prompt": "Hi", "max_tokens": 1})]
        for r in answers:
            with self.subTest(status=r.status):
                self.assertEqual(r.headers.get("access-control-allow-origin"), self.ORIGIN)
                exposed = {v.strip().lower() for v in
                           r.headers.get("access-control-expose-headers", "").split(",")}
                self.assertTrue({"x-request-id", "retry-after"} <= exposed, r.headers)

    def test_request_id_is_the_clients_own_when_sane(self):
        c = self.client(api_key=self.KEY)
        sane = ("trace-1234.abc_DEF", "0f8fad5b-d9cb-469f-a165-70867728950e",
                "a", "x" * 128, "!#$%&'*+-.^_`|~")
        for rid in sane:
            with self.subTest(rid=rid):
                h = {"X-Request-Id": rid}
                for r in (c.post("/v1/completions", {"prompt": "Hi", "max_tokens": 1},
                                 headers=h),
                          c.get("/v1/models", headers=h),
                          c.post("/v1/completions", {"prompt": 5}, headers=h),
                          self.client().get("/v1/models", headers=h),
                          c.get("/v1/nothing", headers=h)):
                    self.assertEqual(r.headers.get("x-request-id"), rid, r)
        es = c.open_stream("/v1/completions", {"prompt": "Hi", "max_tokens": 2,
                                                "stream": True},
                           headers={"X-Request-Id": "stream-7"})
        try:
            self.assertEqual(es.headers.get("x-request-id"), "stream-7")
            self.assertTrue(list(es))
        finally:
            es.close()

    def test_request_id_of_a_completion_is_its_id(self):
        c = self.client(api_key=self.KEY)
        insane = (None, "", "a b", "x" * 129, '"quoted"', "a,b", "caf\u00e9",
                  "a/b", "a:b", "(x)")
        for rid in insane:
            with self.subTest(rid=rid):
                h = {} if rid is None else {"X-Request-Id": rid}
                r = c.post("/v1/completions", {"prompt": "Hi", "max_tokens": 1},
                           headers={k: v.encode("utf-8").decode("latin-1")
                                    for k, v in h.items()})
                self.assertEqual(r.status, 200, r)
                self.assertRegex(r.json["id"], r"^cmpl-[0-9a-f]{24}$")
                self.assertEqual(r.headers.get("x-request-id"), r.json["id"])
        es = c.open_stream("/v1/completions", {"prompt": "Hi", "max_tokens": 2,
                                                "stream": True})
        try:
            events = list(es)
        finally:
            es.close()
        ids = {ev["id"] for ev in events}
        self.assertEqual(len(ids), 1, ids)
        self.assertEqual(es.headers.get("x-request-id"), ids.pop())

    def test_request_id_is_generated_for_every_other_answer(self):
        c = self.client(api_key=self.KEY)
        status, h = self.preflight(self.ORIGIN, "authorization")
        seen = [(204, self.field(h, "x-request-id"))]
        for r in (c.get("/v1/models"), c.get("/health"), self.client().get("/v1/models"),
                  c.get("/v1/nothing"), c.delete("/v1/models"),
                  c.post("/v1/completions", {"prompt": 5}),
                  c.post("/v1/completions", {"prompt": "x" * 5000}),
                  c.delete("/v1/sessions/none"), c.post("/tokenize", {"content": "a"})):
            seen.append((r.status, r.headers.get("x-request-id")))
        # a chunked body over --max-body: the 413 written by hand
        with socket.create_connection(("127.0.0.1", self.server.port)) as s:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                      b"Authorization: Bearer " + self.KEY.encode() + b"\r\n"
                      b"Transfer-Encoding: chunked\r\n\r\n"
                      + (b"1000\r\n" + b" " * 4096 + b"\r\n") * 2 + b"0\r\n\r\n")
            r = read_response(s)
        self.assertEqual(r.headers.get("access-control-allow-origin"), self.ORIGIN)
        seen.append((r.status, r.headers.get("x-request-id")))
        self.assertEqual([st for st, _ in seen],
                         [204, 200, 200, 401, 404, 405, 400, 413, 404, 200, 413])
        for st, rid in seen:
            self.assertRegex(rid or "", "^%s$" % GENERATED_ID, st)
        self.assertEqual(len({rid for _, rid in seen}), len(seen), seen)

    def test_access_log_line_has_the_request_id(self):
        c = self.client(api_key=self.KEY)
        mine = "log-check-%d" % os.getpid()
        c.post("/v1/completions", {"prompt": "Hi", "max_tokens": 1},
               headers={"X-Request-Id": mine})
        body = c.complete(prompt="Hi", max_tokens=1)
        streamed = list(c.stream("/v1/completions", {
            "prompt": "Hi", "max_tokens": 2, "stream": True,
            "logit_bias": NO_EOT}))
        refused = self.client().get("/v1/models")
        # the counts, then how often its sequences were paused for another
        # caller's: none here, and said so on every line
        counts = r"[0-9.]+ms prompt_tokens=\d+ completion_tokens=%d paused=0"
        lines = {mine: r"POST /v1/completions 200 " + counts % 1,
                 body["id"]: r"POST /v1/completions 200 " + counts % 1,
                 streamed[0]["id"]: r"POST /v1/completions 200 " + counts % 2,
                 refused.headers["x-request-id"]: r"GET /v1/models 401 " + counts % 0}
        for rid, pattern in lines.items():
            with self.subTest(rid=rid):
                # the line is written when libmicrohttpd reports the request done
                found = wait_for(lambda: re.search(
                    r"info: %s request_id=%s$" % (pattern, re.escape(rid)),
                    self.log_text(), re.M), 2)
                self.assertTrue(found, self.server.log_tail())


    def test_no_path_can_forge_a_log_field(self):
        """The path is logged percent-encoded where it could end its field
        or fake another: one request_id= per line, the real one."""
        forged = ("/x%20request_id=forged", "/x%09request_id=forged",
                  "/request_id=forged", "/x%0Arequest_id=forged", "/%22q%22%25")
        logged = ("/x%20request_id%3Dforged", "/x%09request_id%3Dforged",
                  "/request_id%3Dforged", "/x%0Arequest_id%3Dforged", "/%22q%22%25")
        for path, want in zip(forged, logged):
            with self.subTest(path=path):
                rid = "forge-check-%d-%d" % (os.getpid(), forged.index(path))
                r = self.client(api_key=self.KEY).get(path, headers={"X-Request-Id": rid})
                self.assertEqual(r.status, 404, r)
                line = r"^.* info: GET %s 404 .* request_id=%s$" % (re.escape(want),
                                                                  re.escape(rid))
                self.assertTrue(wait_for(lambda: re.search(line, self.log_text(), re.M), 2),
                                self.server.log_tail())
        self.assertNotIn("request_id=forged", self.log_text())


class T7bIsolation(ServerCase):
    """One client's conversation never shows through to another (issue 12):
    cached prefixes and sessions belong to the API key that made them, and a
    cache_salt isolates further."""
    NAME = "isolation"
    ALICE = "sk-alice-%d" % os.getpid()
    MALLORY = "sk-mallory-%d" % os.getpid()
    ARGS = ("--slots", "2", "--threads", "1")
    VICTIM = "My bank PIN is 4831 and my card is blue"

    @classmethod
    def setUpClass(cls):
        cls.key_file = os.path.join(WORKDIR, "isolation-keys")
        with open(cls.key_file, "w", encoding="ascii") as f:
            f.write("%s\n%s\n" % (cls.ALICE, cls.MALLORY))
        cls.ARGS = cls.ARGS + ("--api-key-file", cls.key_file)
        super().setUpClass()

    def _cached(self, body):
        return body["usage"]["prompt_tokens_details"]["cached_tokens"]

    def _cached_total(self, c):
        return metric_sum(c.metrics(), "gpt2d_cached_tokens_total")

    def test_guessing_another_keys_prompt_learns_nothing(self):
        alice = self.server.client(api_key=self.ALICE)
        mallory = self.server.client(api_key=self.MALLORY)
        for session in ("victim", None):
            extra = {"session_id": session} if session else {}
            alice.complete(prompt=self.VICTIM, max_tokens=2, temperature=0, **extra)
            # churn through the slots so the victim's is evicted, as the attack did
            for i in range(3):
                mallory.complete(prompt=word_prompt(300 + i, 5), max_tokens=1,
                                 session_id="churn-%d" % i)
            before = self._cached_total(mallory)
            for guess in ("1111", "4831", "4832"):
                # each guess salted apart, so none is served by an earlier one
                body = mallory.complete(prompt="My bank PIN is " + guess,
                                        max_tokens=1, temperature=0,
                                        cache_salt="guess-%s-%s" % (session, guess))
                self.assertEqual(self._cached(body), 0, (session, guess))
            # nothing was skipped anywhere, so no step took less time
            self.assertEqual(self._cached_total(mallory), before)

    def test_same_key_shares_its_prefix_and_cache_salt_isolates(self):
        alice = self.server.client(api_key=self.ALICE)
        prompt = word_prompt(555, 10)
        alice.complete(prompt=prompt, max_tokens=1, temperature=0)
        again = alice.complete(prompt=prompt + word_prompt(556, 2), max_tokens=1)
        self.assertEqual(self._cached(again), 10)
        salted = alice.complete(prompt=prompt + word_prompt(557, 2), max_tokens=1,
                                cache_salt="tenant-1")
        self.assertEqual(self._cached(salted), 0)
        salted2 = alice.complete(prompt=prompt + word_prompt(557, 2) + word_prompt(558, 1),
                                 max_tokens=1, cache_salt="tenant-1")
        self.assertEqual(self._cached(salted2), 12)
        other_salt = alice.complete(prompt=prompt + word_prompt(557, 2), max_tokens=1,
                                    cache_salt="tenant-2")
        self.assertEqual(self._cached(other_salt), 0)
        mallory = self.server.client(api_key=self.MALLORY)
        guess = mallory.complete(prompt=prompt + word_prompt(557, 2), max_tokens=1,
                                 cache_salt="tenant-1")
        self.assertEqual(self._cached(guess), 0)

    def test_sessions_are_listed_deleted_and_used_only_by_their_key(self):
        alice = self.server.client(api_key=self.ALICE)
        mallory = self.server.client(api_key=self.MALLORY)
        prompt = word_prompt(600, 8)
        alice.complete(prompt=prompt, max_tokens=2, session_id="mine")

        def listed(c):
            return [s["id"] for s in c.get("/v1/sessions").json["data"]]
        self.assertIn("mine", listed(alice))
        self.assertNotIn("mine", listed(mallory))
        # absent, exactly as an id that never existed
        gone = mallory.delete("/v1/sessions/mine")
        self.assert_error(gone, 404)
        never = mallory.delete("/v1/sessions/never-was")
        self.assertEqual(gone.json["error"]["message"].replace("mine", "X"),
                         never.json["error"]["message"].replace("never-was", "X"))
        # mallory's "mine" is mallory's own, empty session
        body = mallory.complete(prompt=prompt + word_prompt(601, 2), max_tokens=1,
                                session_id="mine")
        self.assertEqual(self._cached(body), 0)
        self.assertIn("mine", listed(mallory))
        # alice's session kept its history
        body = alice.complete(prompt=prompt + word_prompt(602, 2), max_tokens=1,
                              session_id="mine")
        self.assertEqual(self._cached(body), 8)
        self.assertIn(alice.delete("/v1/sessions/mine").status, (200, 204))
        self.assertIn("mine", listed(mallory))
        self.assertIn(mallory.delete("/v1/sessions/mine").status, (200, 204))

    def test_global_prefix_cache_shares_between_keys(self):
        srv = Server(GPT2D, TINY, WORKDIR,
                     ["--slots", "2", "--threads", "1", "--api-key-file",
                      self.key_file, "--global-prefix-cache"],
                     name="global-cache").start()
        try:
            prompt = word_prompt(700, 9)
            srv.client(api_key=self.ALICE).complete(prompt=prompt, max_tokens=1)
            body = srv.client(api_key=self.MALLORY).complete(
                prompt=prompt + word_prompt(701, 1), max_tokens=1)
            self.assertEqual(self._cached(body), 9)
        finally:
            rc, _ = srv.stop()
        self.assertEqual(rc, 0, srv.log_tail())
        self.assert_clean_log(srv)


class T8PerKeyQueue(ServerCase):
    """One slot, a queue of 4: each key may queue 2 (half the queue)."""
    NAME = "perkey"
    KEYS = ("key-alpha", "key-beta")
    ENV = {"GPT2D_TEST_MIN_STEP_US": "2000"}
    MODEL = staticmethod(long_model)

    @classmethod
    def setUpClass(cls):
        os.makedirs(WORKDIR, exist_ok=True)
        cls.key_file = os.path.join(WORKDIR, "perkey-keys")
        with open(cls.key_file, "w") as f:
            f.write("\n".join(cls.KEYS) + "\n")
        cls.ARGS = ("--slots", "1", "--max-queue", "4", "--threads", "1",
                    "--api-key-file", cls.key_file)
        ServerCase.setUpClass.__func__(cls)

    def test_key_over_its_queue_limit_gets_429_naming_it_while_others_are_queued(self):
        a = self.server.client(api_key=self.KEYS[0])
        b = self.server.client(api_key=self.KEYS[1])
        streams, lock = [], threading.Lock()

        def open_in_background(client, seed):
            def run():
                try:
                    es = client.open_stream("/v1/completions",
                                            dict(LONG_REQ, stream=True, seed=seed))
                except StreamError:
                    return
                with lock:
                    streams.append(es)
            t = threading.Thread(target=run)
            t.start()
            return t
        threads = []
        try:
            for i in range(3):      # one runs, two wait (headers come when admitted)
                threads.append(open_in_background(a, i))
                time.sleep(0.05)
            self.assertTrue(wait_for(lambda: metric_sum(a.metrics(), "gpt2d_queue_depth")
                                     == 2, 5))
            t0 = time.monotonic()
            with self.assertRaises(StreamError) as cm:
                streams.append(a.open_stream("/v1/completions",
                                             dict(LONG_REQ, stream=True, seed=9)))
            self.assertLess(time.monotonic() - t0, 1.0, "refused only after waiting")
            r = cm.exception.response
            err = self.assert_error(r, 429)
            self.assertEqual(err["code"], "max_queued_per_key")
            self.assertIn("max-queued-per-key", err["message"])
            self.assertTrue(r.headers["retry-after"].strip().isdigit(), r.headers)
            # the other key still has its share of the queue
            threads.append(open_in_background(b, 10))
            self.assertTrue(wait_for(lambda: metric_sum(a.metrics(), "gpt2d_queue_depth")
                                     == 3, 5))
        finally:
            # each stream closed lets the next be admitted and open
            deadline = time.monotonic() + 30
            while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
                with lock:
                    for es in streams:
                        es.close()
                time.sleep(0.05)
            with lock:
                for es in streams:
                    es.close()


class T8Backpressure(ServerCase):
    NAME = "busy"
    ARGS = ("--slots", "1", "--max-queue", "1", "--threads", "1")
    # a LONG_REQ runs >= 2 s however fast the machine generates
    ENV = {"GPT2D_TEST_MIN_STEP_US": "2000"}
    MODEL = staticmethod(long_model)

    def _idle(self, c):
        m = c.metrics()
        return (metric_sum(m, "gpt2d_slots_busy") == 0
                and metric_sum(m, "gpt2d_queue_depth") == 0)

    def test_disconnect_cancels_and_frees_slot(self):
        c = self.server.client()
        self.assertTrue(wait_for(lambda: self._idle(c), 5), "not idle")
        before = metric_sum(c.metrics(), "gpt2d_requests_cancelled_total")
        es = c.open_stream("/v1/completions", dict(LONG_REQ, stream=True))
        it = iter(es)
        next(it)
        next(it)
        self.assertEqual(metric_sum(c.metrics(), "gpt2d_slots_busy"), 1)
        es.close()
        t0 = time.monotonic()

        def freed():
            m = c.metrics()
            return (metric_sum(m, "gpt2d_requests_cancelled_total") == before + 1
                    and metric_sum(m, "gpt2d_slots_busy") == 0)
        self.assertTrue(wait_for(freed, 1.5),
                        "after %.1f s: %r" % (time.monotonic() - t0, {
                            k: v for k, v in c.metrics().items()
                            if "cancel" in k or "slots" in k}))
        # the slot serves the next request at once
        body = c.complete(prompt="Hi", max_tokens=3)
        self.assertEqual(body["usage"]["completion_tokens"], 3)

    def test_disconnect_during_non_stream_request_cancels(self):
        c = self.server.client()
        self.assertTrue(wait_for(lambda: self._idle(c), 5), "not idle")
        before = metric_sum(c.metrics(), "gpt2d_requests_cancelled_total")
        body = json.dumps(dict(LONG_REQ)).encode()
        s = socket.create_connection(("127.0.0.1", self.server.port))
        s.sendall(http_request("POST", "/v1/completions", body))
        self.assertTrue(wait_for(
            lambda: metric_sum(c.metrics(), "gpt2d_slots_busy") == 1, 2),
            "the request never ran")
        s.close()

        def freed():
            m = c.metrics()
            return (metric_sum(m, "gpt2d_requests_cancelled_total") == before + 1
                    and metric_sum(m, "gpt2d_slots_busy") == 0)
        self.assertTrue(wait_for(freed, 1.5), "not cancelled within 1.5 s")

    def test_full_queue_answers_429_with_retry_after(self):
        c = self.server.client()
        self.assertTrue(wait_for(lambda: self._idle(c), 5), "not idle")
        results = [None] * 5
        waited = [None] * 5
        streams = []
        lock = threading.Lock()

        def run(i):
            t0 = time.monotonic()
            try:
                es = c.open_stream("/v1/completions",
                                   dict(LONG_REQ, stream=True, seed=i))
                with lock:
                    streams.append(es)
                results[i] = 200
            except StreamError as e:
                results[i] = e.response
                waited[i] = time.monotonic() - t0
        threads = [threading.Thread(target=run, args=(i,)) for i in range(5)]
        for t in threads:
            t.start()
            time.sleep(0.01)
        # an accepted stream's headers may wait for its turn; the refusals
        # must come at once
        for t in threads:
            t.join(3)
        refused = [r for r in results if r is not None and r != 200]
        try:
            self.assertGreaterEqual(len(refused), 3, results)
            for r in refused:
                self.assert_error(r, 429)
                self.assertIn("retry-after", r.headers)
                self.assertTrue(r.headers["retry-after"].strip().isdigit(),
                                r.headers["retry-after"])
            # refused at once, not after waiting for a slot
            self.assertLess(max(w for w in waited if w is not None), 1.0,
                            waited)
        finally:
            with lock:
                for es in streams:
                    es.close()
            for t in threads:
                t.join(10)
            with lock:
                for es in streams:
                    es.close()
        self.assertTrue(wait_for(lambda: self._idle(c), 3), "slot not freed")

    def test_busy_session_is_409(self):
        c = self.server.client()
        self.assertTrue(wait_for(lambda: self._idle(c), 5), "not idle")
        es = c.open_stream("/v1/completions",
                           dict(LONG_REQ, stream=True, session_id="busy"))
        try:
            next(iter(es))
            r = c.post("/v1/completions", {"prompt": "Hi", "max_tokens": 1,
                                           "session_id": "busy"})
            self.assert_error(r, 409)
            self.assert_error(c.delete("/v1/sessions/busy"), 409)
        finally:
            es.close()
        self.assertTrue(wait_for(lambda: self._idle(c), 3), "slot not freed")


    def test_session_is_free_at_once_after_its_client_hangs_up(self):
        """A client that hangs up mid-stream and comes straight back with its
        session is served, not refused with 409 (issue 12, item 6)."""
        c = self.server.client()
        for i in range(5):
            self.assertTrue(wait_for(lambda: self._idle(c), 5), "not idle")
            es = c.open_stream("/v1/completions",
                               dict(LONG_REQ, stream=True, session_id="back"))
            next(iter(es))
            es.close()
            r = c.post("/v1/completions", {"prompt": "Hi", "max_tokens": 1,
                                           "session_id": "back"})
            self.assertEqual(r.status, 200, (i, r))
        self.assertTrue(wait_for(lambda: self._idle(c), 3), "slot not freed")


class T8aCancelCounting(ServerCase):
    NAME = "cancels"
    ARGS = ("--slots", "3", "--threads", "1")
    ENV = {"GPT2D_TEST_MIN_STEP_US": "2000"}
    MODEL = staticmethod(long_model)

    def _busy(self, c):
        return metric_sum(c.metrics(), "gpt2d_slots_busy")

    def test_a_request_of_several_prompts_counts_as_one_cancellation(self):
        """gpt2d_requests_cancelled_total counts HTTP requests, as the
        access log's 499 does: two prompts and n = 1, streamed or not, are
        three sequences of one request."""
        c = self.server.client()
        req = dict(LONG_REQ, prompt=["Once upon a time", "In the beginning"])
        for stream in (True, False):
            self.assertTrue(wait_for(lambda: self._busy(c) == 0, 5), "not idle")
            before = metric_sum(c.metrics(), "gpt2d_requests_cancelled_total")
            s = socket.create_connection(("127.0.0.1", self.server.port))
            s.sendall(http_request("POST", "/v1/completions",
                                   json.dumps(dict(req, stream=stream)).encode()))
            self.assertTrue(wait_for(lambda: self._busy(c) == 2, 5),
                            "the prompts never ran")
            s.close()
            self.assertTrue(wait_for(lambda: self._busy(c) == 0, 5),
                            "slots not freed")
            time.sleep(0.1)     # nothing more is counted later
            self.assertEqual(
                metric_sum(c.metrics(), "gpt2d_requests_cancelled_total"),
                before + 1, "stream=%s" % stream)


class T8bChunkedPrefill(ServerCase):
    NAME = "chunked"
    ARGS = ("--slots", "2", "--threads", "1", "--max-batch-rows", "64")
    MODEL = staticmethod(long_model)

    def test_long_prompt_is_prefilled_in_chunks_beside_a_stream(self):
        c = self.server.client()
        es = c.open_stream("/v1/completions", dict(LONG_REQ, stream=True))
        it = iter(es)
        next(it)                                # the stream is decoding
        long_prompt = word_prompt(4242, 900)
        b = {}

        def run_b():
            b["sent"] = time.monotonic()
            s = c.open_stream("/v1/completions", {
                "prompt": long_prompt, "max_tokens": 1, "stream": True})
            for _ in s:
                b.setdefault("first", time.monotonic())
            s.close()
        tb = threading.Thread(target=run_b)
        a_times = []
        try:
            tb.start()
            for _ in it:
                a_times.append(time.monotonic())
                if not tb.is_alive():
                    break
        finally:
            es.close()
            tb.join(10)
        self.assertIn("first", b, "the long prompt got no token")
        # 900 rows at 62 per step (64 less a decode row per slot) take
        # ~15 steps; the stream gets a token in each of them instead of one
        # long wait for the whole prompt
        during = [t for t in a_times if b["sent"] < t < b["first"]]
        gaps = [y - x for x, y in zip(during, during[1:])]
        ttft = b["first"] - b["sent"]
        self.assertGreaterEqual(len(during), 5, "stream stalled by a prefill")
        # unchunked, the stream would wait about the whole TTFT once
        self.assertLess(max(gaps), ttft / 2,
                        "stream waited %.0f ms of the prompt's %.0f ms"
                        % (1e3 * max(gaps), 1e3 * ttft))
        # every step is timed once, and the ~15 prefill steps take real time.
        # A step counts its rows before its sampling and its time after, so
        # a scrape during the cancelled stream's last step may see one
        # count ahead: wait (briefly) for the engine to go idle.
        deadline = time.monotonic() + 5
        while True:
            m = c.metrics()
            if (m["gpt2d_step_seconds_count"] == m["gpt2d_batch_rows_count"]
                    or time.monotonic() > deadline):
                break
            time.sleep(0.02)
        self.assertEqual(m["gpt2d_step_seconds_count"],
                         m["gpt2d_batch_rows_count"])
        self.assertEqual(m['gpt2d_batch_rows_bucket{le="64"}'],
                         m["gpt2d_batch_rows_count"],
                         "a step had more rows than --max-batch-rows")
        self.assertGreaterEqual(m["gpt2d_batch_rows_sum"], 900)
        self.assertGreater(m["gpt2d_step_seconds_sum"], 0.0)


# ---------------------------------------------------------------- tool calls

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "enum": ["Paris", "Rome", "Oslo"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
        "metric": {"type": "boolean"}},
        "required": ["city", "days"], "additionalProperties": False}}}
NOTE_TOOL = {"type": "function", "function": {
    "name": "note", "strict": True,
    "parameters": {"type": "object", "properties": {
        "text": {"type": "string", "maxLength": 6},
        "tags": {"type": "array", "items": {"enum": ["a", "b"]},
                 "maxItems": 2}},
        "required": ["text", "tags"], "additionalProperties": False}}}
NOW_TOOL = {"type": "function", "function": {"name": "now"}}
TOOLS = [WEATHER_TOOL, NOTE_TOOL, NOW_TOOL]
CALL_ID = re.compile(r"call_[0-9a-f]{24}")
NEWLINE = 198       # "\n": the assistant's suffix, which may end the calls


def join_chat_deltas(events):
    """Streamed chat chunks joined as the OpenAI SDKs join them: per choice
    the content (None until a piece comes), the tool calls by index (id,
    type and name from a call's first entry, arguments appended) and the
    finish_reason."""
    out = {}
    for ev in events:
        for c in ev.get("choices") or []:
            m = out.setdefault(c["index"], {"content": None, "tool_calls": [],
                                            "finish_reason": None})
            d = c["delta"]
            if d.get("content"):
                m["content"] = (m["content"] or "") + d["content"]
            for tc in d.get("tool_calls") or []:
                calls = m["tool_calls"]
                if tc["index"] == len(calls):
                    calls.append({"id": tc["id"], "type": tc["type"],
                                  "function": {"name": tc["function"]["name"],
                                               "arguments": ""}})
                calls[tc["index"]]["function"]["arguments"] += \
                    tc["function"].get("arguments", "")
            if c.get("finish_reason"):
                m["finish_reason"] = c["finish_reason"]
    return out


class ToolCallCase(ServerCase):
    """What every tool-call group checks: an answer's calls are real calls
    of the request's functions, their arguments valid under the function's
    `parameters` by python3-jsonschema."""
    MODEL = staticmethod(long_model)

    def chat(self, **body):
        r = self.client().post("/v1/chat/completions", body)
        self.assertEqual(r.status, 200, r)
        return r.json

    def assert_calls(self, message, finish, tools=TOOLS, marker="<tool_call>"):
        """The message is calls (content null) or text that does not begin
        with the marker; whole calls validate; a call cut by max_tokens is
        the last one, its arguments a prefix of a JSON text.  Returns the
        calls."""
        import jsonschema
        schemas = {t["function"]["name"]:
                   t["function"].get("parameters",
                                     {"type": "object", "maxProperties": 0})
                   for t in tools}
        calls = message.get("tool_calls") or []
        self.assertEqual(message["role"], "assistant")
        if not calls:
            self.assertIsInstance(message["content"], str, message)
            self.assertFalse(message["content"].startswith(marker), message)
            self.assertIn(finish, ("stop", "length"))
            return calls
        self.assertIsNone(message["content"], message)
        self.assertIn(finish, ("tool_calls", "length"))
        ids = [c["id"] for c in calls]
        self.assertEqual(len(set(ids)), len(ids), ids)
        for k, c in enumerate(calls):
            self.assertRegex(c["id"], CALL_ID)
            self.assertEqual(c["type"], "function")
            self.assertEqual(set(c["function"]), {"name", "arguments"})
            self.assertIn(c["function"]["name"], schemas)
            text = c["function"]["arguments"]
            if finish == "length" and k == len(calls) - 1:
                continue   # may be cut anywhere
            args = json.loads(text)
            # compact, as the grammar writes it
            self.assertEqual(text, json.dumps(args, separators=(",", ":"),
                                              ensure_ascii=False), text)
            jsonschema.validate(args, schemas[c["function"]["name"]])
        return calls


class T12ToolCalls(ToolCallCase):
    """tools and tool_choice over HTTP with the built-in template (a random
    1024-context model and the real tokenizer): required, a named function
    and one call at most make calls that validate; a stream joins to the
    whole answer of the same seed; a second round with the tools' results
    is accepted and begins with the first round's prompt and reply."""
    NAME = "tools"
    ARGS = ("--slots", "4", "--threads", "2")

    def test_required_makes_calls_that_validate(self):
        finishes = set()
        for seed in range(6):
            body = self.chat(messages=[{"role": "user", "content": "Weather?"}],
                             tools=TOOLS, tool_choice="required", n=2,
                             seed=seed, max_tokens=300,
                             logit_bias={str(NEWLINE): 5})
            for ch in body["choices"]:
                calls = self.assert_calls(ch["message"], ch["finish_reason"])
                self.assertGreaterEqual(len(calls), 1, ch)
                self.assertLessEqual(len(calls), 8)
                finishes.add(ch["finish_reason"])
        self.assertIn("tool_calls", finishes)

    def test_a_named_function_is_called_once(self):
        for seed in range(4):
            for name in ("get_weather", "note", "now"):
                body = self.chat(
                    messages=[{"role": "user", "content": "Go"}], tools=TOOLS,
                    tool_choice={"type": "function", "function": {"name": name}},
                    seed=seed, max_tokens=200)
                ch = body["choices"][0]
                calls = self.assert_calls(ch["message"], ch["finish_reason"])
                self.assertEqual(ch["finish_reason"], "tool_calls", ch)
                self.assertEqual([c["function"]["name"] for c in calls], [name])
                if name == "now":
                    self.assertEqual(calls[0]["function"]["arguments"], "{}")

    def test_no_parallel_calls_is_one_call(self):
        for seed in range(4):
            body = self.chat(messages=[{"role": "user", "content": "Go"}],
                             tools=TOOLS, tool_choice="required",
                             parallel_tool_calls=False, seed=seed,
                             max_tokens=200)
            ch = body["choices"][0]
            calls = self.assert_calls(ch["message"], ch["finish_reason"])
            self.assertEqual(ch["finish_reason"], "tool_calls", ch)
            self.assertEqual(len(calls), 1)

    def test_auto_answers_calls_or_text(self):
        for seed in range(4):
            body = self.chat(messages=[{"role": "user", "content": "Hi"}],
                             tools=TOOLS, seed=seed, max_tokens=40, n=2)
            for ch in body["choices"]:
                self.assert_calls(ch["message"], ch["finish_reason"])

    def test_none_describes_the_tools_and_writes_text(self):
        plain = self.chat(messages=[{"role": "user", "content": "Hi"}],
                          seed=1, max_tokens=5)
        body = self.chat(messages=[{"role": "user", "content": "Hi"}],
                         tools=TOOLS, tool_choice="none", seed=1, max_tokens=5)
        ch = body["choices"][0]
        self.assertIsInstance(ch["message"]["content"], str)
        self.assertNotIn("tool_calls", ch["message"])
        # the description is in the prompt
        self.assertGreater(body["usage"]["prompt_tokens"],
                           plain["usage"]["prompt_tokens"] + 50)

    def test_stream_joins_to_the_whole_answer_of_the_seed(self):
        cases = [dict(tool_choice="required", logit_bias={str(NEWLINE): 5}),
                 dict(tool_choice={"type": "function",
                                   "function": {"name": "note"}}),
                 dict(tool_choice="auto"),
                 dict(tool_choice="required", max_tokens=25)]
        seen = set()
        for extra in cases:
            body = dict(messages=[{"role": "user", "content": "Weather?"}],
                        tools=TOOLS, seed=7, n=2, max_tokens=200,
                        logprobs=True)
            body.update(extra)
            whole = self.chat(**body)
            events, _ = stream_events(self.client(), "/v1/chat/completions",
                                      dict(body, stream=True))
            joined = join_chat_deltas(events)
            for ch in whole["choices"]:
                got = joined[ch["index"]]
                self.assert_calls(ch["message"], ch["finish_reason"])
                seen.add((bool(ch["message"].get("tool_calls")),
                          ch["finish_reason"]))
                self.assertEqual(got["finish_reason"], ch["finish_reason"])
                want_calls = ch["message"].get("tool_calls") or []
                self.assertEqual(
                    [c["function"] for c in got["tool_calls"]],
                    [c["function"] for c in want_calls], extra)
                for c in got["tool_calls"]:
                    self.assertRegex(c["id"], CALL_ID)
                    self.assertEqual(c["type"], "function")
                if want_calls:
                    self.assertIsNone(got["content"])
                else:
                    self.assertEqual(got["content"] or "",
                                     ch["message"]["content"])
            # every token's logprobs, as for text
            for ch in whole["choices"]:
                n_entries = sum(len(c["logprobs"]["content"])
                                for ev in events for c in ev["choices"]
                                if c["index"] == ch["index"] and c.get("logprobs"))
                self.assertEqual(n_entries, len(ch["logprobs"]["content"]))
            # each choice opens with the role and a null content (calls may
            # come); the delta that names a call has its id and no
            # arguments yet; the finish chunk's delta is empty
            openings = [c for ev in events for c in ev["choices"]
                        if "role" in c["delta"]]
            self.assertEqual(sorted(c["index"] for c in openings), [0, 1])
            for c in openings:
                self.assertEqual(c["delta"], {"role": "assistant",
                                              "content": None, "refusal": None})
            for ev in events:
                for c in ev["choices"]:
                    for tc in c["delta"].get("tool_calls") or []:
                        if "id" in tc:
                            self.assertEqual(tc["function"]["arguments"], "")
                    if c.get("finish_reason"):
                        self.assertEqual(c["delta"], {})
        # calls whole and cut short, and text, were all compared
        self.assertTrue({(True, "tool_calls"), (True, "length")} <= seen, seen)
        self.assertTrue(any(not calls for calls, _ in seen), seen)

    def test_second_round_with_results_is_accepted(self):
        c = self.client()
        first_msgs = [{"role": "user", "content": "Weather in Rome?"}]
        sid = "tools-%d" % os.getpid()
        first = self.chat(messages=first_msgs, tools=TOOLS,
                          tool_choice="required", parallel_tool_calls=False,
                          seed=3, max_tokens=200, return_token_ids=True,
                          session_id=sid)
        ch = first["choices"][0]
        calls = self.assert_calls(ch["message"], ch["finish_reason"])
        self.assertEqual(ch["finish_reason"], "tool_calls")
        # the calls sent back as they came, and one result each
        messages = first_msgs + [ch["message"]] + [
            {"role": "tool", "tool_call_id": call["id"], "content": "sunny"}
            for call in calls]
        second = self.chat(messages=messages, tools=TOOLS, seed=4,
                           max_tokens=20, return_token_ids=True,
                           session_id=sid)
        ch2 = second["choices"][0]
        self.assert_calls(ch2["message"], ch2["finish_reason"])
        # the second prompt begins with the first prompt and reply, in text
        said = vocab().decode(ch["prompt_token_ids"] + ch["token_ids"])
        prompt2 = vocab().decode(ch2["prompt_token_ids"])
        self.assertTrue(prompt2.startswith(said), (said, prompt2))
        self.assertIn(b"\nTool: sunny\nAssistant:", prompt2)
        # and the session reuses every token the two share (the model may
        # have split the reply where the tokenizer would not)
        before = ch["prompt_token_ids"] + ch["token_ids"][:-1]
        common = 0
        for a, b in zip(before, ch2["prompt_token_ids"]):
            if a != b:
                break
            common += 1
        self.assertGreaterEqual(common, len(ch["prompt_token_ids"]) - 1)
        self.assertEqual(
            second["usage"]["prompt_tokens_details"]["cached_tokens"],
            min(common, len(ch2["prompt_token_ids"]) - 1))
        # a result for a call never made is refused by name
        bad = messages + [{"role": "tool", "tool_call_id": "call_x",
                           "content": "?"}]
        r = c.post("/v1/chat/completions", {"messages": bad, "tools": TOOLS})
        self.assert_error(r, 400, "messages[%d].tool_call_id" % (len(bad) - 1))

    def test_bad_tools_are_400_naming_the_field(self):
        c = self.client()
        hi = [{"role": "user", "content": "Hi"}]
        bad_schema = {"type": "function", "function": {
            "name": "f", "parameters": {"type": "object", "properties": {
                "x": {"type": "strin"}}}}}
        for body, param in (
                ({"tools": [NOW_TOOL, bad_schema]},
                 "tools[1].function.parameters.properties.x.type"),
                ({"tools": [{"type": "function", "function": {"name": "a b"}}]},
                 "tools[0].function.name"),
                ({"tools": TOOLS, "tool_choice": {"type": "function",
                                                  "function": {"name": "x"}}},
                 "tool_choice.function.name"),
                ({"tool_choice": "required"}, "tool_choice"),
                ({"functions": [{"name": "f"}]}, "functions")):
            r = c.post("/v1/chat/completions", dict(body, messages=hi))
            self.assert_error(r, 400, param)


class T12bToolCallsAuto(ToolCallCase):
    """tool_choice auto with a template whose call marker is one token
    ("@"), so that a logit_bias can send the answer down either branch: a
    bias for "@" makes calls, one against it text; without one, either."""
    NAME = "tools-auto"
    AT = 31     # "@"
    TEMPLATE = {
        "system": {"prefix": "System: ", "suffix": "\n"},
        "user": {"prefix": "User: ", "suffix": "\n"},
        "assistant": {"prefix": "Assistant:", "suffix": "\n"},
        "tool_call": {"prefix": "@", "suffix": ";"},
        "stop": ["\nUser:"]}

    @classmethod
    def setUpClass(cls):
        path = os.path.join(WORKDIR, "tools-auto-template.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(cls.TEMPLATE, f)
        cls.ARGS = ("--slots", "2", "--threads", "1", "--chat-template", path)
        super().setUpClass()

    def ask(self, seed, bias, stream=False, **extra):
        body = dict(messages=[{"role": "user", "content": "Weather?"}],
                    tools=TOOLS, seed=seed, max_tokens=150, n=2,
                    logit_bias={str(self.AT): bias} if bias else {})
        body.update(extra)
        if not stream:
            return self.chat(**body)["choices"]
        events, _ = stream_events(self.client(), "/v1/chat/completions",
                                  dict(body, stream=True))
        return join_chat_deltas(events)

    def test_the_marker_makes_calls(self):
        for seed in range(3):
            for ch in self.ask(seed, 100):
                calls = self.assert_calls(ch["message"], ch["finish_reason"],
                                          marker="@")
                self.assertGreaterEqual(len(calls), 1, ch)

    def test_without_the_marker_the_answer_is_text(self):
        for seed in range(3):
            for ch in self.ask(seed, -100):
                self.assertEqual(self.assert_calls(ch["message"],
                                                   ch["finish_reason"],
                                                   marker="@"), [])

    def test_either_way_stream_and_whole_agree(self):
        for seed in range(3):
            for bias in (100, -100, 0):
                whole = self.ask(seed, bias)
                joined = self.ask(seed, bias, stream=True)
                for ch in whole:
                    self.assert_calls(ch["message"], ch["finish_reason"],
                                      marker="@")
                    got = joined[ch["index"]]
                    self.assertEqual(got["finish_reason"], ch["finish_reason"])
                    self.assertEqual(
                        [c["function"] for c in got["tool_calls"]],
                        [c["function"]
                         for c in ch["message"].get("tool_calls") or []])
                    if not got["tool_calls"]:
                        self.assertEqual(got["content"] or "",
                                         ch["message"]["content"])

    def test_response_format_is_the_text_branch(self):
        fmt = {"type": "json_schema", "json_schema": {"name": "r", "schema": {
            "type": "object", "properties": {"ok": {"type": "boolean"}},
            "required": ["ok"], "additionalProperties": False}}}
        stopped = 0
        for seed in range(3):
            for ch in self.ask(seed, -100, response_format=fmt):
                self.assertEqual(self.assert_calls(
                    ch["message"], ch["finish_reason"], marker="@"), [])
                if ch["finish_reason"] == "stop":
                    stopped += 1
                    self.assertIn(json.loads(ch["message"]["content"]),
                                  ({"ok": True}, {"ok": False}))
            for ch in self.ask(seed, 100, response_format=fmt):
                self.assertGreaterEqual(len(self.assert_calls(
                    ch["message"], ch["finish_reason"], marker="@")), 1)
        self.assertGreater(stopped, 0)


# ---------------------------------------------------------------- responses

RESPONSE_EVENTS_TEXT = [
    "response.created", "response.in_progress", "response.output_item.added",
    "response.content_part.added"]
RESPONSE_TEXT_END = ["response.output_text.done", "response.content_part.done",
                     "response.output_item.done"]


def responses_tool(tool):
    """A chat tool in the Responses API's flat shape."""
    return dict(tool["function"], type="function")


def response_text(body):
    """The text of a Response that answered with one message item."""
    assert len(body["output"]) == 1, body["output"]
    item = body["output"][0]
    assert item["type"] == "message", item
    assert len(item["content"]) == 1, item
    return item["content"][0]["text"]


class T13Responses(ToolCallCase):
    """POST /v1/responses (issue 33): a Responses body is read into chat's
    path, so its answer equals the chat completion of the same
    conversation and seed, whole and streamed; the Response object and its
    events have the shapes and order the OpenAI SDK reads; every field it
    cannot honour is a 400 naming it.  Stored responses (in memory here:
    no --responses-dir) are read, listed, deleted and continued."""
    NAME = "responses"
    ARGS = ("--slots", "2", "--threads", "1")

    def respond(self, **body):
        r = self.client().post("/v1/responses", body)
        self.assertEqual(r.status, 200, r)
        return r.json

    def stream(self, **body):
        events, es = stream_events(self.client(), "/v1/responses",
                                   dict(body, stream=True))
        self.assertEqual(es.status, 200)
        self.assertFalse(es.done, "no data: [DONE] on /v1/responses")
        self.assertEqual([e["sequence_number"] for e in events],
                         list(range(len(events))))
        return events

    def assert_response_shape(self, body, chat=None):
        self.assertRegex(body["id"], r"^resp_[0-9a-f]{24}$")
        self.assertEqual(body["object"], "response")
        self.assertIsInstance(body["created_at"], int)
        self.assertEqual(body["model"], "long-model")
        self.assertIsNone(body["error"])
        self.assertFalse(body["background"])
        self.assertIsNone(body["previous_response_id"])
        self.assertIsNone(body["reasoning"])
        self.assertEqual(body["service_tier"], "default")
        self.assertIn(body["status"], ("completed", "incomplete"))
        if body["status"] == "incomplete":
            self.assertEqual(body["incomplete_details"],
                             {"reason": "max_output_tokens"})
            self.assertEqual(body["output"][-1]["status"], "incomplete")
        else:
            self.assertIsNone(body["incomplete_details"])
            self.assertTrue(all(i["status"] == "completed"
                                for i in body["output"]))
        self.assertIsInstance(body["completed_at"], int)
        u = body["usage"]
        self.assertEqual(u["total_tokens"],
                         u["input_tokens"] + u["output_tokens"])
        self.assertEqual(u["output_tokens_details"], {"reasoning_tokens": 0})
        self.assertIsInstance(u["input_tokens_details"]["cached_tokens"], int)
        for item in body["output"]:
            if item["type"] == "message":
                self.assertRegex(item["id"], r"^msg_[0-9a-f]{24}$")
                self.assertEqual(item["role"], "assistant")
                self.assertEqual(
                    [(p["type"], p["annotations"], p["logprobs"])
                     for p in item["content"]],
                    [("output_text", [], [])])
            else:
                self.assertEqual(item["type"], "function_call")
                self.assertRegex(item["id"], r"^fc_[0-9a-f]{24}$")
                self.assertRegex(item["call_id"], CALL_ID)
        if chat is not None:
            ch = chat["choices"][0]
            self.assertEqual(body["status"], "incomplete"
                             if ch["finish_reason"] == "length"
                             else "completed")
            self.assertEqual(u["input_tokens"], chat["usage"]["prompt_tokens"])
            self.assertEqual(u["output_tokens"],
                             chat["usage"]["completion_tokens"])

    def test_text_equals_chat_of_the_same_conversation(self):
        for temperature in (0, 1):
            body = self.respond(input="Hello there", instructions="Be brief.",
                                max_output_tokens=12, seed=5,
                                temperature=temperature,
                                metadata={"run": "a"}, user="u1",
                                safety_identifier="s1", store=True)
            chat = self.chat(messages=[
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Hello there"}],
                max_completion_tokens=12, seed=5, temperature=temperature)
            self.assert_response_shape(body, chat)
            self.assertEqual(response_text(body),
                             chat["choices"][0]["message"]["content"])
            echo = {k: body[k] for k in (
                "instructions", "max_output_tokens", "metadata", "user",
                "safety_identifier", "store", "temperature", "top_p",
                "tools", "tool_choice", "text", "truncation",
                "parallel_tool_calls", "max_tool_calls", "top_logprobs")}
            self.assertEqual(echo, {
                "instructions": "Be brief.", "max_output_tokens": 12,
                "metadata": {"run": "a"}, "user": "u1",
                "safety_identifier": "s1", "store": True,
                "temperature": float(temperature), "top_p": 1.0,
                "tools": [], "tool_choice": "auto",
                "text": {"format": {"type": "text"}},
                "truncation": "disabled", "parallel_tool_calls": True,
                "max_tool_calls": None, "top_logprobs": 0})

    def test_defaults_and_no_user_fields_when_not_sent(self):
        body = self.respond(input="Hi", max_output_tokens=2, seed=1)
        self.assertIsNone(body["instructions"])
        self.assertEqual(body["metadata"], {})
        self.assertTrue(body["store"])
        self.assertNotIn("user", body)
        self.assertNotIn("safety_identifier", body)
        self.assertNotIn("output_text", body)   # the SDK adds it

    def test_input_items_equal_chat_messages(self):
        items = [
            {"role": "developer", "content": [
                {"type": "input_text", "text": "Be brief."},
                {"type": "input_text", "text": "Be kind."}]},
            {"type": "message", "role": "user", "content": "Hi"},
            {"type": "message", "role": "assistant", "status": "completed",
             "id": "msg_1", "content": [
                 {"type": "output_text", "text": " Hello", "annotations": []}]},
            {"role": "user", "content": [{"type": "input_text",
                                          "text": "Again"}]},
        ]
        messages = [
            {"role": "system", "content": "Be brief.\nBe kind."},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": " Hello"},
            {"role": "user", "content": "Again"},
        ]
        body = self.respond(input=items, max_output_tokens=10, seed=3)
        chat = self.chat(messages=messages, max_completion_tokens=10, seed=3)
        self.assert_response_shape(body, chat)
        self.assertEqual(response_text(body),
                         chat["choices"][0]["message"]["content"])

    def check_text_events(self, events, whole):
        types = [e["type"] for e in events]
        n_delta = types.count("response.output_text.delta")
        end = "response.completed" if whole["status"] == "completed" \
            else "response.incomplete"
        self.assertEqual(types, RESPONSE_EVENTS_TEXT
                         + ["response.output_text.delta"] * n_delta
                         + RESPONSE_TEXT_END + [end])
        for e in events[:2]:
            self.assertEqual(e["response"]["status"], "in_progress")
            self.assertEqual(e["response"]["output"], [])
            self.assertIsNone(e["response"]["usage"])
        item_id = events[2]["item"]["id"]
        self.assertEqual(events[2]["item"]["content"], [])
        self.assertEqual(events[2]["output_index"], 0)
        self.assertEqual(events[3]["part"], {"type": "output_text", "text": "",
                                             "annotations": [], "logprobs": []})
        deltas = [e for e in events if e["type"].endswith("text.delta")]
        for e in deltas + events[3:-2]:
            if "item_id" in e:
                self.assertEqual((e["item_id"], e["output_index"],
                                  e["content_index"]), (item_id, 0, 0))
        for e in deltas:
            self.assertEqual(e["logprobs"], [])
        text = "".join(e["delta"] for e in deltas)
        done = events[-4]
        self.assertEqual(done["text"], text)
        self.assertEqual(events[-3]["part"]["text"], text)
        self.assertEqual(events[-2]["item"]["content"][0]["text"], text)
        self.assertEqual(events[-2]["item"]["status"],
                         whole["output"][0]["status"])
        final = events[-1]["response"]
        self.assertEqual(text, response_text(whole))
        self.assertEqual(final["output"], [events[-2]["item"]])
        self.assertEqual(final["status"], whole["status"])
        self.assertEqual(final["usage"]["output_tokens"],
                         whole["usage"]["output_tokens"])
        self.assertEqual(final["usage"]["input_tokens"],
                         whole["usage"]["input_tokens"])

    def test_stream_events_join_to_the_whole_answer(self):
        for max_out, bias in ((40, {}), (4, NO_EOT)):
            req = dict(input="Tell me a story", instructions="Be brief.",
                       max_output_tokens=max_out, seed=7, logit_bias=bias)
            whole = self.respond(**req)
            events = self.stream(**req)
            self.check_text_events(events, whole)
            if bias:
                self.assertEqual(whole["status"], "incomplete")
                self.assertEqual(events[-1]["response"]["incomplete_details"],
                                 {"reason": "max_output_tokens"})

    def test_tools_give_function_call_items_as_chat_calls(self):
        tools = [responses_tool(t) for t in TOOLS]
        for seed in range(3):
            req = dict(input="Weather?", tools=tools, tool_choice="required",
                       seed=seed, max_output_tokens=200)
            body = self.respond(**req)
            chat = self.chat(messages=[{"role": "user", "content": "Weather?"}],
                             tools=TOOLS, tool_choice="required", seed=seed,
                             max_completion_tokens=200)
            self.assert_response_shape(body, chat)
            calls = self.assert_calls(chat["choices"][0]["message"],
                                      chat["choices"][0]["finish_reason"])
            self.assertEqual(
                [(i["type"], i["name"], i["arguments"]) for i in body["output"]],
                [("function_call", c["function"]["name"],
                  c["function"]["arguments"]) for c in calls])
            self.assertEqual([t["strict"] for t in body["tools"]],
                             [True, True, True])
            self.assertEqual(body["tools"][0]["name"], "get_weather")
            events = self.stream(**req)
            types = [e["type"] for e in events]
            self.assertEqual(types[:2], ["response.created",
                                         "response.in_progress"])
            self.assertEqual(types[-1],
                             "response." + events[-1]["response"]["status"])
            final = events[-1]["response"]["output"]
            self.assertEqual([(i["name"], i["arguments"]) for i in final],
                             [(i["name"], i["arguments"])
                              for i in body["output"]])
            for k, item in enumerate(final):
                mine = [e for e in events if e.get("output_index") == k]
                self.assertEqual(mine[0]["type"], "response.output_item.added")
                self.assertEqual(mine[0]["item"]["arguments"], "")
                self.assertEqual(mine[-1]["type"], "response.output_item.done")
                self.assertEqual(mine[-2]["type"],
                                 "response.function_call_arguments.done")
                self.assertEqual(mine[-2]["arguments"], item["arguments"])
                self.assertEqual("".join(
                    e["delta"] for e in mine
                    if e["type"] == "response.function_call_arguments.delta"),
                    item["arguments"])
                self.assertEqual(mine[-1]["item"], item)

    def test_function_call_items_as_input_equal_chat_tool_messages(self):
        tools = [responses_tool(t) for t in TOOLS]
        args = json.dumps({"city": "Oslo", "days": 2})
        items = [
            {"role": "user", "content": "Weather?"},
            {"type": "message", "role": "assistant",
             "content": [{"type": "output_text", "text": "Let me look."}]},
            {"type": "function_call", "call_id": "call_a", "name": "get_weather",
             "arguments": args},
            {"type": "function_call", "call_id": "call_b", "name": "now",
             "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_a",
             "output": "Sunny"},
            {"type": "function_call_output", "call_id": "call_b",
             "output": [{"type": "input_text", "text": "noon"}]},
        ]
        messages = [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": "Let me look.", "tool_calls": [
                {"id": "call_a", "type": "function", "function": {
                    "name": "get_weather", "arguments": args}},
                {"id": "call_b", "type": "function", "function": {
                    "name": "now", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "call_a", "content": "Sunny"},
            {"role": "tool", "tool_call_id": "call_b", "content": "noon"},
        ]
        body = self.respond(input=items, tools=tools, tool_choice="none",
                            seed=2, max_output_tokens=10)
        chat = self.chat(messages=messages, tools=TOOLS, tool_choice="none",
                         seed=2, max_completion_tokens=10)
        self.assert_response_shape(body, chat)
        self.assertEqual(response_text(body),
                         chat["choices"][0]["message"]["content"])

    def test_json_schema_text_format_is_chats_response_format(self):
        import jsonschema
        schema = {"type": "object", "properties": {
            "name": {"type": "string", "maxLength": 8},
            "age": {"type": "integer", "minimum": 0, "maximum": 120}},
            "required": ["name", "age"], "additionalProperties": False}
        fmt = {"type": "json_schema", "name": "person", "schema": schema,
               "strict": True}
        for seed in range(2):
            body = self.respond(input="A person", text={"format": fmt},
                                seed=seed, max_output_tokens=60)
            chat = self.chat(messages=[{"role": "user", "content": "A person"}],
                             response_format={"type": "json_schema",
                                              "json_schema": {
                                                  "name": "person",
                                                  "schema": schema,
                                                  "strict": True}},
                             seed=seed, max_completion_tokens=60)
            self.assert_response_shape(body, chat)
            text = response_text(body)
            self.assertEqual(text, chat["choices"][0]["message"]["content"])
            self.assertEqual(body["text"], {"format": fmt})
            if body["status"] == "completed":
                jsonschema.validate(json.loads(text), schema)
        body = self.respond(input="A thing", seed=1, max_output_tokens=40,
                            text={"format": {"type": "json_object"}})
        chat = self.chat(messages=[{"role": "user", "content": "A thing"}],
                         response_format={"type": "json_object"}, seed=1,
                         max_completion_tokens=40)
        self.assertEqual(response_text(body),
                         chat["choices"][0]["message"]["content"])

    def test_what_cannot_be_honoured_is_400_naming_the_field(self):
        weather = responses_tool(WEATHER_TOOL)
        cases = [
            ({"previous_response_id": "resp_x"}, "previous_response_id"),
            ({"previous_response_id": 5}, "previous_response_id"),
            ({"previous_response_id": "resp_x", "session_id": "s"},
             "session_id"),
            ({"background": True}, "background"),
            ({"reasoning": {"effort": "low"}}, "reasoning"),
            ({"include": ["message.output_text.logprobs"]}, "include[0]"),
            ({"top_logprobs": 2}, "top_logprobs"),
            ({"truncation": "sometimes"}, "truncation"),
            ({"conversation": "conv_1"}, "conversation"),
            ({"prompt": {"id": "p"}}, "prompt"),
            ({"n": 2}, "n"),
            ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
            ({"tools": [weather, {"type": "file_search"}]}, "tools[1].type"),
            ({"tools": [dict(weather, name="a b")]}, "tools[0].name"),
            ({"tool_choice": {"type": "web_search_preview"}},
             "tool_choice.type"),
            ({"tools": [weather],
              "tool_choice": {"type": "function", "name": "nope"}},
             "tool_choice.name"),
            ({"text": {"format": {"type": "grammar"}}}, "text.format.type"),
            ({"text": {"format": {"type": "json_schema", "name": "x",
                                  "schema": {"type": "object", "x-y": 1},
                                  "strict": True}}},
             "text.format.schema.x-y"),
            ({"metadata": {str(i): "v" for i in range(17)}}, "metadata"),
            ({"metadata": {"k": 1}}, "metadata.k"),
            ({"max_output_tokens": 0}, "max_output_tokens"),
            ({"input": None}, "input"),
            ({"input": []}, "input"),
            ({"input": [{"role": "user", "content": [
                {"type": "input_text", "text": "a"},
                {"type": "input_image", "image_url": "http://x"}]}]},
             "input[0].content[1].type"),
            ({"input": [{"role": "user", "content": "a"},
                        {"type": "reasoning", "summary": []}]}, "input[1].type"),
            ({"input": [{"role": "tool", "content": "a"}]}, "input[0].role"),
            ({"input": [{"role": "user", "content": "a"},
                        {"type": "function_call", "call_id": "c", "name": "f",
                         "arguments": "{"}]}, "input[1].arguments"),
            ({"input": [{"type": "function_call_output", "call_id": "c",
                         "output": "x"}]}, "input[0].call_id"),
            ({"input": "word " * 1100}, "input"),
            ({"input": "hi", "instructions": "word " * 1100}, "input"),
        ]
        for extra, param in cases:
            body = dict({"input": "Hi", "max_output_tokens": 4}, **extra)
            r = self.client().post("/v1/responses", body)
            self.assertEqual(r.status, 400, (extra, r))
            err = r.json["error"]
            self.assertEqual(err["param"], param, (extra, err))
            self.assertNotIn("messages", err["message"], err)
        r = self.client().post("/v1/responses",
                               {"input": "Hi", "previous_response_id": "r"})
        self.assertEqual(r.json["error"]["code"],
                         "previous_response_not_found")
        r = self.client().post("/v1/responses", {"input": "word " * 1100})
        self.assertEqual(r.json["error"]["code"], "context_length_exceeded")

    def test_a_stored_response_is_read_listed_and_deleted(self):
        items = [{"role": "user", "content": "One"},
                 {"type": "message", "role": "assistant",
                  "content": [{"type": "output_text", "text": " Two"}]},
                 {"role": "developer", "content": [
                     {"type": "input_text", "text": "Three"}]}]
        body = self.respond(input=items, max_output_tokens=3, seed=1)
        c = self.client()
        path = "/v1/responses/" + body["id"]
        got = c.get(path)
        self.assertEqual(got.status, 200, got)
        self.assertEqual(got.json, body)
        # this request's own input items, normalised, each with an id
        page = c.get(path + "/input_items?order=asc").json
        self.assertEqual(page["object"], "list")
        self.assertFalse(page["has_more"])
        data = page["data"]
        self.assertEqual([(i["type"], i["role"], i["status"]) for i in data],
                         [("message", "user", "completed"),
                          ("message", "assistant", "completed"),
                          ("message", "developer", "completed")])
        self.assertEqual(data[0]["content"],
                         [{"type": "input_text", "text": "One"}])
        self.assertEqual(data[1]["content"],
                         [{"type": "output_text", "text": " Two",
                           "annotations": []}])
        for item in data:
            self.assertRegex(item["id"], r"^msg_[0-9a-f]{24}$")
        self.assertEqual((page["first_id"], page["last_id"]),
                         (data[0]["id"], data[2]["id"]))
        # newest first by default; limit and after page through
        self.assertEqual(c.get(path + "/input_items").json["data"],
                         data[::-1])
        first = c.get(path + "/input_items?limit=2").json
        self.assertEqual(first["data"], data[:0:-1])
        self.assertTrue(first["has_more"])
        rest = c.get(path + "/input_items?limit=2&after=" +
                     first["last_id"]).json
        self.assertEqual(rest["data"], data[:1])
        self.assertFalse(rest["has_more"])
        for query, param in (("limit=0", "limit"), ("limit=101", "limit"),
                             ("limit=x", "limit"), ("order=up", "order"),
                             ("after=msg_x", "after"), ("include=x",
                                                        "include")):
            r = c.get(path + "/input_items?" + query)
            self.assertEqual(r.status, 400, (query, r))
            self.assertEqual(r.json["error"]["param"], param)
        gone = c.request("DELETE", path)
        self.assertEqual(gone.status, 200, gone)
        self.assertEqual(gone.json, {"id": body["id"], "object": "response",
                                     "deleted": True})
        for method, p in (("GET", path), ("DELETE", path),
                          ("GET", path + "/input_items")):
            r = c.request(method, p)
            self.assertEqual(r.status, 404, (method, p, r))
            self.assertEqual(r.json["error"]["message"],
                             "Response with id '%s' not found." % body["id"])
        r = c.post("/v1/responses", {"input": "x",
                                     "previous_response_id": body["id"]})
        self.assertEqual(r.status, 400, r)
        self.assertEqual((r.json["error"]["param"], r.json["error"]["code"]),
                         ("previous_response_id",
                          "previous_response_not_found"))
        for p in ("/v1/responses/resp_x/other", "/v1/responses/"):
            self.assertEqual(c.get(p).status, 404, p)
        r = c.request("DELETE", path + "/input_items")
        self.assertEqual(r.status, 404, r)
        self.assertEqual(c.get("/v1/responses").status, 405)

    def test_a_stored_item_keeps_what_makes_the_prompt_only(self):
        """Fields the prompt does not read, and ids that are not ids, are
        not kept: a record holds about the conversation's text."""
        items = [{"role": "user", "content": "Hi", "junk": "J" * 5000,
                  "id": "I" * 400, "status": "S" * 100},
                 {"type": "message", "role": "assistant", "id": "msg_ok-1",
                  "content": [{"type": "output_text", "text": " Yo",
                               "annotations": ["A" * 100],
                               "extra": 1}]},
                 {"type": "function_call", "call_id": "c1", "name": "f",
                  "arguments": "{}", "junk": [1, 2, 3]},
                 {"type": "function_call_output", "call_id": "c1",
                  "output": [{"type": "input_text", "text": "42",
                              "junk": True}]},
                 {"role": "user", "content": "More"}]
        body = self.respond(input=items, max_output_tokens=2, seed=1)
        page = self.client().get("/v1/responses/%s/input_items?order=asc"
                                 % body["id"]).json["data"]
        self.assertEqual(sorted(page[0]), ["content", "id", "role", "status",
                                           "type"])
        self.assertRegex(page[0]["id"], r"^msg_[0-9a-f]{24}$")
        self.assertEqual(page[0]["status"], "completed")
        self.assertEqual(page[1]["id"], "msg_ok-1")
        self.assertEqual(page[1]["content"], [
            {"type": "output_text", "text": " Yo", "annotations": []}])
        self.assertEqual(sorted(page[2]), ["arguments", "call_id", "id",
                                           "name", "status", "type"])
        self.assertRegex(page[2]["id"], r"^fc_[0-9a-f]{24}$")
        self.assertEqual(page[3]["output"],
                         [{"type": "input_text", "text": "42"}])
        self.assertRegex(page[3]["id"], r"^fco_[0-9a-f]{24}$")
        self.assertNotIn("JJJJ", json.dumps(page))

    def test_store_false_keeps_nothing(self):
        body = self.respond(input="Hi", max_output_tokens=2, seed=1,
                            store=False)
        self.assertIs(body["store"], False)
        r = self.client().get("/v1/responses/" + body["id"])
        self.assertEqual(r.status, 404, r)

    def test_a_continued_turn_is_the_conversation_sent_whole(self):
        """previous_response_id writes the stored conversation before the
        new input, without the previous instructions (OpenAI's rule), and
        keeps its cache_salt: the answer, its prompt's length and the
        cached part are those of the same conversation sent whole."""
        nb = {"50256": -100}
        r1 = self.respond(input="First words", instructions="Be brief.",
                          max_output_tokens=6, seed=4, logit_bias=nb,
                          cache_salt="continued-salt")
        r2 = self.respond(input="Second", previous_response_id=r1["id"],
                          max_output_tokens=6, seed=5, logit_bias=nb)
        self.assertEqual(r2["previous_response_id"], r1["id"])
        self.assertIsNone(r2["instructions"])
        whole = [{"role": "user", "content": "First words"}, r1["output"][0],
                 {"role": "user", "content": "Second"}]
        one = self.respond(input=whole, max_output_tokens=6, seed=5,
                           logit_bias=nb, cache_salt="continued-salt")
        self.assertEqual(response_text(r2), response_text(one))
        self.assertEqual(r2["usage"]["input_tokens"],
                         one["usage"]["input_tokens"])
        # r1's prompt began with its instructions, which r2's has not: r2
        # found nothing of r1's cached, but `one`, salted as r1 was, found
        # all of r2's prompt: r2 ran under the salt it inherited
        self.assertEqual(r2["usage"]["input_tokens_details"]
                         ["cached_tokens"], 0)
        self.assertEqual(one["usage"]["input_tokens_details"]
                         ["cached_tokens"], one["usage"]["input_tokens"] - 1)
        r3 = self.respond(input="Third", previous_response_id=r2["id"],
                          max_output_tokens=6, seed=6, logit_bias=nb)
        self.assertGreaterEqual(r3["usage"]["input_tokens_details"]
                                ["cached_tokens"],
                                r2["usage"]["input_tokens"])

    def test_truncation_auto_drops_the_oldest_turns(self):
        """Over the context, "disabled" is a 400 naming input; "auto" drops
        whole turns from the oldest until the prompt and max_output_tokens
        fit, and answers as the shortest such tail sent whole."""
        long = "word " * 200
        turns = []
        for i in range(6):
            turns += [{"role": "user", "content": "%d %s" % (i, long)},
                      {"type": "message", "role": "assistant", "content": [
                          {"type": "output_text", "text": " ok %d" % i}]}]
        turns.append({"role": "user", "content": "Last"})
        body = {"input": turns, "instructions": "Be brief.",
                "max_output_tokens": 8, "seed": 2}
        r = self.client().post("/v1/responses", body)
        self.assertEqual(r.status, 400, r)
        self.assertEqual((r.json["error"]["param"], r.json["error"]["code"]),
                         ("input", "context_length_exceeded"))
        auto = self.respond(**dict(body, truncation="auto"))
        self.assertEqual(auto["truncation"], "auto")
        for drop in range(1, 6):
            tail = dict(body, input=turns[2 * drop:])
            r = self.client().post("/v1/responses", tail)
            if r.status == 200:
                break
        self.assertEqual(r.status, 200, "no tail of the turns fits")
        self.assertEqual(response_text(auto), response_text(r.json))
        self.assertEqual(auto["usage"]["input_tokens"],
                         r.json["usage"]["input_tokens"])
        # the stored conversation is the tail that was sent: its next turn
        # fits without truncation, as that tail and answer sent whole
        nxt = self.respond(input="More", previous_response_id=auto["id"],
                           max_output_tokens=8, seed=3)
        whole = self.respond(input=turns[2 * drop:] + auto["output"] +
                             [{"role": "user", "content": "More"}],
                             max_output_tokens=8, seed=3)
        self.assertEqual(response_text(nxt), response_text(whole))
        self.assertEqual(nxt["usage"]["input_tokens"],
                         whole["usage"]["input_tokens"])
        # hundreds of short turns: the fewest oldest go (found by
        # bisection), and the tail kept fits with max_output_tokens
        many = []
        for i in range(300):
            many += [{"role": "user", "content": "turn %d" % i},
                     {"role": "assistant", "content": "ok"}]
        many.append({"role": "user", "content": "Last"})
        big = self.respond(input=many, truncation="auto", max_output_tokens=8,
                           seed=2)
        used = big["usage"]["input_tokens"]
        self.assertLessEqual(used + 8, 1024)
        self.assertGreater(used + 8, 1024 - 24, "more dropped than needed")
        # what cannot fit even alone is still a 400
        r = self.client().post("/v1/responses", dict(
            body, truncation="auto", input="word " * 1100))
        self.assertEqual(r.status, 400, r)
        self.assertEqual(r.json["error"]["param"], "input")

    def test_metrics_count_responses(self):
        self.respond(input="Hi", max_output_tokens=1, seed=1)
        text = self.client().get("/metrics").body.decode()
        self.assertRegex(text, r'gpt2d_requests_total\{endpoint="responses",'
                         r'code="200"\} [1-9]')


class T10Inspect(ServerCase):
    """POST /v1/inspect over HTTP: the numbers against the numpy reference,
    the bounds, and what every endpoint has (an API key, CORS, metrics, an
    access-log line, a hang-up that cancels).  tiny's shape with a 1024
    context (long_model), so a long prompt's inspect lasts long enough to
    hang up on; steps last at least 20 ms."""
    NAME = "inspect"
    KEY = "sk-inspect-%d" % os.getpid()
    ORIGIN = "https://playground.example"
    ARGS = ("--slots", "2", "--threads", "2", "--cors-origin", ORIGIN,
            "--inspect-max-tokens", "1000", "--inspect-max-attention", "500")
    ENV = {"GPT2D_API_KEY": KEY, "GPT2D_TEST_MIN_STEP_US": "20000"}
    MODEL = staticmethod(long_model)
    PROMPT = "The cat sat on the mat"

    _model = None

    @classmethod
    def reference(cls):
        if cls._model is None:
            cls._model = gpt2_numpy.GPT2(long_model())
        return cls._model

    def inspect(self, body, **kw):
        r = self.client(api_key=self.KEY).post("/v1/inspect", body, **kw)
        self.assertEqual(r.status, 200, r)
        return r.json

    def test_numbers_match_the_reference(self):
        a = self.inspect({"prompt": self.PROMPT, "logit_lens": 5,
                          "layers": [1, 0], "attention": True})
        ids = [t["id"] for t in a["tokens"]]
        self.assertEqual(ids, main_client().post(
            "/tokenize", {"content": self.PROMPT}).json["tokens"])
        self.assertEqual("".join(t["text"] for t in a["tokens"]), self.PROMPT)
        self.assertEqual(a["layers"], [1, 0])
        self.assertEqual(a["usage"]["prompt_tokens"], len(ids))
        m = self.reference()
        att, resid, lens = m.inspect(ids)
        for i, layer in enumerate(a["layers"]):
            self.assertEqual(len(a["attention"][i]), m.n_head)
            for h in range(m.n_head):
                for q, row in enumerate(a["attention"][i][h]):
                    self.assertEqual(len(row), q + 1)
                    err = np.abs(np.array(row) - att[layer][h, q, :q + 1]).max()
                    self.assertLessEqual(err, 1e-4, (layer, h, q))
            norms = np.linalg.norm(resid[layer], axis=-1)
            np.testing.assert_allclose(a["residual_norms"][i], norms, rtol=1e-4)
            probs = np.exp(lens[layer] - lens[layer].max(-1, keepdims=True))
            probs /= probs.sum(-1, keepdims=True)
            for q, guesses in enumerate(a["logit_lens"][i]):
                self.assertEqual(len(guesses), 5)
                for g in guesses:
                    want = probs[q, g["id"]]
                    self.assertLessEqual(abs(g["prob"] - want), 2e-3 * want)
                    raw = vocab().decode([g["id"]])
                    try:
                        want_text = raw.decode("utf-8")
                    except UnicodeDecodeError:      # OpenAI's form of a byte piece
                        want_text = "bytes:" + "".join("\\x%02x" % x for x in raw)
                    self.assertEqual(g["text"], want_text)
                # the reference's best five, near-ties aside
                best = np.sort(probs[q])[::-1]
                self.assertGreaterEqual(guesses[-1]["prob"], best[5] * (1 - 4e-3))

    def test_last_layer_is_the_completions_top_logprobs(self):
        a = self.inspect({"prompt": self.PROMPT, "logit_lens": 5,
                          "layers": [1]})
        self.assertNotIn("attention", a)
        c = self.client(api_key=self.KEY).complete(
            prompt=self.PROMPT, max_tokens=0, echo=True, logprobs=5)
        top = c["choices"][0]["logprobs"]["top_logprobs"]
        for p, guesses in enumerate(a["logit_lens"][0][:-1]):
            # the five likeliest (an entry also holds the token itself)
            want = dict(sorted(top[p + 1].items(), key=lambda kv: -kv[1])[:5])
            self.assertEqual({g["text"] for g in guesses}, set(want), p)
            for g in guesses:
                self.assertAlmostEqual(g["prob"], math.exp(want[g["text"]]),
                                       delta=1e-5 * g["prob"])

    def test_only_what_was_asked_and_token_ids_alike(self):
        a = self.inspect({"prompt": self.PROMPT})
        self.assertEqual(set(a), {"id", "object", "model", "tokens", "layers",
                                  "residual_norms", "usage"})
        self.assertRegex(a["id"], r"^insp-[0-9a-f]{24}$")
        self.assertEqual(a["object"], "inspect")
        self.assertEqual(a["layers"], [0, 1])
        self.assertEqual([len(r) for r in a["residual_norms"]],
                         [len(a["tokens"])] * 2)
        b = self.inspect({"prompt": [t["id"] for t in a["tokens"]]})
        self.assertNotEqual(a.pop("id"), b.pop("id"))
        self.assertEqual(a, b)

    def test_cache_salt_isolates_as_on_completions(self):
        """An inspect's blocks join its cache_salt's domain alone: unsalted
        and other-salt completions of its prompt reuse nothing, the same
        salt's reuse them; an inspect reuses nothing itself, and the salt
        changes nothing in its answer."""
        c = self.client(api_key=self.KEY)
        prompt = word_prompt(1717, 32)      # two whole KV blocks
        body = {"prompt": prompt, "logit_lens": 2}    # attention: over 500

        def cached(**salt):
            r = c.complete(prompt=prompt + word_prompt(1718, 2), max_tokens=1,
                           **salt)
            return r["usage"]["prompt_tokens_details"]["cached_tokens"]

        def inspect_reusing_nothing(**salt):
            before = metric_sum(c.metrics(), "gpt2d_cached_tokens_total")
            a = self.inspect(dict(body, **salt))
            self.assertEqual(metric_sum(c.metrics(), "gpt2d_cached_tokens_total"),
                             before)
            a.pop("id")
            return a
        salted = inspect_reusing_nothing(cache_salt="inspect-a")
        self.assertEqual(cached(), 0)
        self.assertEqual(cached(cache_salt="inspect-b"), 0)
        self.assertEqual(cached(cache_salt="inspect-a"), 32)
        # now cached unsalted and under inspect-b: inspects reuse none of it
        self.assertEqual(inspect_reusing_nothing(), salted)
        self.assertEqual(inspect_reusing_nothing(cache_salt="inspect-b"), salted)
        self.assert_error(c.post("/v1/inspect", {"prompt": "x", "cache_salt": ""}),
                          400, "cache_salt")

    def test_bounds_are_400_with_the_numbers(self):
        c = self.client(api_key=self.KEY)
        # 4 heads x 55 = 220 per layer over 10 tokens: both layers fit 500
        self.inspect({"prompt": list(range(100, 110)), "attention": True})
        # 4 x 120 = 480 per layer over 15 tokens: one layer fits
        e = self.assert_error(c.post("/v1/inspect", {
            "prompt": list(range(100, 115)), "attention": True}), 400, "layers")
        self.assertIn("960 probabilities", e["message"])
        self.assertIn("at most 1 layers", e["message"])
        self.inspect({"prompt": list(range(100, 115)), "attention": True,
                      "layers": [1]})
        e = self.assert_error(c.post("/v1/inspect", {
            "prompt": list(range(100, 120)), "attention": True,
            "layers": [0]}), 400, "prompt")
        self.assertIn("fewer tokens", e["message"])
        e = self.assert_error(c.post("/v1/inspect", {
            "prompt": list(range(100, 1101))}), 400, "prompt")
        self.assertIn("1001 tokens", e["message"])
        self.assertIn("inspect-max-tokens", e["message"])
        for body, param in (({"prompt": "x", "logit_lens": 9}, "logit_lens"),
                            ({"prompt": "x", "layers": [2]}, "layers"),
                            ({"prompt": "x", "attention": "yes"}, "attention"),
                            ({"prompt": {"a": 1}}, "prompt")):
            with self.subTest(body=body):
                self.assert_error(c.post("/v1/inspect", body), 400, param)

    def test_key_cors_metrics_and_the_access_log(self):
        self.assert_error(self.client().post(
            "/v1/inspect", {"prompt": "x"}), 401)
        pre = self.client().request("OPTIONS", "/v1/inspect", headers={
            "Origin": self.ORIGIN, "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type"})
        self.assertEqual(pre.status, 204, pre)
        self.assertEqual(pre.headers.get("access-control-allow-origin"), self.ORIGIN)
        self.assertIn("POST", pre.headers.get("access-control-allow-methods", ""))
        c = self.client(api_key=self.KEY)
        before = c.metrics()
        r = c.post("/v1/inspect", {"prompt": self.PROMPT, "logit_lens": 1},
                   headers={"Origin": self.ORIGIN})
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.headers.get("access-control-allow-origin"), self.ORIGIN)
        self.assertEqual(r.headers.get("content-type"), "application/json")
        self.assertEqual(r.headers.get("x-request-id"), r.json["id"])
        mine = c.post("/v1/inspect", {"prompt": "x"}, headers={"X-Request-Id": "trace-17"})
        self.assertEqual(mine.headers.get("x-request-id"), "trace-17")
        after = {}

        def delta(name):
            return metric_sum(after, name) - metric_sum(before, name)

        def counted():
            # counted when libmicrohttpd reports each request done, a
            # moment after the client has read the answer
            after.clear()
            after.update(c.metrics())
            return delta('gpt2d_requests_total{endpoint="inspect",code="200"}') >= 2
        wait_for(counted, 2)
        self.assertEqual(delta('gpt2d_requests_total{endpoint="inspect",code="200"}'), 2)
        # answered: no inspect holds its buffers once the engine has let go
        self.assertTrue(wait_for(lambda: c.metrics().get(
            "gpt2d_inspect_memory_bytes") == 0, 2))
        self.assertEqual(delta("gpt2d_inspect_bytes_total"),
                         len(r.body) + len(mine.body))
        self.assertEqual(delta("gpt2d_prompt_tokens_total"),
                         r.json["usage"]["prompt_tokens"] + 1)
        self.assertTrue(wait_for(lambda: re.search(
            r"POST /v1/inspect 200 [0-9.]+ms prompt_tokens=%d completion_tokens=0 "
            r"paused=0 request_id=%s\b" % (r.json["usage"]["prompt_tokens"], r.json["id"]),
            self.log_text()), 2),
            self.server.log_tail())

    def test_hang_up_cancels_and_frees_the_slot(self):
        c = self.client(api_key=self.KEY)
        before = metric_sum(c.metrics(), "gpt2d_requests_cancelled_total")
        body = json.dumps({"prompt": list(range(100, 1100)), "logit_lens": 5})
        s = socket.create_connection(("127.0.0.1", self.server.port))
        s.sendall(http_request("POST", "/v1/inspect", body.encode(),
                               headers=("Authorization: Bearer " + self.KEY,)))
        self.assertTrue(wait_for(
            lambda: metric_sum(c.metrics(), "gpt2d_slots_busy") == 1, 2),
            "the inspect never ran")
        s.close()

        def freed():
            m = c.metrics()
            return (metric_sum(m, "gpt2d_requests_cancelled_total") == before + 1
                    and metric_sum(m, "gpt2d_slots_busy") == 0)
        self.assertTrue(wait_for(freed, 2), "not cancelled within 2 s")
        self.assertTrue(wait_for(lambda: "POST /v1/inspect 499" in self.log_text(), 2))


class T11ThreadNames(ServerCase):
    """Each of the daemon's own threads carries its name (README,
    Operations), so that top -H, ps -L, gdb and perf tell them apart."""

    NAME = "threads"
    ARGS = ("--threads", "3", "--kv-cache-dir", os.path.join(WORKDIR, "threads-kv"))
    # OpenBLAS starts no threads of its own (they would keep the process's
    # name), so every thread of the process is accounted for below.
    ENV = {"OPENBLAS_NUM_THREADS": "1"}

    def thread_names(self):
        """{tid: name} of every thread of the server, from /proc."""
        task = "/proc/%d/task" % self.server.pid
        names = {}
        for tid in os.listdir(task):
            try:
                with open(os.path.join(task, tid, "comm"), encoding="utf-8") as f:
                    names[int(tid)] = f.read().rstrip("\n")
            except FileNotFoundError:       # a connection's thread that ended
                pass
        return names

    def test_every_thread_has_its_name(self):
        names = self.thread_names()
        self.assertEqual(names.get(self.server.pid), "gpt2d", "the main thread")
        # libmicrohttpd names its own: "MHD-listen", and an "MHD-connection"
        # for each open connection
        self.assertEqual(
            sorted(n for n in names.values() if n != "MHD-connection"),
            sorted(["gpt2d", "gpt2d-step", "gpt2d-mm-1", "gpt2d-mm-2",
                    "gpt2d-work-0", "gpt2d-work-1", "gpt2d-work-2",
                    "gpt2d-deadline", "gpt2d-kvdisk", "gpt2d-models",
                    "MHD-listen"]))


class T9Shutdown(ServerCase):
    NAME = "drain"
    ARGS = ("--slots", "2", "--threads", "1", "--drain-timeout", "500")
    MODEL = staticmethod(long_model)

    @classmethod
    def tearDownClass(cls):
        cls.server.kill()       # the test stopped it; this is for its failure

    def test_sigterm_ends_streams_by_the_deadline_and_exits_0(self):
        """A 1000-token stream cannot finish within --drain-timeout 500: it
        must be ended on purpose (a last chunk with a finish_reason, or an
        error event) so the client can tell it from a network failure, and
        the process must exit 0 soon after the deadline."""
        c = self.server.client()
        es = c.open_stream("/v1/completions", dict(LONG_REQ, stream=True))
        it = iter(es)
        next(it)
        events = []
        t0 = time.monotonic()
        rc_box = []
        stopper = threading.Thread(
            target=lambda: rc_box.append(self.server.stop(timeout=10)))
        stopper.start()
        time.sleep(0.1)
        # draining: new work is refused (503) or not even accepted
        try:
            r = c.post("/v1/completions", {"prompt": "Hi", "max_tokens": 1})
            self.assert_error(r, 503)
        except OSError:
            pass
        cut = None
        try:
            for ev in it:
                events.append(ev)
        except OSError as e:
            cut = e
        finally:
            es.close()
        stopper.join(12)
        rc, seconds = rc_box[0]
        self.assert_clean_log(self.server)
        self.assertEqual(rc, 0, self.server.log_tail())
        self.assertLess(seconds, 5.0)
        self.assertLess(time.monotonic() - t0, 6.0)
        with self.assertRaises(OSError):
            c.get("/health")
        self.assertIsNone(cut, "stream cut by a socket error")
        self.assertTrue(events, "no event after SIGTERM")
        last = events[-1]
        ended = "error" in last or any(
            ch.get("finish_reason") for ch in last.get("choices") or [])
        self.assertTrue(ended, "the stream stopped without a finish_reason "
                        "or an error event; last: %r, [DONE]: %r"
                        % (last, es.done))


# ================================================================ runner

def main(argv):
    if not MAIN_PORT:
        print("api_tests.py: GPT2D_API_PORT is not set", file=sys.stderr)
        return 2
    return run_module(__name__, argv, "api_tests",
                      os.environ.get("GPT2D_API_SUMMARY"))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
