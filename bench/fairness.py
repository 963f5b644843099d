#!/usr/bin/env python3
"""fairness.py — one key flooding the server, another key's experience
(issue 19, findings 1 and 6), a key held to its token budget, and the
capacity a key gets back once another has gone and how long its batch
takes beside another (issue 28).
Standard library only.

Starts gpt2d (--gpt2d, --model; default limits unless --args adds some)
on 127.0.0.1 with three API keys in a keys file, named a, b and c, each
line with the attributes --key-a, --key-b, --key-c give it (c: a token
budget, tokens-per-minute=300 by default: less than a loaded 2-core
machine generates for it at 124M, so the budget binds): one daemon for
flood, think, prefill and budget in turn, a fresh one for each run of
alone-after and drain.  Then:

  flood    Key A runs --flooders closed-loop clients, each sending the most
           expensive request it is allowed, over and over:
           {"prompt":[464],"max_tokens":--flood-tokens,"n":--flood-n,
            "logit_bias":{"50256":-100}}.
           Key B sends --probes streamed requests one after another
           (max_tokens 4) and measures each one's time to first token.
           Reported: B's TTFT median / p90 / max, B's 429s, A's 429s.
           Idle TTFT (no flood) is measured first for comparison.

  think    The same flood by key A, but key B thinks between its probes as
           a person or an agent does: it sleeps a random --think-min to
           --think-max seconds (2-5 by default) after each answer.  Reported
           as for flood, B's TTFTs in order, and A's completed requests
           (A is slowed while B is around, not starved), and B's TTFT p50
           and p99 against issue 28's goal: p50 <= 0.1 s, p99 <= 1 s
           (PASS/FAIL; with fewer than 100 probes p99 is the max).

  prefill  Key B streams --stream-tokens tokens alone (idle tokens/s), then
           again while three clients of key A send fresh --prompt-tokens
           prompts (random ids) with max_tokens 1, over and over.
           Reported: B's tokens/s idle and under the flood, and the ratio.

  budget   Key C, with a token budget, runs --budget-clients closed-loop
           clients for --budget-seconds, each sending {"prompt":[464],
           "max_tokens":--budget-tokens} (EOT banned, so every request uses
           its whole charge) and, on a 429, waiting the Retry-After it was
           given, as a well-behaved client does.  Key B probes TTFT
           meanwhile.  Reported: C's generated tokens a minute against its
           budget (over T seconds at most tokens-per-minute x (1 + T/60):
           the full bucket it starts with, and the refill), C's 429s and
           their Retry-After, B's TTFT.

  alone-after
           Issue 28: what capacity a key gets back once the others have
           gone.  A fresh daemon: --alone-clients closed-loop clients of key
           A (4: every default slot) stream {"prompt":[464],"max_tokens":
           --alone-tokens,"n":--alone-n} (EOT banned) over and over, with
           return_token_ids, so that every generated token is timestamped
           as it arrives; after --warmup seconds key B probes as in think
           for --alone-phase seconds, then stops.  A's tokens/s are counted
           over --window seconds from --gap seconds after B's last answer.
           Then a second fresh daemon that only ever sees A: the same flood,
           counted over the same seconds from its start.  Reported: both
           rates, their ratio, and PASS/FAIL against the goal (within 5 %:
           ratio >= 0.95); A's tokens/s in 3 s steps through both runs.

  drain    Issue 28: a fixed batch of work finishes as soon beside another
           key as at full capacity.  A fresh daemon: --flooders closed-loop
           clients of key A work through --drain-jobs jobs
           {"prompt":[464],"max_tokens":--drain-tokens,"n":--flood-n}
           (EOT banned, so every job is the same work), each client taking
           the next job left; from 0.5 s on (A's first jobs hold the slots)
           key B sends --drain-probes streamed 4-token probes 0.5 s apart,
           then stops.  Then a second fresh daemon that only ever sees A:
           the same jobs.  Reported: the seconds from A's start to its last
           answer in both, their ratio, and PASS/FAIL against the goal
           (within 10 %: ratio <= 1.10); B's TTFT.  The defaults (12 jobs,
           n 4, 150 tokens) take 20-40 s at full capacity on 2 threads at
           124M.

After each case the per-key series of /metrics are printed (by name), and
gpt2d_preemptions_total and gpt2d_sequences_paused (issue 28) when the
daemon has them.  The output begins with the command that reproduces it,
the daemon's version and the machine's load average.

Everything is bounded: every phase has a time limit (--limit for a case
and for each drain run), the server is stopped at the end.  Example (the
long-context test model; GPT-2 124M the same way):

  bench/fairness.py --gpt2d build/src/gpt2d --model MODEL_DIR --threads 2
  bench/fairness.py --gpt2d build/src/gpt2d --model MODEL_DIR --threads 2 \\
      --case think,alone-after,drain --flood-tokens 300 --probes 12
"""

