#!/usr/bin/env python3
"""make_fixtures.py — tiny random GPT-2 models and their reference logits.

    make_fixtures.py DATA_DIR      (DATA_DIR = $GPT2D_TEST_DATA)

Reads DATA_DIR/tokenizer/{vocab.json,merges.txt} (the real GPT-2 vocabulary)
and writes:

  DATA_DIR/models/<name>/   config.json, model.safetensors, vocab.json,
                            merges.txt — written by make_model.py.  `tiny`
                            (C=64, H=4, L=2, n_ctx=64, F32, plain names, tied)
                            is the model other suites use.
  DATA_DIR/fixtures/cases.json
  DATA_DIR/fixtures/<model>.<sequence>.f32
  DATA_DIR/fixtures/STAMP   hash of the generators and the vocabulary; when it
                            matches, nothing is regenerated.

cases.json (all paths relative to DATA_DIR):

  {
    "format": 1,
    "tolerance": 1e-3,            max |logit difference| a float32 forward
                                  pass may show against this reference
    "models": [
      { "name": "tiny", "dir": "models/tiny",
        "load_dtype": "auto",     how to load it (gpt2d --dtype) and keep
        "load_kv_dtype": "float32",  its KV cache (--kv-dtype): the
                                  variants "<model>@..." (VARIANTS) keep
                                  halves or int8 weights, against a
                                  reference that rounds or quantizes the
                                  same values; "<model>@float32"
                                  loads an F16 model as floats
        "dequantized": "models/tiny@int8-dequantized",
                                  int8 variants only: the model as F32
                                  holding the values int8 multiplies by
                                  (quantized by numpy), which loaded as
                                  float32 must give int8's bits
        "quick": true,            whether GPT2D_TEST_QUICK runs it
        "n_layer": 2, "n_head": 4, "n_embd": 64, "n_ctx": 64,
        "vocab_size": 50257, "dtype": "F32", "prefix": "", "tied": true,
        "sequences": [
          { "name": "prompt",            plain random tokens
            "tokens": [ ... ],
            "logits": "fixtures/tiny.prompt.f32",
            "prompt_len": 19,            for "greedy": tokens[prompt_len:]
                                         were generated
            "greedy": false,             true: tokens[i] = argmax of logits
                                         row i-1 for every i >= prompt_len
            "min_margin": 0.0,           greedy only: smallest gap between the
                                         best and second-best logit over the
                                         generated steps (kept >= 10 x
                                         tolerance, so argmax is unambiguous)
            "fills_context": false }     true: len(tokens) == n_ctx
        ],
        "inspect": "fixtures/tiny.inspect.json" } ] }

The inspect file (POST /v1/inspect's quantities, for the "prompt" sequence):

  { "tokens": [ ... ],
    "attention": [layer][head][query] -> query + 1 probabilities (keys
                 0..query), as the reference's softmax gives them,
    "residual_norms": [layer][position] -> L2 norm of the residual stream
                 after the layer's block,
    "lens": [layer][position] -> the LENS_TOP most likely next tokens of
                 that stream through the final LayerNorm and the
                 unembedding, [[id, probability], ...] most likely first }

A .f32 file holds len(tokens) rows of vocab_size little-endian float32,
row-major: row i is the logits after tokens[0..i] (the distribution of token
i+1).  The reference computes in float64 with full recompute; before writing,
this script checks that the reference's KV-cache path (token by token and in
uneven chunks) agrees with full recompute to 1e-9, that the safetensors file
reads back bit-exactly, and that a plain-loop implementation agrees with the
vectorised one on the tiny model; for the inspect file, that the attention
rows are distributions, the same in uneven chunks, and that the last
layer's lens is the model's own logits.
"""

import hashlib
import json
import math
import os
import shutil
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import gpt2_numpy  # noqa: E402
import make_model  # noqa: E402

