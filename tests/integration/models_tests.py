"""models_tests.py — several models behind one gpt2d (src/fleet/), against
real processes on 127.0.0.1 (run by tests/integration/test_models.sh).

    GPT2D_MODELS_WORKDIR            scratch directory (logs, models)
    GPT2D_BUILDDIR, GPT2D_SRCDIR, GPT2D_TEST_DATA
    GPT2D_MODELS_SUMMARY            optional: file that receives "PASSED FAILED"

    models_tests.py [SUBSTRING...]  only the tests whose name contains one

  - Three models of different shapes (two from --model, one from
    --models-dir): a request for each gets that model's own reference
    greedy tokens (the numpy reference of its weights), whole and
    streamed, on completions and chat, with n > 1; /v1/models lists them
    with their states; an unknown model is a 404 model_not_found on every
    endpoint that takes one; sessions are each model's own.
  - Memory: a model that cannot load while the others are in use is a 503
    with Retry-After, and loads once they are not; the least recently used
    idle model is unloaded for another, never one a running request holds
    (which finishes with exactly its answer); an idle model unloads after
    --model-idle-timeout and loads again on the next request; a model whose
    files are broken is a 500 naming why, and the others serve on.
  - Tokenizing (/tokenize, /detokenize) uses the model's tokenizer, read at
    start: for a model that is not loaded it answers as the loaded ones do
    and leaves it unloaded, even where there is no room to load it, and it
    is not a use of the model (the least recently used one is unloaded);
    a /detokenize answer read slowly outlives its model's unload.
  - Draft models (--draft): each model answers with its own reference
    tokens, whole, streamed, with n > 1 and a session's second turn,
    while a draft guesses for it (itself, from a copy: every greedy guess
    holds; a smaller model's context: it drafts for the positions it
    has); seeded sampling gives the same text with and without; the
    guesses show in usage, /v1/models and /metrics.
  - Lists the daemon refuses at start (exit 2, one line saying why), and
    model directories whose tokenizer cannot be read, even those that would
    load only on first use (exit 1, one line naming the file).

Slow generations come from --test-min-step-us (every engine step lasts at
least that long; speculation off, so a step is one token), so "still
running" holds on any machine; every wait is
bounded by an event the test observes, never a wall-clock guess.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from gpt2d_client import (EOT, NO_EOT, Server, Vocab,  # noqa: E402
                          http_request, read_raw)
from testlib import (DATA, GPT2D, SRCDIR, TINY, Case,  # noqa: E402
                     long_context_model, run_module, wait_for)

sys.path.insert(0, os.path.join(SRCDIR, "tests", "reference"))
import gpt2_numpy  # noqa: E402

WORKDIR = os.environ.get("GPT2D_MODELS_WORKDIR", tempfile.gettempdir())
SMALL = os.path.join(DATA, "models", "w36h4")         # 1 layer, context 33
WIDE = os.path.join(DATA, "models", "w72h6-untied")   # 2 layers, context 40
MIN_MARGIN = 5e-3
STEP_US = 20000     # --test-min-step-us where a generation must last
LONG = 120          # tokens of a generation that outlasts the test's checks
# Bytes of a KV block of tiny's shape (2 layers, 64 wide, floats): K and V
# of 16 positions, then their scores (kv_layout.h).
TINY_BLOCK = 2 * 2 * 16 * 64 * 4 + (40 + 16 * 168 + 64 * 4 + 63) // 64 * 64


def models_dir():
    """A --models-dir holding `wide` (a link to the w72h6-untied fixture),
    a directory without a config.json (not a model) and a file."""
    d = os.path.join(WORKDIR, "models-dir")
    if not os.path.isdir(d):
        os.makedirs(os.path.join(d, "not-a-model"))
        os.symlink(WIDE, os.path.join(d, "wide"))
        with open(os.path.join(d, "README"), "w", encoding="ascii") as f:
            f.write("not a model\n")
    return d


def long_model():
    """tiny's shape with a 1024-token context: room for LONG tokens."""
    return long_context_model(os.path.join(WORKDIR, "ctx1024-model"), TINY, 11)


def long_models_dir():
    """A --models-dir holding `long`, the 1024-token model."""
    d = os.path.join(WORKDIR, "long-dir")
    if not os.path.isdir(d):
        os.makedirs(d)
        os.symlink(long_model(), os.path.join(d, "long"))
    return d


def model_dir_of(name, files, edit=None):
    """A --models-dir holding one model `name` made of tiny's `files`;
    edit(config) changes its config.json."""
    d = os.path.join(WORKDIR, name + "-dir")
    if not os.path.isdir(d):
        os.makedirs(os.path.join(d, name))
        for f in files:
            shutil.copy(os.path.join(TINY, f), os.path.join(d, name, f))
        if edit is not None:
            path = os.path.join(d, name, "config.json")
            with open(path, encoding="utf-8") as f:
                config = json.load(f)
            edit(config)
            with open(path, "w", encoding="utf-8") as f:
                json.dump(config, f)
    return d


