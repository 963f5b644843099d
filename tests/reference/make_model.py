#!/usr/bin/env python3
"""make_model.py — a small random GPT-2 in exact Hugging Face layout.

    make_model.py OUT_DIR --vocab-dir DIR --n-layer L --n-head H --n-embd C
                  --n-ctx T [--seed S] [--prefix ''|'transformer.']
                  [--dtype F32|F16|BF16] [--untied-lm-head] [--std X]

Writes OUT_DIR/config.json (the keys of HF's GPT2Config),
OUT_DIR/model.safetensors (written by hand: u64 little-endian header length,
JSON header, raw little-endian data) and copies DIR/vocab.json and
DIR/merges.txt; the vocabulary size is taken from vocab.json.

Tensor names follow the HF checkpoints: wte.weight [V,C], wpe.weight [T,C],
h.N.ln_1.{weight,bias} [C], h.N.attn.c_attn.weight [C,3C] (Conv1D, [in,out],
columns q | k | v), h.N.attn.c_attn.bias [3C], h.N.attn.c_proj.{weight [C,C],
bias [C]}, h.N.ln_2.*, h.N.mlp.c_fc.{weight [C,4C], bias [4C]},
h.N.mlp.c_proj.{weight [4C,C], bias [C]}, ln_f.*, and the h.N.attn.bias
causal-mask buffers [1,1,T,T] that older checkpoints carry (a loader must
ignore them).  Every name gets --prefix.  With --untied-lm-head an extra
lm_head.weight [V,C] is written; as in a saved GPT2LMHeadModel it is never
prefixed (HF keeps lm_head outside the `transformer.` module).

Weights are seeded normals with standard deviation --std (default 0.1: with
the default a model of width 64 gives logits with a spread of about one unit,
so argmax decisions and softmaxes are far from uniform).  LayerNorm gains are
1 + noise, every bias is nonzero.  Values are generated in float32 and then
rounded to --dtype; the file is the only truth (the reference reads it back).

Importable: make_model(out_dir, ...) returns {name: numpy array as stored}.
"""

import argparse
import json
import os
import shutil
import sys

import numpy as np

DTYPES = ("F32", "F16", "BF16")


def to_bf16_bits(a):
    """float32 array -> uint16 bfloat16 bits, round to nearest even."""
    bits = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    rounding = ((bits >> 16) & 1) + np.uint32(0x7FFF)
    return ((bits + rounding) >> 16).astype(np.uint16)


def stored(a, dtype):
    """The array as it goes to disk: little-endian, in the requested dtype."""
    if dtype == "F32":
        return np.ascontiguousarray(a, dtype="<f4")
    if dtype == "F16":
        return np.ascontiguousarray(a, dtype="<f2")
    if dtype == "BF16":
        return to_bf16_bits(a).astype("<u2")
    raise ValueError("unknown dtype " + dtype)


def gpt2_tensors(rng, n_layer, n_embd, n_ctx, vocab, std, untied):
    """Yields (name without prefix, float32 array) in a fixed order, so a seed
    always gives the same model."""
    C = n_embd

    def normal(*shape, scale=std):
        return rng.standard_normal(shape, dtype=np.float32) * np.float32(scale)

    def gain(n):
        return np.float32(1.0) + normal(n, scale=0.1)

    yield "wte.weight", normal(vocab, C)
    yield "wpe.weight", normal(n_ctx, C)
    causal = np.tril(np.ones((n_ctx, n_ctx), dtype=np.float32))
    causal = causal.reshape(1, 1, n_ctx, n_ctx)
    for i in range(n_layer):
        p = "h.%d." % i
        yield p + "ln_1.weight", gain(C)
        yield p + "ln_1.bias", normal(C, scale=0.1)
        yield p + "attn.bias", causal
        yield p + "attn.c_attn.weight", normal(C, 3 * C)
        yield p + "attn.c_attn.bias", normal(3 * C, scale=0.1)
        yield p + "attn.c_proj.weight", normal(C, C)
        yield p + "attn.c_proj.bias", normal(C, scale=0.1)
        yield p + "ln_2.weight", gain(C)
        yield p + "ln_2.bias", normal(C, scale=0.1)
        yield p + "mlp.c_fc.weight", normal(C, 4 * C)
        yield p + "mlp.c_fc.bias", normal(4 * C, scale=0.1)
        yield p + "mlp.c_proj.weight", normal(4 * C, C)
        yield p + "mlp.c_proj.bias", normal(C, scale=0.1)
    yield "ln_f.weight", gain(C)
    yield "ln_f.bias", normal(C, scale=0.1)
    if untied:
        yield "lm_head.weight", normal(vocab, C)