FORMAT = 1
TOLERANCE = 1e-3
MIN_MARGIN = 10 * TOLERANCE
# q8 sequences keep every quantized input at least this far (relatively)
# from a half-way point (gpt2_numpy.q8_tie_margin), ~2-3 float32 ulps, so
# that gpt2d's float32 pass rounds almost every one as the float64
# reference does: a flip moves its row's logits by a few hundredths
# (make-fixtures.log's numpy float32 run shows some), and test_forward
# allows only a few rows that.  1e-6 would leave no 64-token sequence of
# w128h2 (~120k inputs) clear.
Q8_MARGIN = 2e-7
GREEDY_PROMPT = 5
GREEDY_NEW = 16
PROMPT_LEN = 19
LENS_TOP = 8        # the lens guesses kept: more than the API's 5, so a
                    # near-tie at the 5th place is still in the file

# name, layers, heads, width, n_ctx, dtype, prefix, untied, context sequence?
MODELS = [
    ("tiny", 2, 4, 64, 64, "F32", "", False, True),
    ("w48h3", 1, 3, 48, 32, "F32", "", False, True),     # head_dim 16
    ("w40h5", 3, 5, 40, 48, "F32", "transformer.", False, False),  # hd 8
    ("w72h6-untied", 2, 6, 72, 40, "F32", "", True, False),      # hd 12
    ("w36h4", 1, 4, 36, 33, "F32", "", False, True),     # hd 9, odd n_ctx
    ("w128h2", 2, 2, 128, 64, "F32", "", False, True),   # hd 64, as GPT-2
    ("f16", 2, 4, 64, 64, "F16", "transformer.", False, False),
    ("bf16", 1, 2, 32, 32, "BF16", "transformer.", True, False),
]

# Models also loaded with narrower weights or cache, against a reference
# that rounds (or quantizes) the same values: (name suffix, --dtype,
# --kv-dtype).  w36h4 (head_dim 9) takes the portable attention, the others
# the AVX2 one.  The int8 variants cover every checkpoint dtype (F32, F16,
# BF16), widths that are not a multiple of int8's blocks of 32 inputs (36,
# 72, 40), tied and untied heads; the q8 variants (int8's weights, every
# product's inputs quantized too: gpt2_numpy.quantize_rows_q8) the same.  Every F16 model is also loaded with
# --dtype float32 ("<model>@float32", the same logits).
VARIANTS = {
    "tiny": (("@float16", "float16", "float32"),
             ("@kv16", "auto", "float16"),
             ("@int8", "int8", "float32"),
             ("@q8", "q8", "float32")),
    "w40h5": (("@int8", "int8", "float32"),
              ("@q8", "q8", "float32")),
    "w72h6-untied": (("@float16-kv16", "float16", "float16"),
                     ("@int8", "int8", "float32"),
                     ("@q8", "q8", "float32")),
    "w128h2": (("@float16", "float16", "float32"),
               ("@float16-kv16", "float16", "float16"),
               ("@int8-kv16", "int8", "float16"),
               ("@q8-kv16", "q8", "float16")),
    "w36h4": (("@kv16", "auto", "float16"),
              ("@int8", "int8", "float32"),
              ("@q8", "q8", "float32")),
    "f16": (("@int8", "int8", "float32"),
            ("@q8", "q8", "float32")),
    "bf16": (("@int8", "int8", "float32"),
             ("@q8", "q8", "float32")),
    "trained-tiny": (("@float16-kv16", "float16", "float16"),
                     ("@int8", "int8", "float32"),
                     ("@q8", "q8", "float32")),
}

# Models trained here (tests/data/train-tiny.sh puts them in DATA/models/):
# trained weights, whose logits have the structure random ones lack, under
# the same checks as the generated models (not in the quick set).
TRAINED = ("trained-tiny",)

# The variants GPT2D_TEST_QUICK (memcheck) runs besides the plain models:
# half panels with a half cache through the AVX2 attention, a half cache
# through the portable one, and int8 and q8 panels with partial blocks.
QUICK_VARIANTS = ("w72h6-untied@float16-kv16", "w36h4@kv16", "w36h4@int8",
                  "w36h4@q8")

