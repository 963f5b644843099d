#!/usr/bin/env python3
"""train.py — small GPT-2s trained on this machine, in numpy alone.

    train.py PRESET OUT_DIR --vocab-dir DIR [--cache DIR] [--steps N]
             [--seed S] [--heldout-text FILE]

Trains PRESET (below) on corpus.py's training texts with GPT-2's own
tokenizer (gpt2_bpe.py) and writes OUT_DIR in the Hugging Face layout that
gpt2d and make_model.py use: config.json, model.safetensors (float32,
tied embeddings), vocab.json, merges.txt, and training.json (what was
trained on, how long, and the held-out perplexity beside a unigram
model's).  With --cache, a model already trained from the same inputs
(the key: this file, gpt2_bpe.py, corpus.py, gpt2_numpy.py, the corpus's
bytes, the vocabulary, the preset, the seed and --steps) is copied from
CACHE/trained/KEY/ instead, and a new one is stored there first.

The forward pass is the reference's (gpt2_numpy's layer_norm, gelu_tanh
and softmax_rows on (rows, C) arrays: what it computes for a written model
is what train.py trained); the backward pass is written out below, checked
against central differences by tests/reference/test_train.py.  AdamW with
a linear warm-up and a cosine decay to a tenth, gradients clipped to norm
1, float32 throughout.  Deterministic for a seed on one machine and one
BLAS thread count: windows are drawn from numpy's PCG64 with that seed,
and every reduction has a fixed order.

Presets share the corpus and the tokenizer, so `tiny` can draft for
`small`.  Their cost is dominated by the tied unembedding: 50,257 × C
multiply-adds per token each way.
"""

import argparse
import hashlib
import json
import math
import os
import shutil
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import corpus  # noqa: E402
import gpt2_bpe  # noqa: E402
import gpt2_numpy  # noqa: E402
import make_model  # noqa: E402

# n_ctx: the positions the model has (its wpe); seq: the windows trained on.
PRESETS = {
    "tiny": dict(n_layer=4, n_head=4, n_embd=128, n_ctx=256, seq=128,
                 batch=16, steps=900, lr=3e-3, warmup=100),
    "small": dict(n_layer=6, n_head=8, n_embd=256, n_ctx=1024, seq=256,
                  batch=8, steps=1200, lr=1.5e-3, warmup=100),
}
EPS = 1e-5
WEIGHT_DECAY = 0.1
BETAS = (0.9, 0.95)
CLIP = 1.0
LOSS_ROWS = 512          # unembedding rows a chunk: 512 x 50,257 floats
SOURCES = ("train.py", "gpt2_bpe.py", "corpus.py", "gpt2_numpy.py",
           "make_model.py")


# ---- the model ----

def init_params(rng, L, C, T, V, dtype=np.float32):
    """GPT-2's initialisation: normals of 0.02 (the residual projections
    scaled by 1/sqrt(2L)), gains 1, biases 0.  Names as HF's, unprefixed."""
    def normal(shape, std):
        return (rng.standard_normal(shape) * std).astype(dtype)
    p = {"wte.weight": normal((V, C), 0.02), "wpe.weight": normal((T, C), 0.01)}
    proj = 0.02 / math.sqrt(2 * L)
    for i in range(L):
        h = "h.%d." % i
        p[h + "ln_1.weight"] = np.ones(C, dtype)
        p[h + "ln_1.bias"] = np.zeros(C, dtype)
        p[h + "attn.c_attn.weight"] = normal((C, 3 * C), 0.02)
        p[h + "attn.c_attn.bias"] = np.zeros(3 * C, dtype)
        p[h + "attn.c_proj.weight"] = normal((C, C), proj)
        p[h + "attn.c_proj.bias"] = np.zeros(C, dtype)
        p[h + "ln_2.weight"] = np.ones(C, dtype)
        p[h + "ln_2.bias"] = np.zeros(C, dtype)
        p[h + "mlp.c_fc.weight"] = normal((C, 4 * C), 0.02)
        p[h + "mlp.c_fc.bias"] = np.zeros(4 * C, dtype)
        p[h + "mlp.c_proj.weight"] = normal((4 * C, C), proj)
        p[h + "mlp.c_proj.bias"] = np.zeros(C, dtype)
    p["ln_f.weight"] = np.ones(C, dtype)
    p["ln_f.bias"] = np.zeros(C, dtype)
    return p


