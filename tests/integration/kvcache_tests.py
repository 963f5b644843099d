"""kvcache_tests.py — the KV cache's tiers against real gpt2d processes on
127.0.0.1 (run by tests/integration/test_kvcache.sh).

    GPT2D_KVCACHE_WORKDIR           scratch directory (logs, cache dirs, a model)
    GPT2D_BUILDDIR, GPT2D_SRCDIR, GPT2D_TEST_DATA
    GPT2D_KVCACHE_SUMMARY           optional: file that receives "PASSED FAILED"

    kvcache_tests.py [SUBSTRING...] only the tests whose name contains one

Every answer is checked against the same request run cold (a cache_salt no
other request used: nothing can be reused), so a block restored wrongly
would show as a different text.  Servers run with 8 blocks of RAM (two
contexts of the tiny model) so that sessions spill to disk:
  Restart          conversations come back after SIGTERM and a restart, from
                   disk, and answer as cold runs do.
  Faults           kill -9 during writes; a corrupted and a truncated block
                   file; a cache directory of another model; a disk that
                   refuses writes (a file-size limit): each serves correct
                   answers and says what it skipped.
  Identity         the directory of a model of the same shape with other
                   weights, of --matmul panels under blas, of other panel
                   kernels: nothing reused, answers (text and logprobs) as
                   cold; the same model restarted, or kernels that give the
                   same bits, reuse it all.
  Budgets          RAM never above --kv-memory, the directory never above
                   --kv-disk.
  SharedContext    a prompt array of 4 prompts over one 400-token context
                   computes it once.
  Sharing          between two API keys: one key's long prompts leave the
                   other's session history (its share of the memory), and
                   each key's sessions are counted against its own quota.
  Directory        one daemon per cache directory (a second exits 2 naming
                   the first's PID), a directory others can write to is
                   refused, and links planted at the names of the files the
                   daemon writes are not followed (issue 25, items 3 and 4).
"""

import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from gpt2d_client import NO_EOT, Server, metric_sum  # noqa: E402
from testlib import (GPT2D, SRCDIR, TINY, Case,  # noqa: E402
                     long_context_model, run_module, wait_for)

WORKDIR = os.environ.get("GPT2D_KVCACHE_WORKDIR", tempfile.gettempdir())
# A block of tiny (2 layers x 64) in RAM: K/V of 16 positions, then their
# scores (kv_layout.h: 40 + 16 x 168 bytes and a 64-float residual, to a
# whole number of 64-byte lines).
SCORES = (40 + 16 * 168 + 64 * 4 + 63) // 64 * 64
BLOCK = 2 * 2 * 64 * 16 * 4 + SCORES
BLOCK_FILE = 256 + BLOCK                # header + the block
RAM = 8 * (BLOCK_FILE - 256)            # 8 blocks: two of tiny's contexts


def history(user, n=40):
    return [1000 * (user + 1) + i for i in range(n)]