GENERATORS = ("make_fixtures.py", "make_model.py", "gpt2_numpy.py",
              "make-fixtures.sh")


def stamp_of(tok_dir):
    h = hashlib.sha256()
    h.update(b"format %d\n" % FORMAT)
    for name in GENERATORS:
        path = os.path.join(HERE, name)
        if os.path.exists(path):
            with open(path, "rb") as f:
                h.update(name.encode() + b"\0" + f.read())
    for name in ("vocab.json", "merges.txt"):
        with open(os.path.join(tok_dir, name), "rb") as f:
            h.update(name.encode() + b"\0" + f.read())
    for name in TRAINED:    # retrained weights: new references
        path = os.path.join(os.path.dirname(tok_dir), "models", name,
                            "model.safetensors")
        if os.path.exists(path):
            with open(path, "rb") as f:
                h.update(name.encode() + b"\0" + f.read())
    return h.hexdigest()


def check(cond, what):
    if not cond:
        raise AssertionError("reference self-check failed: " + what)


def self_check_q8(rng):
    """quantize_rows_q8 and a product by int8 weights against plain loops
    over the definition (integer sums per block, then the scales), on
    inputs with zero rows, an outlier, exact halves (ties to even) and K
    not a multiple of 32."""
    n, K, N = 4, 70, 5
    a = rng.standard_normal((n, K)).astype(np.float32)
    a[1] = 0
    a[2, 3] = 1e4
    a[3, :32] = np.float32(127 / 2)  # d = 0.5: every input / d is 127 ...
    a[3, 0] = np.float32(2.5 * 0.5)  # ... but this one, a tie: 2.5 -> 2
    a[3, 1] = np.float32(-3.5 * 0.5)  # -3.5 -> -4
    w = rng.standard_normal((K, N)).astype(np.float32)
    wq = gpt2_numpy.quantize_int8(w)
    got = gpt2_numpy.quantize_rows_q8(a) @ wq.astype(np.float64)
    want = np.zeros((n, N))
    for r in range(n):
        for c in range(N):
            total = 0.0
            for k0 in range(0, K, 32):
                ks = range(k0, min(K, k0 + 32))
                amax = max(abs(float(a[r, k])) for k in ks)
                wmax = max(abs(float(w[k, c])) for k in ks)
                da = float(np.float32(np.float32(amax) / np.float32(127)))
                dw = float(np.float16(np.float32(wmax) / np.float32(127)))
                s = 0
                for k in ks:
                    qa = 0 if da == 0 else max(-127, min(127, round(
                        float(np.float32(a[r, k] / np.float32(da))))))
                    qw = 0 if dw == 0 else max(-127, min(127, round(
                        float(np.float32(w[k, c] / np.float32(dw))))))
                    s += qa * qw
                total += s * dw * da
            want[r, c] = total
    check(np.abs(got - want).max() <= 1e-12 * max(1.0, np.abs(want).max()),
          "q8 product vs plain loops: %g" % np.abs(got - want).max())
    q3 = gpt2_numpy.quantize_rows_q8(a[3:4])[0] / 0.5
    check(q3[0] == 2 and q3[1] == -4 and q3[2] == 127,
          "q8 ties to even: %r" % (q3[:3],))