import argparse
import http.client
import json
import math
import os
import random
import shlex
import socket
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fairlib import (KEY_A, KEY_B, KEY_C, Flood, add_server_args,  # noqa: E402
                     running, stream, tokens_per_second)

NO_EOT = {"50256": -100}
B_DELAY = 0.5  # drain: B comes once A's first jobs hold the slots


def post(port, key, body, timeout=120):
    """Non-streamed POST /v1/completions: (status, seconds, Retry-After or
    None, tokens used: prompt + completion)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    t0 = time.monotonic()
    c.request("POST", "/v1/completions", json.dumps(body),
              {"Authorization": "Bearer " + key, "Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    retry_after = r.getheader("Retry-After")
    c.close()
    tokens = 0
    if r.status == 200:
        tokens = json.loads(data)["usage"]["total_tokens"]
    return (r.status, time.monotonic() - t0,
            int(retry_after) if retry_after else None, tokens)


def flood(port, key, n, make, obey=False):
    """`n` clients of `key` POSTing make() over and over (fairlib.Flood)."""
    def send():
        st, _, retry_after, tokens = post(port, key, make(), timeout=300)
        return st, retry_after, tokens
    return Flood(n, send, obey)


def ttft_probes(port, n, deadline, pause=lambda: 0.05, ends=None):
    """Key B's streamed probes one after another, `pause()` seconds apart:
    (TTFTs, 429s).  When each answer ended goes into `ends` if given."""
    ttfts, refused = [], 0
    for i in range(n):
        if time.monotonic() > deadline:
            break
        st, ttft, _ = stream(port, KEY_B, {"prompt": [464, 318], "max_tokens": 4,
                                           "seed": i, "temperature": 1.0})
        if ends is not None:
            ends.append(time.monotonic())
        if st == 429:
            refused += 1
        elif ttft is not None:
            ttfts.append(ttft)
        time.sleep(pause())
    return ttfts, refused


class Hangup:
    """A flood's open connections, so that its end need not wait for
    answers nobody counts any more: hang_up() shuts every one down, and
    any opened after it (the daemon cancels their requests)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.socks = set()
        self.down = False

    def opened(self, sock):
        with self.lock:
            if not self.down:
                self.socks.add(sock)
                return
        sock.shutdown(socket.SHUT_RDWR)

    def closed(self, sock):
        with self.lock:
            self.socks.discard(sock)

    def hang_up(self):
        with self.lock:
            self.down = True
            socks = list(self.socks)
        for sock in socks:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def stream_tokens(port, key, body, hangup, timeout=300):
    """Streamed POST /v1/completions with return_token_ids: (status,
    "cut" for a stream that ended before its [DONE] or "error", and
    [(monotonic time, generated tokens)] for each chunk that carries some).
    Counting the ids, not the chunks: a chunk may carry several tokens, or
    none."""
    got = []
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.connect()
        sock = c.sock
        hangup.opened(sock)
        try:
            c.request("POST", "/v1/completions",
                      json.dumps(dict(body, stream=True, return_token_ids=True)),
                      {"Authorization": "Bearer " + key,
                       "Content-Type": "application/json"})
            r = c.getresponse()
            if r.status != 200:
                r.read()
                return r.status, got
            for line in r:
                line = line.strip()
                if not line.startswith(b"data: "):
                    continue
                if line == b"data: [DONE]":
                    return 200, got
                k = sum(len(ch.get("token_ids") or ())
                        for ch in json.loads(line[6:])["choices"])
                if k:
                    got.append((time.monotonic(), k))
            return "cut", got
        finally:
            hangup.closed(sock)
    except (OSError, http.client.HTTPException, ValueError):
        return "error", got
    finally:
        c.close()


