#!/usr/bin/env python3
"""sizes.py — every GPT-2 size, every weight dtype: load time, memory, speed.

For each shape (random weights in the exact shapes of distilgpt2, gpt2,
gpt2-medium, gpt2-large and gpt2-xl, made once by
tests/reference/make_model.py as F16 checkpoints) and each --dtype, starts
gpt2d and measures:

  load s       process start to the first 200 from /health (reading and
               packing the weights; the KV pool is small and fixed);
  RSS MB       the daemon's VmRSS once healthy;
  1 stream     ms/token of one greedy stream (mean gap between its tokens
               after the first), beside the bandwidth limit: the bytes of
               weights one decode step reads (the daemon's start-up line)
               over the machine's read bandwidth;
  K=8 tok/s    aggregate tokens/s of 8 concurrent streams while all eight
               decode, beside its limit: the larger of the bandwidth time
               and the compute time (2 x weights x 8 FLOP at sgemm peak).

The two machine bounds come from `bench_forward --machine-only` in the same
run.  It reports; it never fails on a number.

    python3 bench/sizes.py --build BUILD [--sizes gpt2,gpt2-xl]
        [--dtypes float32,float16,int8] [--tokens 64]

Models go to BUILD/bench/models/sizes/ (about 5 GB for all five).
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(SRC, "tests", "integration"))

from gpt2d_client import Server, rss_kib  # noqa: E402

# name: (layers, heads, width) — Hugging Face's configs for these models.
SHAPES = {
    "distilgpt2": (6, 12, 768),
    "gpt2": (12, 12, 768),
    "gpt2-medium": (24, 16, 1024),
    "gpt2-large": (36, 20, 1280),
    "gpt2-xl": (48, 25, 1600),
}
PROMPT = [464, 2068, 7586, 21831, 18045, 625, 262, 16931, 3290, 13]
K = 8


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, stdout=subprocess.PIPE,
                          universal_newlines=True, **kw).stdout


def machine_bounds(build, threads):
    out = sh([os.path.join(build, "bench", "bench_forward"), "--machine-only",
              "--threads", str(threads)])
    bw = float(re.search(r"bandwidth ([0-9.]+) GB/s", out).group(1)) * 1e9
    flops = float(re.search(r"sgemm ([0-9.]+) GFLOP/s", out).group(1)) * 1e9
    return bw, flops


def ensure_model(build, name, python):
    layers, heads, width = SHAPES[name]
    out = os.path.join(build, "bench", "models", "sizes", name)
    if os.path.exists(os.path.join(out, "model.safetensors")):
        return out
    vocab = os.path.join(build, "tests", "data", "tokenizer")
    tmp = out + ".tmp"
    subprocess.run(["rm", "-rf", tmp], check=True)
    print("sizes.py: generating %s (%d layers, %d heads, %d wide)"
          % (name, layers, heads, width), file=sys.stderr)
    subprocess.run([python, os.path.join(SRC, "tests", "reference",
                                         "make_model.py"), tmp,
                    "--vocab-dir", vocab, "--n-layer", str(layers),
                    "--n-head", str(heads), "--n-embd", str(width),
                    "--n-ctx", "1024", "--seed", "1", "--dtype", "F16"],
                   check=True, env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
    os.rename(tmp, out)
    return out


def stream(client, seed, tokens, times):
    """One greedy stream of `tokens` tokens; appends each token's arrival."""
    body = {"prompt": PROMPT, "max_tokens": tokens, "temperature": 0,
            "seed": seed, "logit_bias": {"50256": -100}, "stream": True}
    es = client.open_stream("/v1/completions", body)
    try:
        for ev in es:
            choices = ev.get("choices") or []
            if choices and choices[0].get("finish_reason") is None:
                times.append(time.monotonic())
    finally:
        es.close()


def measure(server, tokens):
    one = []
    stream(server.client(timeout=600), 1, tokens, one)
    gaps = [b - a for a, b in zip(one, one[1:])]
    ms_per_token = 1e3 * sum(gaps) / len(gaps)

    times = [[] for _ in range(K)]
    threads = [threading.Thread(target=stream,
                                args=(server.client(timeout=600), 2 + i,
                                      tokens, times[i])) for i in range(K)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # while all K decode: from the latest first token to the earliest last
    lo = max(t[0] for t in times)
    hi = min(t[-1] for t in times)
    n = sum(1 for t in times for x in t if lo < x <= hi)
    agg = n / (hi - lo) if hi > lo else float("nan")
    return ms_per_token, agg


def run_one(args, model_dir, dtype, bw):
    with tempfile.TemporaryDirectory(prefix="gpt2d-sizes-") as work:
        server = Server(os.path.join(args.build, "src", "gpt2d"), model_dir,
                        work, ["--dtype", dtype, "--threads", str(args.threads),
                               "--slots", str(K), "--kv-memory", "512M",
                               "--kv-dtype", "float16"])
        t0 = time.monotonic()
        try:
            server.start(timeout=600)
        except RuntimeError as e:
            return {"error": str(e).splitlines()[0]}
        load = time.monotonic() - t0
        rss = rss_kib(server.pid) / 1024.0
        with open(server.log_path) as f:
            m = re.search(r"([0-9.]+) MB of \S+ weights", f.read())
        weight_bytes = float(m.group(1)) * 1e6
        try:
            ms, agg = measure(server, args.tokens)
        finally:
            server.stop()
    return {"load": load, "rss": rss, "ms": ms, "agg": agg,
            "weight_mb": weight_bytes / 1e6, "bw_ms": 1e3 * weight_bytes / bw}


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", required=True, help="the build tree")
    ap.add_argument("--sizes", default=",".join(SHAPES))
    ap.add_argument("--dtypes", default="float32,float16,int8")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--python", default="python3")
    args = ap.parse_args(argv)

    bw, flops = machine_bounds(args.build, args.threads)
    print("machine: read bandwidth %.1f GB/s, sgemm peak %.0f GFLOP/s, "
          "%d threads; load average %.1f" % (bw / 1e9, flops / 1e9, args.threads,
                                           os.getloadavg()[0]))
    print("%-12s %-9s %7s %8s %9s %17s %20s" % (
        "model", "dtype", "load s", "RSS MB", "weights", "1 stream ms/tok",
        "K=8 tok/s"))
    for name in args.sizes.split(","):
        layers, heads, width = SHAPES[name]
        n_weights = layers * 12 * width * width + 50257 * width
        model_dir = ensure_model(args.build, name, args.python)
        for dtype in args.dtypes.split(","):
            r = run_one(args, model_dir, dtype, bw)
            if "error" in r:
                print("%-12s %-9s  %s" % (name, dtype, r["error"]))
                continue
            # K streams: each step reads the weights once and does
            # 2 x weights x K FLOPs
            step_bound = max(r["weight_mb"] * 1e6 / bw,
                             2.0 * n_weights * K / flops)
            print("%-12s %-9s %7.1f %8.0f %6.0f MB %6.1f (limit %5.1f) "
                  "%7.1f (limit %6.1f)" % (
                      name, dtype, r["load"], r["rss"], r["weight_mb"],
                      r["ms"], r["bw_ms"], r["agg"], K / step_bound))
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