def naive_logits(m, tokens):
    """Plain loops over positions and heads, float64; last row only."""
    C, H, D = m.n_embd, m.n_head, m.head_dim
    xs = [m.wte[t] + m.wpe[p] for p, t in enumerate(tokens)]

    def ln(v, w, b):
        mu = sum(v) / len(v)
        var = sum((e - mu) ** 2 for e in v) / len(v)
        return np.array([(e - mu) / math.sqrt(var + m.eps) for e in v]) * w + b

    for L in m.layers:
        qkv = [ln(x, L["ln_1_w"], L["ln_1_b"]) @ L["attn_w"] + L["attn_b"]
               for x in xs]
        new = []
        for i, x in enumerate(xs):
            y = np.zeros(C)
            for h in range(H):
                q = qkv[i][h * D:(h + 1) * D]
                scores = [float(q @ qkv[j][C + h * D:C + (h + 1) * D])
                          / math.sqrt(D) for j in range(i + 1)]
                top = max(scores)
                w = [math.exp(s - top) for s in scores]
                tot = sum(w)
                for j in range(i + 1):
                    y[h * D:(h + 1) * D] += (w[j] / tot) * \
                        qkv[j][2 * C + h * D:2 * C + (h + 1) * D]
            x = x + y @ L["proj_w"] + L["proj_b"]
            f = ln(x, L["ln_2_w"], L["ln_2_b"]) @ L["fc_w"] + L["fc_b"]
            g = np.array([0.5 * e * (1 + math.tanh(
                math.sqrt(2 / math.pi) * (e + 0.044715 * e ** 3))) for e in f])
            new.append(x + g @ L["mproj_w"] + L["mproj_b"])
        xs = new
    return ln(xs[-1], m.ln_f_w, m.ln_f_b) @ m.lm_head.T


def self_check_model(m, written, prefix, tied):
    back = gpt2_numpy.read_safetensors(m.path)
    check(set(back) == set(written), "tensor names read back")
    for name, a in written.items():
        if a.dtype == np.uint16:     # BF16 bits
            a = (a.astype(np.uint32) << 16).view(np.float32)
        check(np.array_equal(back[name], a.astype(np.float32)),
              "tensor %s reads back bit-exactly" % name)
    check(prefix + "wte.weight" in back and prefix + "h.0.attn.bias" in back,
          "names carry the prefix %r" % prefix)
    check(m.tied == tied, "tied/untied lm_head detected")


def self_check_sequence(m, tokens, full):
    # token by token through the cache
    cache = m.new_cache()
    inc = np.concatenate([m.forward([t], cache) for t in tokens])
    err = np.abs(inc - full).max()
    check(err < 1e-9, "token-by-token vs full recompute: %g" % err)
    # uneven chunks
    cache, rows, at = m.new_cache(), [], 0
    for size in (1, 4, 2, 7, 3, 11, 5, 64):
        if at >= len(tokens):
            break
        rows.append(m.forward(tokens[at:at + size], cache))
        at += size
    err = np.abs(np.concatenate(rows) - full).max()
    check(err < 1e-9, "chunked vs full recompute: %g" % err)


def clear_of_ties(m, tokens):
    """Whether a q8 model's inputs over `tokens` keep Q8_MARGIN (always
    true for the other dtypes)."""
    if not m.q8:
        return True
    m.q8_margin = math.inf
    m.full(tokens)
    return m.q8_margin >= Q8_MARGIN


def greedy_sequence(m, rng):
    """A prompt whose greedy continuation has unambiguous argmaxes (and,
    under q8, inputs clear of half-way points)."""
    for _ in range(200):
        prompt = [int(t) for t in rng.integers(0, m.vocab_size, GREEDY_PROMPT)]
        gen, steps = m.greedy(prompt, GREEDY_NEW)
        margins = []
        for s in steps:
            top2 = np.partition(s, -2)[-2:]
            margins.append(float(top2[1] - top2[0]))
        if min(margins) >= MIN_MARGIN and clear_of_ties(m, prompt + gen):
            return prompt + gen, min(margins)
    raise AssertionError("no prompt with a clear greedy continuation found")


def random_tokens(m, rng, n, fixed=()):
    """n random tokens (with `fixed` (index, token) pairs), under q8 drawn
    again until clear of half-way points."""
    for _ in range(200):
        tokens = [int(t) for t in rng.integers(0, m.vocab_size, n)]
        for i, t in fixed:
            tokens[i] = t
        if clear_of_ties(m, tokens):
            return tokens
    raise AssertionError("no %d tokens clear of q8's half-way points" % n)