def broken_models_dir():
    """A --models-dir whose one model has a config.json and a tokenizer,
    and no weights."""
    return model_dir_of("broken", ("config.json", "vocab.json", "merges.txt"))


_refs = {}


def reference(directory):
    if directory not in _refs:
        _refs[directory] = gpt2_numpy.GPT2(directory)
    return _refs[directory]


def greedy(directory, prompt, n):
    """The reference's greedy continuation of `prompt` (ids), and whether
    every step's best token leads the next by MIN_MARGIN."""
    m = reference(directory)
    cache = m.new_cache()
    logits = m.forward(prompt, cache)[-1]
    out, clear = [], True
    for _ in range(n):
        top2 = sorted(logits)[-2:]
        clear = clear and top2[1] - top2[0] >= MIN_MARGIN
        tok = int(logits.argmax())
        out.append(tok)
        if tok == EOT or len(out) == n:
            break
        logits = m.forward([tok], cache)[-1]
    return out, clear


def greedy_case(directory, key, n_prompt, n_gen):
    """A prompt (ids) whose reference greedy continuation of n_gen tokens
    is unambiguous and has no end-of-text; and that continuation."""
    for attempt in range(300):
        base = 1000 + 97 * (key + attempt)
        prompt = [(base + 13 * i) % 50000 for i in range(n_prompt)]
        out, clear = greedy(directory, prompt, n_gen)
        if clear and len(out) == n_gen and EOT not in out:
            return prompt, out
    raise AssertionError("no unambiguous greedy case in %s" % directory)


def streamed_ids(client, path, body):
    """The token ids of a streamed answer's first choice, in order."""
    ids = []
    for event in client.stream(path, dict(body, stream=True)):
        for ch in event.get("choices", []):
            ids.extend(ch.get("token_ids") or [])
    return ids


def states(client):
    r = client.get("/v1/models")
    assert r.status == 200, r
    return {m["id"]: m["state"] for m in r.json["data"]}


class Generation(threading.Thread):
    """One long streamed completion in the background: .ids (its token
    ids), .finish, .first (set once its first chunk came), .error."""

    def __init__(self, client, body):
        threading.Thread.__init__(self, daemon=True)
        self.client, self.body = client, body
        self.ids, self.finish, self.error = [], None, None
        self.first = threading.Event()

    def run(self):
        try:
            for event in self.client.stream("/v1/completions",
                                            dict(self.body, stream=True)):
                for ch in event.get("choices", []):
                    self.ids.extend(ch.get("token_ids") or [])
                    self.finish = ch.get("finish_reason") or self.finish
                self.first.set()
        except Exception as e:  # noqa: BLE001 (reported by the test)
            self.error = e
        finally:
            self.first.set()