def write_safetensors(path, tensors, dtype):
    """tensors: list of (name, array already in its on-disk numpy dtype)."""
    header = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, a in tensors:
        header[name] = {"dtype": dtype, "shape": list(a.shape),
                        "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)   # data starts 8-aligned, as HF does
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(np.uint64(len(raw)).astype("<u8").tobytes())
        f.write(raw)
        for _, a in tensors:
            a.tofile(f)
    os.replace(tmp, path)


def hf_config(n_layer, n_head, n_embd, n_ctx, vocab, dtype, untied, std):
    """config.json's keys, as HF's GPT2Config writes them."""
    torch_dtype = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}
    return {
        "activation_function": "gelu_new",
        "architectures": ["GPT2LMHeadModel"],
        "attn_pdrop": 0.1,
        "bos_token_id": 50256,
        "embd_pdrop": 0.1,
        "eos_token_id": 50256,
        "initializer_range": std,
        "layer_norm_epsilon": 1e-05,
        "model_type": "gpt2",
        "n_ctx": n_ctx,
        "n_embd": n_embd,
        "n_head": n_head,
        "n_layer": n_layer,
        "n_positions": n_ctx,
        "resid_pdrop": 0.1,
        "tie_word_embeddings": not untied,
        "torch_dtype": torch_dtype[dtype],
        "vocab_size": vocab,
    }


def make_model(out_dir, vocab_dir, n_layer, n_head, n_embd, n_ctx, seed=0,
               prefix="", dtype="F32", untied=False, std=0.1):
    if n_layer < 1 or n_head < 1 or n_embd < 1 or n_ctx < 1:
        raise ValueError("n_layer, n_head, n_embd and n_ctx must be >= 1")
    if n_embd % n_head != 0:
        raise ValueError("n_embd %d is not a multiple of n_head %d"
                         % (n_embd, n_head))
    if dtype not in DTYPES:
        raise ValueError("dtype must be one of " + ", ".join(DTYPES))
    with open(os.path.join(vocab_dir, "vocab.json"), encoding="utf-8") as f:
        vocab = len(json.load(f))
    os.makedirs(out_dir, exist_ok=True)

    rng = np.random.default_rng(seed)
    tensors = []
    for name, a in gpt2_tensors(rng, n_layer, n_embd, n_ctx, vocab, std,
                                untied):
        full = name if name == "lm_head.weight" else prefix + name
        tensors.append((full, stored(a, dtype)))
    write_safetensors(os.path.join(out_dir, "model.safetensors"), tensors,
                      dtype)

    config = hf_config(n_layer, n_head, n_embd, n_ctx, vocab, dtype, untied,
                       std)
    with open(os.path.join(out_dir, "config.json"), "w",
              encoding="utf-8") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")
    for name in ("vocab.json", "merges.txt"):
        shutil.copyfile(os.path.join(vocab_dir, name),
                        os.path.join(out_dir, name))
    return dict(tensors)


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="Write a random GPT-2 in Hugging Face layout.")
    ap.add_argument("out_dir")
    ap.add_argument("--vocab-dir", required=True,
                    help="directory holding vocab.json and merges.txt")
    ap.add_argument("--n-layer", type=int, required=True)
    ap.add_argument("--n-head", type=int, required=True)
    ap.add_argument("--n-embd", type=int, required=True)
    ap.add_argument("--n-ctx", type=int, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--prefix", default="", choices=["", "transformer."])
    ap.add_argument("--dtype", default="F32", choices=DTYPES)
    ap.add_argument("--untied-lm-head", action="store_true")
    ap.add_argument("--std", type=float, default=0.1)
    a = ap.parse_args(argv)
    try:
        make_model(a.out_dir, a.vocab_dir, a.n_layer, a.n_head, a.n_embd,
                   a.n_ctx, seed=a.seed, prefix=a.prefix, dtype=a.dtype,
                   untied=a.untied_lm_head, std=a.std)
    except (OSError, ValueError) as e:
        print("make_model.py: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