def reference_sequences(data_dir, name, m, m32, rng, T, ctx):
    """The prompt, greedy (and with ctx, context) sequences of model `m`,
    their reference logits written to fixtures/NAME.SEQUENCE.f32."""
    seqs = []
    prompt = random_tokens(m, rng, PROMPT_LEN,
                           ((3, m.vocab_size - 1),   # <|endoftext|>
                            (7, 0)))                 # the first and last rows
    seqs.append({"name": "prompt", "tokens": prompt,
                 "prompt_len": len(prompt), "greedy": False})
    tokens, margin = greedy_sequence(m, rng)
    seqs.append({"name": "greedy", "tokens": tokens,
                 "prompt_len": GREEDY_PROMPT, "greedy": True,
                 "min_margin": margin})
    if ctx:
        full_ctx = random_tokens(m, rng, T)
        seqs.append({"name": "context", "tokens": full_ctx,
                     "prompt_len": T, "greedy": False})

    for s in seqs:
        full = m.full(s["tokens"])
        self_check_sequence(m, s["tokens"], full)
        if s["greedy"]:
            p = s["prompt_len"]
            check(all(int(np.argmax(full[i - 1])) == s["tokens"][i]
                      for i in range(p, len(s["tokens"]))),
                  "greedy tokens are the argmax of full recompute")
        f32_err = float(np.abs(m32.full(s["tokens"]) - full).max())
        s["fills_context"] = len(s["tokens"]) == T
        s["logits"] = "fixtures/%s.%s.f32" % (name, s["name"])
        full.astype("<f4").tofile(os.path.join(data_dir, s["logits"]))
        print("%-20s %-8s %3d tokens  |logit| max %.2f  "
              "numpy float32 vs float64: %.2g"
              % (name, s["name"], len(s["tokens"]),
                 float(np.abs(full).max()), f32_err))
    return seqs


def reference_inspect(data_dir, name, m, tokens):
    """The inspect fixture of `tokens` under model `m`; returns its path
    relative to data_dir."""
    att, resid, lens = m.inspect(tokens)
    n = len(tokens)
    full = m.full(tokens)
    err = np.abs(lens[-1] - full).max()
    check(err < 1e-9, "last layer's lens vs the logits: %g" % err)
    for p in att:
        check(np.abs(p.sum(axis=-1) - 1).max() < 1e-12, "attention rows sum to 1")
        check(not np.triu(p, 1).any(), "attention is causal")
    # the same rows when the prompt comes in uneven chunks through the cache
    record, cache, at = {"attention": [], "residual": []}, m.new_cache(), 0
    for size in (4, 7, 1, 11, 64):
        if at >= n:
            break
        m.forward(tokens[at:at + size], cache, record)
        at += size
    for layer, p in enumerate(att):
        rows = [r for i, r in enumerate(record["attention"])
                if i % m.n_layer == layer]
        got = np.concatenate([np.pad(r, ((0, 0), (0, 0), (0, n - r.shape[2])))
                              for r in rows], axis=1)
        err = np.abs(got - p).max()
        check(err < 1e-12, "chunked vs whole attention: %g" % err)
    out = {"tokens": tokens, "attention": [], "residual_norms": [],
           "lens": []}
    for p, x, logits in zip(att, resid, lens):
        out["attention"].append([[p[h, q, :q + 1].tolist() for q in range(n)]
                                 for h in range(m.n_head)])
        out["residual_norms"].append(np.linalg.norm(x, axis=-1).tolist())
        probs = np.exp(logits - logits.max(axis=-1, keepdims=True))
        probs /= probs.sum(axis=-1, keepdims=True)
        top = np.argsort(-probs, axis=-1, kind="stable")[:, :LENS_TOP]
        out["lens"].append([[[int(t), float(probs[q, t])] for t in top[q]]
                            for q in range(n)])
    rel = "fixtures/%s.inspect.json" % name
    with open(os.path.join(data_dir, rel), "w", encoding="utf-8") as f:
        json.dump(out, f)
    return rel


