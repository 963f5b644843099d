#!/usr/bin/env python3
"""test_train.py — the trainer's own checks, each able to fail:

  gradients       train.py's backward pass against central differences of
                  its loss, in float64, on a tiny shape (2 layers, width 16,
                  2 heads, a vocabulary of 50), every parameter tensor;
  reproducible    two short runs with one seed write byte-identical
                  model.safetensors; another seed differs;
  optimizer       AdamW's first step moves every weight by lr against the
                  sign of its gradient (after the decay), and the schedule
                  warms up to lr and ends at a tenth of it;
  reference       a written model loaded by gpt2_numpy.GPT2 (the reference
                  the C code is checked against) gives train.py's logits;
  tokenizer       gpt2_bpe.py agrees with the JS reference on every case
                  of every CORPUS_JSON given (tests/tokenizer/corpus.json,
                  and tests/reference/bpe_edge_cases.json: the characters
                  where JavaScript's \\s and Python's str.isspace() part).

    test_train.py VOCAB_DIR CORPUS_JSON EXPECTED_JSON
                  [CORPUS_JSON EXPECTED_JSON]...

Known and not tested: gpt2_bpe.py classifies letters and numbers with
Python's unicodedata (Unicode 14.0 in Debian 12's Python 3.11), the JS
reference and the C tables (src/text/unicode_class.c) with Node's (17.0).
The 13,916 letters and 133 numbers assigned in Unicode 15.0-17.0 are "other"
to gpt2_bpe.py, and a text can split differently: "\\u088f's" is
[156, 95, 237, 6, 82] here, [156, 95, 237, 338] in JavaScript.  None of
them is in the fortunes corpus, so the trained models are unaffected.
"""

import os
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import gpt2_bpe  # noqa: E402
import gpt2_numpy  # noqa: E402
import train  # noqa: E402

FAILED = []


def check(cond, what):
    print("%s: %s" % ("ok" if cond else "FAIL", what))
    if not cond:
        FAILED.append(what)


def tiny_cfg(V):
    return dict(n_layer=2, n_head=2, n_embd=16, n_ctx=8, seq=6, batch=2,
                steps=3, lr=1e-2, warmup=1, vocab_size=V)


def loss_of(p, cfg, idx, targets):
    z, _ = train.forward(p, cfg, idx)
    loss, _, _ = train.loss_and_dz(p, z, targets.reshape(-1), rows=5)
    return loss


def gradients():
    """Analytic against (f(w + h) - f(w - h)) / 2h at up to 12 entries of
    every tensor (all of the small ones), float64, h = 1e-5: the error
    |a - n| / max(|a|, |n|, 1e-3) below 1e-5 (the differences are
    good to ~1e-9 absolute here; a wrong term is off by O(1)).  The floor:
    some gradients are 0 exactly (the keys' bias moves every score of a
    row alike, which softmax ignores) and the differences' noise there
    is all a relative error would see."""
    V = 50
    cfg = tiny_cfg(V)
    rng = np.random.default_rng(5)
    p = train.init_params(rng, cfg["n_layer"], cfg["n_embd"], cfg["n_ctx"],
                          V, dtype=np.float64)
    for k in p:     # off GPT-2's start, so every term matters
        p[k] += rng.standard_normal(p[k].shape) * 0.3
    idx = rng.integers(0, V, size=(2, 6))
    targets = rng.integers(0, V, size=(2, 6))
    _, grads = train.loss_and_grads(p, cfg, idx, targets)
    worst = {}
    for name in sorted(p):
        w = p[name]
        flat = w.reshape(-1)
        picks = range(flat.size) if flat.size <= 12 else \
            rng.choice(flat.size, 12, replace=False)
        err = 0.0
        for j in picks:
            keep = flat[j]
            flat[j] = keep + 1e-5
            up = loss_of(p, cfg, idx, targets)
            flat[j] = keep - 1e-5
            down = loss_of(p, cfg, idx, targets)
            flat[j] = keep
            num = (up - down) / 2e-5
            ana = grads[name].reshape(-1)[j]
            err = max(err, abs(ana - num) / max(abs(ana), abs(num), 1e-3))
        worst[name] = err
    bad = {k: v for k, v in worst.items() if not v < 1e-5}
    check(len(worst) == len(p) and not bad,
          "backward = central differences on all %d tensors (worst relative "
          "error %.1e%s)" % (len(p), max(worst.values()),
                             "; off: %r" % bad if bad else ""))