def ln_forward(x, w, b):
    """gpt2_numpy.layer_norm, and what its backward needs."""
    y = gpt2_numpy.layer_norm(x, w, b, EPS)
    mu = x.mean(axis=-1, keepdims=True)
    rstd = 1.0 / np.sqrt(((x - mu) ** 2).mean(axis=-1, keepdims=True) + EPS)
    return y, ((x - mu) * rstd, rstd, w)


def ln_backward(dy, cache):
    xhat, rstd, w = cache
    dw = (dy * xhat).sum(axis=0)
    db = dy.sum(axis=0)
    g = dy * w
    dx = rstd * (g - g.mean(axis=-1, keepdims=True)
                 - xhat * (g * xhat).mean(axis=-1, keepdims=True))
    return dx, dw, db


def gelu_backward(dy, x):
    k = math.sqrt(2.0 / math.pi)
    t = np.tanh(k * (x + 0.044715 * (x * x * x)))
    return dy * (0.5 * (1.0 + t) +
                 0.5 * x * (1.0 - t * t) * k * (1.0 + 3 * 0.044715 * x * x))


def forward(p, cfg, idx):
    """idx (B, T) ints -> (the final LayerNorm's output (B*T, C), caches)."""
    B, T = idx.shape
    L, H, C = cfg["n_layer"], cfg["n_head"], cfg["n_embd"]
    D = C // H
    x = (p["wte.weight"][idx] + p["wpe.weight"][:T]).reshape(B * T, C)
    mask = np.triu(np.ones((T, T), dtype=bool), 1)
    caches = []
    for i in range(L):
        h = "h.%d." % i
        a, ln1 = ln_forward(x, p[h + "ln_1.weight"], p[h + "ln_1.bias"])
        qkv = a @ p[h + "attn.c_attn.weight"] + p[h + "attn.c_attn.bias"]
        q, k, v = (qkv[:, j * C:(j + 1) * C].reshape(B, T, H, D)
                   .transpose(0, 2, 1, 3) for j in range(3))
        s = (q @ k.transpose(0, 1, 3, 2)) * np.asarray(1.0 / math.sqrt(D),
                                                         x.dtype)
        s[..., mask] = -np.inf
        att = gpt2_numpy.softmax_rows(s)
        y = (att @ v).transpose(0, 2, 1, 3).reshape(B * T, C)
        x = x + (y @ p[h + "attn.c_proj.weight"] + p[h + "attn.c_proj.bias"])
        m, ln2 = ln_forward(x, p[h + "ln_2.weight"], p[h + "ln_2.bias"])
        f = m @ p[h + "mlp.c_fc.weight"] + p[h + "mlp.c_fc.bias"]
        g = gpt2_numpy.gelu_tanh(f)
        x = x + (g @ p[h + "mlp.c_proj.weight"] + p[h + "mlp.c_proj.bias"])
        caches.append((a, ln1, q, k, v, att, y, m, ln2, f, g))
    z, lnf = ln_forward(x, p["ln_f.weight"], p["ln_f.bias"])
    return z, (idx, caches, lnf)


def loss_and_dz(p, z, targets, rows=LOSS_ROWS):
    """Mean cross-entropy of z's logits (z @ wte^T) against targets, its
    gradient on z, and wte's gradient from the unembedding; by chunks of
    rows so the logits never exist whole."""
    wte = p["wte.weight"]
    n = z.shape[0]
    total = 0.0
    dz = np.empty_like(z)
    dwte = np.zeros_like(wte)
    buf = np.empty((min(rows, n), wte.shape[0]), z.dtype)
    for r0 in range(0, n, rows):
        zc, t = z[r0:r0 + rows], targets[r0:r0 + rows]
        e = np.matmul(zc, wte.T, out=buf[:len(t)])
        e -= e.max(axis=-1, keepdims=True)
        ar = np.arange(len(t))
        picked = e[ar, t].astype(np.float64)
        np.exp(e, out=e)
        s = e.sum(axis=-1, keepdims=True)
        total += float((np.log(s[:, 0].astype(np.float64)) - picked).sum())
        e /= s
        e[ar, t] -= 1.0
        e *= np.asarray(1.0 / n, z.dtype)
        dz[r0:r0 + rows] = e @ wte
        dwte += e.T @ zc
    return total / n, dz, dwte


