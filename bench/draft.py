#!/usr/bin/env python3
"""draft.py — what speculative decoding with a draft model (--draft) gives.

    python3 bench/draft.py --build BUILD shapes [--target gpt2-xl]
        [--drafts distilgpt2,gpt2] [--dtype float32] [--tokens 48]
        [--ks 1,2,4,8] [--repeats 3]
    python3 bench/draft.py --build BUILD pair TARGET_DIR DRAFT_DIR
        --heldout FILE [--tokens 64] [--requests 8] [--k 8] [--repeats 3]
    python3 bench/draft.py --build BUILD agree [--target gpt2-xl]
        [--draft distilgpt2] [--dtype float32] [--tokens 48]
        [--percents 30,60,90] [--ks rule,1,8] [--repeats 3]
    python3 bench/draft.py --build BUILD overhead [--target gpt2-xl]
        [--draft distilgpt2] [--dtype float32] [--tokens 48]
    python3 bench/draft.py --build BUILD truncate MODEL_DIR LAYERS OUT_DIR

(--binary GPT2D runs that daemon rather than BUILD's, to compare builds.)

shapes: random weights in GPT-2's shapes (bench/sizes.py makes them), one
greedy stream.  Random models never agree, so what is measured is the
price: for each k, a daemon whose draft guesses k tokens every step and
whose model verifies all of them (--test-speculate-always,
--speculative-tokens k) decodes one stream; its mean step (the draft's k
passes and the model's step of 1 + k rows, from gpt2d's own
gpt2d_step_seconds between the first token and the last) against the
same daemon's plain step ("speculative": false), alternating, medians of
--repeats.  What a draft accepted with probability a (each
guess on its own) gives is then exact arithmetic: a step keeps
1 + a + ... + a^k tokens on average, so the speed-up is that times the
plain step over the step with k guesses; the best k for each a.  And
what a draft that is always wrong costs under the engine's own rule
(no --test-speculate-always): the same stream with "speculative" false
and true, alternating, medians of --repeats.

agree: the same shapes, with a draft constructed to agree as often as
asked: a daemon with --test-draft-agree P makes the draft's guess the
prediction's token at P % of positions (drawn independently) and another
token elsewhere, and each drafted request sends the greedy answer (its
token ids) as its prediction, so the draft agrees with the model at that
rate while its passes cost what they cost.  For each P and each k ("rule":
the engine's own choice; a number: --test-speculate-always with that many
guesses a step), one greedy stream alternates "speculative" false and
true; the median request times, the speed-up, the share of guesses the
model kept, and whether every answer was the greedy one (it must be).

pair: a real model and its draft (the trained test models).  Greedy
requests of --tokens tokens on the first 32 tokens of each held-out text,
one at a time, "speculative" false and true alternating for --repeats
rounds; the median tokens per second of each, the acceptance seen
(usage.completion_tokens_details), and whether every answer was the same
(it must be).  Then the same with every guess verified.

overhead: shapes' last line alone: a random (always wrong) draft under the
engine's own rule, "speculative" false and true alternating.

truncate: writes OUT_DIR, a draft made of MODEL_DIR's first LAYERS layers
(its embeddings, those layers, its final LayerNorm and unembedding: a
layer-skipping draft of the model itself, the only draft a model trained
here has without training a second one).

Timing is wall-clock or gpt2d's own on a shared machine: run it when
nothing else does.  It reports; it never fails on a number.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(HERE)
# bench/ after the standard library: bench/inspect.py is not `inspect`
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != HERE]
sys.path.append(HERE)
sys.path.insert(0, os.path.join(SRC, "tests", "integration"))

import sizes  # noqa: E402
from gpt2d_client import Server  # noqa: E402

ACCEPTANCE = (0.3, 0.6, 0.9)


BINARY = None  # --binary: another gpt2d than BUILD's


def start(build, target, work, args):
    server = Server(BINARY or os.path.join(build, "src", "gpt2d"), target,
                    work, args)
    server.start(timeout=900)
    return server


def mean_step(server, tokens, spec):
    """gpt2d's mean step while one greedy stream decodes, speculating or
    not (sizes.py's window: from its first token to its end)."""
    scraper = server.client(timeout=60)
    body = {"prompt": sizes.PROMPT, "max_tokens": tokens, "temperature": 0,
            "logit_bias": {"50256": -100}, "stream": True,
            "speculative": spec}
    start = None
    for ev in server.client(timeout=600).stream("/v1/completions", body):
        if start is None and ev.get("choices"):
            start = sizes.engine_counters(scraper)
    steps, seconds, _ = sizes.decode_window(
        start, sizes.engine_counters(scraper), 1)
    return seconds / steps


def interleaved(server, tokens, repeats):
    """Median steps without and with speculation, alternating in one
    daemon (off, on, off, on, ...), so both see the same machine."""
    server.client(timeout=600).complete(prompt=sizes.PROMPT, max_tokens=4,
                                        temperature=0)
    off, on = [], []
    for _ in range(repeats):
        off.append(mean_step(server, tokens, False))
        on.append(mean_step(server, tokens, True))
    return statistics.median(off), statistics.median(on)


def timed(client, body):
    t0 = time.monotonic()
    r = client.complete(**body)
    return time.monotonic() - t0, r


def shapes(args):
    target = sizes.ensure_model(args.build, args.target, args.python)
    base = ["--dtype", args.dtype, "--threads", str(args.threads),
            "--slots", "1"]
    ks = [int(k) for k in args.ks.split(",")]
    print("%s, %s, one stream; load average %.1f" % (
        args.target, args.dtype, os.getloadavg()[0]))
    with tempfile.TemporaryDirectory(prefix="gpt2d-draft-") as work:
        for name in args.drafts.split(","):
            draft = sizes.ensure_model(args.build, name, args.python)
            ratio = {}
            for k in ks:
                server = start(args.build, target, work, base + [
                    "--draft", draft, "--speculative-tokens", str(k),
                    "--test-speculate-always=true"])
                try:
                    plain, step = interleaved(server, args.tokens,
                                              args.repeats)
                finally:
                    server.stop()
                ratio[k] = step / plain
                print("  draft %s, k %d: step %.1f ms, plain %.1f ms "
                      "(%.2fx)" % (name, k, 1e3 * step, 1e3 * plain,
                                   ratio[k]))
                sys.stdout.flush()
            cells = []
            for a in ACCEPTANCE:
                best = max(ks, key=lambda k: (1 - a ** (k + 1)) / (1 - a) /
                           ratio[k])
                gain = (1 - a ** (best + 1)) / (1 - a) / ratio[best]
                cells.append("a=%.1f: %.2fx (k %d)" % (a, gain, best))
            print("  draft %s: %s" % (name, "; ".join(cells)))
            overhead(args, target, draft, base, work, name)
    return 0


def overhead(args, target, draft, base, work, name):
    """A draft that is always wrong, under the engine's own rule."""
    server = start(args.build, target, work, base + ["--draft", draft])
    try:
        c = server.client(timeout=600)
        body = {"prompt": sizes.PROMPT, "max_tokens": args.tokens,
                "temperature": 0, "logit_bias": {"50256": -100}}
        timed(c, dict(body, max_tokens=4))
        off, on = [], []
        for _ in range(args.repeats):
            off.append(timed(c, dict(body, speculative=False))[0])
            t, r = timed(c, dict(body, speculative=True))
            on.append(t)
            d = r["usage"]["completion_tokens_details"]
        print("  draft %s, always wrong, the engine's rule: %.3fx the plain "
              "time (%d guesses, %d accepted in the last)" % (
                  name, statistics.median(on) / statistics.median(off),
                  d["accepted_prediction_tokens"] +
                  d["rejected_prediction_tokens"],
                  d["accepted_prediction_tokens"]))
    finally:
        server.stop()


def agree(args):
    target = sizes.ensure_model(args.build, args.target, args.python)
    draft = sizes.ensure_model(args.build, args.draft, args.python)
    base = ["--dtype", args.dtype, "--threads", str(args.threads),
            "--slots", "1", "--draft", draft]
    print("%s drafted by %s, %s, one stream of %d tokens; load average %.1f"
          % (args.target, args.draft, args.dtype, args.tokens,
             os.getloadavg()[0]))
    body = {"prompt": sizes.PROMPT, "max_tokens": args.tokens,
            "temperature": 0, "logit_bias": {"50256": -100},
            "return_token_ids": True}
    with tempfile.TemporaryDirectory(prefix="gpt2d-draft-") as work:
        for percent in [int(p) for p in args.percents.split(",")]:
            for k in args.ks.split(","):
                extra = ["--test-draft-agree", str(percent)]
                if k != "rule":
                    extra += ["--speculative-tokens", k,
                              "--test-speculate-always=true"]
                server = start(args.build, target, work, base + extra)
                try:
                    c = server.client(timeout=600)
                    greedy = c.complete(**dict(body, speculative=False))
                    ids = greedy["choices"][0]["token_ids"]
                    drafted = dict(body, speculative=True, prediction={
                        "type": "content", "content": ids})
                    off, on, kept, guessed, same = [], [], 0, 0, True
                    for _ in range(args.repeats):
                        off.append(timed(c, dict(body, speculative=False))[0])
                        t, r = timed(c, drafted)
                        on.append(t)
                        same = same and r["choices"][0]["token_ids"] == ids
                        d = r["usage"]["completion_tokens_details"]
                        kept += d["accepted_prediction_tokens"]
                        guessed += d["accepted_prediction_tokens"] + \
                            d["rejected_prediction_tokens"]
                finally:
                    server.stop()
                plain, spec = statistics.median(off), statistics.median(on)
                print("  agree %3d %%, k %-4s: %.2fx (plain %.0f ms, drafted "
                      "%.0f ms; %.1f guesses a token, %.2f of them kept), "
                      "answers %s" % (
                          percent, k, plain / spec, 1e3 * plain, 1e3 * spec,
                          guessed / args.repeats / len(ids),
                          kept / guessed if guessed else 0.0,
                          "the same" if same else "DIFFERENT"))
                sys.stdout.flush()
    return 0


def overhead_only(args):
    target = sizes.ensure_model(args.build, args.target, args.python)
    draft = sizes.ensure_model(args.build, args.draft, args.python)
    base = ["--dtype", args.dtype, "--threads", str(args.threads),
            "--slots", "1"]
    print("%s drafted by %s (random weights: always wrong), %s; load "
          "average %.1f" % (args.target, args.draft, args.dtype,
                            os.getloadavg()[0]))
    with tempfile.TemporaryDirectory(prefix="gpt2d-draft-") as work:
        overhead(args, target, draft, base, work, args.draft)
    return 0


def prompts(client, path, n):
    with open(path, encoding="utf-8") as f:
        texts = [t.strip() for t in f.read().split("<|endoftext|>")
                 if t.strip()]
    out = []
    for t in texts[:n]:
        r = client.post("/tokenize", {"content": t})
        out.append(r.json["tokens"][:32])
    return out


def pair_round(client, ps, tokens, spec):
    t0 = time.monotonic()
    answers, acc, prop = [], 0, 0
    for p in ps:
        r = client.complete(prompt=p, max_tokens=tokens, temperature=0,
                            logit_bias={"50256": -100}, speculative=spec,
                            return_token_ids=True)
        answers.append(r["choices"][0]["token_ids"])
        d = r["usage"]["completion_tokens_details"]
        acc += d["accepted_prediction_tokens"]
        prop += d["accepted_prediction_tokens"] + \
            d["rejected_prediction_tokens"]
    return len(ps) * tokens / (time.monotonic() - t0), answers, acc, prop


def pair(args):
    for always in (False, True):
        with tempfile.TemporaryDirectory(prefix="gpt2d-draft-") as work:
            server = start(args.build, args.target_dir, work, [
                "--draft", args.draft_dir, "--threads", str(args.threads),
                "--slots", "1", "--speculative-tokens", str(args.k),
                "--test-speculate-always=%s" %
                ("true" if always else "false")])
            try:
                c = server.client(timeout=600)
                ps = prompts(c, args.heldout, args.requests)
                pair_round(c, ps[:1], 8, False)
                rate = {False: [], True: []}
                same, acc, prop = True, 0, 0
                for _ in range(args.repeats):
                    off, a_off, _, _ = pair_round(c, ps, args.tokens, False)
                    on, a_on, a, p = pair_round(c, ps, args.tokens, True)
                    rate[False].append(off)
                    rate[True].append(on)
                    same = same and a_on == a_off
                    acc, prop = acc + a, prop + p
            finally:
                server.stop()
        off, on = statistics.median(rate[False]), statistics.median(rate[True])
        print("%s drafting for %s, k <= %d%s: %.1f tok/s off, %.1f on "
              "(%.2fx), acceptance %.2f (%d of %d), answers %s" % (
                  os.path.basename(args.draft_dir.rstrip("/")),
                  os.path.basename(args.target_dir.rstrip("/")), args.k,
                  ", every guess verified" if always else "", off, on,
                  on / off, acc / prop if prop else 0.0, acc, prop,
                  "the same" if same else "DIFFERENT"))
        sys.stdout.flush()
    return 0


def truncate(args):
    sys.path.insert(0, os.path.join(SRC, "tests", "reference"))
    import json
    import shutil

    import numpy as np
    import gpt2_numpy
    import make_model
    src = args.model_dir
    with open(os.path.join(src, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    tensors = gpt2_numpy.read_safetensors(
        os.path.join(src, "model.safetensors"))
    keep = []
    for name, a in tensors.items():
        parts = name.split(".")
        layer = parts.index("h") + 1 if "h" in parts else None
        if layer is not None and int(parts[layer]) >= args.layers:
            continue
        keep.append((name, np.ascontiguousarray(a, dtype=np.float32)))
    os.makedirs(args.out_dir, exist_ok=True)
    make_model.write_safetensors(
        os.path.join(args.out_dir, "model.safetensors"), keep, "F32")
    config["n_layer"] = args.layers
    with open(os.path.join(args.out_dir, "config.json"), "w",
              encoding="utf-8") as f:
        json.dump(config, f, indent=1)
    for name in ("vocab.json", "merges.txt"):
        shutil.copy(os.path.join(src, name), args.out_dir)
    print("%s: the first %d of %s's layers" % (args.out_dir, args.layers,
                                               src))
    return 0


def shape_pair_parser(sub, mode):
    """A mode on one model and one draft in GPT-2's shapes."""
    p = sub.add_parser(mode)
    p.add_argument("--target", default="gpt2-xl", choices=sorted(sizes.SHAPES))
    p.add_argument("--draft", default="distilgpt2",
                   choices=sorted(sizes.SHAPES))
    p.add_argument("--dtype", default="float32")
    p.add_argument("--tokens", type=int, default=48)
    return p


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--python", default="python3")
    ap.add_argument("--binary", help="this gpt2d rather than BUILD's")
    sub = ap.add_subparsers(dest="mode", required=True)
    s = sub.add_parser("shapes")
    s.add_argument("--target", default="gpt2-xl", choices=sorted(sizes.SHAPES))
    s.add_argument("--drafts", default="distilgpt2,gpt2")
    s.add_argument("--dtype", default="float32")
    s.add_argument("--tokens", type=int, default=48)
    s.add_argument("--ks", default="1,2,4,8")
    g = shape_pair_parser(sub, "agree")
    g.add_argument("--percents", default="30,60,90")
    g.add_argument("--ks", default="rule,1,8")
    p = sub.add_parser("pair")
    p.add_argument("target_dir")
    p.add_argument("draft_dir")
    p.add_argument("--heldout", required=True)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--requests", type=int, default=8)
    p.add_argument("--k", type=int, default=8,
                   help="--speculative-tokens: the most guesses a step")
    t = sub.add_parser("truncate")
    t.add_argument("model_dir")
    t.add_argument("layers", type=int)
    t.add_argument("out_dir")
    shape_pair_parser(sub, "overhead")
    args = ap.parse_args(argv)
    global BINARY
    BINARY = args.binary
    return {"shapes": shapes, "overhead": overhead_only, "agree": agree,
            "pair": pair,
            "truncate": truncate}[args.mode](args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