def write_dequantized(src, out, tied):
    """Writes the model in directory `src` to `out` as F32 with its weight
    matrices replaced by the values gpt2d --dtype int8 multiplies by
    (gpt2_numpy.quantize_int8): loaded as float32, it must give the same
    bits as `src` loaded as int8."""
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    t = gpt2_numpy.read_safetensors(os.path.join(src, "model.safetensors"))
    in_out = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight",
              "mlp.c_proj.weight")
    tensors = []
    for name, a in t.items():
        if name.endswith(in_out):
            a = gpt2_numpy.quantize_int8(a)
        elif name == "lm_head.weight" or (tied and
                                          name.endswith("wte.weight")):
            a = gpt2_numpy.quantize_int8(a.T).T
        tensors.append((name, np.ascontiguousarray(a, dtype="<f4")))
    make_model.write_safetensors(os.path.join(out, "model.safetensors"),
                                 tensors, "F32")
    for name in ("config.json", "vocab.json", "merges.txt"):
        shutil.copyfile(os.path.join(src, name), os.path.join(out, name))


def against_unquantized(name, q, u, seqs):
    """Prints what int8 quantization costs: `q` is a model quantized, `u`
    the same unquantized.  Over every position of the sequences: the
    largest logit difference, and how often both models' argmax agree;
    then how many of the greedy tokens `u` generates from the same prompt
    before it first differs."""
    diff, agree, rows = 0.0, 0, 0
    for s in seqs:
        a, b = q.full(s["tokens"]), u.full(s["tokens"])
        diff = max(diff, float(np.abs(a - b).max()))
        agree += int((a.argmax(axis=1) == b.argmax(axis=1)).sum())
        rows += a.shape[0]
    g = next(s for s in seqs if s["greedy"])
    p = g["prompt_len"]
    own, _ = u.greedy(g["tokens"][:p], len(g["tokens"]) - p)
    same = next((i for i, (x, y) in enumerate(zip(own, g["tokens"][p:]))
                 if x != y), len(own))
    print("%-20s int8 vs unquantized: max |dlogit| %.3g, argmax agrees at "
          "%d/%d positions, greedy identical for %d/%d tokens"
          % (name, diff, agree, rows, same, len(own)))


def add_model(cases, data_dir, seed, name, mdir, m, dtype, prefix, untied,
              ctx, quick):
    """Model `m` (in mdir) and its VARIANTS: reference sequences, inspect
    fixtures and cases.json entries."""
    T = m.n_ctx
    seqs = reference_sequences(data_dir, name, m,
                               gpt2_numpy.GPT2(mdir, dtype=np.float32),
                               np.random.default_rng(2000 + seed), T, ctx)
    if name == "tiny":
        short = seqs[0]["tokens"][:6]
        err = np.abs(naive_logits(m, short) - m.full(short)[-1]).max()
        check(err < 1e-9, "plain loops vs vectorised: %g" % err)

    entry = {
        "name": name, "dir": "models/" + name, "load_dtype": "auto",
        "load_kv_dtype": "float32", "quick": quick,
        "n_layer": m.n_layer, "n_head": m.n_head, "n_embd": m.n_embd,
        "n_ctx": T,
        "vocab_size": m.vocab_size, "dtype": dtype, "prefix": prefix,
        "tied": not untied, "sequences": seqs,
        "inspect": reference_inspect(data_dir, name, m,
                                     seqs[0]["tokens"])}
    cases["models"].append(entry)
    for suffix, matrices, kv in VARIANTS.get(name, ()):
        # the reference rounds what gpt2d keeps narrower: the matrices
        # (--dtype float16 or int8) and/or the cached keys and values
        # (--kv-dtype float16)
        def narrow(dt):
            return gpt2_numpy.GPT2(
                mdir, dtype=dt,
                matrices={"float16": np.float16, "int8": "int8",
                          "q8": "q8"}.get(matrices),
                kv=np.float16 if kv == "float16" else None)
        variant_model = narrow(np.float64)
        vseqs = reference_sequences(
            data_dir, name + suffix, variant_model, narrow(np.float32),
            np.random.default_rng(3000 + seed), T, ctx)
        variant = dict(entry, name=name + suffix, load_dtype=matrices,
                       load_kv_dtype=kv,
                       quick=name + suffix in QUICK_VARIANTS,
                       sequences=vseqs,
                       inspect=reference_inspect(data_dir, name + suffix,
                                                 variant_model,
                                                 vseqs[0]["tokens"]))
        if matrices in ("int8", "q8"):
            against_unquantized(
                name + suffix, variant_model,
                gpt2_numpy.GPT2(mdir, kv=np.float16 if kv == "float16"
                                else None), vseqs)
        if matrices == "int8":
            variant["dequantized"] = "models/%s%s-dequantized" % (
                name, suffix)
            write_dequantized(mdir, os.path.join(
                data_dir, variant["dequantized"]), not untied)
        cases["models"].append(variant)
    if dtype == "F16":
        # the same values widened to float panels: the same logits
        cases["models"].append(dict(entry, name=name + "@float32",
                                    load_dtype="float32", quick=False))