class ModelsCase(Case):
    """A test that starts its own daemons; each is stopped (exit 0, no
    sanitizer report) at the end of the test."""

    def setUp(self):
        self.servers = []

    def tearDown(self):
        for srv in self.servers:
            rc, _ = srv.stop()
            self.assertEqual(rc, 0, srv.log_tail())
            self.assert_clean_log(srv)

    def start(self, name, first, args):
        srv = Server(GPT2D, first, WORKDIR, list(args), name=name).start()
        self.servers.append(srv)
        return srv

    def log_of(self, srv):
        with open(srv.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")


class ThreeModels(ModelsCase):
    ARGS = ("--model", "small=" + SMALL, "--threads", "2", "--slots", "2")

    def three(self):
        return self.start("three", TINY,
                          list(self.ARGS) + ["--models-dir", models_dir()])

    def test_each_model_answers_with_its_own_reference_tokens(self):
        srv = self.three()
        c = srv.client()
        self.assertEqual(states(c), {"tiny": "loaded", "small": "loaded",
                                     "wide": "unloaded"})
        for key, (name, directory) in enumerate(
                (("tiny", TINY), ("small", SMALL), ("wide", WIDE))):
            prompt, want = greedy_case(directory, key, 5, 8)
            body = {"model": name, "prompt": prompt, "max_tokens": 8,
                    "temperature": 0, "return_token_ids": True}
            with self.subTest(model=name, kind="whole, n=2"):
                r = c.complete(**dict(body, n=2))
                self.assertEqual(r["model"], name)
                for ch in r["choices"]:
                    self.assertEqual(ch["token_ids"], want)
            with self.subTest(model=name, kind="streamed"):
                self.assertEqual(streamed_ids(c, "/v1/completions", body),
                                 want)
            with self.subTest(model=name, kind="chat"):
                r = c.post("/v1/chat/completions", {
                    "model": name, "max_tokens": 4, "temperature": 0,
                    "messages": [{"role": "user", "content": "Hi"}]})
                self.assertEqual(r.status, 200, r)
                self.assertEqual(r.json["model"], name)
        self.assertEqual(states(c), {"tiny": "loaded", "small": "loaded",
                                     "wide": "loaded"})
        m = c.metrics()
        for name in ("tiny", "small", "wide"):
            self.assertEqual(m['gpt2d_model_loaded{model="%s"}' % name], 1)
            self.assertEqual(m['gpt2d_model_loads_total{model="%s"}' % name],
                             1)
        self.assertIn("model wide loaded from", self.log_of(srv))

    def test_a_continued_response_keeps_its_model(self):
        """previous_response_id without a model runs on the previous
        response's model, not the default; a model named wins."""
        c = self.three().client()
        r1 = c.post("/v1/responses", {"model": "small", "input": "Hi",
                                      "max_output_tokens": 2})
        self.assertEqual((r1.status, r1.json["model"]), (200, "small"))
        r2 = c.post("/v1/responses", {"previous_response_id": r1.json["id"],
                                      "input": "Go", "max_output_tokens": 2})
        self.assertEqual((r2.status, r2.json["model"]), (200, "small"), r2)
        r3 = c.post("/v1/responses", {"previous_response_id": r2.json["id"],
                                      "model": "tiny", "input": "So",
                                      "max_output_tokens": 2})
        self.assertEqual((r3.status, r3.json["model"]), (200, "tiny"), r3)
        # an unknown id still names no model: the default's 400 for the id
        e = self.assert_error(c.post("/v1/responses", {
            "previous_response_id": "resp_x", "input": "x"}), 400,
            "previous_response_id")
        self.assertEqual(e["code"], "previous_response_not_found")

    def test_models_are_listed_and_unknown_ones_are_404_everywhere(self):
        srv = self.three()
        c = srv.client()
        data = c.get("/v1/models").json["data"]
        self.assertEqual([m["id"] for m in data], ["tiny", "small", "wide"])
        self.assertEqual([m["default"] for m in data], [True, False, False])
        self.assertEqual([m["max_model_len"] for m in data], [64, 33, 40])
        one = c.get("/v1/models/small")
        self.assertEqual((one.status, one.json["id"]), (200, "small"))
        self.assertEqual(
            self.assert_error(c.get("/v1/models/nope"), 404, "model")["code"],
            "model_not_found")
        cases = [
            ("/v1/completions", {"prompt": "Hi", "max_tokens": 1}),
            ("/v1/chat/completions",
             {"messages": [{"role": "user", "content": "Hi"}]}),
            ("/v1/inspect", {"prompt": "Hi"}),
            ("/tokenize", {"content": "Hi"}),
            ("/detokenize", {"tokens": [1]}),
        ]
        for path, body in cases:
            with self.subTest(path=path):
                e = self.assert_error(c.post(path, dict(body, model="nope")),
                                      404, "model")
                self.assertEqual(e["code"], "model_not_found")
                self.assertIn("nope", e["message"])
                # the default model when none is named
                self.assertEqual(c.post(path, body).status, 200)
        self.assertEqual(self.assert_error(
            c.post("/tokenize", {"model": 5, "content": "Hi"}), 400,
            "model")["message"], "model must be a string")
        # each model's tokenizer answers for it
        r = c.post("/tokenize", {"model": "wide", "content": "Hello world"})
        self.assertEqual((r.status, r.json), (200, {"tokens": [15496, 995]}))

    def test_tokenizing_is_not_a_use_of_the_model(self):
        """Tokenizing needs only a model's tokenizer, read at start: it
        does not load the model, nor count as using it, so the least
        recently used model is still the one unloaded for another."""
        srv = self.start("lru-tokenize", TINY,
                         list(self.ARGS) + ["--models-dir", models_dir(),
                                            "--models-max", "2"])
        c = srv.client()
        self.assertEqual(states(c), {"tiny": "loaded", "small": "loaded",
                                     "wide": "unloaded"})
        for name in ("tiny", "small"):
            c.complete(model=name, prompt="Hi", max_tokens=1)
        # tiny was used longest ago, and tokenizing with it changes nothing
        for path, body in (("/tokenize", {"content": "Hi"}),
                           ("/detokenize", {"tokens": [17250]})):
            with self.subTest(path=path):
                r = c.post(path, dict(body, model="tiny"))
                self.assertEqual(r.status, 200, r)
        r = c.post("/tokenize", {"model": "wide", "content": "Hello world"})
        self.assertEqual((r.status, r.json), (200, {"tokens": [15496, 995]}))
        self.assertEqual(states(c), {"tiny": "loaded", "small": "loaded",
                                     "wide": "unloaded"})
        c.complete(model="wide", prompt="Hi", max_tokens=1)
        self.assertEqual(states(c), {"tiny": "unloaded", "small": "loaded",
                                     "wide": "loaded"})

    def test_sessions_are_each_models_own(self):
        srv = self.three()
        c = srv.client()
        for name in ("tiny", "small"):
            c.complete(model=name, prompt="One two three", max_tokens=2,
                       session_id="conv-1")
        listed = c.get("/v1/sessions").json["data"]
        self.assertEqual(sorted((s["model"], s["id"]) for s in listed),
                         [("small", "conv-1"), ("tiny", "conv-1")])
        self.assertEqual(c.delete("/v1/sessions/conv-1").status, 200)
        self.assertEqual(c.get("/v1/sessions").json["data"], [])
        self.assertEqual(c.delete("/v1/sessions/conv-1").status, 404)


class Memory(ModelsCase):
    def slow(self, name, args):
        return self.start(name, long_model(),
                          ["--threads", "1", "--slots", "2",
                           "--test-min-step-us", str(STEP_US)] + list(args))

    def test_a_model_that_cannot_load_while_others_run_is_503_then_loads(self):
        srv = self.slow("busy", ["--model", "tiny=" + TINY,
                                 "--models-max", "1"])
        c = srv.client()
        self.assertEqual(states(c), {"ctx1024-model": "loaded",
                                     "tiny": "unloaded"})
        prompt, want = greedy_case(TINY, 40, 4, 6)
        body = {"model": "ctx1024-model", "prompt": [5, 6, 7],
                "max_tokens": LONG, "temperature": 0, "logit_bias": NO_EOT,
                "return_token_ids": True, "speculative": False}
        alone = c.complete(**body)["choices"][0]["token_ids"]
        gen = Generation(c, body)
        gen.start()
        self.assertTrue(gen.first.wait(30))
        r = c.post("/v1/completions", {"model": "tiny", "prompt": prompt,
                                       "max_tokens": 6, "temperature": 0,
                                       "return_token_ids": True})
        e = self.assert_error(r, 503, "model")
        self.assertEqual(e["code"], "model_unavailable")
        self.assertGreaterEqual(int(r.headers["retry-after"]), 1)
        self.assertTrue(gen.is_alive(), "the generation outlasted the 503")
        gen.join(120)
        self.assertIsNone(gen.error)
        self.assertEqual((gen.ids, gen.finish), (alone, "length"))
        # nothing holds the long model now: it makes room
        r = c.complete(model="tiny", prompt=prompt, max_tokens=6,
                       temperature=0, return_token_ids=True)
        self.assertEqual(r["choices"][0]["token_ids"], want)
        self.assertEqual(states(c), {"ctx1024-model": "unloaded",
                                     "tiny": "loaded"})

    def test_least_recently_used_idle_model_unloads_never_a_busy_one(self):
        srv = self.slow("lru", ["--model", "tiny=" + TINY,
                                "--model", "small=" + SMALL,
                                "--models-max", "2"])
        c = srv.client()
        # listed models load at start while they fit: the third waits
        self.assertEqual(states(c), {"ctx1024-model": "loaded",
                                     "tiny": "loaded", "small": "unloaded"})
        body = {"model": "ctx1024-model", "prompt": [8, 9, 10],
                "max_tokens": LONG, "temperature": 0, "logit_bias": NO_EOT,
                "return_token_ids": True, "speculative": False}
        gen = Generation(c, body)
        gen.start()
        self.assertTrue(gen.first.wait(30))
        # ctx1024-model was used last, but it is busy: tiny makes room
        prompt, want = greedy_case(SMALL, 50, 4, 5)
        r = c.complete(model="small", prompt=prompt, max_tokens=5,
                       temperature=0, return_token_ids=True)
        self.assertEqual(r["choices"][0]["token_ids"], want)
        self.assertTrue(gen.is_alive())
        self.assertEqual(states(c), {"ctx1024-model": "loaded",
                                     "tiny": "unloaded", "small": "loaded"})
        gen.join(120)
        self.assertIsNone(gen.error)
        self.assertEqual(len(gen.ids), LONG)
        self.assertEqual(gen.finish, "length")
        self.assertIn("model tiny unloaded (its memory was needed)",
                      self.log_of(srv))

    def test_models_memory_budget_unloads_for_room(self):
        # the bytes each model counts, from a daemon without a budget
        srv = self.start("sizes", TINY, ["--model", "small=" + SMALL,
                                         "--threads", "1"])
        m = srv.client().metrics()
        tiny = int(m['gpt2d_model_memory_bytes{model="tiny"}'])
        small = int(m['gpt2d_model_memory_bytes{model="small"}'])
        budget = max(tiny, small) + min(tiny, small) // 2
        srv = self.start("budget", TINY, ["--model", "small=" + SMALL,
                                          "--threads", "1",
                                          "--models-memory", str(budget)])
        c = srv.client()
        self.assertEqual(states(c), {"tiny": "loaded", "small": "unloaded"})
        prompt, want = greedy_case(SMALL, 60, 4, 5)
        r = c.complete(model="small", prompt=prompt, max_tokens=5,
                       temperature=0, return_token_ids=True)
        self.assertEqual(r["choices"][0]["token_ids"], want)
        self.assertEqual(states(c), {"tiny": "unloaded", "small": "loaded"})
        m = c.metrics()
        self.assertEqual(int(m["gpt2d_models_memory_max_bytes"]), budget)
        self.assertEqual(int(m["gpt2d_models_memory_bytes"]), small)

    def test_tokenizing_for_a_model_with_no_room_leaves_it_unloaded(self):
        """/tokenize and /detokenize for a model that is not loaded, under
        a --models-memory without room for it beside the loaded one: they
        loaded it (unloading the other) or, while the other ran a request,
        were a 503.  Its tokenizer is read at start: they answer as the
        loaded model does, and it stays unloaded."""
        sizes = self.slow("tok-sizes", ["--model", "tiny=" + TINY])
        m = sizes.client().metrics()
        long = int(m['gpt2d_model_memory_bytes{model="ctx1024-model"}'])
        tiny = int(m['gpt2d_model_memory_bytes{model="tiny"}'])
        budget = max(long, tiny) + min(long, tiny) // 2
        srv = self.slow("tok-budget", ["--model", "tiny=" + TINY,
                                       "--models-memory", str(budget)])
        c = srv.client()
        as_started = {"ctx1024-model": "loaded", "tiny": "unloaded"}
        self.assertEqual(states(c), as_started)
        text = "H\u00e9llo w\u00f6rld \u65e5\u672c <|endoftext|> \u2713\tend"
        r = c.post("/tokenize", {"model": "ctx1024-model", "content": text})
        self.assertEqual(r.status, 200, r)
        ids = r.json["tokens"]
        self.assertIn(EOT, ids)
        self.assertEqual(Vocab(os.path.join(TINY, "vocab.json")).decode(ids),
                         text.encode("utf-8"))

        def tokenize_unloaded():
            r = c.post("/tokenize", {"model": "tiny", "content": text})
            self.assertEqual((r.status, r.json), (200, {"tokens": ids}))
            r = c.post("/tokenize", {"model": "tiny",
                                     "content": "Hello world"})
            self.assertEqual((r.status, r.json),
                             (200, {"tokens": [15496, 995]}))
            r = c.post("/detokenize", {"model": "tiny", "tokens": ids})
            self.assertEqual((r.status, r.json), (200, {"content": text}))
            # its own vocabulary's bounds: a 400, not a load
            self.assert_error(c.post("/detokenize", {
                "model": "tiny", "tokens": [15496, 50257]}), 400, "tokens")
            self.assertEqual(states(c), as_started)

        before = c.metrics()
        with self.subTest(loaded="idle"):
            tokenize_unloaded()
        with self.subTest(loaded="running a request"):
            gen = Generation(c, {"model": "ctx1024-model", "prompt": [5, 6, 7],
                                 "max_tokens": LONG, "temperature": 0,
                                 "logit_bias": NO_EOT, "speculative": False,
                                 "return_token_ids": True})
            gen.start()
            self.assertTrue(gen.first.wait(30))
            tokenize_unloaded()
            self.assertTrue(gen.is_alive(), "the generation outlasted them")
            # loading it is what has no room
            r = c.post("/v1/completions", {"model": "tiny", "prompt": "Hi",
                                           "max_tokens": 1})
            e = self.assert_error(r, 503, "model")
            self.assertEqual(e["code"], "model_unavailable")
            gen.join(120)
            self.assertIsNone(gen.error)
            self.assertEqual((len(gen.ids), gen.finish), (LONG, "length"))
        after = c.metrics()
        for series in ("gpt2d_model_loaded", "gpt2d_model_loads_total",
                       "gpt2d_model_memory_bytes"):
            for name in ("ctx1024-model", "tiny"):
                key = '%s{model="%s"}' % (series, name)
                self.assertEqual(after[key], before[key], key)
        self.assertEqual(after['gpt2d_model_loads_total{model="tiny"}'], 0)
        self.assertEqual(int(after["gpt2d_models_memory_bytes"]), long)

    def test_an_idle_model_unloads_and_loads_again_when_asked(self):
        srv = self.slow("idle", ["--model-idle-timeout", "1"])
        c = srv.client()
        body = {"prompt": [11, 12, 13], "max_tokens": 100, "temperature": 0,
                "logit_bias": NO_EOT, "return_token_ids": True,
                "speculative": False}
        t0 = time.monotonic()
        gen = Generation(c, body)
        gen.start()
        # held for the whole generation, longer than the idle timeout
        while gen.is_alive():
            self.assertEqual(states(c), {"ctx1024-model": "loaded"})
            time.sleep(0.1)
        self.assertGreater(time.monotonic() - t0, 1.5)
        self.assertIsNone(gen.error)
        self.assertEqual(len(gen.ids), 100)
        # its prompt again: cached tokens, counted before the unload
        c.complete(**dict(body, max_tokens=1))
        hits = 'gpt2d_kv_hit_tokens_total{tier="ram"}'
        compute = 'gpt2d_model_compute_seconds_total{model="ctx1024-model"}'
        before = c.metrics()
        self.assertGreater(before[hits], 0)
        # scraped as fast as it answers while the model unloads: no
        # counter ever reads less than before (nor while it stops)
        seen, done = [], threading.Event()

        def scrape():
            s = srv.client()
            while not done.is_set():
                m = s.metrics()
                seen.append((m[hits], m[compute]))

        scraper = threading.Thread(target=scrape, daemon=True)
        scraper.start()
        self.assertTrue(wait_for(
            lambda: states(c) == {"ctx1024-model": "unloaded"}, 30))
        done.set()
        scraper.join(30)
        self.assertGreater(len(seen), 10)
        for (h0, c0), (h1, c1) in zip(seen, seen[1:]):
            self.assertGreaterEqual(h1, h0, seen)
            self.assertGreaterEqual(c1, c0, seen)
        # counters never go back: the unloaded model's stay in the sums
        after = c.metrics()
        self.assertEqual(after[hits], before[hits])
        self.assertGreaterEqual(after[compute], before[compute])
        self.assertGreater(after[compute], 0)
        again = c.complete(**body)["choices"][0]["token_ids"]
        self.assertEqual(again, gen.ids)
        m = c.metrics()
        self.assertEqual(m['gpt2d_model_loads_total{model="ctx1024-model"}'],
                         2)
        self.assertGreaterEqual(m[hits], before[hits])
        self.assertGreater(m[compute], after[compute])
        self.assertIn("model ctx1024-model unloaded (idle)", self.log_of(srv))

    def test_a_detokenize_answer_read_slowly_outlives_an_unload(self):
        """Attack on this issue, finding 1: a /detokenize answer renders its
        text from the model's tokenizer as it is sent; the model it names
        was let go before, and unloading it for another model freed the
        tokenizer under the answer (the daemon crashed).  The tokenizer is
        the daemon's, not the loaded model's, and holds no model: the
        other model loads in its place meanwhile, and the answer is whole."""
        srv = self.start("detok", TINY, ["--model", "small=" + SMALL,
                                         "--models-max", "1", "--threads",
                                         "1", "--max-body", "8M"])
        c = srv.client()
        # 66 bytes of text each: 26 MB, far more than the sockets' buffers
        # hold (a small receive buffer would make the rest crawl)
        n = 400000
        body = json.dumps({"model": "tiny", "tokens": [38093] * n}).encode()
        sock = socket.create_connection(("127.0.0.1", srv.port))
        try:
            sock.sendall(http_request("POST", "/detokenize", body))
            head, _ = read_raw(sock, until=lambda d: b"\r\n\r\n" in d,
                               size=1)
            self.assertIn(b" 200 ", head.split(b"\r\n")[0])
            r = c.post("/v1/completions", {"model": "small", "prompt": "Hi",
                                           "max_tokens": 2})
            self.assertEqual(r.status, 200, r)
            self.assertEqual(states(c), {"tiny": "unloaded",
                                         "small": "loaded"})
            want = ('{"content":"' + (" " + "=" * 65) * n + '"}').encode()
            data = bytearray()
            sock.settimeout(60)
            while len(data) < len(want):
                chunk = sock.recv(1 << 20)
                if not chunk:
                    break
                data += chunk
        finally:
            sock.close()
        self.assertEqual(bytes(data), want)
        self.assertEqual(states(c), {"tiny": "unloaded", "small": "loaded"})

    def test_deleting_a_session_reaches_an_unloaded_models_disk_tier(self):
        """Attack on this issue, finding 2: a session of a model unloaded
        since (its history on the model's disk tier) was not found by
        DELETE (404), and came back when the model loaded again."""
        kv = os.path.join(WORKDIR, "delete-kv")
        srv = self.start("delete", TINY, ["--model", "small=" + SMALL,
                                          "--models-max", "1", "--threads",
                                          "1", "--kv-cache-dir", kv])
        c = srv.client()
        c.complete(model="small", prompt="One two three four five",
                   max_tokens=2, session_id="private")
        c.complete(model="tiny", prompt="Hello", max_tokens=2)
        self.assertEqual(states(c), {"tiny": "loaded", "small": "unloaded"})
        r = c.delete("/v1/sessions/private")
        self.assertEqual((r.status, r.json.get("deleted")), (200, True), r)
        c.complete(model="small", prompt="Hello", max_tokens=2)
        self.assertEqual(c.get("/v1/sessions").json["data"], [])
        self.assertEqual(c.delete("/v1/sessions/private").status, 404)

    def test_a_broken_model_is_500_and_the_others_serve_on(self):
        srv = self.start("broken", TINY, ["--models-dir", broken_models_dir(),
                                          "--threads", "1"])
        c = srv.client()
        for _ in range(2):  # and again: a failed load leaves nothing held
            e = self.assert_error(
                c.post("/v1/completions", {"model": "broken", "prompt": "Hi"}),
                500, "model")
            self.assertEqual(e["code"], "model_load_failed")
            # the reason names the operator's files: the log has it
            self.assertNotIn(broken_models_dir(), e["message"])
        self.assertIn("model broken could not be loaded from", self.log_of(srv))
        self.assertIn("model.safetensors", self.log_of(srv))
        self.assertEqual(states(c), {"tiny": "loaded", "broken": "unloaded"})
        r = c.post("/v1/completions", {"model": "tiny", "prompt": "Hi",
                                       "max_tokens": 2})
        self.assertEqual(r.status, 200)


def draft_copy():
    """A copy of tiny in another directory: a draft that is the model."""
    d = os.path.join(WORKDIR, "tiny-copy")
    if not os.path.isdir(d):
        shutil.copytree(TINY, d)
    return d


class Drafts(ModelsCase):
    """tiny drafted for by a copy of itself, small (context 33) by tiny
    (context 64) and wide by small (context 33 for wide's 40), every
    guess verified whatever it costs (--test-speculate-always)."""

    def daemon(self):
        return self.start("drafts", TINY, [
            "--model", "small=" + SMALL, "--model", "wide=" + WIDE,
            "--draft", "tiny=" + draft_copy(), "--draft",
            "small=tiny", "--draft", "wide=small", "--threads", "2",
            "--slots", "3", "--test-speculate-always=true"])

    def test_answers_are_each_models_own_with_a_draft(self):
        srv = self.daemon()
        c = srv.client()
        listed = {m["id"]: m.get("draft") for m in
                  c.get("/v1/models").json["data"]}
        self.assertEqual(listed, {"tiny": "tiny-copy", "small": "tiny",
                                  "wide": "small"})
        accepted = {}
        for key, (name, directory) in enumerate(
                (("tiny", TINY), ("small", SMALL), ("wide", WIDE))):
            prompt, want = greedy_case(directory, 10 + key, 5, 12)
            body = {"model": name, "prompt": prompt, "max_tokens": 12,
                    "temperature": 0, "return_token_ids": True}
            with self.subTest(model=name, kind="whole, n=2"):
                r = c.complete(**dict(body, n=2))
                for ch in r["choices"]:
                    self.assertEqual(ch["token_ids"], want)
                details = r["usage"]["completion_tokens_details"]
                accepted[name] = details["accepted_prediction_tokens"]
                self.assertGreater(details["accepted_prediction_tokens"] +
                                   details["rejected_prediction_tokens"], 0)
            with self.subTest(model=name, kind="streamed"):
                self.assertEqual(streamed_ids(c, "/v1/completions", body),
                                 want)
            with self.subTest(model=name, kind="a session's two turns"):
                first = c.complete(**dict(body, session_id="s" + name))
                self.assertEqual(first["choices"][0]["token_ids"], want)
                turn = prompt + want + prompt[:3]
                ref, _ = greedy(directory, turn, 6)
                second = c.complete(**dict(body, prompt=turn, max_tokens=6,
                                           session_id="s" + name))
                self.assertEqual(second["choices"][0]["token_ids"], ref)
                self.assertGreaterEqual(
                    second["usage"]["prompt_tokens_details"]["cached_tokens"],
                    len(prompt) + len(want) - 1)
        # tiny's own guesses hold: after the prompt's step, every token of
        # both sequences but those past the last step's guesses
        self.assertGreaterEqual(accepted["tiny"], 2 * 6)
        m = c.metrics()
        self.assertGreater(m["gpt2d_spec_draft_model_passes_total"], 0)
        self.assertGreater(m["gpt2d_spec_draft_model_seconds_total"], 0)

    def test_seeded_sampling_is_the_same_with_and_without(self):
        srv = self.daemon()
        c = srv.client()
        for name in ("tiny", "wide"):
            body = {"model": name, "prompt": "The rain in Spain",
                    "max_tokens": 16, "temperature": 0.9, "seed": 77,
                    "n": 2, "frequency_penalty": 0.3,
                    "return_token_ids": True}
            on = c.complete(**body)
            off = c.complete(**dict(body, speculative=False))
            with self.subTest(model=name):
                self.assertEqual([ch["token_ids"] for ch in on["choices"]],
                                 [ch["token_ids"] for ch in off["choices"]])
                self.assertEqual(
                    off["usage"]["completion_tokens_details"]
                    ["rejected_prediction_tokens"], 0)
                streamed = streamed_ids(c, "/v1/completions",
                                        dict(body, n=1))
                self.assertEqual(streamed, on["choices"][0]["token_ids"])


class RefusedAtStart(Case):
    def refused(self, args):
        p = subprocess.run([GPT2D, "--port", "0", "--threads", "1"] + args,
                           capture_output=True, timeout=60)
        return p.returncode, p.stderr.decode() + p.stdout.decode()

    def test_bad_model_lists_are_refused_with_the_reason(self):
        empty = os.path.join(WORKDIR, "empty-models-dir")
        os.makedirs(empty, exist_ok=True)
        cases = [
            (["--model", TINY, "--model", TINY], "two models are called 'tiny'"),
            (["--model", "a b=" + TINY], "model id 'a b'"),
            (["--model", TINY, "--models-memory", "1M"],
             "more than --models-memory"),
            (["--models-dir", empty], "holds no model"),
            (["--model", "..=" + TINY], "model id '..'"),
            (["--model", ".hidden=" + TINY], "model id '.hidden'"),
            (["--model", "gpt2d.lock=" + TINY], "model id 'gpt2d.lock'"),
            (["--model", "a.kv=" + TINY], "model id 'a.kv'"),
            # a --models-dir model the KV budget cannot serve: at start
            (["--model", TINY, "--models-dir", long_models_dir(),
              "--kv-memory", "512k"],
             "cannot hold one full context: that takes %d bytes (%.1f "
             "MB) for model long" % (64 * TINY_BLOCK, 64 * TINY_BLOCK / 2**20)),
            (["--model", TINY, "--draft", "nope=" + SMALL],
             "--draft nope=%s: there is no model 'nope'" % SMALL),
            (["--model", TINY, "--model", "small=" + SMALL, "--draft",
              "tiny=tiny"], "a model cannot draft for itself"),
            (["--model", TINY, "--draft", TINY],
             "a model cannot draft for itself"),
            (["--model", TINY, "--draft", "tiny="],
             "--draft tiny=: the draft needs a value"),
            (["--model", TINY, "--model", "small=" + SMALL, "--draft",
              "small", "--draft", "tiny=" + WIDE],
             "model tiny has a draft already (small)"),
        ]
        for args, words in cases:
            with self.subTest(args=args):
                rc, out = self.refused(args)
                self.assertEqual(rc, 2, out)
                self.assertIn(words, out)
                self.assertEqual(len(out.strip().splitlines()), 1, out)


class TokenizerRefusedAtStart(Case):
    def test_a_model_whose_tokenizer_cannot_be_read_stops_the_start(self):
        """Every model's tokenizer is read at start, also a --models-dir
        model's that would load only on first use: a directory whose
        tokenizer is missing, malformed or larger than the model's
        vocabulary stops the daemon (exit 1, as a bad file of a model
        loaded at start does; one line naming it)."""
        weights = ("config.json", "model.safetensors")
        no_vocab = model_dir_of("no-vocab", weights + ("merges.txt",))
        no_merges = model_dir_of("no-merges", weights + ("vocab.json",))
        larger = model_dir_of(
            "larger", weights + ("vocab.json", "merges.txt"),
            lambda config: config.update(vocab_size=50000))
        cases = [
            (no_vocab, os.path.join(no_vocab, "no-vocab", "vocab.json")),
            (no_merges, os.path.join(no_merges, "no-merges", "merges.txt")),
            (larger, "tokenizer has 50257 tokens but the model only 50000"),
        ]
        for directory, words in cases:
            with self.subTest(directory=directory):
                p = subprocess.run(
                    [GPT2D, "--port", "0", "--threads", "1", "--model", TINY,
                     "--models-dir", directory],
                    capture_output=True, timeout=60)
                out = p.stderr.decode() + p.stdout.decode()
                self.assertEqual(p.returncode, 1, out)
                self.assertIn(words, out)
                self.assertEqual(len(out.strip().splitlines()), 1, out)


if __name__ == "__main__":
    sys.exit(run_module(__name__, sys.argv[1:], "models_tests",
                        os.environ.get("GPT2D_MODELS_SUMMARY")))