def reproducible():
    V = 60
    rng = np.random.default_rng(0)
    stream = rng.integers(0, V, size=400).astype(np.int32)
    cfg = tiny_cfg(V)
    with tempfile.TemporaryDirectory() as d:
        blobs = []
        for run, seed in enumerate((7, 7, 8)):
            p = train.train(cfg, stream, seed)
            out = os.path.join(d, str(run))
            os.makedirs(out)
            # no vocabulary files for a vocab of 60: the weights alone
            import make_model
            names = sorted(p)
            make_model.write_safetensors(
                os.path.join(out, "model.safetensors"),
                [(n, make_model.stored(p[n], "F32")) for n in names], "F32")
            with open(os.path.join(out, "model.safetensors"), "rb") as f:
                blobs.append(f.read())
    check(blobs[0] == blobs[1], "one seed, two runs: identical safetensors")
    check(blobs[0] != blobs[2], "another seed: different weights")


def optimizer():
    """Properties of AdamW and the schedule that hold whatever the code
    looks like: from a zero state the bias-corrected first step is
    g / (|g| + eps), i.e. lr against the gradient's sign, after decoupled
    decay (matrices only); the learning rate warms up linearly to lr and
    the cosine ends at lr / 10."""
    rng = np.random.default_rng(11)
    w0 = {"m.weight": rng.standard_normal((3, 4)).astype(np.float32),
          "b.bias": rng.standard_normal(4).astype(np.float32)}
    # magnitudes 1e-2 .. 1e2: eps = 1e-8 is then below the bound
    g = {k: (np.sign(rng.standard_normal(v.shape)) * 10.0 ** rng.uniform(
        -2, 2, v.shape)).astype(np.float32) for k, v in w0.items()}
    w = {k: v.copy() for k, v in w0.items()}
    lr = 0.01
    train.AdamW(w).step(w, g, lr)
    err = 0.0
    for k in w0:
        decay = 1 - lr * train.WEIGHT_DECAY if w0[k].ndim == 2 else 1.0
        want = w0[k].astype(np.float64) * decay - lr * np.sign(g[k])
        err = max(err, float(np.abs(w[k] - want).max()))
    check(err < 1e-6, "AdamW's first step: lr against the gradient's sign "
          "after decay (max difference %.1e)" % err)
    cfg = dict(lr=3e-3, warmup=10, steps=100)
    lrs = [train.learning_rate(s, cfg) for s in range(cfg["steps"])]
    check(abs(lrs[9] - 3e-3) < 1e-12 and abs(lrs[0] - 3e-4) < 1e-12 and
          all(a >= b for a, b in zip(lrs[9:], lrs[10:])) and
          abs(train.learning_rate(100, cfg) - 3e-4) < 1e-12,
          "schedule: warm-up to lr at step warmup-1, cosine down to lr/10")


def reference(vocab_dir):
    """A model trained a few steps on real tokens, then moved off GPT-2's
    start (as gradients() does: at the start attention is nearly uniform
    and a wrong score scale changes the logits by 1e-4 of their spread),
    written in HF layout and read back by the reference: the same logits.
    Bound: 1e-5 of the logits' spread (float32 here, float64 there; seen:
    ~1e-7)."""
    enc = gpt2_bpe.Encoder(vocab_dir)
    text = ("It was the best of times, it was the worst of times. " * 8)
    stream = np.asarray(enc.encode(text), np.int32)
    cfg = dict(tiny_cfg(len(enc.encoder)), steps=2)
    p = train.train(cfg, stream, 3)
    rng = np.random.default_rng(4)
    for k in sorted(p):
        p[k] += (rng.standard_normal(p[k].shape) * 0.3).astype(np.float32)
    with tempfile.TemporaryDirectory() as d:
        train.write_model(d, p, cfg, vocab_dir, {"test": True})
        ref = gpt2_numpy.GPT2(d)
        tokens = [int(t) for t in stream[:7]]
        want = ref.full(tokens)
    z, _ = train.forward(p, cfg, np.asarray([tokens]))
    got = z.astype(np.float64) @ p["wte.weight"].astype(np.float64).T
    err = np.abs(got - want).max() / (want.max() - want.min())
    check(err < 1e-5, "written model: the reference's logits = train.py's "
          "(max difference %.1e of the spread)" % err)


def main(argv):
    if len(argv) < 4 or len(argv) % 2 != 0:
        print(__doc__.split("\n\n")[-2], file=sys.stderr)
        return 2
    gradients()
    reproducible()
    optimizer()
    reference(argv[1])
    for corpus_json, expected_json in zip(argv[2::2], argv[3::2]):
        check(gpt2_bpe.check(argv[1], corpus_json, expected_json) == 0,
              "gpt2_bpe.py = the JS reference on %s"
              % os.path.basename(corpus_json))
    if FAILED:
        print("test_train.py: %d FAILED" % len(FAILED))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
