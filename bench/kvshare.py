#!/usr/bin/env python3
"""kvshare.py — another key's traffic against a session's cached history
(issue 19, finding 4: "four requests from another key evict a session's
cache, cached_tokens 500 -> 0 on the owner's next turn").  Standard library
and tests/integration/gpt2d_client.py only.

Starts gpt2d (--gpt2d, --model, --threads; default limits otherwise, plus
--args) on 127.0.0.1 with two API keys, A and B, then:

  1. Key A: a session of --history token ids (max_tokens 4), and its
     second turn (the history plus one id): the reuse before any churn
     (each turn reuses at most the prompt of the turn before).
  2. Key A idles 1.5 s (past the engine's one-second grace, so key B may
     use every slot), then key B sends --requests distinct prompts of
     --prompt tokens with max_tokens --tokens, --concurrency at a time.
  3. Key A's third turn: its cached_tokens against its history.

Printed: A's cached_tokens before and after B's traffic, B's wall time, and
the server's KV eviction series.  Example (GPT-2 124M-shaped weights):

  bench/kvshare.py --gpt2d build/src/gpt2d --model build/bench/models/gpt2-124m-random
"""

import argparse
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))

from gpt2d_client import NO_EOT, Server  # noqa: E402

KEY_A, KEY_B = "bench-kvshare-a", "bench-kvshare-b"


def turn(client, prompt, max_tokens=4, **extra):
    """One greedy completion: its cached_tokens."""
    r = client.post("/v1/completions", dict(prompt=prompt, max_tokens=max_tokens,
                                            temperature=0, logit_bias=NO_EOT,
                                            **extra))
    if r.status != 200:
        sys.exit("request failed: %r" % (r,))
    return r.json["usage"]["prompt_tokens_details"]["cached_tokens"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpt2d", default="build/src/gpt2d")
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--args", default="", help="more gpt2d flags, space-separated")
    ap.add_argument("--history", type=int, default=500)
    ap.add_argument("--requests", type=int, default=4)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--prompt", type=int, default=600)
    ap.add_argument("--tokens", type=int, default=400)
    args = ap.parse_args()

    work = tempfile.mkdtemp(prefix="gpt2d-kvshare.")
    keys = os.path.join(work, "keys")
    with open(keys, "w", encoding="ascii") as f:
        f.write(KEY_A + "\n" + KEY_B + "\n")
    server = Server(args.gpt2d, args.model, work,
                    ["--threads", str(args.threads), "--api-key-file", keys]
                    + args.args.split(), name="kvshare").start(timeout=300)
    try:
        a = server.client(api_key=KEY_A, timeout=600)
        b = server.client(api_key=KEY_B, timeout=600)
        history = [100 + (i * 13) % 5000 for i in range(args.history)]
        turn(a, history, session_id="chat")
        # each turn reuses at most the turn before's prompt
        print("A, second turn, before B's traffic: cached_tokens %d of %d"
              % (turn(a, history + [7], session_id="chat"), len(history)))
        history.append(7)
        time.sleep(1.5)
        prompts = [[6000 + 97 * k + (i * 7) % 3000 for i in range(args.prompt)]
                   for k in range(args.requests)]
        t0 = time.monotonic()
        with ThreadPoolExecutor(args.concurrency) as pool:
            list(pool.map(lambda p: turn(b, p, args.tokens), prompts))
        print("B: %d prompts of %d tokens, max_tokens %d, %d at a time: %.1f s"
              % (args.requests, args.prompt, args.tokens, args.concurrency,
                 time.monotonic() - t0))
        print("A, third turn, after B's traffic: cached_tokens %d of %d"
              % (turn(a, history + [8], session_id="chat"), len(history)))
        for key, value in sorted(a.metrics().items()):
            if "kv_evictions" in key or "kv_accounts" in key:
                print("  %s %g" % (key, value))
    finally:
        server.stop()


if __name__ == "__main__":
    main()