def build(data_dir):
    tok_dir = os.path.join(data_dir, "tokenizer")
    fix_dir = os.path.join(data_dir, "fixtures")
    stamp_path = os.path.join(fix_dir, "STAMP")
    stamp = stamp_of(tok_dir)
    try:
        with open(stamp_path, encoding="ascii") as f:
            if f.read().strip() == stamp and os.path.exists(
                    os.path.join(fix_dir, "cases.json")) and all(
                    os.path.exists(os.path.join(data_dir, "models", mm[0],
                                                "model.safetensors"))
                    for mm in MODELS):
                print("fixtures up to date (%s)" % stamp[:12])
                return
    except FileNotFoundError:
        pass

    shutil.rmtree(fix_dir, ignore_errors=True)
    os.makedirs(fix_dir)
    cases = {"format": FORMAT, "tolerance": TOLERANCE, "models": []}
    for seed, (name, L, H, C, T, dtype, prefix, untied, ctx) in \
            enumerate(MODELS):
        mdir = os.path.join(data_dir, "models", name)
        shutil.rmtree(mdir, ignore_errors=True)
        written = make_model.make_model(mdir, tok_dir, L, H, C, T,
                                        seed=1000 + seed, prefix=prefix,
                                        dtype=dtype, untied=untied)
        m = gpt2_numpy.GPT2(mdir)
        m.path = os.path.join(mdir, "model.safetensors")
        self_check_model(m, written, prefix, not untied)
        if name == "tiny":
            self_check_q8(np.random.default_rng(7))
        add_model(cases, data_dir, seed, name, mdir, m, dtype, prefix,
                  untied, ctx, True)
    for k, name in enumerate(TRAINED):
        mdir = os.path.join(data_dir, "models", name)
        check(os.path.exists(os.path.join(mdir, "training.json")),
              "%s missing (tests/data/train-tiny.sh makes it)" % mdir)
        m = gpt2_numpy.GPT2(mdir)
        add_model(cases, data_dir, len(MODELS) + k, name, mdir, m, "F32", "",
                  False, False, False)

    with open(os.path.join(fix_dir, "cases.json"), "w",
              encoding="utf-8") as f:
        json.dump(cases, f, indent=1)
        f.write("\n")
    with open(stamp_path, "w", encoding="ascii") as f:
        f.write(stamp + "\n")
    print("fixtures written (%s)" % stamp[:12])


def main(argv):
    if len(argv) != 2:
        print("usage: make_fixtures.py DATA_DIR", file=sys.stderr)
        return 2
    try:
        build(argv[1])
    except (OSError, ValueError, KeyError, AssertionError) as e:
        print("make_fixtures.py: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
