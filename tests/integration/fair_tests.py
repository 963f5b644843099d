"""fair_tests.py — two API keys sharing the KV slots, against real gpt2d
processes on 127.0.0.1 (run by tests/integration/test_fair.sh): the
engine's rules "fair and never idle" (src/engine/engine_fair.c) as a client
sees them.

    GPT2D_FAIR_WORKDIR              scratch directory (logs, a model)
    GPT2D_BUILDDIR, GPT2D_SRCDIR, GPT2D_TEST_DATA
    GPT2D_FAIR_SUMMARY              optional: file that receives "PASSED FAILED"

    fair_tests.py [SUBSTRING...]    only the tests whose name contains one

One group, SharedSlots: a daemon with --slots 2, keys "a" and "b", and
engine steps of at least STEP_US (--test-min-step-us), so that a step is
long beside a client's reading of it on any machine.
  - Key a runs two long seeded requests (logprobs, EOT banned), one slot
    each; key b's short request takes a slot at once: one of a's sequences
    is paused at a step boundary, resumed when b's ends, and both of a's
    answers (text, token ids, logprobs) are the bits the same requests make
    alone on a fresh daemon; streamed and whole answers alike.  /metrics
    counts the preemption (fair_share) and the pause under a's name, and
    the paused request's access log line says paused=1.
  - A key alone gets every slot at once, though another key's request
    ended a moment before (the old rules kept it to one slot for 30 s).

Every bound a test asserts is counted in engine steps (at least STEP_US
each), taken from the daemon's own figures, or relative to another time
the test measured, never a wall-clock guess, so a slow (loaded, ASan)
machine makes the tests slower, not flaky.
"""

import os
import re
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from gpt2d_client import NO_EOT, Server, metric_sum  # noqa: E402
from testlib import (GPT2D, TINY, ServerCase, key_file,  # noqa: E402
                     long_context_model, run_module, wait_for)

WORKDIR = os.environ.get("GPT2D_FAIR_WORKDIR", tempfile.gettempdir())

STEP_US = 15000     # --test-min-step-us of the group's daemon
STEP = STEP_US * 1e-6
LONG = 60           # tokens of key a's requests
SHORT = 12          # tokens of key b's
FEW = 10            # steps that count as "at once"
# panels: a row's bits depend neither on the batch nor on how a history is
# cut into prompt chunks, which is what makes a resumed sequence exact
FLAGS = ("--slots", "2", "--threads", "1", "--matmul", "panels")
KEYS = {name: "sk-fair-%s-%d" % (name, os.getpid()) for name in ("a", "b")}


def ctx_model():
    """tiny's shape with a 1024-token context: room for LONG tokens."""
    return long_context_model(os.path.join(WORKDIR, "ctx1024-model"), TINY, 7)


def long_body(seed, stream):
    """One of key a's requests: seeded sampling that runs to LONG tokens,
    with logprobs and token ids to compare bit for bit; a prompt of its
    own, so nothing one reuses from another's cache."""
    return {"prompt": "Request %d: once upon a time" % seed,
            "max_tokens": LONG, "seed": seed, "logprobs": 2,
            "logit_bias": NO_EOT, "return_token_ids": True, "stream": stream}


class Reader(threading.Thread):
    """One completion read in the background.  A stream's chunks are kept
    with the time each arrived (.chunks: [(seconds, chunk)]; .done: it
    ended with [DONE]); a whole answer in .answer.  .t_sent, .t_end:
    when it was sent and when it ended; .error: what went wrong."""

    def __init__(self, client, body):
        threading.Thread.__init__(self, daemon=True)
        self.client, self.body = client, body
        self.chunks, self.answer, self.done = [], None, False
        self.error = self.t_end = None
        self.t_sent = time.monotonic()
        self.start()

    def run(self):
        try:
            if self.body["stream"]:
                es = self.client.open_stream("/v1/completions", self.body)
                try:
                    for chunk in es:
                        self.chunks.append((time.monotonic(), chunk))
                    self.done = es.done
                finally:
                    es.close()
            else:
                self.answer = self.client.complete(**self.body)
        except Exception as e:  # noqa: BLE001 - reported by finish()
            self.error = e
        self.t_end = time.monotonic()

    def token_times(self):
        """The arrival time of each token so far, one entry per token."""
        return [t for t, c in list(self.chunks)
                for ch in c.get("choices", ()) for _ in ch.get("token_ids", ())]

    def first_token(self):
        times = self.token_times()
        return times[0] if times else None

    def request_id(self):
        return self.answer["id"] if self.answer else self.chunks[0][1]["id"]

    def finish(self, case, seconds=30):
        """Waits for the end; fails `case` on an error, an error event, or a
        stream without [DONE].  Returns the choice, a stream's put together
        as a whole answer's."""
        self.join(seconds)
        case.assertFalse(self.is_alive(), "no answer within %d s" % seconds)
        case.assertIsNone(self.error)
        if self.answer is not None:
            return self.answer["choices"][0]
        errors = [c for _, c in self.chunks if "error" in c]
        case.assertEqual(errors, [])
        case.assertTrue(self.done, "the stream ended without [DONE]")
        return assembled([c for _, c in self.chunks])