def backward(p, cfg, dz, dwte, state):
    """Gradients of every parameter, given dLoss/dz and the unembedding's
    part of wte's."""
    idx, caches, lnf = state
    B, T = idx.shape
    L, H, C = cfg["n_layer"], cfg["n_head"], cfg["n_embd"]
    D = C // H
    g_ = {"wte.weight": dwte}
    dx, g_["ln_f.weight"], g_["ln_f.bias"] = ln_backward(dz, lnf)
    scale = np.asarray(1.0 / math.sqrt(D), dz.dtype)
    for i in reversed(range(L)):
        h = "h.%d." % i
        a, ln1, q, k, v, att, y, m, ln2, f, g = caches[i]
        # the MLP
        g_[h + "mlp.c_proj.weight"] = g.T @ dx
        g_[h + "mlp.c_proj.bias"] = dx.sum(axis=0)
        df = gelu_backward(dx @ p[h + "mlp.c_proj.weight"].T, f)
        g_[h + "mlp.c_fc.weight"] = m.T @ df
        g_[h + "mlp.c_fc.bias"] = df.sum(axis=0)
        dm = df @ p[h + "mlp.c_fc.weight"].T
        d, g_[h + "ln_2.weight"], g_[h + "ln_2.bias"] = ln_backward(dm, ln2)
        dx = dx + d
        # attention
        g_[h + "attn.c_proj.weight"] = y.T @ dx
        g_[h + "attn.c_proj.bias"] = dx.sum(axis=0)
        dy = (dx @ p[h + "attn.c_proj.weight"].T).reshape(
            B, T, H, D).transpose(0, 2, 1, 3)
        datt = dy @ v.transpose(0, 1, 3, 2)
        dv = att.transpose(0, 1, 3, 2) @ dy
        ds = att * (datt - (datt * att).sum(axis=-1, keepdims=True)) * scale
        dq = ds @ k
        dk = ds.transpose(0, 1, 3, 2) @ q
        dqkv = np.concatenate(
            [t.transpose(0, 2, 1, 3).reshape(B * T, C) for t in (dq, dk, dv)],
            axis=1)
        g_[h + "attn.c_attn.weight"] = a.T @ dqkv
        g_[h + "attn.c_attn.bias"] = dqkv.sum(axis=0)
        da = dqkv @ p[h + "attn.c_attn.weight"].T
        d, g_[h + "ln_1.weight"], g_[h + "ln_1.bias"] = ln_backward(da, ln1)
        dx = dx + d
    dx = dx.reshape(B, T, C)
    g_["wpe.weight"] = np.zeros_like(p["wpe.weight"])
    g_["wpe.weight"][:T] = dx.sum(axis=0)
    np.add.at(g_["wte.weight"], idx.reshape(-1), dx.reshape(B * T, C))
    return g_


def loss_and_grads(p, cfg, idx, targets):
    z, state = forward(p, cfg, idx)
    loss, dz, dwte = loss_and_dz(p, z, targets.reshape(-1))
    return loss, backward(p, cfg, dz, dwte, state)


# ---- training ----

class AdamW:
    def __init__(self, params):
        self.m = {k: np.zeros_like(v) for k, v in params.items()}
        self.v = {k: np.zeros_like(v) for k, v in params.items()}
        self.t = 0

    def step(self, params, grads, lr):
        self.t += 1
        b1, b2 = BETAS
        c1, c2 = 1 - b1 ** self.t, 1 - b2 ** self.t
        for k in sorted(params):    # a fixed order
            w, g = params[k], grads[k]
            self.m[k] = b1 * self.m[k] + (1 - b1) * g
            self.v[k] = b2 * self.v[k] + (1 - b2) * g * g
            if w.ndim == 2:         # matrices and embeddings decay
                w *= np.float32(1 - lr * WEIGHT_DECAY)
            w -= (np.float32(lr) * (self.m[k] / c1) /
                  (np.sqrt(self.v[k] / c2) + np.float32(1e-8))).astype(
                      w.dtype)