def token_flood(port, key, n, body, hangup):
    """`n` clients of `key` streaming `body` over and over (fairlib.Flood),
    every chunk's (time, tokens) gathered in .chunks."""
    chunks, lock = [], threading.Lock()

    def send():
        st, got = stream_tokens(port, key, body, hangup)
        with lock:
            chunks.extend(got)
        return st, None, sum(k for _, k in got)
    f = Flood(n, send)
    f.chunks = chunks
    return f


def end_flood(f, hangup):
    f.stop.set()
    hangup.hang_up()
    f.end()


def tokens_between(chunks, t0, t1):
    return sum(k for t, k in chunks if t0 <= t < t1)


def buckets(chunks, t0, t1, width):
    """Tokens/s in consecutive `width`-second buckets from t0 to t1 (the
    last one shorter)."""
    edges = [t0 + i * width for i in range(int(math.ceil((t1 - t0) / width)))] + [t1]
    return " ".join("%.0f" % (tokens_between(chunks, a, b) / (b - a))
                    for a, b in zip(edges, edges[1:]) if b > a)


def percentile(xs, q):
    """Nearest rank: the smallest x with at least a fraction q of xs at or
    below it (with fewer than 1 / (1 - q) values, the largest)."""
    xs = sorted(xs)
    return xs[max(0, math.ceil(q * len(xs)) - 1)]


def summary(xs):
    if not xs:
        return "none"
    return "median %.3f s, p90 %.3f s, max %.3f s (%d)" % (
        statistics.median(xs), percentile(xs, 0.9), max(xs), len(xs))


def verdict(ok):
    return "PASS" if ok else "FAIL"


def ttft_goal(ttfts):
    """B's TTFT p50 and p99 against issue 28's goal: p50 <= 0.1 s and
    p99 <= 1 s."""
    if not ttfts:
        return "B TTFT: no probe answered (goal p50 <= 0.1 s, p99 <= 1 s): FAIL"
    p50, p99 = statistics.median(ttfts), percentile(ttfts, 0.99)
    return "B TTFT p50 %.3f s (goal <= 0.1 s: %s), p99 %.3f s%s (goal <= 1 s: %s)" % (
        p50, verdict(p50 <= 0.1), p99,
        " (the max: %d probes, fewer than 100)" % len(ttfts) if len(ttfts) < 100 else "",
        verdict(p99 <= 1.0))


# Series of /metrics printed after each case: the per-key ones, and issue
# 28's preemption series where the daemon has them (main before it has not).
SERIES = ("gpt2d_key_", "gpt2d_preemptions_total", "gpt2d_sequences_paused")


