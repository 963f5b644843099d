#!/usr/bin/env python3
"""inspect.py — what POST /v1/inspect costs: time and answer size.

    inspect.py --gpt2d build/src/gpt2d \\
        --model build/bench/models/gpt2-124m-random [--tokens 128] [--reps 5]

Starts gpt2d on 127.0.0.1 (--threads, default 2) and sends, one at a time,
--reps times each, interleaved: a --tokens-token prompt (random ids) as

  echo scoring   /v1/completions max_tokens 0, echo, logprobs 5: every
                 prompt position computed with its logits (the baseline)
  norms          /v1/inspect, nothing asked: residual norms of every layer
  attention      /v1/inspect "attention": true, every layer
  lens           /v1/inspect "logit_lens": 5, every layer
  everything     /v1/inspect attention and a lens of 5, every layer

and prints, per variant, the median and best wall time, the answer's
bytes, and from /metrics the steps the requests took and the longest one
(an upper bound: the bucket of gpt2d_step_seconds it fell in).  Beside
them, the longest step of an echo-scored prefill of a whole chunk
(--max-batch-rows less the slots: the longest step the engine makes):
no inspect step may be longer.  Only ever 127.0.0.1.  Prints; never fails
on a number (exit 1 only when a request fails).
"""

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))

from gpt2d_client import Server, parse_metrics  # noqa: E402

STEP = "gpt2d_step_seconds"


def step_buckets(metrics):
    """{upper bound: cumulative count} of the step histogram."""
    out = {}
    for key, value in metrics.items():
        if key.startswith(STEP + "_bucket{le=\""):
            le = key[len(STEP + "_bucket{le=\""):-2]
            out[float("inf") if le == "+Inf" else float(le)] = value
    return out


def step_figures(before, after):
    """(steps taken, upper bound of the longest) between two scrapes."""
    b, a = step_buckets(before), step_buckets(after)
    bounds = sorted(a)
    steps = a[bounds[-1]] - b.get(bounds[-1], 0)
    # the first bucket that holds every new step
    longest = next(le for le in bounds if a[le] - b.get(le, 0) == steps)
    return int(steps), longest


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpt2d", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-batch-rows", type=int, default=256)
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args(argv)

    rng = random.Random(1)
    prompt = [rng.randrange(50000) for _ in range(args.tokens)]
    variants = [
        ("echo scoring", "/v1/completions",
         {"prompt": prompt, "max_tokens": 0, "echo": True, "logprobs": 5}),
        ("norms", "/v1/inspect", {"prompt": prompt}),
        ("attention", "/v1/inspect", {"prompt": prompt, "attention": True}),
        ("lens", "/v1/inspect", {"prompt": prompt, "logit_lens": 5}),
        ("everything", "/v1/inspect",
         {"prompt": prompt, "attention": True, "logit_lens": 5}),
    ]
    work = tempfile.mkdtemp(prefix="gpt2d-inspect-bench.")
    srv = Server(args.gpt2d, args.model, work,
                 ["--threads", str(args.threads), "--slots", "4",
                  "--max-batch-rows", str(args.max_batch_rows)],
                 name="inspect-bench").start(timeout=120)
    figures = {}
    try:
        c = srv.client(timeout=600)
        # the longest step there is: a whole chunk of echo scoring
        chunk = args.max_batch_rows - 4
        c.post("/v1/completions", {"prompt": prompt[:8], "max_tokens": 1})
        m0 = parse_metrics(c.get("/metrics").body.decode())
        r = c.post("/v1/completions", {
            "prompt": [rng.randrange(50000) for _ in range(chunk)],
            "max_tokens": 0, "echo": True, "logprobs": 5})
        if r.status != 200:
            raise SystemExit("chunk prefill: %r" % (r,))
        chunk_steps, chunk_longest = step_figures(
            m0, parse_metrics(c.get("/metrics").body.decode()))
        times = {name: [] for name, _, _ in variants}
        sizes, steps = {}, {}
        for rep in range(args.reps):
            for name, path, body in variants:
                m0 = parse_metrics(c.get("/metrics").body.decode())
                t0 = time.monotonic()
                r = c.post(path, body)
                took = time.monotonic() - t0
                if r.status != 200:
                    raise SystemExit("%s: %r" % (name, r))
                m1 = parse_metrics(c.get("/metrics").body.decode())
                times[name].append(took)
                sizes[name] = len(r.body)
                if rep == 0:
                    steps[name] = step_figures(m0, m1)
        print("gpt2d /v1/inspect: %d tokens, every layer, model %s, %d threads, "
              "median and best of %d, one request at a time"
              % (args.tokens, os.path.basename(args.model.rstrip("/")),
                 args.threads, args.reps))
        print("%-14s %9s %9s %12s %6s %14s" % ("request", "median s", "best s",
                                               "answer bytes", "steps",
                                               "longest step"))
        for name, _, _ in variants:
            n, longest = steps[name]
            print("%-14s %9.3f %9.3f %12d %6d %12s s" % (
                name, statistics.median(times[name]), min(times[name]),
                sizes[name], n, "<= %g" % longest))
            figures[name] = {"median_s": statistics.median(times[name]),
                             "best_s": min(times[name]), "bytes": sizes[name],
                             "steps": n, "longest_step_le_s": longest}
        print("a whole chunk (%d rows) of echo scoring: %d steps, longest <= %g s"
              % (chunk, chunk_steps, chunk_longest))
        figures["chunk_echo"] = {"rows": chunk, "steps": chunk_steps,
                                 "longest_step_le_s": chunk_longest}
    finally:
        rc, _ = srv.stop()
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(figures, f, indent=1)
    return 0 if rc == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