class CacheCase(Case):
    """Starts servers on a cache directory of its own per test."""

    def setUp(self):
        self.dir = os.path.join(WORKDIR, "cache-" + self._testMethodName)
        shutil.rmtree(self.dir, ignore_errors=True)
        self.servers = []

    def tearDown(self):
        for s in self.servers:
            s.kill()

    def server(self, name, extra=(), disk="4M", model=TINY, binary=GPT2D,
               ram=RAM, env=None):
        args = ["--slots", "2", "--threads", "1", "--kv-memory", str(ram),
                "--kv-cache-dir", self.dir, "--kv-disk", disk] + list(extra)
        s = Server(binary, model, WORKDIR, args, env=env, name=name).start()
        self.servers.append(s)
        return s

    def stop(self, s):
        rc, _ = s.stop()
        self.assertEqual(rc, 0, s.log_tail())
        self.assert_clean_log(s)

    def turn(self, c, prompt, session=None, **kw):
        body = dict(prompt=prompt, max_tokens=4, temperature=0,
                    logit_bias=NO_EOT)
        body.update(kw)
        if session is not None:
            body["session_id"] = session
        r = c.post("/v1/completions", body)
        self.assertEqual(r.status, 200, r)
        return r.json["choices"][0]["text"], \
            r.json["usage"]["prompt_tokens_details"]["cached_tokens"]

    def echo_scores(self, c, prompt, **kw):
        """The prompt's scores (echo, 3 alternatives a token, nothing
        generated) and cached_tokens."""
        body = dict(prompt=prompt, max_tokens=0, echo=True, logprobs=3)
        body.update(kw)
        r = c.post("/v1/completions", body)
        self.assertEqual(r.status, 200, r)
        lp = r.json["choices"][0]["logprobs"]
        return ((lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]),
                r.json["usage"]["prompt_tokens_details"]["cached_tokens"])

    def cold(self, c, prompt, **kw):
        """The same request with nothing reusable (its own cache_salt)."""
        self.salt = getattr(self, "salt", 0) + 1
        text, cached = self.turn(c, prompt, cache_salt="cold-%d" % self.salt,
                                 **kw)
        self.assertEqual(cached, 0)
        return text

    def log(self, s):
        with open(s.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def files(self):
        return sorted(glob.glob(os.path.join(self.dir, "*.kv")))

    def disk_used(self):
        """Bytes of the block files; one the I/O thread deletes between the
        listing and its size holds nothing."""
        used = 0
        for p in self.files():
            try:
                used += os.path.getsize(p)
            except FileNotFoundError:
                pass
        return used

    def fill(self, s, users=6):
        """Six sessions of 40 tokens + 4: more than RAM holds."""
        c = s.client()
        for u in range(users):
            self.turn(c, history(u), session="u%d" % u)


class Restart(CacheCase):

    def test_conversations_come_back_after_a_restart(self):
        s = self.server("restart-1")
        self.fill(s)
        m = s.client().metrics()
        self.assertGreater(metric_sum(m, "gpt2d_kv_disk_writes_total"), 0)
        # where each history is: 43 tokens (40 + 3 generated ones fed back),
        # the oldest users' on disk, the newest in RAM -- once the I/O
        # thread has written what eviction queued (on a loaded machine it
        # can trail the last request)
        def where():
            data = s.client().get("/v1/sessions").json["data"]
            listed = {x["id"]: x for x in data}
            done = len(listed) == 6 and all(
                x["cached"]["ram"] + x["cached"]["disk"] == 43
                for x in listed.values())
            return listed if done else None
        listed = wait_for(where, 10) or \
            {x["id"]: x for x in s.client().get("/v1/sessions").json["data"]}
        for u in range(6):
            x = listed["u%d" % u]
            self.assertEqual(x["n_tokens"], 43, x)
            self.assertEqual(x["cached"]["ram"] + x["cached"]["disk"], 43, x)
        self.assertEqual(listed["u0"]["cached"], {"ram": 0, "disk": 43})
        self.assertEqual(listed["u5"]["cached"], {"ram": 43, "disk": 0})
        self.stop(s)
        s = self.server("restart-2")
        self.assertIn("KV disk: ", self.log(s))
        c = s.client()
        # the sessions are listed again, their history all on disk
        listed = {x["id"]: x for x in c.get("/v1/sessions").json["data"]}
        for u in range(6):
            self.assertEqual(listed["u%d" % u]["cached"], {"ram": 0, "disk": 43})
        for u in range(6):
            prompt = history(u) + [7, 8]
            text, cached = self.turn(c, prompt, session="u%d" % u)
            self.assertEqual(cached, 40, u)     # 40 of the 42: whole history
            self.assertEqual(text, self.cold(c, prompt), u)
        m = c.metrics()
        # RAM starts empty: every history came from disk
        self.assertEqual(
            metric_sum(m, 'gpt2d_kv_hit_tokens_total{tier="disk"}'), 6 * 40)
        self.assertGreater(metric_sum(m, "gpt2d_kv_disk_reads_total"), 0)
        self.stop(s)

    def test_a_session_deleted_is_gone_from_disk_too(self):
        s = self.server("delete")
        self.fill(s)
        c = s.client()
        self.assertIn(c.delete("/v1/sessions/u0").status, (200, 204))
        _, cached = self.turn(c, history(0) + [7], session="u0")
        self.assertEqual(cached, 0)
        self.stop(s)


class Faults(CacheCase):

    def test_kill_9_during_writes_then_restart(self):
        s = self.server("kill-1")
        c = s.client()
        for u in range(6):                      # evictions: writes under way
            self.turn(c, history(u), session="u%d" % u)
        s.kill()
        # as a write cut short leaves it: a temporary file
        with open(os.path.join(self.dir, "0" * 64 + ".part"), "wb") as f:
            f.write(b"GPT2DKV\0" + b"\1" * 100)
        s = self.server("kill-2")
        self.assertRegex(self.log(s), r"[1-9][0-9]* torn")
        self.assertEqual(glob.glob(os.path.join(self.dir, "*.part")), [])
        c = s.client()
        for u in range(6):
            prompt = history(u) + [9]
            text, _ = self.turn(c, prompt, session="u%d" % u)
            self.assertEqual(text, self.cold(c, prompt), u)
        self.stop(s)

    def test_corrupted_and_truncated_block_files(self):
        s = self.server("damage-1")
        self.fill(s)
        self.stop(s)
        files = self.files()
        self.assertGreaterEqual(len(files), 6)
        # every block's data damaged in one byte, one file cut short
        for path in files[1:]:
            with open(path, "r+b") as f:
                f.seek(256 + 1000)
                b = f.read(1)
                f.seek(256 + 1000)
                f.write(bytes([b[0] ^ 0x40]))
        with open(files[0], "r+b") as f:
            f.truncate(300)
        sessions = glob.glob(os.path.join(self.dir, "sessions-*"))
        self.assertEqual(len(sessions), 1, sessions)
        with open(sessions[0], "r+b") as f:
            f.seek(60)
            b = f.read(1)
            f.seek(60)
            f.write(bytes([b[0] ^ 1]))
        s = self.server("damage-2")
        self.assertIn("1 damaged files removed", self.log(s))
        self.assertRegex(self.log(s),
                         r"sessions-[0-9a-f]{16} does not check out")
        c = s.client()
        for u in range(6):
            prompt = history(u) + [5, 6]
            text, _ = self.turn(c, prompt, session="u%d" % u)
            self.assertEqual(text, self.cold(c, prompt), u)
        m = c.metrics()
        self.assertGreater(metric_sum(m, 'gpt2d_kv_disk_errors_total{op="read"}'), 0)
        self.assertIn("did not check out", self.log(s))
        self.stop(s)

    def test_a_cache_dir_of_another_model_is_ignored(self):
        other = long_context_model(os.path.join(WORKDIR, "other-model"), TINY, 11)
        s = self.server("other-1", model=other, ram=2 * 64 * (BLOCK_FILE - 256))
        self.fill(s)
        self.stop(s)
        theirs = self.files()
        self.assertGreater(len(theirs), 0)
        s = self.server("other-2")
        self.assertIn("%d of other models or settings ignored" % len(theirs),
                      self.log(s))
        c = s.client()
        prompt = history(0) + [1]
        text, cached = self.turn(c, prompt, session="u0")
        self.assertEqual(cached, 0)
        self.assertEqual(text, self.cold(c, prompt))
        self.stop(s)
        for path in theirs:                     # left alone, not ours to delete
            self.assertTrue(os.path.exists(path), path)

    def test_a_disk_that_refuses_writes(self):
        # every block file is over the file-size limit: each write fails
        wrapper = os.path.join(WORKDIR, "gpt2d-fsize")
        with open(wrapper, "w", encoding="ascii") as f:
            f.write("#!/bin/sh\nexec prlimit --fsize=%d -- %s \"$@\"\n"
                    % (BLOCK_FILE - 1000, GPT2D))
        os.chmod(wrapper, 0o755)
        if shutil.which("prlimit") is None:
            self.skipTest("prlimit (util-linux) not installed")
        s = self.server("full", binary=wrapper)
        self.fill(s)
        c = s.client()
        for u in range(6):
            prompt = history(u) + [3]
            text, _ = self.turn(c, prompt, session="u%d" % u)
            self.assertEqual(text, self.cold(c, prompt), u)
        # a block counts on disk from its queueing until its write fails:
        # wait for the I/O thread to try every queued write
        wait_for(lambda: metric_sum(c.metrics(), "gpt2d_kv_disk_blocks") == 0, 10)
        m = c.metrics()
        self.assertGreater(metric_sum(m, 'gpt2d_kv_disk_errors_total{op="write"}'), 0)
        self.assertEqual(metric_sum(m, "gpt2d_kv_disk_blocks"), 0)
        self.assertIn("cannot write", self.log(s))
        self.assertEqual(self.files(), [])
        s.kill()


def tiny_shaped(seed):
    """A model of tiny's shape and vocabulary (2 layers, 4 heads, 64 wide,
    64 positions: the same config.json, the same block files) with other
    weights, from `seed`, made once."""
    out = os.path.join(WORKDIR, "tiny-shaped-%d" % seed)
    if not os.path.exists(os.path.join(out, "model.safetensors")):
        subprocess.run(
            [sys.executable, os.path.join(SRCDIR, "tests", "reference",
                                          "make_model.py"),
             out, "--vocab-dir", TINY, "--n-layer", "2", "--n-head", "4",
             "--n-embd", "64", "--n-ctx", "64", "--seed", str(seed)],
            check=True, stdout=subprocess.DEVNULL,
            env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
    return out


def cpu_has(flag):
    with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
        return any(flag in line.split() for line in f
                   if line.startswith("flags"))


class Identity(CacheCase):
    """Issue 25: the disk tier's files were keyed by the model's shapes and
    dtypes, not its weights nor the kernels: a same-shaped model, or blas
    after panels, took another's keys and values for its own."""

    def scored(self, c, prompt, session=None, salt=None):
        """text, logprobs (5 alternatives a token) and cached_tokens of a
        greedy turn."""
        body = dict(prompt=prompt, max_tokens=4, temperature=0,
                    logit_bias=NO_EOT, logprobs=5)
        if session is not None:
            body["session_id"] = session
        if salt is not None:
            body["cache_salt"] = salt
        r = c.post("/v1/completions", body)
        self.assertEqual(r.status, 200, r)
        choice = r.json["choices"][0]
        return (choice["text"], choice["logprobs"],
                r.json["usage"]["prompt_tokens_details"]["cached_tokens"])

    def assert_as_cold(self, s, users, cached):
        """Each user's next turn reuses `cached` tokens and answers, text
        and logprobs to the bit (JSON carries 17 digits), as the same
        request with nothing to reuse."""
        c = s.client()
        for u in users:
            prompt = history(u) + [1]
            text, logprobs, got = self.scored(c, prompt, session="u%d" % u)
            self.assertEqual(got, cached, u)
            self.salt = getattr(self, "salt", 0) + 1
            cold = self.scored(c, prompt, salt="cold-%d" % self.salt)
            self.assertEqual(cold[2], 0)
            self.assertEqual((text, logprobs), cold[:2], u)

    def foreign(self, s):
        found = re.search(r"(\d+) of other models or settings ignored",
                          self.log(s))
        self.assertIsNotNone(found, s.log_tail())
        return int(found.group(1))

    def fill_and_stop(self, name, **kw):
        """Six sessions under a server of `kw`, stopped: their files."""
        s = self.server(name, **kw)
        self.fill(s)
        self.stop(s)
        files = self.files()
        self.assertGreater(len(files), 0)
        return files

    def test_a_model_with_other_weights_reuses_nothing(self):
        theirs = self.fill_and_stop("weights-1")
        s = self.server("weights-2", model=tiny_shaped(25))
        self.assertEqual(self.foreign(s), len(theirs))
        self.assertEqual(s.client().get("/v1/sessions").json["data"], [])
        self.assert_as_cold(s, (0, 5), 0)
        self.stop(s)
        for path in theirs:                     # left alone, not ours
            self.assertTrue(os.path.exists(path), path)

    def test_matmul_blas_after_panels_reuses_nothing(self):
        theirs = self.fill_and_stop("blas-1", extra=["--matmul", "panels"])
        s = self.server("blas-2", extra=["--matmul", "blas"])
        self.assertEqual(self.foreign(s), len(theirs))
        self.assert_as_cold(s, (0, 5), 0)
        self.stop(s)

    def test_scores_come_back_from_disk(self):
        """A scored prompt's blocks keep their scores on disk: after a
        restart the same scoring request reads its two full blocks back
        and its scores are the same as before, and as a cold run's."""
        prompt = [400 + (i * 17) % 5000 for i in range(40)]
        s = self.server("scored-1")
        first, cached = self.echo_scores(s.client(), prompt)
        self.assertEqual(cached, 0)
        self.stop(s)
        s = self.server("scored-2")
        c = s.client()
        again, cached = self.echo_scores(c, prompt)
        self.assertEqual(cached, 32)
        self.assertEqual(again, first)
        self.assertGreaterEqual(
            metric_sum(c.metrics(), 'gpt2d_kv_hit_tokens_total{tier="disk"}'),
            32)
        cold, cached = self.echo_scores(c, prompt, cache_salt="cold")
        self.assertEqual(cached, 0)
        self.assertEqual(cold, first)
        self.stop(s)

    def test_no_scores_from_the_cache_under_blas(self):
        """blas rounds a row by the rows beside it: a kept score would not
        be what a cold run computes, so scoring computes every position
        there, every time."""
        prompt = [500 + (i * 7) % 5000 for i in range(40)]
        s = self.server("blas", extra=["--matmul", "blas"])
        c = s.client()
        for _ in range(2):
            r = c.post("/v1/completions", dict(prompt=prompt, max_tokens=0,
                                               echo=True, logprobs=2))
            self.assertEqual(r.status, 200, r)
            self.assertEqual(
                r.json["usage"]["prompt_tokens_details"]["cached_tokens"], 0)
        self.assertEqual(metric_sum(c.metrics(), "gpt2d_kv_blocks_scored"), 0)
        self.stop(s)

    def test_part_of_a_scored_block_read_back_keeps_no_scores(self):
        """The attack on scoring from the cache: a plain request reads
        back only part of a scored block (8 of its positions) and fills it
        with other tokens; the block it makes is not scored, so a scoring
        request over that text reuses only the first block and its scores
        are a cold run's (they were the first prompt's)."""
        first = [1000 + 3 * i for i in range(33)]
        plain = first[:24] + [20000 + i for i in range(16)]
        later = plain[:32] + [777, 778]

        s = self.server("partial-1")
        self.echo_scores(s.client(), first)
        self.stop(s)
        s = self.server("partial-2")
        c = s.client()
        self.turn(c, plain, max_tokens=1)
        warm, cached = self.echo_scores(c, later)
        self.assertEqual(cached, 16)
        cold, _ = self.echo_scores(c, later, cache_salt="cold")
        self.assertEqual(warm, cold)
        self.stop(s)

    def test_the_same_model_restarted_reuses_its_cache(self):
        """Also after another model ran on the directory: its files, and
        its sessions' file, are still ours."""
        ours = self.fill_and_stop("again-1")
        s = self.server("again-2", model=tiny_shaped(25))
        self.assert_as_cold(s, (1,), 0)
        self.stop(s)
        theirs = len(self.files()) - len(ours)
        self.assertGreater(theirs, 0)
        s = self.server("again-3")
        self.assertEqual(self.foreign(s), theirs)
        listed = {x["id"] for x in s.client().get("/v1/sessions").json["data"]}
        self.assertEqual(listed, {"u%d" % u for u in range(6)})
        self.assert_as_cold(s, (0, 5), 40)      # the whole history
        self.stop(s)

    def test_panel_kernels_share_a_cache_where_their_bits_are_the_same(self):
        """AVX2 and AVX-512 tiles give the same bits, so one's cache is the
        other's; the portable kernels' differ, so theirs is not."""
        if not cpu_has("avx2"):
            self.skipTest("no AVX2: only the portable kernels run here")
        theirs = self.fill_and_stop("isa-1", env={"GPT2D_ISA": "avx2"})
        if cpu_has("avx512f"):
            s = self.server("isa-2", env={"GPT2D_ISA": "avx512"})
            self.assertEqual(self.foreign(s), 0)
            self.assert_as_cold(s, (0, 5), 40)
            self.stop(s)
        s = self.server("isa-3", env={"GPT2D_ISA": "portable"})
        self.assertGreaterEqual(self.foreign(s), len(theirs))
        self.assert_as_cold(s, (0, 5), 0)
        self.stop(s)


class Budgets(CacheCase):

    def test_ram_and_disk_stay_within_their_budgets(self):
        disk = 12 * BLOCK_FILE + 100
        s = self.server("budget", disk=str(disk))
        c = s.client()
        for u in range(20):
            self.turn(c, history(u), session="u%d" % u)
            used = self.disk_used()
            self.assertLessEqual(used, disk)
        m = c.metrics()
        self.assertLessEqual(metric_sum(m, 'gpt2d_kv_bytes{tier="ram"}'), RAM)
        self.assertLessEqual(metric_sum(m, 'gpt2d_kv_bytes{tier="disk"}'), disk)
        self.assertGreater(metric_sum(m, "gpt2d_kv_disk_evictions_total"), 0)
        self.stop(s)                            # writes out RAM: still within
        used = self.disk_used()
        self.assertLessEqual(used, disk)


    def test_a_request_larger_than_the_cache_is_400_not_a_wedged_queue(self):
        """The attack pass: with one context of KV memory, n = 2 sequences
        that may grow to 54 positions need 8 blocks of 4.  It used to queue,
        never begin, and hold up everyone behind it."""
        s = self.server("too-large", ram=RAM // 2)
        c = s.client()
        r = c.post("/v1/completions", {"prompt": "Hello world", "max_tokens": 50,
                                       "n": 2})
        self.assert_error(r, 400, "max_tokens")
        self.assertIn("the cache holds 4", r.json["error"]["message"])
        text, _ = self.turn(c, [1, 2, 3])       # the queue is free
        self.assertIsInstance(text, str)
        self.stop(s)


class SharedContext(CacheCase):

    def test_prompt_array_over_one_context_computes_it_once(self):
        model = long_context_model(os.path.join(WORKDIR, "long-model"), TINY, 5)
        s = Server(GPT2D, model, WORKDIR,
                   ["--slots", "4", "--threads", "1", "--max-n", "4"],
                   name="shared").start()
        self.servers.append(s)
        c = s.client()
        # max_tokens 1 is lm-eval's shape: the first prompt ends in the step
        # that computes the context, and the others still pick it up
        for max_tokens in (4, 1):
            with self.subTest(max_tokens=max_tokens):
                context = [100 + max_tokens + (i * 7) % 5000
                           for i in range(400)]
                prompts = [context + [9000 + 3 * k, 9001 + 3 * k]
                           for k in range(4)]
                r = c.post("/v1/completions",
                           dict(prompt=prompts, max_tokens=max_tokens,
                                temperature=0, logit_bias=NO_EOT))
                self.assertEqual(r.status, 200, r)
                # the first computes the 400 tokens; the other three reuse
                self.assertGreaterEqual(
                    r.json["usage"]["prompt_tokens_details"]["cached_tokens"],
                    3 * 400)
                texts = {ch["index"]: ch["text"] for ch in r.json["choices"]}
                for k, p in enumerate(prompts):
                    self.assertEqual(
                        texts[k], self.cold(c, p, max_tokens=max_tokens), k)
        self.stop(s)

    def test_scoring_a_shared_context_computes_it_once(self):
        """Echo scoring (lm-eval's log-likelihoods: echo, logprobs,
        max_tokens 0) and echo with 1 or 16 tokens: a prompt array of 4
        over one 400-token context, then 4 requests one after another over
        another, reuse the context (every full block of it after the
        first: 3 x 400 and 400 each, 95 % at least) with every logprob and
        top_logprobs entry the same as a cold run's (its own cache_salt),
        the first token after the reused blocks included."""
        model = long_context_model(os.path.join(WORKDIR, "long-model"), TINY, 5)
        s = Server(GPT2D, model, WORKDIR,
                   ["--slots", "4", "--threads", "1", "--max-n", "4"],
                   name="scored").start()
        self.servers.append(s)
        c = s.client()

        def scored(prompt, max_tokens, salt=None):
            body = dict(prompt=prompt, max_tokens=max_tokens, echo=True,
                        logprobs=5, temperature=0, logit_bias=NO_EOT)
            if salt is not None:
                body["cache_salt"] = salt
            r = c.post("/v1/completions", body)
            self.assertEqual(r.status, 200, r)
            return r.json

        def scores(choice):
            lp = choice["logprobs"]
            return (lp["tokens"], lp["token_logprobs"], lp["top_logprobs"],
                    choice["text"])

        for max_tokens in (0, 1, 16):
            with self.subTest(max_tokens=max_tokens, shape="array"):
                context = [200 + max_tokens + (i * 11) % 5000
                           for i in range(400)]
                prompts = [context + [9000 + 3 * k, 9001 + 3 * k]
                           for k in range(4)]
                r = scored(prompts, max_tokens)
                self.assertGreaterEqual(
                    r["usage"]["prompt_tokens_details"]["cached_tokens"],
                    3 * 400 * 95 // 100)
                # the context's 25 full blocks keep their scores
                self.assertGreaterEqual(
                    metric_sum(c.metrics(), "gpt2d_kv_blocks_scored"), 25)
                by_index = {ch["index"]: ch for ch in r["choices"]}
                for k, p in enumerate(prompts):
                    cold = scored(p, max_tokens, salt="array-%d-%d" % (
                        max_tokens, k))
                    self.assertEqual(
                        cold["usage"]["prompt_tokens_details"]["cached_tokens"],
                        0)
                    self.assertEqual(scores(by_index[k]),
                                     scores(cold["choices"][0]), k)
            with self.subTest(max_tokens=max_tokens, shape="one by one"):
                context = [300 + max_tokens + (i * 13) % 5000
                           for i in range(400)]
                for k in range(4):
                    p = context + [9100 + k]
                    r = scored(p, max_tokens)
                    cached = r["usage"]["prompt_tokens_details"]["cached_tokens"]
                    if k == 0:
                        self.assertEqual(cached, 0)
                    else:
                        self.assertGreaterEqual(cached, 400 * 95 // 100)
                    cold = scored(p, max_tokens, salt="seq-%d-%d" % (
                        max_tokens, k))
                    self.assertEqual(scores(r["choices"][0]),
                                     scores(cold["choices"][0]), k)
        self.stop(s)


class Sharing(CacheCase):
    """Two API keys on the long-context model (1024 positions) with KV
    memory for two contexts (128 blocks) and no disk tier."""

    ALICE = "sk-kv-alice-%d" % os.getpid()
    BOB = "sk-kv-bob-%d" % os.getpid()
    LONG_BLOCK = BLOCK                  # 2 layers x 64, as tiny's

    def keyed_server(self, name, extra=(), env=None):
        keys = os.path.join(WORKDIR, "sharing-keys")
        with open(keys, "w", encoding="ascii") as f:
            f.write("%s\n%s\n" % (self.ALICE, self.BOB))
        model = long_context_model(os.path.join(WORKDIR, "long-model"), TINY, 5)
        s = Server(GPT2D, model, WORKDIR,
                   ["--slots", "2", "--threads", "1", "--api-key-file", keys,
                    "--kv-memory", str(2 * 64 * self.LONG_BLOCK)] + list(extra),
                   env=env, name=name).start()
        self.servers.append(s)
        return s

    def test_another_keys_long_prompts_leave_a_sessions_history(self):
        """Finding 4 of the attack pass: requests of another key evicted a
        session's cache (cached_tokens 500 -> 0 on the owner's next turn).
        Bob's 8 distinct prompts of 1000 tokens, two at a time, are four
        times what the cache holds; Alice's 500-token history (32 blocks,
        under her share of 64) stays whole."""
        s = self.keyed_server("sharing")
        alice = s.client(api_key=self.ALICE)
        bob = s.client(api_key=self.BOB)
        history = [100 + (i * 13) % 5000 for i in range(500)]
        self.turn(alice, history, session="chat")
        # Alice reads her answer: idle, she no longer keeps Bob to half of
        # the slots (the engine's 1 s grace), and his two run at once
        time.sleep(1.5)
        prompts = [[6000 + 97 * k + (i * 7) % 3000 for i in range(1000)]
                   for k in range(8)]
        with ThreadPoolExecutor(2) as pool:
            for _, cached in pool.map(lambda p: self.turn(bob, p), prompts):
                self.assertEqual(cached, 0)
        m = alice.metrics()
        self.assertEqual(metric_sum(m, 'gpt2d_kv_accounts{tier="ram"}'), 2)
        self.assertEqual(metric_sum(m, 'gpt2d_kv_share_blocks{tier="ram"}'), 64)
        self.assertGreater(metric_sum(
            m, 'gpt2d_kv_evictions_by_account_total{tier="ram",from="own"}'), 0)
        self.assertEqual(metric_sum(
            m, 'gpt2d_kv_evictions_by_account_total{tier="ram",'
            'from="under_share"}'), 0)
        prompt = history + [7, 8]
        text, cached = self.turn(alice, prompt, session="chat")
        self.assertEqual(cached, 500)
        self.assertEqual(text, self.cold(alice, prompt))
        self.stop(s)

    def test_sessions_count_against_their_own_keys_quota(self):
        """--max-sessions-per-key 1: Alice's new session while her one
        session runs is 429 max_sessions_per_key; Bob's is not; once hers
        is idle, the new one takes its place (the old one is forgotten, not
        Bob's)."""
        s = self.keyed_server("quota", ["--max-sessions-per-key", "1"],
                              env={"GPT2D_TEST_MIN_STEP_US": "15000"})
        alice = s.client(api_key=self.ALICE)
        bob = s.client(api_key=self.BOB)
        self.turn(bob, [5, 6, 7], session="bobs")
        es = alice.open_stream("/v1/completions", {
            "prompt": [1, 2, 3], "max_tokens": 60, "stream": True,
            "logit_bias": NO_EOT, "session_id": "first"})
        try:
            events = iter(es)
            self.assertIsNotNone(next(events, None))    # it runs
            r = alice.post("/v1/completions", {"prompt": [4], "max_tokens": 1,
                                               "session_id": "second"})
            err = self.assert_error(r, 429, "session_id")
            self.assertEqual(err["code"], "max_sessions_per_key")
            self.assertIn("max-sessions-per-key", err["message"])
            self.assertIn("retry-after", r.headers)
            self.turn(bob, [8], session="bobs-2")        # Bob's own quota
            for _ in events:
                pass
        finally:
            es.close()
        self.turn(alice, [4], session="second")
        listed = [x["id"] for x in alice.get("/v1/sessions").json["data"]]
        self.assertEqual(listed, ["second"])
        listed = [x["id"] for x in bob.get("/v1/sessions").json["data"]]
        self.assertEqual(listed, ["bobs-2"])
        m = alice.metrics()
        self.assertEqual(metric_sum(m, "gpt2d_kv_sessions_forgotten_total"), 2)
        self.stop(s)


class Directory(CacheCase):

    NOT_OURS = "not the cache's\n"

    def refused(self, extra=(), timeout=20):
        """gpt2d on this case's directory, expected to refuse it at start:
        (its exit status, or None when it still ran after `timeout` s and was
        killed; its output)."""
        args = [GPT2D, "--model", TINY, "--host", "127.0.0.1", "--port", "0",
                "--slots", "2", "--threads", "1", "--kv-memory", str(RAM),
                "--kv-cache-dir", self.dir] + list(extra)
        try:
            p = subprocess.run(args, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=timeout)
            return p.returncode, p.stdout.decode("utf-8", "replace")
        except subprocess.TimeoutExpired as e:
            return None, (e.output or b"").decode("utf-8", "replace")

    def target(self, name):
        """A file outside the cache directory for a link to point to."""
        path = os.path.join(WORKDIR, "%s-%s" % (self._testMethodName, name))
        with open(path, "w", encoding="ascii") as f:
            f.write(self.NOT_OURS)
        return path

    def assert_unchanged(self, path):
        with open(path, "rb") as f:
            data = f.read()
        if data != self.NOT_OURS.encode("ascii"):
            self.fail("%s was written through the link: %d bytes, %r..."
                      % (path, len(data), data[:8]))

    def test_a_second_daemon_on_the_directory_exits_2_naming_the_first(self):
        """Issue 25, item 3: two daemons on one directory overwrote each
        other's sessions file and together exceeded the budget, and the
        next start deleted 27 files as over it."""
        s = self.server("first")
        c = s.client()
        self.turn(c, history(0), session="u0")
        rc, out = self.refused()
        self.assertEqual(rc, 2, out)
        self.assertIn("--kv-cache-dir %s is in use by another gpt2d (PID %d"
                      % (self.dir, s.pid), out)
        with open(os.path.join(self.dir, "gpt2d.lock"), encoding="ascii") as f:
            self.assertEqual(f.read(), "%d\n" % s.pid)
        # the first serves on, its cache whole
        _, cached = self.turn(c, history(0) + [7, 8], session="u0")
        self.assertEqual(cached, 40)
        self.stop(s)
        s = self.server("after")                # the lock went with it
        self.assertEqual(len(s.client().get("/v1/sessions").json["data"]), 1)
        self.stop(s)

    def test_a_directory_others_can_write_to_is_refused(self):
        os.makedirs(self.dir)
        os.chmod(self.dir, 0o770)
        rc, out = self.refused()
        self.assertEqual(rc, 2, out)
        self.assertIn("--kv-cache-dir %s is writable by its group" % self.dir, out)
        self.assertIn("chmod 700 %s" % self.dir, out)
        self.assertEqual(os.listdir(self.dir), [])
        os.chmod(self.dir, 0o700)
        self.stop(self.server("owned"))

    def test_links_planted_at_block_files_part_names_are_not_followed(self):
        """Issue 25, item 4: a block's temporary file was opened O_TRUNC,
        so a link planted at its name had its target overwritten."""
        prompt = history(3)
        s = self.server("names")
        self.turn(s.client(), prompt)
        self.stop(s)                            # RAM written out: the names
        names = [os.path.basename(p)[:-len(".kv")] for p in self.files()]
        self.assertEqual(len(names), 3)         # 43 tokens: 16 + 16 + 11
        for path in self.files():
            os.unlink(path)
        s = self.server("planted")
        target = self.target("target")
        for name in names:                      # after the scan, which
            os.symlink(target, os.path.join(self.dir, name + ".part"))
        c = s.client()
        text, cached = self.turn(c, prompt)
        self.assertEqual(cached, 0)
        self.stop(s)                            # the same blocks written again
        self.assert_unchanged(target)
        self.assertEqual(glob.glob(os.path.join(self.dir, "*.part")), [])
        self.assertEqual(len(self.files()), 3)
        for path in self.files():
            self.assertFalse(os.path.islink(path), path)
        # and they serve: a restart reads them back
        s = self.server("read-back")
        c = s.client()
        prompt = prompt + [5, 6]
        text, cached = self.turn(c, prompt)
        self.assertEqual(cached, 40)
        self.assertEqual(text, self.cold(c, prompt))
        self.stop(s)

    def test_links_planted_at_the_sessions_file_are_not_followed(self):
        # the file's name holds the cache's identity: a first run shows it
        self.stop(self.server("sessions-0"))
        names = glob.glob(os.path.join(self.dir, "sessions-*"))
        self.assertEqual(len(names), 1, names)
        sessions = names[0]
        os.unlink(sessions)
        s = self.server("sessions-1")
        c = s.client()
        self.turn(c, history(0), session="u0")
        target = self.target("target")
        os.symlink(target, sessions + ".part")
        self.stop(s)                            # writes the sessions file
        self.assert_unchanged(target)
        self.assertFalse(os.path.lexists(sessions + ".part"))
        self.assertFalse(os.path.islink(sessions))
        # the good file moved out and a link to it in its place: not read
        elsewhere = os.path.join(WORKDIR, self._testMethodName + "-elsewhere")
        os.rename(sessions, elsewhere)
        os.symlink(elsewhere, sessions)
        s = self.server("sessions-2")
        self.assertIn("%s is a symbolic link: not followed" % sessions,
                      self.log(s))
        c = s.client()
        self.assertEqual(c.get("/v1/sessions").json["data"], [])
        # its history is found when the session comes back
        prompt = history(0) + [7, 8]
        text, cached = self.turn(c, prompt, session="u0")
        self.assertEqual(cached, 40)
        self.assertEqual(text, self.cold(c, prompt))
        self.stop(s)
        self.assertFalse(os.path.islink(sessions))
        self.assertTrue(os.path.isfile(elsewhere))


def main(argv):
    return run_module(__name__, argv, "kvcache_tests",
                      os.environ.get("GPT2D_KVCACHE_SUMMARY"))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