def key_metrics(port):
    """The lines of /metrics whose names start with one of SERIES."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", "/metrics", headers={"Authorization": "Bearer " + KEY_B})
    text = c.getresponse().read().decode()
    c.close()
    return [ln for ln in text.splitlines() if ln.startswith(SERIES)]


def load():
    return "load average %.2f %.2f %.2f" % os.getloadavg()


def flood_case(args, port):
    idle, _ = ttft_probes(port, 5, time.monotonic() + 60)
    print("B idle TTFT: %s" % summary(idle))
    body = {"prompt": [464], "max_tokens": args.flood_tokens, "n": args.flood_n,
            "logit_bias": {"50256": -100}}
    a = flood(port, KEY_A, args.flooders, lambda: body)
    time.sleep(args.warmup)
    ttfts, refused = ttft_probes(port, args.probes, time.monotonic() + args.limit)
    a.end()
    print("B TTFT while A floods (%d x n=%d max_tokens=%d): %s; B 429s: %d; A: %r" % (
        args.flooders, args.flood_n, args.flood_tokens, summary(ttfts), refused,
        a.status))
    return statistics.median(ttfts) if ttfts else None, refused


def think_case(args, port):
    rng = random.Random(2)
    body = {"prompt": [464], "max_tokens": args.flood_tokens, "n": args.flood_n,
            "logit_bias": {"50256": -100}}
    a = flood(port, KEY_A, args.flooders, lambda: body)
    time.sleep(args.warmup)
    ttfts, refused = ttft_probes(port, args.probes, time.monotonic() + args.limit,
                                 lambda: rng.uniform(args.think_min, args.think_max))
    a.end()
    print("B TTFT thinking %g-%g s between probes while A floods (%d x n=%d "
          "max_tokens=%d): %s; B 429s: %d; A: %r" % (
              args.think_min, args.think_max, args.flooders, args.flood_n,
              args.flood_tokens, summary(ttfts), refused, a.status))
    print("  B TTFTs in order: %s" % " ".join("%.2f" % t for t in ttfts))
    print(ttft_goal(ttfts))
    return statistics.median(ttfts) if ttfts else None, refused


def alone_after_case(args):
    """Two fresh daemons: A's flood with B around, then after B has gone;
    and A's flood alone from the start, measured over the same seconds."""
    body = {"prompt": [464], "max_tokens": args.alone_tokens, "n": args.alone_n,
            "logit_bias": NO_EOT}
    print("alone-after: A = %d clients of n=%d max_tokens=%d (EOT banned), "
          "streamed; B probes %g-%g s apart for %g s, then stops; A's tokens/s "
          "from %g s after B's last answer, for %g s, against a daemon that "
          "only ever saw A, over the same seconds of its flood" % (
              args.alone_clients, args.alone_n, args.alone_tokens, args.think_min,
              args.think_max, args.alone_phase, args.gap, args.window))
    rng = random.Random(2)
    with running(args, "gpt2d-fair-") as (_, port):
        print("  with B: %s" % load())
        hangup = Hangup()
        t0 = time.monotonic()
        a = token_flood(port, KEY_A, args.alone_clients, body, hangup)
        time.sleep(args.warmup)
        ends = []
        ttfts, refused = ttft_probes(port, args.probes,
                                     t0 + args.warmup + args.alone_phase,
                                     lambda: rng.uniform(args.think_min, args.think_max),
                                     ends)
        w0 = (ends[-1] if ends else time.monotonic()) + args.gap
        a.stop.wait(max(0.0, w0 + args.window - time.monotonic()))
        end_flood(a, hangup)
        after = tokens_between(a.chunks, w0, w0 + args.window) / args.window
        print("  B's %d probes, last answer at %.1f s: TTFT %s; B 429s: %d" % (
            len(ends), (ends[-1] - t0) if ends else 0, summary(ttfts), refused))
        print("  A's tokens/s by 3 s from its start: %s; A: %r" % (
            buckets(a.chunks, t0, w0 + args.window, 3.0), a.status))
        print("  " + "\n  ".join(key_metrics(port)))
    offset = w0 - t0
    with running(args, "gpt2d-fair-") as (_, port):
        print("  alone: %s" % load())
        hangup = Hangup()
        t0 = time.monotonic()
        a = token_flood(port, KEY_A, args.alone_clients, body, hangup)
        a.stop.wait(offset + args.window)
        end_flood(a, hangup)
        alone = tokens_between(a.chunks, t0 + offset, t0 + offset + args.window) / args.window
        print("  A's tokens/s by 3 s from its start: %s; A: %r" % (
            buckets(a.chunks, t0, t0 + offset + args.window, 3.0), a.status))
    ratio = after / alone if alone else 0.0
    print("A's tokens/s %.1f-%.1f s into its flood: %.1f after B left, %.1f alone "
          "throughout; ratio %.3f (goal: within 5 %%, >= 0.95: %s)" % (
              offset, offset + args.window, after, alone, ratio,
              verdict(ratio >= 0.95)))
    return after, alone


def run_jobs(port, key, clients, jobs, deadline):
    """`clients` closed-loop clients of `key` POSTing the bodies of `jobs`,
    each taking the next one left, until none is or `deadline` has passed:
    (when each answer came, {status: answers})."""
    todo, ends, status = list(reversed(jobs)), [], {}
    lock = threading.Lock()

    def client():
        while True:
            with lock:
                if not todo or time.monotonic() > deadline:
                    return
                body = todo.pop()
            try:
                st = post(port, key, body,
                          timeout=max(1.0, deadline - time.monotonic()))[0]
            except (OSError, http.client.HTTPException, ValueError):
                st = "error"
            with lock:
                ends.append(time.monotonic())
                status[st] = status.get(st, 0) + 1
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()) + 5)
    with lock:
        return list(ends), dict(status)