def learning_rate(step, cfg):
    if step < cfg["warmup"]:
        return cfg["lr"] * (step + 1) / cfg["warmup"]
    done = (step - cfg["warmup"]) / max(1, cfg["steps"] - cfg["warmup"])
    return cfg["lr"] * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * done)))


def clip(grads):
    norm = math.sqrt(sum(float((g.astype(np.float64) ** 2).sum())
                         for _, g in sorted(grads.items())))
    if norm > CLIP:
        for g in grads.values():
            g *= np.float32(CLIP / norm)
    return norm


def train(cfg, stream, seed, log=None):
    """Parameters trained on windows of the token stream (np.int32)."""
    rng = np.random.default_rng(seed)
    V = cfg["vocab_size"]
    p = init_params(rng, cfg["n_layer"], cfg["n_embd"], cfg["n_ctx"], V)
    opt = AdamW(p)
    B, T = cfg["batch"], cfg["seq"]
    t0 = time.monotonic()
    for step in range(cfg["steps"]):
        starts = rng.integers(0, len(stream) - T - 1, size=B)
        win = np.stack([stream[s:s + T + 1] for s in starts])
        loss, grads = loss_and_grads(p, cfg, win[:, :-1], win[:, 1:])
        norm = clip(grads)
        opt.step(p, grads, learning_rate(step, cfg))
        if log and (step % 50 == 0 or step == cfg["steps"] - 1):
            el = time.monotonic() - t0
            log("step %d/%d: loss %.3f, grad norm %.2f, %.0f tokens/s"
                % (step + 1, cfg["steps"], loss, norm,
                   (step + 1) * B * T / el))
    return p


def heldout_nll(p, cfg, stream):
    """Mean negative log-likelihood of the held-out stream, in windows of
    seq tokens, each token after a window's first predicted from the
    window before it."""
    T = cfg["seq"]
    total, count = 0.0, 0
    for s in range(0, len(stream) - T, T):
        win = stream[s:s + T + 1][None, :]
        z, _ = forward(p, cfg, win[:, :-1])
        loss, _, _ = loss_and_dz(p, z, win[0, 1:])
        total += loss * T
        count += T
    return total / count


def unigram_nll(train_stream, held_stream, V):
    """Add-one smoothed unigram model of the training tokens, scored on the
    held-out tokens the windows above score."""
    counts = np.bincount(train_stream, minlength=V).astype(np.float64) + 1.0
    logp = np.log(counts / counts.sum())
    return float(-logp[held_stream].mean())


# ---- files ----

def write_model(out_dir, p, cfg, vocab_dir, meta):
    os.makedirs(out_dir, exist_ok=True)
    names = ["wte.weight", "wpe.weight"]
    for i in range(cfg["n_layer"]):
        names += ["h.%d.%s" % (i, n) for n in (
            "ln_1.weight", "ln_1.bias", "attn.c_attn.weight",
            "attn.c_attn.bias", "attn.c_proj.weight", "attn.c_proj.bias",
            "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
            "mlp.c_proj.weight", "mlp.c_proj.bias")]
    names += ["ln_f.weight", "ln_f.bias"]
    make_model.write_safetensors(
        os.path.join(out_dir, "model.safetensors"),
        [(n, make_model.stored(p[n], "F32")) for n in names], "F32")
    config = make_model.hf_config(cfg["n_layer"], cfg["n_head"],
                                  cfg["n_embd"], cfg["n_ctx"],
                                  cfg["vocab_size"], "F32", False, 0.02)
    with open(os.path.join(out_dir, "config.json"), "w",
              encoding="utf-8") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")
    for name in ("vocab.json", "merges.txt"):
        shutil.copyfile(os.path.join(vocab_dir, name),
                        os.path.join(out_dir, name))
    with open(os.path.join(out_dir, "training.json"), "w",
              encoding="utf-8") as f:
        json.dump(meta, f, indent=2, sort_keys=True)
        f.write("\n")


