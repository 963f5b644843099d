#!/usr/bin/env python3
"""quality.py — what a cheaper weight or KV dtype costs in quality, measured
by the daemon itself on trained weights; and how often a small model agrees
with a large one (the ceiling of a draft's acceptance).

    python3 bench/quality.py --build BUILD --model DIR --heldout FILE
        [--draft DIR] [--dtypes float32,float16,int8,q8]
        [--kv-dtypes float32,float16] [--chunk 128] [--chunks N]
        [--prompts 24] [--tokens 32]

For each pair of --dtype and --kv-dtype, starts gpt2d on the model and
measures, on the held-out text (never trained on; the file
tests/reference/corpus.py writes: each text after a literal <|endoftext|>
and followed by a newline, which are taken back off, the texts tokenized
one by one and joined with token 50256, as the trainer saw its texts):

  perplexity   exp of the mean negative log-likelihood of the tokens of
               windows of --chunk + 1 tokens taken every --chunk tokens
               (every window, or the first --chunks), each token after a
               window's first predicted from those before it in the
               window, each window one request (`echo` + `logprobs`,
               `max_tokens` 0): train.py's own held-out figure when
               --chunk is the preset's training window;
  top-1        the share of those positions whose most likely next token
               (`top_logprobs`) is float32 weights' with float32 KV;
  greedy       the share of --tokens greedy tokens after each of --prompts
               held-out prompts that equal float32's up to the first that
               differs (a greedy continuation that leaves float32's at
               token 10 of 32 counts 10/32: after it the contexts differ).

With --draft, the draft model (float32) is scored the same way and its
top-1 agreement with the target's float32 is printed: the share of
positions where a greedy draft proposes the target's own token, which is
what speculative decoding's acceptance cannot exceed at temperature 0.

Prompts are the first 32 tokens of the first --prompts windows.  Every
run scores the same tokens (the daemon's /tokenize).  The figures
are exact functions of the weights and the kernels: no timing, no load
dependence.  Prints a Markdown table.
"""

import argparse
import math
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(SRC, "tests", "integration"))

from gpt2d_client import Server  # noqa: E402


def start(build, model, work, dtype, kv_dtype):
    server = Server(os.path.join(build, "src", "gpt2d"), model, work,
                    ["--dtype", dtype, "--kv-dtype", kv_dtype,
                     "--threads", "2", "--slots", "2"])
    server.start(timeout=600)
    return server


def tokenize(client, text):
    r = client.post("/tokenize", {"content": text})
    if r.status != 200:
        raise RuntimeError("tokenize: %d %s" % (r.status, r.body[:200]))
    return r.json["tokens"]


def heldout_stream(client, text):
    """corpus.py's held-out file back to the token stream the trainer
    scores: 50256, then each text's tokens."""
    ids = []
    for piece in text.split("<|endoftext|>")[1:]:
        ids.append(50256)
        ids.extend(tokenize(client, piece[:-1] if piece.endswith("\n")
                            else piece))
    return ids


def score(client, ids):
    """(log-likelihoods of ids[1:], the most likely token at each)."""
    r = client.post("/v1/completions", {"prompt": ids, "max_tokens": 0,
                                        "echo": True, "logprobs": 1,
                                        "temperature": 0})
    if r.status != 200:
        raise RuntimeError("score: %d %s" % (r.status, r.body[:200]))
    lp = r.json["choices"][0]["logprobs"]
    lls = lp["token_logprobs"][1:]
    best = [max(top.items(), key=lambda kv: kv[1])[0]
            for top in lp["top_logprobs"][1:]]
    return lls, best


def greedy(client, ids, n):
    r = client.post("/v1/completions", {"prompt": ids, "max_tokens": n,
                                        "temperature": 0,
                                        "return_token_ids": True,
                                        "logit_bias": {"50256": -100}})
    if r.status != 200:
        raise RuntimeError("greedy: %d %s" % (r.status, r.body[:200]))
    return r.json["choices"][0]["token_ids"]


