#!/usr/bin/env python3
"""models.py — several models behind one gpt2d: how they share the machine,
and what a load on first use costs.

    python3 bench/models.py --build BUILD --model ID=DIR --model ID=DIR
        [--streams 4] [--seconds 20] [--tokens 32] [--threads 2]

Starts one gpt2d serving every --model (--slots 8; the first by --model,
the default, loaded at start; the others from a --models-dir of links,
loaded on first use), then:
  1. first use: for each model but the first, one request; the time to
     its answer is the load plus the request (the daemon's log line gives
     the load alone);
  2. contention: --streams client threads per model send greedy requests
     of --tokens tokens (end-of-text banned) for --seconds, all models at
     once.  Prints, per model, tokens per second, its share of the worker
     pool's time (gpt2d_model_compute_seconds_total) and its mean step.
     Busy models should split the time evenly whatever their step costs
     (compute_share.h); a model's tokens per second then follows its
     step's cost.
  3. alone: the same load on each model by itself, for the tokens per
     second it gets with the machine to itself.

Timing is wall-clock on a shared machine: run it when nothing else does.
It reports; it never fails on a number.
"""

import argparse
import os
import re
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(SRC, "tests", "integration"))

from gpt2d_client import NO_EOT, Server, parse_metrics  # noqa: E402


def run_load(client, models, streams, seconds, tokens):
    """K threads per model, each sending requests until `seconds` pass;
    returns {model: tokens generated}."""
    done = {m: 0 for m in models}
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds

    def worker(model, k):
        n = 0
        while time.monotonic() < stop_at:
            r = client.post("/v1/completions", {
                "model": model, "prompt": [1000 + 7 * k + j for j in range(8)],
                "max_tokens": tokens, "temperature": 0,
                "logit_bias": NO_EOT})
            if r.status != 200:
                raise RuntimeError("%s: %d %s" % (model, r.status, r.body[:200]))
            n += r.json["usage"]["completion_tokens"]
        with lock:
            done[model] += n

    threads = [threading.Thread(target=worker, args=(m, k), daemon=True)
               for m in models for k in range(streams)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return done, time.monotonic() - t0


def compute_seconds(client):
    text = client.get("/metrics").body.decode()
    m = parse_metrics(text)
    return {k[len('gpt2d_model_compute_seconds_total{model="'):-2]: v
            for k, v in m.items()
            if k.startswith("gpt2d_model_compute_seconds_total")}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--model", action="append", required=True,
                    help="ID=DIR, repeated; the first is the default")
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    ids = [m.split("=", 1)[0] for m in a.model]
    work = tempfile.mkdtemp(prefix="gpt2d-bench-models-")
    first = a.model[0]   # Server passes it as --model: ID=DIR works
    args = ["--slots", "8", "--threads", str(a.threads)]
    # the others from a --models-dir (links), so they load on first use
    others = os.path.join(work, "models")
    os.makedirs(others)
    for m in a.model[1:]:
        mid, mdir = m.split("=", 1)
        os.symlink(os.path.abspath(mdir), os.path.join(others, mid))
    args += ["--models-dir", others]
    srv = Server(os.path.join(a.build, "src", "gpt2d"), first, work, args,
                 name="models").start(timeout=300)
    try:
        c = srv.client(timeout=600)
        print("== first use (the default, %s, loaded at start)" % ids[0])
        for model in ids[1:]:
            t0 = time.monotonic()
            r = c.post("/v1/completions", {"model": model, "prompt": "Hello",
                                           "max_tokens": 1})
            assert r.status == 200, r
            print("  %-14s first request %.2f s" % (model, time.monotonic() - t0))
        with open(srv.log_path, encoding="utf-8", errors="replace") as f:
            for line in f:
                m = re.search(r"model (\S+) loaded from \S+ in ([0-9.]+) s "
                              r"\(([0-9.]+) MB counted\)", line)
                if m:
                    print("  %-14s load %s s, %s MB counted" % m.groups())
        print("== all %d models busy at once: %d streams each, %.0f s, "
              "%d tokens a request" % (len(ids), a.streams, a.seconds,
                                       a.tokens))
        before = compute_seconds(c)
        done, took = run_load(c, ids, a.streams, a.seconds, a.tokens)
        after = compute_seconds(c)
        used = {m: after[m] - before.get(m, 0.0) for m in ids}
        total = sum(used.values()) or 1.0
        shared = {}
        for m in ids:
            shared[m] = done[m] / took
            print("  %-14s %7.1f tok/s  %5.1f %% of the pool's time "
                  "(%.1f s)" % (m, shared[m], 100 * used[m] / total, used[m]))
        print("== each model alone")
        for m in ids:
            alone, took = run_load(c, [m], a.streams, a.seconds / 2, a.tokens)
            rate = alone[m] / took
            print("  %-14s %7.1f tok/s alone; shared it got %.0f %% of that"
                  % (m, rate, 100 * shared[m] / rate))
    finally:
        srv.stop()


if __name__ == "__main__":
    sys.exit(main())
