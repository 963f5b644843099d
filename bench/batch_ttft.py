#!/usr/bin/env python3
"""batch_ttft.py — an interactive request's time to first token, idle and
while a batch runs.

    python3 bench/batch_ttft.py --model DIR [--binary build/src/gpt2d]
        [--prompt 128] [--rounds 5] [--probes 8] [--lines 64]
        [--line-prompt 32] [--line-tokens 128] [--slots 4] [--threads 2]
        [--server-args "..."]

One daemon (--batch-dir in a scratch directory).  Each round sends
--probes interactive requests with the machine otherwise idle, then
creates a batch of --lines lines (each a --line-prompt token prompt and
--line-tokens to generate), waits until its lines are running, sends as
many probes again, and cancels the batch.  A probe is a --prompt token
prompt of its own (a cache_salt of its own: nothing cached) with
max_tokens 1, so its wall time is its time to first token; probes are
spaced by a random 0-200 ms, so they arrive anywhere in a step.  Prints
the median and 90th percentile of each phase, their ratio, the batch lines
answered during the busy phases, gpt2d_background_preemptions_total and
gpt2d_background_steps_abandoned_total.

Timing is wall-clock on a shared machine: run it when nothing else does.
It reports; it never fails on a number.
"""

import argparse
import json
import os
import random
import shlex
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(HERE)
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != HERE]
sys.path.insert(0, os.path.join(SRC, "tests", "integration"))

from gpt2d_client import Server, metric_sum, parse_metrics  # noqa: E402


def upload(client, data):
    boundary = "bench-boundary"
    body = (("--%s\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\n"
             "batch\r\n--%s\r\nContent-Disposition: form-data; name=\"file\"; "
             "filename=\"b.jsonl\"\r\n\r\n" % (boundary, boundary)).encode()
            + data + ("\r\n--%s--\r\n" % boundary).encode())
    r = client.post("/v1/files", raw=body, headers={
        "Content-Type": "multipart/form-data; boundary=" + boundary})
    assert r.status == 200, r
    return r.json["id"]


def probe(client, rng, n_prompt, salt):
    prompt = [rng.randrange(256, 50000) for _ in range(n_prompt)]
    t0 = time.monotonic()
    r = client.post("/v1/completions", {"prompt": prompt, "max_tokens": 1,
                                        "temperature": 0, "cache_salt": salt})
    assert r.status == 200, r
    return time.monotonic() - t0


def wait_status(client, batch_id, want, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        b = client.get("/v1/batches/" + batch_id).json
        if b["status"] in want:
            return b
        time.sleep(0.05)
    raise RuntimeError("batch %s not %s" % (batch_id, want))


def pct(values, p):
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100.0 * (len(s) - 1))))]


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--binary", default=os.path.join("build", "src", "gpt2d"))
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--probes", type=int, default=8)
    ap.add_argument("--lines", type=int, default=64)
    ap.add_argument("--line-prompt", type=int, default=32)
    ap.add_argument("--line-tokens", type=int, default=128)
    ap.add_argument("--slots", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--server-args", default="")
    args = ap.parse_args(argv)

    work = tempfile.mkdtemp(prefix="gpt2d-batch-ttft.")
    batch_dir = os.path.join(work, "batches")
    os.mkdir(batch_dir, 0o700)
    server = Server(os.path.abspath(args.binary), args.model, work,
                    ["--slots", str(args.slots), "--threads",
                     str(args.threads), "--batch-dir", batch_dir]
                    + shlex.split(args.server_args), name="batch-ttft")
    server.start(timeout=120)
    client = server.client(timeout=600)
    rng = random.Random(5)
    lines = b"".join(json.dumps({
        "custom_id": "l%d" % i, "method": "POST", "url": "/v1/completions",
        "body": {"prompt": [rng.randrange(256, 50000)
                            for _ in range(args.line_prompt)],
                 "max_tokens": args.line_tokens, "seed": i,
                 "speculative": False}}).encode() + b"\n"
        for i in range(args.lines))
    file_id = upload(client, lines)
    idle, busy = [], []
    answered = 0
    try:
        probe(client, rng, args.prompt, "warm")
        for rnd in range(args.rounds):
            for k in range(args.probes):
                time.sleep(rng.uniform(0, 0.2))
                idle.append(probe(client, rng, args.prompt,
                                  "i%d-%d" % (rnd, k)))
            b = client.post("/v1/batches", {"input_file_id": file_id,
                                            "endpoint": "/v1/completions",
                                            "completion_window": "24h"}).json
            wait_status(client, b["id"], ("in_progress",))
            time.sleep(1.0)  # its lines past their prompts, decoding
            for k in range(args.probes):
                time.sleep(rng.uniform(0, 0.2))
                busy.append(probe(client, rng, args.prompt,
                                  "b%d-%d" % (rnd, k)))
            client.post("/v1/batches/%s/cancel" % b["id"])
            b = wait_status(client, b["id"], ("cancelled", "completed"))
            answered += b["request_counts"]["completed"]
        metrics = parse_metrics(client.get("/metrics").body.decode())
        preempt = metric_sum(metrics, "gpt2d_background_preemptions_total")
        abandoned = metric_sum(metrics,
                               "gpt2d_background_steps_abandoned_total")
    finally:
        server.stop()
    mi, mb = statistics.median(idle), statistics.median(busy)
    print("prompt %d tokens, %d probes a phase x %d rounds, batch lines %d "
          "prompt + %d tokens, slots %d%s" % (
              args.prompt, args.probes, args.rounds, args.line_prompt,
              args.line_tokens, args.slots,
              (", " + args.server_args) if args.server_args else ""))
    print("TTFT idle: median %.1f ms, p90 %.1f ms" % (mi * 1e3,
                                                      pct(idle, 90) * 1e3))
    print("TTFT while a batch runs: median %.1f ms, p90 %.1f ms (%.2fx idle)"
          % (mb * 1e3, pct(busy, 90) * 1e3, mb / mi))
    print("batch lines answered in the busy phases: %d; background "
          "preemptions: %d, background steps abandoned: %d"
          % (answered, preempt, abandoned))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