def measure(args, model, dtype, kv_dtype, windows, prompts):
    with tempfile.TemporaryDirectory(prefix="gpt2d-quality-") as work:
        server = start(args.build, model, work, dtype, kv_dtype)
        try:
            c = server.client(timeout=600)
            lls, best = [], []
            for w in windows:
                l, b = score(c, w)
                lls += l
                best += b
            outs = [greedy(c, p, args.tokens) for p in prompts]
        finally:
            server.stop()
    return {"nll": -sum(lls) / len(lls), "best": best, "greedy": outs}


def agreement(a, b):
    return sum(x == y for x, y in zip(a, b)) / len(a)


def prefix_share(outs, ref, n):
    total = 0
    for o, r in zip(outs, ref):
        same = 0
        while same < min(len(o), len(r)) and o[same] == r[same]:
            same += 1
        total += same
    return total / (n * len(ref))


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--draft")
    ap.add_argument("--heldout", required=True, help="held-out text file")
    ap.add_argument("--dtypes", default="float32,float16,int8,q8")
    ap.add_argument("--kv-dtypes", default="float32,float16")
    ap.add_argument("--chunk", type=int, default=128)
    ap.add_argument("--chunks", type=int, default=0, help="0: every window")
    ap.add_argument("--prompts", type=int, default=24)
    ap.add_argument("--tokens", type=int, default=32)
    args = ap.parse_args(argv)

    with open(args.heldout, encoding="utf-8") as f:
        text = f.read()
    with tempfile.TemporaryDirectory(prefix="gpt2d-quality-") as work:
        server = start(args.build, args.model, work, "float32", "float32")
        try:
            ids = heldout_stream(server.client(timeout=600), text)
        finally:
            server.stop()
    windows = [ids[s:s + args.chunk + 1]
               for s in range(0, len(ids) - args.chunk, args.chunk)]
    if args.chunks:
        windows = windows[:args.chunks]
    if len(windows) < max(1, args.prompts):
        sys.exit("quality.py: the held-out text has %d tokens: too few"
                 % len(ids))
    prompts = [w[:32] for w in windows[:args.prompts]]
    positions = len(windows) * args.chunk

    rows = []
    ref = None
    for dtype in args.dtypes.split(","):
        for kv in args.kv_dtypes.split(","):
            r = measure(args, args.model, dtype, kv, windows, prompts)
            if ref is None:
                ref = r
            rows.append((os.path.basename(os.path.normpath(args.model)),
                         dtype, kv, r))
            print("quality.py: %s %s kv %s: perplexity %.3f" %
                  (rows[-1][0], dtype, kv, math.exp(r["nll"])),
                  file=sys.stderr, flush=True)
    print("held-out: %d windows of %d + 1 tokens (%d positions scored), %d "
          "greedy prompts of 32 tokens x %d new" %
          (len(windows), args.chunk, positions, args.prompts, args.tokens))
    print()
    print("| model | dtype | KV | perplexity | top-1 = float32's | "
          "greedy = float32's |")
    print("|---|---|---|---|---|---|")
    for name, dtype, kv, r in rows:
        print("| %s | %s | %s | %.3f | %.2f %% | %.2f %% |" %
              (name, dtype, kv, math.exp(r["nll"]),
               100 * agreement(r["best"], ref["best"]),
               100 * prefix_share(r["greedy"], ref["greedy"], args.tokens)))
    if args.draft:
        d = measure(args, args.draft, "float32", "float32", windows, prompts)
        print()
        print("draft %s (float32): perplexity %.3f; top-1 = the target's "
              "float32 top-1 at %.2f %% of positions; its greedy tokens = "
              "the target's for %.2f %% of them (to the first difference)" %
              (os.path.basename(os.path.normpath(args.draft)),
               math.exp(d["nll"]), 100 * agreement(d["best"], ref["best"]),
               100 * prefix_share(d["greedy"], ref["greedy"], args.tokens)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