def drain_run(args, with_b):
    """One fresh daemon: A's --drain-jobs jobs from --flooders clients, with
    B's --drain-probes probes from B_DELAY s on (with_b), or alone.
    Returns the seconds from A's start to its last answer, or None when
    not every job got a 200 within --limit."""
    jobs = [{"prompt": [464], "max_tokens": args.drain_tokens, "n": args.flood_n,
             "logit_bias": NO_EOT, "seed": i} for i in range(args.drain_jobs)]
    with running(args, "gpt2d-fair-") as (_, port):
        print("  %s: %s" % ("with B" if with_b else "alone", load()))
        t0 = time.monotonic()
        result = []
        a = threading.Thread(target=lambda: result.append(
            run_jobs(port, KEY_A, args.flooders, jobs, t0 + args.limit)))
        a.start()
        if with_b:
            time.sleep(B_DELAY)
            ttfts, refused = ttft_probes(port, args.drain_probes, t0 + args.limit,
                                         lambda: 0.5)
        a.join(args.limit + 10)
        ends, status = result[0] if result else ([], {})
        took = max(ends) - t0 if status.get(200) == len(jobs) else None
        print("  A's %d jobs: %r, the last answer at %s" % (
            len(jobs), status, "%.1f s" % took if took else "- (not all done)"))
        if with_b:
            print("  B's TTFT: %s; B 429s: %d" % (summary(ttfts), refused))
            print("  " + "\n  ".join(key_metrics(port)))
    return took


def drain_case(args):
    """A fixed batch of A's work beside B's few probes, against the same
    batch on a daemon that only ever saw A."""
    print("drain: A = %d jobs {\"prompt\":[464],\"n\":%d,\"max_tokens\":%d} "
          "(EOT banned) from %d closed-loop clients; B: %d streamed 4-token probes "
          "0.5 s apart from %g s on; the time to A's last answer, against a "
          "daemon that only ever saw A" % (
              args.drain_jobs, args.flood_n, args.drain_tokens, args.flooders,
              args.drain_probes, B_DELAY))
    mixed = drain_run(args, True)
    alone = drain_run(args, False)
    if mixed is None or alone is None:
        print("A's batch did not drain within --limit %g s: FAIL" % args.limit)
        return mixed, alone
    ratio = mixed / alone
    print("A's batch drained in %.1f s beside B, %.1f s alone; ratio %.3f "
          "(goal: within 10 %%, <= 1.10: %s)" % (mixed, alone, ratio,
                                                  verdict(ratio <= 1.10)))
    return mixed, alone


def prefill_case(args, port):
    idle = tokens_per_second(port, KEY_B, args.stream_tokens)
    rng = random.Random(1)
    lock = threading.Lock()

    def fresh():
        with lock:
            return {"prompt": [rng.randrange(50000) for _ in range(args.prompt_tokens)],
                    "max_tokens": 1}
    a = flood(port, KEY_A, 3, fresh)
    time.sleep(args.warmup)
    loaded = tokens_per_second(port, KEY_B, args.stream_tokens)
    a.end()
    print("B stream tokens/s: idle %.1f, under 3 prefill flooders %.1f (%.0f %%); A: %r" % (
        idle or 0, loaded or 0, 100.0 * (loaded or 0) / (idle or 1), a.status))
    return idle, loaded