def assembled(chunks):
    """A stream's one choice as the whole answer has it: the text, token
    ids and logprobs of its chunks joined, its finish_reason."""
    choice = {"text": "", "index": 0, "token_ids": [], "finish_reason": None,
              "logprobs": {"tokens": [], "token_logprobs": [],
                           "top_logprobs": [], "text_offset": []}}
    for c in chunks:
        for ch in c["choices"]:
            choice["text"] += ch["text"]
            choice["token_ids"] += ch.get("token_ids", [])
            if "prompt_token_ids" in ch:
                choice["prompt_token_ids"] = ch["prompt_token_ids"]
            for k, v in (ch.get("logprobs") or {}).items():
                choice["logprobs"][k] += v
            choice["finish_reason"] = ch["finish_reason"] or choice["finish_reason"]
    return choice


class SharedSlots(ServerCase):
    """--slots 2 shared by keys a and b, steps of at least STEP_US."""

    WORKDIR = WORKDIR
    NAME = "fair"
    MODEL = staticmethod(ctx_model)

    @classmethod
    def setUpClass(cls):
        os.makedirs(WORKDIR, exist_ok=True)
        cls.keys_path = key_file(os.path.join(WORKDIR, "fair-keys"),
                                 ["%s name=%s" % (k, n) for n, k in KEYS.items()])
        cls.ARGS = FLAGS + ("--api-key-file", cls.keys_path,
                            "--test-min-step-us", str(STEP_US))
        ServerCase.setUpClass.__func__(cls)

    def key(self, name):
        return self.client(api_key=KEYS[name])

    def read(self, name, body):
        """`body` sent by key `name` in the background (a Reader); a test
        that fails leaves it to end before the next test begins."""
        r = Reader(self.key(name), body)
        self.addCleanup(r.join, 30)
        return r

    def alone(self, bodies):
        """The choices `bodies` make run one at a time on a fresh daemon
        with the same flags but the step floor (which changes when steps
        run, never what they compute)."""
        s = Server(GPT2D, ctx_model(), WORKDIR,
                   list(FLAGS) + ["--api-key-file", self.keys_path],
                   name="alone-" + self._testMethodName).start()
        try:
            return [Reader(s.client(api_key=KEYS["a"]), b).finish(self)
                    for b in bodies]
        finally:
            rc, _ = s.stop()
            self.assertEqual(rc, 0, s.log_tail())
            self.assert_clean_log(s)

    def paused_in_log(self, request_id):
        """paused=N of the request's access log line (written once the
        server is done with it, a moment after the client)."""
        pattern = re.compile(r"POST /v1/completions 200 .* paused=(\d+) "
                             r"request_id=%s$" % re.escape(request_id), re.M)
        found = wait_for(lambda: pattern.search(self.log_text()), 5)
        self.assertTrue(found, "no access line for %s:\n%s"
                        % (request_id, self.server.log_tail()))
        return int(found.group(1))

    def delta_since(self, before, settled=lambda delta: True):
        """Changes in /metrics since `before`, as a function series ->
        change, once `settled` holds of it (a request's pauses are counted
        when it is freed, a moment after its answer) or after 5 s."""
        last = {}

        def poll():
            after = self.key("a").metrics()
            last["delta"] = lambda series: (metric_sum(after, series)
                                            - metric_sum(before, series))
            return settled(last["delta"])
        wait_for(poll, 5)
        return last["delta"]

    def check_preemption(self, stream):
        a = self.key("a")
        before = a.metrics()
        bodies = [long_body(seed, stream) for seed in (11, 12)]
        longs = [self.read("a", body) for body in bodies]
        # both of a's requests run, a few steps in
        if stream:
            started = wait_for(lambda: all(len(r.token_times()) >= 3 for r in longs), 10)
        else:
            started = wait_for(lambda: metric_sum(a.metrics(), "gpt2d_slots_busy") == 2, 10)
            time.sleep(3 * STEP)
        self.assertTrue(started, "key a's two requests did not both start")
        short = self.read("b", {"prompt": "Hello there", "max_tokens": SHORT,
                                "seed": 5, "logit_bias": NO_EOT,
                                "return_token_ids": True, "stream": True})
        short_choice = short.finish(self)
        self.assertEqual(len(short_choice["token_ids"]), SHORT)
        choices = [r.finish(self) for r in longs]

        # b's first token came while both of a's still ran, in a fraction of
        # the time a's had left: it waited for no sequence of a's to end
        a_end = min(r.t_end for r in longs)
        ttft = short.first_token() - short.t_sent
        self.assertLess(short.first_token(), a_end,
                        "b's first token came after one of a's answers ended")
        self.assertLess(ttft, (a_end - short.t_sent) / 2,
                        "b's first token after %.3f s, a's first answer %.3f s "
                        "after b was sent" % (ttft, a_end - short.t_sent))

        # exactly what each of a's requests makes alone
        for body, got, want in zip(bodies, choices, self.alone(bodies)):
            self.assertEqual(len(got["token_ids"]), LONG)
            self.assertEqual(got, want, "seed %d" % body["seed"])

        # one of a's sequences was paused, once, for b's fair share
        paused = [self.paused_in_log(r.request_id()) for r in longs]
        self.assertEqual(sorted(paused), [0, 1])
        self.assertEqual(self.paused_in_log(short.request_id()), 0)
        delta = self.delta_since(before, lambda d: d(
            'gpt2d_key_pauses_total{key="a"}') >= 1)
        self.assertEqual(delta('gpt2d_preemptions_total{reason="fair_share"}'), 1)
        self.assertEqual(delta('gpt2d_preemptions_total{reason="key_limit"}'), 0)
        self.assertEqual(delta('gpt2d_key_pauses_total{key="a"}'), 1)
        self.assertEqual(delta('gpt2d_key_pauses_total{key="b"}'), 0)
        # it stood paused while b ran: SHORT steps at least, less a step's
        # rounding either side
        stood = delta('gpt2d_key_paused_seconds_total{key="a"}')
        self.assertGreaterEqual(stood, (SHORT - 1) * STEP)

        if stream:
            # the paused stream shows it: no token for about as long (half
            # of it, for the jitter of two connections' delivery), and it
            # went on afterwards without an error event
            times = longs[paused.index(1)].token_times()
            gap = max(t1 - t0 for t0, t1 in zip(times, times[1:]))
            self.assertGreaterEqual(gap, stood / 2,
                                    "stood paused %.3f s, longest gap %.3f s"
                                    % (stood, gap))

    def test_a_short_request_of_another_key_pauses_a_stream_which_resumes_exactly(self):
        self.check_preemption(stream=True)

    def test_a_short_request_of_another_key_pauses_an_answer_which_resumes_exactly(self):
        self.check_preemption(stream=False)

    def test_a_key_alone_takes_every_slot_though_another_keys_request_just_ended(self):
        """The old rules held a key to its share (one slot of two) for
        30 s after another key's last request: its second stream waited
        for its first to end."""
        before = self.key("a").metrics()
        self.key("b").complete(prompt="Hello there", max_tokens=4,
                               logit_bias=NO_EOT)
        longs = [self.read("a", long_body(seed, True)) for seed in (21, 22)]
        for r in longs:
            self.assertEqual(len(r.finish(self)["token_ids"]), LONG)
        # both began within a few steps of each other: the first had made
        # no more than FEW tokens when the second's first one came
        first, second = sorted(longs, key=lambda r: r.first_token())
        ahead = sum(t < second.first_token() for t in first.token_times())
        self.assertLessEqual(ahead, FEW, "the second of a's streams began "
                             "%d tokens after the first" % ahead)
        self.assertEqual(self.delta_since(before)("gpt2d_preemptions_total"), 0)
        for r in longs:
            self.assertEqual(self.paused_in_log(r.request_id()), 0)


def main(argv):
    return run_module(__name__, argv, "fair_tests",
                      os.environ.get("GPT2D_FAIR_SUMMARY"))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
