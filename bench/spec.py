#!/usr/bin/env python3
"""spec.py — what speculative decoding by prompt lookup gives end to end.

    python3 bench/spec.py --build BUILD --model DIR --heldout FILE
        [--streams 1,8] [--tokens 128] [--requests 8] [--repeats 3]
        [--dtype float32] [--passage 320] [--server-args "..."]

Starts one gpt2d (--slots 8, --threads 2) on the model and, for each
workload and each number of concurrent streams K, sends --requests
greedy requests through K client threads, once with "speculative": false
and once with true, alternating (off, on, off, on, ...) for --repeats
rounds, so both see the same machine.  Every request generates exactly
--tokens tokens (end-of-text banned), so the two runs do the same work.
Prints, per workload and K, the median aggregate tokens per second of
each, their ratio, the acceptance (drafts accepted / proposed, from each
answer's usage.completion_tokens_details), the tokens a verification step
kept on average (from gpt2d_spec_* metrics), and whether every answer was
the same with and without (it must be: the design's promise).

Workloads, from the held-out text (tests/reference/corpus.py's file):
  copy    a passage of --passage tokens (consecutive held-out texts), a
          blank line, and the passage's first 8 tokens again: an answer
          that repeats the passage, as a summary quoting its source or an
          edit of a document does, is what prompt lookup drafts.  How often
          the model does repeat it is the acceptance.
  fresh   the first 32 tokens of each held-out text: little to copy
          beyond the answer's own repetitions; what failed drafts cost.

Timing is wall-clock on a shared machine: run it when nothing else does.
It reports; it never fails on a number.
"""

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(SRC, "tests", "integration"))

from gpt2d_client import Server, metric_sum, parse_metrics  # noqa: E402


def tokenize(client, text):
    r = client.post("/tokenize", {"content": text})
    if r.status != 200:
        raise RuntimeError("tokenize: %d %s" % (r.status, r.body[:200]))
    return r.json["tokens"]


def heldout_texts(path):
    with open(path, encoding="utf-8") as f:
        return [t.rstrip("\n") for t in f.read().split("<|endoftext|>")[1:]
                if t.strip()]


def copy_prompts(client, texts, n, passage):
    """n prompts: a passage of `passage` tokens, a blank line, its start."""
    prompts, i = [], 0
    blank = tokenize(client, "\n\n")
    while len(prompts) < n and i < len(texts):
        ids = []
        while len(ids) < passage and i < len(texts):
            ids += tokenize(client, texts[i] + "\n")
            i += 1
        ids = ids[:passage]
        prompts.append(ids + blank + ids[:8])
    return prompts


def fresh_prompts(client, texts, n):
    return [tokenize(client, t)[:32] for t in texts[:n]]


def run_round(client_of, prompts, k, tokens, speculative):
    """Sends the prompts through k threads; (seconds, answers, usage)."""
    answers = [None] * len(prompts)
    drafts = [0, 0]
    lock = threading.Lock()
    next_i = [0]
    errors = []

    def worker():
        c = client_of()
        while True:
            with lock:
                i = next_i[0]
                next_i[0] += 1
            if i >= len(prompts):
                return
            r = c.post("/v1/completions", {
                "prompt": prompts[i], "max_tokens": tokens,
                "temperature": 0, "speculative": speculative,
                "return_token_ids": True, "logit_bias": {"50256": -100}})
            if r.status != 200:
                errors.append("%d %s" % (r.status, r.body[:200]))
                return
            body = r.json
            answers[i] = body["choices"][0]["token_ids"]
            d = body["usage"]["completion_tokens_details"]
            with lock:
                drafts[0] += (d["accepted_prediction_tokens"] +
                              d["rejected_prediction_tokens"])
                drafts[1] += d["accepted_prediction_tokens"]

    threads = [threading.Thread(target=worker) for _ in range(k)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.monotonic() - t0
    if errors:
        raise RuntimeError("request failed: " + errors[0])
    return took, answers, drafts


def spec_steps(client):
    m = parse_metrics(client.get("/metrics").body.decode())
    return (metric_sum(m, "gpt2d_spec_verifications_total"),
            metric_sum(m, "gpt2d_spec_accepted_tokens_total"))


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--heldout", required=True)
    ap.add_argument("--streams", default="1,8")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--passage", type=int, default=320)
    ap.add_argument("--server-args", default="",
                    help="more gpt2d options, e.g. --test-speculate-always "
                         "(every draft found verified: what the cost rule "
                         "declined would have given)")
    args = ap.parse_args(argv)
    streams = [int(s) for s in args.streams.split(",")]
    texts = heldout_texts(args.heldout)
    rows = []
    with tempfile.TemporaryDirectory(prefix="gpt2d-spec-") as work:
        server = Server(os.path.join(args.build, "src", "gpt2d"), args.model,
                        work, ["--dtype", args.dtype, "--threads", "2",
                               "--slots", "8"] + args.server_args.split())
        server.start(timeout=600)
        try:
            c = server.client(timeout=600)
            n_ctx = c.get("/v1/models").json["data"][0].get("max_model_len")
            passage = args.passage
            if n_ctx is not None:
                passage = min(passage, n_ctx - args.tokens - 16)
            workloads = {
                "copy": copy_prompts(c, texts, args.requests, passage),
                "fresh": fresh_prompts(c, texts, args.requests),
            }
            for name, prompts in workloads.items():
                for k in streams:
                    tps = {False: [], True: []}
                    same = True
                    accepted = proposed = 0
                    steps0 = spec_steps(c)
                    ref = None
                    for _ in range(args.repeats):
                        for spec in (False, True):
                            took, answers, d = run_round(
                                lambda: server.client(timeout=600), prompts,
                                k, args.tokens, spec)
                            tps[spec].append(len(prompts) * args.tokens /
                                             took)
                            if ref is None:
                                ref = answers
                            same = same and answers == ref
                            if spec:
                                proposed += d[0]
                                accepted += d[1]
                    steps1 = spec_steps(c)
                    ver = steps1[0] - steps0[0]
                    kept = ((steps1[1] - steps0[1]) / ver + 1) if ver else 0
                    off = statistics.median(tps[False])
                    on = statistics.median(tps[True])
                    rows.append((name, k, off, on, on / off,
                                 accepted / proposed if proposed else 0.0,
                                 proposed / (args.repeats * len(prompts) *
                                             args.tokens),
                                 kept, same))
        finally:
            server.stop()
    print("| workload | K | off tok/s | on tok/s | speed-up | acceptance "
          "| drafts per token | tokens per verification | same answers |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print("| %s | %d | %.1f | %.1f | %.2fx | %.2f | %.2f | %.2f | %s |"
              % (r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7],
                 "yes" if r[8] else "NO"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
