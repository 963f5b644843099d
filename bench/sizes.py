#!/usr/bin/env python3
"""sizes.py — every GPT-2 size, every weight dtype: load time, memory, speed.

For each shape (random weights in the exact shapes of distilgpt2, gpt2,
gpt2-medium, gpt2-large and gpt2-xl, made once by
tests/reference/make_model.py as F16 checkpoints) and each --dtype, starts
gpt2d and measures:

  load s       process start to the first 200 from /health (reading and
               packing the weights; the KV pool is small and fixed);
  RSS MB       the daemon's VmRSS once healthy: the weights, and the
               512 MiB KV pool, whose pages gpt2d touches at start-up
               (8 streams of --tokens must fit in it: gpt2-xl's take
               2 x 48 x 1600 halves, 300 KiB, a token, so --tokens up
               to about 200 there);
  1 stream     ms per decode step (forward pass and sampling) of one
               greedy stream of --tokens tokens, beside the bandwidth
               limit: the bytes of weights one decode step reads (the
               daemon's start-up line) over the machine's read bandwidth;
  K=8 tok/s    aggregate tokens/s of 8 concurrent streams while all eight
               decode, beside its limit: 8 tokens per the longer of the
               bandwidth time and the compute time, 2 x weights x 8 FLOP
               at the peak of our panel kernels for that dtype.

The speeds are the daemon's own: the difference of gpt2d's /metrics
between two scrapes taken while only the measured decode steps run.
gpt2d_step_seconds (sum and count: the forward pass and the sampling of
each engine step, summed in integer nanoseconds, so exact) gives the steps'
mean length; gpt2d_batch_rows (sum and count) shows every step of the
window had exactly 1 (or K) rows, which the table marks "mixed" when not.
The first scrape follows the first token of the stream (of every stream, at
K = 8): the engine records a step before it hands out that step's tokens,
so every prefill step is already counted then.  The last follows the end of
the one stream (the engine idle), or, at K = 8, the moment one stream has
all but --tokens/8 of its tokens, while all eight still decode.  The
gaps between SSE chunks at the client (what this script timed before) add
the engine's bookkeeping between steps and the delivery of the chunks
(1-3 % here), depend on when the reader threads run, and cannot tell
prefill steps from decode steps at K = 8.  Each server first answers one
short request, so the window's steps are not the first to use its
buffers.

The bounds come from `bench_forward --machine-only`: read bandwidth
(--threads threads, the median of 9 passes over 512 MiB a thread) and, per
dtype, the panel kernels' best GFLOP/s over 1-64 rows on a matrix in cache
(one thread's best times --threads: the kernels' arithmetic with every
core to themselves).
It runs before every server; each row's limits use the best figures seen
so far in the run (the first line: the first measurement; the last: the
run's best), since a figure measured while another process held the memory
bus or a core is low, and a limit from it could be beaten.  On a shared
machine the speeds are rough and the limits loose; load times, RSS and the
weights' sizes do not depend on the load.  It reports; it never fails on a
number.

    python3 bench/sizes.py --build BUILD [--sizes gpt2,gpt2-xl]
        [--dtypes float32,float16,int8,q8] [--tokens 128]

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
VOCAB = 50257
PROMPT = [464, 2068, 7586, 21831, 18045, 625, 262, 16931, 3290, 13]
K = 8


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, stdout=subprocess.PIPE,
                          universal_newlines=True, **kw).stdout


class Bounds:
    """The best read bandwidth (bytes/s) and panel peaks (FLOP/s by
    dtype) `bench_forward --machine-only` has measured in this run."""

    def __init__(self, build, threads):
        self.cmd = [os.path.join(build, "bench", "bench_forward"),
                    "--machine-only", "--threads", str(threads)]
        self.bw = 0.0
        self.peak = {}

    def measure(self):
        """Measures again, keeping the best of each figure."""
        out = sh(self.cmd)
        bw = float(re.search(r"bandwidth ([0-9.]+) GB/s", out).group(1)) * 1e9
        self.bw = max(self.bw, bw)
        for m in re.finditer(r"panels (\S+) ([0-9.]+) GFLOP/s", out):
            flops = float(m.group(2)) * 1e9
            self.peak[m.group(1)] = max(self.peak.get(m.group(1), 0.0), flops)

    def show(self, what):
        print("%s: read bandwidth %.1f GB/s; panels %s GFLOP/s; load "
              "average %.1f" % (what, self.bw / 1e9, ", ".join(
                  "%s %.0f" % (d, f / 1e9) for d, f in self.peak.items()),
                  os.getloadavg()[0]))
        sys.stdout.flush()


# every --dtype whose panel peak `bench_forward --machine-only` prints
DTYPES = ("float32", "float16", "int8", "q8")


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


def stream(client, seed, tokens, on_tokens):
    """One greedy stream of `tokens` tokens; calls on_tokens(n) when a chunk
    brings its tokens up to n (a chunk names its tokens' ids, and holds
    none or several when a character spans tokens)."""
    body = {"prompt": PROMPT, "max_tokens": tokens, "temperature": 0,
            "seed": seed, "logit_bias": {"50256": -100}, "stream": True,
            "return_token_ids": True}
    es = client.open_stream("/v1/completions", body)
    n = 0
    try:
        for ev in es:
            choices = ev.get("choices") or []
            if choices and choices[0].get("token_ids"):
                n += len(choices[0]["token_ids"])
                on_tokens(n)
    finally:
        es.close()


def engine_counters(client):
    """(steps, their seconds, steps by rows, their rows) so far."""
    m = client.metrics()
    return (m["gpt2d_step_seconds_count"], m["gpt2d_step_seconds_sum"],
            m["gpt2d_batch_rows_count"], m["gpt2d_batch_rows_sum"])


def decode_window(before, after, rows):
    """(steps, seconds, whether each step had exactly `rows` rows) of the
    engine steps between two engine_counters scrapes."""
    steps, seconds, row_steps, row_sum = (b - a for a, b in zip(before, after))
    return steps, seconds, row_steps > 0 and row_sum == rows * row_steps


def one_stream(server, tokens):
    """Mean seconds per decode step of one stream, and whether every step of
    the window had one row."""
    scraper = server.client(timeout=60)
    start = []

    def on_tokens(n):
        if not start:
            start.append(engine_counters(scraper))

    stream(server.client(timeout=600), 1, tokens, on_tokens)
    if not start:
        raise RuntimeError("the stream ended before its first token")
    steps, seconds, pure = decode_window(start[0], engine_counters(scraper), 1)
    return seconds / steps if steps > 0 else float("nan"), pure


def k_streams(server, tokens):
    """Aggregate tokens/s of K streams over steps in which all K decode, and
    whether every step of the window had K rows."""
    scraper = server.client(timeout=60)
    counts = [0] * K
    lock = threading.Lock()
    all_decode = threading.Event()
    one_ending = threading.Event()
    margin = max(8, tokens // 8)

    def on_tokens(i, n):
        with lock:
            counts[i] = n
            if min(counts) >= 1:
                all_decode.set()
            if n >= tokens - margin:
                one_ending.set()

    def run(i):
        try:
            stream(server.client(timeout=600), 2 + i, tokens,
                   lambda n: on_tokens(i, n))
        finally:                    # a failed stream leaves a mixed window
            all_decode.set()
            one_ending.set()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(K)]
    for t in threads:
        t.start()
    all_decode.wait()
    before = engine_counters(scraper)
    one_ending.wait()
    after = engine_counters(scraper)
    for t in threads:
        t.join()
    steps, seconds, pure = decode_window(before, after, K)
    return K * steps / seconds if seconds > 0 else float("nan"), pure


def run_one(args, model_dir, dtype):
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
            server.client(timeout=600).complete(prompt=PROMPT, max_tokens=8,
                                                temperature=0)
            step, one_pure = one_stream(server, args.tokens)
            agg, k_pure = k_streams(server, args.tokens)
        except RuntimeError as e:
            return {"error": str(e).splitlines()[0]}
        finally:
            server.stop()
    return {"load": load, "rss": rss, "weight_bytes": weight_bytes,
            "step": step, "one_pure": one_pure, "agg": agg, "k_pure": k_pure}


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", required=True, help="the build tree")
    ap.add_argument("--sizes", default=",".join(SHAPES))
    ap.add_argument("--dtypes", default=",".join(DTYPES))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--python", default="python3")
    args = ap.parse_args(argv)
    for dtype in args.dtypes.split(","):
        if dtype not in DTYPES:
            ap.error("--dtypes: %r is not one of %s (each needs its own "
                     "kernels' peak)" % (dtype, ", ".join(DTYPES)))

    bounds = Bounds(args.build, args.threads)
    bounds.measure()
    bounds.show("machine")
    print("%-12s %-9s %7s %8s %9s %19s %22s" % (
        "model", "dtype", "load s", "RSS MB", "weights", "1 stream ms/tok",
        "K=8 tok/s"))
    for name in args.sizes.split(","):
        layers, heads, width = SHAPES[name]
        n_weights = layers * 12 * width * width + VOCAB * width
        model_dir = ensure_model(args.build, name, args.python)
        for dtype in args.dtypes.split(","):
            bounds.measure()
            r = run_one(args, model_dir, dtype)
            if "error" in r:
                print("%-12s %-9s  %s" % (name, dtype, r["error"]))
                continue
            read = r["weight_bytes"] / bounds.bw
            # K streams: each step reads the weights once and does
            # 2 x weights x K FLOPs
            k_step = max(read, 2.0 * n_weights * K / bounds.peak[dtype])
            print("%-12s %-9s %7.1f %8.0f %6.0f MB %7.2f (limit %5.2f)%s "
                  "%7.1f (limit %6.1f)%s" % (
                      name, dtype, r["load"], r["rss"],
                      r["weight_bytes"] / 1e6, 1e3 * r["step"], 1e3 * read,
                      "" if r["one_pure"] else " mixed", r["agg"], K / k_step,
                      "" if r["k_pure"] else " mixed"))
            sys.stdout.flush()
    bounds.show("best in the run")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
