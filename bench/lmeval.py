#!/usr/bin/env python3
"""lmeval.py — multiple-choice log-likelihoods as lm-eval sends them.

    python3 bench/lmeval.py --model DIR --gpt2d NAME BINARY
        [--gpt2d NAME BINARY ...] [--items 16] [--context 320]
        [--choices 4] [--shape array|single] [--repeats 3] [--threads 2]
        [--heldout FILE] [--server-args "..."]

lm-eval-harness's `local-completions` scores a multiple-choice item by
the log-likelihood of each choice after the item's context: one
completion request per choice (--shape single), or the item's choices as
one prompt array (--shape array), each with "echo": true, "logprobs": 1
and "max_tokens": 0, so the answer is every prompt token's
log-probability.  Each item here is a context of --context tokens (the
held-out text's tokens when --heldout is given, else a seeded run of
token ids) and --choices continuations of 4-8 tokens.

Each daemon (--gpt2d, one or more: builds to compare) is started once;
rounds alternate between them (A B A B ...), every round with a cache_salt
of its own so no round finds another's blocks.  Per daemon it prints the
median items per second, the prompt tokens sent and computed (sent minus
usage.prompt_tokens_details.cached_tokens) in the last round, and whether
every score was the same as the first daemon's (they must be: the same
kernels give the same bits).

Timing is wall-clock on a shared machine: run it when nothing else does.
It reports; it never fails on a number.
"""

import argparse
import os
import random
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(HERE)
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != HERE]
sys.path.insert(0, os.path.join(SRC, "tests", "integration"))

from gpt2d_client import Server  # noqa: E402


def items_of(args, client):
    """[(context, [choice, ...])]: the same for every daemon and round."""
    rng = random.Random(7)
    stream = []
    if args.heldout:
        with open(args.heldout, encoding="utf-8") as f:
            text = f.read().replace("<|endoftext|>", "\n")
        r = client.post("/tokenize", {"content": text})
        stream = r.json["tokens"]
    out = []
    for i in range(args.items):
        if len(stream) >= args.context:
            at = rng.randrange(0, len(stream) - args.context)
            context = stream[at:at + args.context]
        else:
            context = [rng.randrange(256, 50000) for _ in range(args.context)]
        choices = [[rng.randrange(256, 50000)
                    for _ in range(rng.randrange(4, 9))]
                   for _ in range(args.choices)]
        out.append((context, choices))
    return out


def score_round(client, items, shape, salt):
    """Seconds, tokens sent, tokens cached, and every choice's scores."""
    body = {"max_tokens": 0, "echo": True, "logprobs": 1, "temperature": 0,
            "cache_salt": salt}
    sent = cached = 0
    scores = []
    t0 = time.monotonic()
    for context, choices in items:
        prompts = [context + c for c in choices]
        requests = [prompts] if shape == "array" else [[p] for p in prompts]
        for prompt in requests:
            r = client.post("/v1/completions", dict(body, prompt=prompt))
            if r.status != 200:
                raise RuntimeError("%d %s" % (r.status, r.body[:300]))
            usage = r.json["usage"]
            sent += usage["prompt_tokens"]
            cached += usage["prompt_tokens_details"]["cached_tokens"]
            for ch in sorted(r.json["choices"], key=lambda c: c["index"]):
                lp = ch["logprobs"]
                scores.append((lp["token_logprobs"], lp["top_logprobs"]))
    return time.monotonic() - t0, sent, cached, scores


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--gpt2d", nargs=2, action="append", required=True,
                    metavar=("NAME", "BINARY"))
    ap.add_argument("--items", type=int, default=16)
    ap.add_argument("--context", type=int, default=320)
    ap.add_argument("--choices", type=int, default=4)
    ap.add_argument("--shape", choices=("array", "single"), default="array")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--heldout")
    ap.add_argument("--server-args", default="")
    args = ap.parse_args(argv)
    print("%d items of a %d-token context and %d choices, %s requests; "
          "load average %.1f" % (args.items, args.context, args.choices,
                                 args.shape, os.getloadavg()[0]))
    with tempfile.TemporaryDirectory(prefix="gpt2d-lmeval-") as work:
        servers = []
        try:
            for name, binary in args.gpt2d:
                s = Server(binary, args.model, work,
                           ["--threads", str(args.threads), "--slots",
                            str(max(4, args.choices)), "--max-n",
                            str(max(4, args.choices))] +
                           args.server_args.split(), name=name)
                servers.append(s.start(timeout=600))
            clients = [s.client(timeout=600) for s in servers]
            items = items_of(args, clients[0])
            rates = [[] for _ in servers]
            last = [None] * len(servers)
            for rnd in range(args.repeats):
                for k, c in enumerate(clients):
                    seconds, sent, cached, scores = score_round(
                        c, items, args.shape, "lmeval-%d-%d" % (rnd, k))
                    rates[k].append(args.items / seconds)
                    last[k] = (sent, cached, scores)
            for k, (name, _) in enumerate(args.gpt2d):
                sent, cached, scores = last[k]
                print("  %-12s %.2f items/s (rounds: %s); prompt tokens "
                      "sent %d, computed %d (%.0f %%); scores %s" % (
                          name, statistics.median(rates[k]),
                          ", ".join("%.2f" % x for x in rates[k]), sent,
                          sent - cached, 100.0 * (sent - cached) / sent,
                          "the same as %s's" % args.gpt2d[0][0]
                          if scores == last[0][2] else "DIFFERENT"))
        finally:
            for s in servers:
                s.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