def budget_case(args, port):
    per_minute = None
    for word in args.key_c.split():
        if word.startswith("tokens-per-minute="):
            per_minute = int(word.split("=", 1)[1])
    body = {"prompt": [464], "max_tokens": args.budget_tokens, "logit_bias": NO_EOT}
    t0 = time.monotonic()
    c = flood(port, KEY_C, args.budget_clients, lambda: body, obey=True)
    ttfts, refused = ttft_probes(port, args.probes, t0 + args.budget_seconds)
    # the probes may end first: C keeps going for the whole window
    c.stop.wait(max(0.0, t0 + args.budget_seconds - time.monotonic()))
    c.end()
    elapsed = time.monotonic() - t0
    rate = c.tokens * 60.0 / elapsed
    bound = per_minute * (1 + elapsed / 60.0) if per_minute else None
    ra = sorted(c.retry_afters)
    print("C (%s) used %d tokens (prompt + completion) in %.0f s: %.0f a minute; "
          "at most %s allowed "
          "(%s); C: %r, Retry-After median %s s; B TTFT meanwhile: %s; B 429s: %d" % (
              args.key_c, c.tokens, elapsed, rate,
              "%.0f" % bound if bound else "-",
              "within" if bound is None or c.tokens <= bound else "OVER",
              c.status, statistics.median(ra) if ra else "-", summary(ttfts),
              refused))
    return c.tokens, bound


# Cases that share one daemon, one after another, and cases that start
# their own fresh ones.
SHARED = (("flood", flood_case), ("think", think_case),
          ("prefill", prefill_case), ("budget", budget_case))
FRESH = (("alone-after", alone_after_case), ("drain", drain_case))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_server_args(ap)
    ap.add_argument("--case", default="flood,prefill,budget",
                    help="any of " + ", ".join(name for name, _ in SHARED + FRESH))
    ap.add_argument("--key-a", default="", help="key A's attributes in the keys file")
    ap.add_argument("--key-b", default="")
    ap.add_argument("--key-c", default="tokens-per-minute=300")
    ap.add_argument("--budget-clients", type=int, default=2)
    ap.add_argument("--budget-tokens", type=int, default=100)
    ap.add_argument("--budget-seconds", type=float, default=90.0)
    ap.add_argument("--flooders", type=int, default=3)
    ap.add_argument("--flood-n", type=int, default=4)
    ap.add_argument("--flood-tokens", type=int, default=1023)
    ap.add_argument("--probes", type=int, default=20)
    ap.add_argument("--limit", type=float, default=120.0, help="seconds per case")
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--think-min", type=float, default=2.0)
    ap.add_argument("--think-max", type=float, default=5.0)
    ap.add_argument("--stream-tokens", type=int, default=200)
    ap.add_argument("--prompt-tokens", type=int, default=1023)
    ap.add_argument("--alone-clients", type=int, default=4,
                    help="alone-after: key A's clients (4: every default slot)")
    ap.add_argument("--alone-n", type=int, default=1)
    ap.add_argument("--alone-tokens", type=int, default=128)
    ap.add_argument("--alone-phase", type=float, default=15.0,
                    help="alone-after: seconds B probes for")
    ap.add_argument("--gap", type=float, default=1.0,
                    help="alone-after: seconds from B's last answer to the window")
    ap.add_argument("--window", type=float, default=12.0,
                    help="alone-after: seconds A's tokens are counted over")
    ap.add_argument("--drain-jobs", type=int, default=12,
                    help="drain: key A's jobs (n=--flood-n each)")
    ap.add_argument("--drain-tokens", type=int, default=150)
    ap.add_argument("--drain-probes", type=int, default=3)
    args = ap.parse_args()
    cases = args.case.split(",")
    unknown = set(cases) - {name for name, _ in SHARED + FRESH}
    if unknown:
        ap.error("unknown case: %s" % ", ".join(sorted(unknown)))
    version = subprocess.run([args.gpt2d, "--version"], capture_output=True,
                             text=True, timeout=30).stdout.strip()
    print("command: %s" % shlex.join(["python3"] + sys.argv))
    print("gpt2d: %s (%s); %s" % (args.gpt2d, version, load()))
    print("daemon (fairlib.start): %s" % shlex.join(
        [args.gpt2d, "--model", args.model, "--port", "0", "--threads",
         str(args.threads), "--api-key-file", "KEYS"] + args.args.split()))
    if any(name in cases for name, _ in SHARED):
        with running(args, "gpt2d-fair-") as (_, port):
            for name, case in SHARED:
                if name in cases:
                    case(args, port)
                    print("  " + "\n  ".join(key_metrics(port)))
    for name, case in FRESH:
        if name in cases:
            case(args)


if __name__ == "__main__":
    main()