def cache_key(preset, cfg, seed, vocab_dir):
    h = hashlib.sha256()
    for name in SOURCES:
        with open(os.path.join(HERE, name), "rb") as f:
            h.update(f.read())
    for name in ("vocab.json", "merges.txt"):
        with open(os.path.join(vocab_dir, name), "rb") as f:
            h.update(f.read())
    h.update(corpus.digest().encode())
    h.update(json.dumps([preset, cfg, seed], sort_keys=True).encode())
    return h.hexdigest()[:24]


def run(preset, out_dir, vocab_dir, seed, steps=None, log=None):
    cfg = dict(PRESETS[preset])
    if steps is not None:
        cfg["steps"] = steps
    enc = gpt2_bpe.Encoder(vocab_dir)
    cfg["vocab_size"] = len(enc.encoder)
    train_docs, held_docs = corpus.split(corpus.documents())
    train_stream = np.asarray(corpus.tokens(enc, train_docs), np.int32)
    held_stream = np.asarray(corpus.tokens(enc, held_docs), np.int32)
    t0 = time.monotonic()
    p = train(cfg, train_stream, seed, log)
    seconds = time.monotonic() - t0
    nll = heldout_nll(p, cfg, held_stream)
    T = cfg["seq"]
    scored = np.concatenate([held_stream[s + 1:s + T + 1] for s in
                             range(0, len(held_stream) - T, T)])
    uni = unigram_nll(train_stream, scored, cfg["vocab_size"])
    meta = {"preset": preset, "config": cfg, "seed": seed,
            "corpus": "Debian fortunes (%s), every %dth text held out"
                      % (corpus.FORTUNES, corpus.HELDOUT_EVERY),
            "train_tokens": int(len(train_stream)),
            "heldout_tokens": int(len(held_stream)),
            "train_seconds": round(seconds, 1),
            "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS", "default"),
            "heldout_perplexity": round(math.exp(nll), 3),
            "unigram_perplexity": round(math.exp(uni), 3)}
    write_model(out_dir, p, cfg, vocab_dir, meta)
    return meta


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("preset", choices=sorted(PRESETS))
    ap.add_argument("out_dir")
    ap.add_argument("--vocab-dir", required=True)
    ap.add_argument("--cache", help="keep and reuse trained models here")
    ap.add_argument("--steps", type=int)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--heldout-text", help="write the held-out text here")
    a = ap.parse_args(argv)

    def log(msg):
        print("train.py %s: %s" % (a.preset, msg), file=sys.stderr,
              flush=True)

    if a.heldout_text:
        _, held = corpus.split(corpus.documents())
        with open(a.heldout_text, "w", encoding="utf-8") as f:
            f.write(corpus.heldout_text(held))
    cfg = dict(PRESETS[a.preset])
    if a.steps is not None:
        cfg["steps"] = a.steps
    cached = None
    if a.cache:
        cached = os.path.join(a.cache, "trained", "%s-%s" % (
            a.preset, cache_key(a.preset, cfg, a.seed, a.vocab_dir)))
        if os.path.exists(os.path.join(cached, "training.json")):
            log("cached: %s" % cached)
            shutil.rmtree(a.out_dir, ignore_errors=True)
            shutil.copytree(cached, a.out_dir)
            return 0
    target = cached + ".tmp" if cached else a.out_dir
    shutil.rmtree(target, ignore_errors=True)
    meta = run(a.preset, target, a.vocab_dir, a.seed, a.steps, log)
    log("held-out perplexity %.2f (unigram %.2f), %.0f s" % (
        meta["heldout_perplexity"], meta["unigram_perplexity"],
        meta["train_seconds"]))
    if cached:
        os.replace(target, cached)   # complete, or not there at all
        shutil.rmtree(a.out_dir, ignore_errors=True)
        shutil.copytree(cached, a.out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
