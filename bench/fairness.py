#!/usr/bin/env python3
"""fairness.py — one key flooding the server, another key's experience
(issue 19, findings 1 and 6).  Standard library only.

Starts gpt2d (--gpt2d, --model; default limits unless --args adds some)
on 127.0.0.1 with two API keys, A and B, then:

  flood    Key A runs --flooders closed-loop clients, each sending the most
           expensive request it is allowed, over and over:
           {"prompt":[464],"max_tokens":--flood-tokens,"n":--flood-n,
            "logit_bias":{"50256":-100}}.
           Key B sends --probes streamed requests one after another
           (max_tokens 4) and measures each one's time to first token.
           Reported: B's TTFT median / p90 / max, B's 429s, A's 429s.
           Idle TTFT (no flood) is measured first for comparison.

  prefill  Key B streams --stream-tokens tokens alone (idle tokens/s), then
           again while three clients of key A send fresh --prompt-tokens
           prompts (random ids) with max_tokens 1, over and over.
           Reported: B's tokens/s idle and under the flood, and the ratio.

Everything is bounded: every phase has a time limit, the server is stopped
at the end.  Example (the long-context test model; GPT-2 124M the same way):

  bench/fairness.py --gpt2d build/src/gpt2d --model MODEL_DIR --threads 2
"""

import argparse
import http.client
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time

KEY_A, KEY_B = "bench-key-a", "bench-key-b"


def start(args, workdir):
    keys = os.path.join(workdir, "keys")
    with open(keys, "w") as f:
        f.write(KEY_A + "\n" + KEY_B + "\n")
    port_file = os.path.join(workdir, "port")
    log = open(os.path.join(workdir, "gpt2d.log"), "w")
    cmd = [args.gpt2d, "--model", args.model, "--port", "0", "--port-file", port_file,
           "--threads", str(args.threads), "--api-key-file", keys] + args.args.split()
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 120:
        if proc.poll() is not None:
            sys.exit("gpt2d exited: see %s" % log.name)
        try:
            with open(port_file) as f:
                port = int(f.read().strip())
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return proc, port
        except (OSError, ValueError):
            pass
        time.sleep(0.2)
    proc.kill()
    sys.exit("gpt2d did not start")


def post(port, key, body, timeout=120):
    """Non-streamed POST /v1/completions: (status, seconds)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    t0 = time.monotonic()
    c.request("POST", "/v1/completions", json.dumps(body),
              {"Authorization": "Bearer " + key, "Content-Type": "application/json"})
    r = c.getresponse()
    r.read()
    c.close()
    return r.status, time.monotonic() - t0


def stream(port, key, body, timeout=300):
    """Streamed request: (status, ttft seconds, token times)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    t0 = time.monotonic()
    c.request("POST", "/v1/completions", json.dumps(dict(body, stream=True)),
              {"Authorization": "Bearer " + key, "Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        r.read()
        c.close()
        return r.status, None, []
    times = []
    for line in r:
        line = line.strip()
        if not line.startswith(b"data: "):
            continue
        if line == b"data: [DONE]":
            break
        times.append(time.monotonic() - t0)
    c.close()
    return 200, (times[0] if times else None), times


class Flood:
    """`n` closed-loop clients of `key` sending `make()` until stopped."""

    def __init__(self, port, key, n, make):
        self.stop = threading.Event()
        self.status = {}
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.run, args=(port, key, make))
                        for _ in range(n)]
        for t in self.threads:
            t.start()

    def run(self, port, key, make):
        while not self.stop.is_set():
            try:
                st, _ = post(port, key, make(), timeout=300)
            except OSError:
                st = "error"
            with self.lock:
                self.status[st] = self.status.get(st, 0) + 1
            if st == 429:
                time.sleep(0.05)

    def end(self):
        self.stop.set()
        for t in self.threads:
            t.join(300)


def ttft_probes(port, n, deadline):
    ttfts, refused = [], 0
    for i in range(n):
        if time.monotonic() > deadline:
            break
        st, ttft, _ = stream(port, KEY_B, {"prompt": [464, 318], "max_tokens": 4,
                                           "seed": i, "temperature": 1.0})
        if st == 429:
            refused += 1
        elif ttft is not None:
            ttfts.append(ttft)
        time.sleep(0.05)
    return ttfts, refused


def summary(xs):
    if not xs:
        return "none"
    xs = sorted(xs)
    return "median %.3f s, p90 %.3f s, max %.3f s (%d)" % (
        statistics.median(xs), xs[int(0.9 * (len(xs) - 1))], xs[-1], len(xs))


def flood_case(args, port):
    idle, _ = ttft_probes(port, 5, time.monotonic() + 60)
    print("B idle TTFT: %s" % summary(idle))
    body = {"prompt": [464], "max_tokens": args.flood_tokens, "n": args.flood_n,
            "logit_bias": {"50256": -100}}
    flood = Flood(port, KEY_A, args.flooders, lambda: body)
    time.sleep(args.warmup)
    ttfts, refused = ttft_probes(port, args.probes, time.monotonic() + args.limit)
    flood.end()
    print("B TTFT while A floods (%d x n=%d max_tokens=%d): %s; B 429s: %d; A: %r" % (
        args.flooders, args.flood_n, args.flood_tokens, summary(ttfts), refused,
        flood.status))
    return statistics.median(ttfts) if ttfts else None, refused


def tokens_per_second(port, n):
    st, ttft, times = stream(port, KEY_B, {"prompt": [464], "max_tokens": n,
                                           "logit_bias": {"50256": -100}})
    if st != 200 or len(times) < 2:
        return None
    return (len(times) - 1) / (times[-1] - times[0])


def prefill_case(args, port):
    idle = tokens_per_second(port, args.stream_tokens)
    rng = random.Random(1)
    lock = threading.Lock()

    def fresh():
        with lock:
            return {"prompt": [rng.randrange(50000) for _ in range(args.prompt_tokens)],
                    "max_tokens": 1}
    flood = Flood(port, KEY_A, 3, fresh)
    time.sleep(args.warmup)
    loaded = tokens_per_second(port, args.stream_tokens)
    flood.end()
    print("B stream tokens/s: idle %.1f, under 3 prefill flooders %.1f (%.0f %%); A: %r" % (
        idle or 0, loaded or 0, 100.0 * (loaded or 0) / (idle or 1), flood.status))
    return idle, loaded


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpt2d", default="build/src/gpt2d")
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--args", default="", help="more gpt2d flags, space-separated")
    ap.add_argument("--case", default="flood,prefill")
    ap.add_argument("--flooders", type=int, default=3)
    ap.add_argument("--flood-n", type=int, default=4)
    ap.add_argument("--flood-tokens", type=int, default=1023)
    ap.add_argument("--probes", type=int, default=20)
    ap.add_argument("--limit", type=float, default=120.0, help="seconds per case")
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--stream-tokens", type=int, default=200)
    ap.add_argument("--prompt-tokens", type=int, default=1023)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpt2d-fair-") as workdir:
        proc, port = start(args, workdir)
        try:
            if "flood" in args.case:
                flood_case(args, port)
            if "prefill" in args.case:
                prefill_case(args, port)
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


if __name__ == "__main__":
    main()
