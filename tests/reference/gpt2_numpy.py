#!/usr/bin/env python3
"""gpt2_numpy.py — GPT-2 in numpy, the independent reference for gpt2d.

Written from the model's definition (Radford et al. 2019 and the HF
GPT2LMHeadModel layout), not from the C code.  It reads a Hugging Face model
directory by itself (config.json + model.safetensors with F32, F16 or BF16
tensors, with or without the `transformer.` prefix, tied or untied lm_head)
and computes in float64 by default, so it is the accurate side of every
comparison.

    x   = wte[tok] + wpe[pos]
    for each block:
        a  = LN_1(x);  q|k|v = a·W_attn + b_attn        (Conv1D: W is [in,out])
        per head h:  softmax(q_h k_h^T / sqrt(head_dim) + causal) v_h
        x += concat_heads · W_proj + b_proj
        m  = LN_2(x);  x += gelu_tanh(m·W_fc + b_fc) · W_mproj + b_mproj
    logits = LN_f(x) · lm_head^T                        (lm_head = wte if tied)

API:
    model = GPT2(model_dir)               # dtype=np.float64 by default
    model = GPT2(model_dir, matrices=np.float16)
                                          # the weight matrices rounded to
                                          # half first, as gpt2d --dtype
                                          # float16 keeps them
    model = GPT2(model_dir, matrices="int8")
                                          # quantized to 8 bits with a half
                                          # scale per 32 inputs, as gpt2d
                                          # --dtype int8 keeps them
                                          # (quantize_int8)
    model = GPT2(model_dir, matrices="q8")
                                          # the int8 weights, and every
                                          # weight product's inputs
                                          # quantized too, as gpt2d
                                          # --dtype q8 multiplies them
                                          # (quantize_rows_q8)
    model = GPT2(model_dir, kv=np.float16)
                                          # keys and values rounded to half
                                          # as they are cached (--kv-dtype)
    cache = model.new_cache()
    logits = model.forward(tokens, cache) # appends tokens, returns [n, V]
    logits = model.full(tokens)           # fresh cache, whole sequence
    toks, steps = model.greedy(prompt, n) # argmax generation, incremental
    att, resid, lens = model.inspect(tokens)
                                          # per layer: attention probabilities
                                          # (H, n, n), the residual stream
                                          # after the block (n, C), and the
                                          # logit lens's logits (n, V)

Command line (a quick look at a model):
    gpt2_numpy.py MODEL_DIR TOKEN...      # prints greedy continuation
"""

import json
import math
import os
import struct
import sys

import numpy as np

_NP_DTYPES = {"F32": "<f4", "F16": "<f2", "F64": "<f8"}


def read_safetensors(path):
    """Returns {name: numpy array} widened to float32 (exact for F16/BF16),
    checking the header's offsets against the file."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ValueError("%s: shorter than the 8-byte header length" % path)
    (hlen,) = struct.unpack("<Q", blob[:8])
    if 8 + hlen > len(blob):
        raise ValueError("%s: header length %d past end of file"
                         % (path, hlen))
    header = json.loads(blob[8:8 + hlen].decode("utf-8"))
    data = memoryview(blob)[8 + hlen:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dt = info["dtype"]
        shape = tuple(info["shape"])
        begin, end = info["data_offsets"]
        if not 0 <= begin <= end <= len(data):
            raise ValueError("%s: %s: offsets %r outside the data"
                             % (path, name, info["data_offsets"]))
        count = int(np.prod(shape, dtype=np.int64))
        raw = data[begin:end]
        if dt == "BF16":
            if end - begin != 2 * count:
                raise ValueError("%s: %s: size mismatch" % (path, name))
            bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            a = bits.view(np.float32)
        elif dt in _NP_DTYPES:
            npdt = np.dtype(_NP_DTYPES[dt])
            if end - begin != npdt.itemsize * count:
                raise ValueError("%s: %s: size mismatch" % (path, name))
            a = np.frombuffer(raw, dtype=npdt).astype(np.float32)
        else:
            raise ValueError("%s: %s: unsupported dtype %s"
                             % (path, name, dt))
        out[name] = a.reshape(shape)
    return out


def quantize_int8(w):
    """The values of matrix w (K inputs, N outputs) as gpt2d --dtype int8
    keeps them, the precision of llama.cpp's Q8_0: each output's weights go
    in blocks of 32 consecutive inputs (the last block shorter when K is not
    a multiple of 32).  A block's scale is d = amax / 127, amax its largest
    |weight|, computed in float32 and rounded to the nearest float16; each
    weight becomes q * d (exact in float32), q the integer nearest to
    weight / d (float32 division, ties to even) clamped to [-127, 127], or
    0 when d is 0.  Returns float32 (K, N)."""
    w = np.asarray(w, dtype=np.float32)
    if not np.all(np.abs(w) <= np.float32(127 * 65504)):
        raise ValueError("a weight int8 with half scales cannot hold")
    out = np.empty_like(w)
    for k0 in range(0, w.shape[0], 32):
        block = w[k0:k0 + 32]
        amax = np.abs(block).max(axis=0)
        d = (amax / np.float32(127)).astype(np.float16).astype(np.float32)
        safe = np.where(d > 0, d, np.float32(1))
        q = np.clip(np.rint(block / safe), -127, 127)
        out[k0:k0 + 32] = np.where(d > 0, q, 0).astype(np.float32) * d
    return out


def layer_norm(x, w, b, eps):
    # x is (N, C); statistics per row, biased variance as in torch.
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def gelu_tanh(x):
    # GPT-2's "gelu_new": 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    # (x * x * x, not x ** 3: numpy's power takes pow() per element, 200x
    # slower, which train.py's steps felt)
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi)
                                    * (x + 0.044715 * (x * x * x))))


def softmax_rows(s):
    s = s - s.max(axis=-1, keepdims=True)
    e = np.exp(s)
    return e / e.sum(axis=-1, keepdims=True)


class Cache:
    """Keys and values of one sequence: per layer, arrays (H, T, head_dim)."""

    def __init__(self, n_layer):
        self.k = [None] * n_layer
        self.v = [None] * n_layer
        self.n_tokens = 0

def q8_tie_margin(a):
    """How close the inputs a (rows, K) come to a half-way point as
    quantize_rows_q8 divides them: the least |frac(|a / d|) - 1/2| /
    max(1, |a / d|) over the inputs below the clamp.  A float32 pass that
    computed an input a few ulps apart from this (float64) reference rounds
    it the same way only if this is larger than those ulps, relatively."""
    a = np.asarray(a, dtype=np.float32)
    least = np.inf
    for k0 in range(0, a.shape[1], 32):
        block = a[:, k0:k0 + 32].astype(np.float64)
        d = (np.abs(a[:, k0:k0 + 32]).max(axis=1) / np.float32(127))
        ok = d > 0
        if not ok.any():
            continue
        r = np.abs(block[ok] / d[ok, None].astype(np.float64))
        dist = np.abs(r - np.floor(r) - 0.5) / np.maximum(1.0, r)
        dist = np.where(r < 127, dist, np.inf)
        least = min(least, float(dist.min()))
    return least


def quantize_rows_q8(a):
    """The inputs of a weight product, a (n rows, K inputs), as gpt2d
    --dtype q8 multiplies them: each row in blocks of 32 consecutive inputs
    (the last block shorter), the row first rounded to float32.  A block's
    scale is d = amax / 127 in float32, amax its largest |input| (not
    rounded to half: it is no weight); each input becomes q * d, q the
    integer nearest to input / d (float32 division, ties to even) clamped
    to [-127, 127], or 0 when d is 0.  Returns float64 (n, K): q * d is
    exact there, and the product of these rows with the int8 weights
    (q_w * d_w, exact too) is, block by block, the integer sum of q * q_w
    times d * d_w that gpt2d computes, here without its float32 rounding."""
    a = np.asarray(a, dtype=np.float32)
    out = np.zeros(a.shape, dtype=np.float64)
    for k0 in range(0, a.shape[1], 32):
        block = a[:, k0:k0 + 32]
        d = np.abs(block).max(axis=1) / np.float32(127)
        safe = np.where(d > 0, d, np.float32(1))[:, None]
        q = np.clip(np.rint(block / safe), -127, 127)
        q = np.where(d[:, None] > 0, q, 0)
        out[:, k0:k0 + 32] = q.astype(np.float64) * \
            d[:, None].astype(np.float64)
    return out


class GPT2:
    def __init__(self, model_dir, dtype=np.float64, matrices=None, kv=None):
        with open(os.path.join(model_dir, "config.json"),
                  encoding="utf-8") as f:
            cfg = json.load(f)
        self.n_layer = int(cfg["n_layer"])
        self.n_head = int(cfg["n_head"])
        self.n_embd = int(cfg["n_embd"])
        self.n_ctx = int(cfg.get("n_positions", cfg.get("n_ctx")))
        self.vocab_size = int(cfg["vocab_size"])
        self.eps = float(cfg.get("layer_norm_epsilon", 1e-5))
        if cfg.get("activation_function", "gelu_new") != "gelu_new":
            raise ValueError("only activation_function gelu_new is modelled")
        if self.n_embd % self.n_head:
            raise ValueError("n_embd is not a multiple of n_head")
        self.head_dim = self.n_embd // self.n_head
        self.dtype = dtype
        self.kv = kv
        # q8: every weight product's inputs are quantized (quantize_rows_q8);
        # q8_margin: the least q8_tie_margin of them since it was last reset
        self.q8 = matrices == "q8"
        self.q8_margin = math.inf

        t = read_safetensors(os.path.join(model_dir, "model.safetensors"))
        prefix = "transformer." if "transformer.wte.weight" in t else ""

        def get(name, shape, matrix=False):
            key = prefix + name
            if key not in t:
                raise KeyError("tensor %s missing" % key)
            a = t[key]
            if a.shape != tuple(shape):
                raise ValueError("tensor %s has shape %s, expected %s"
                                 % (key, a.shape, tuple(shape)))
            return stored(a, matrix).astype(dtype)

        # The matrices the products multiply by, rounded to nearest (ties
        # to even) or quantized when `matrices` says so; vectors stay as
        # read.  `matrix` is "in_out" for a Conv1D weight [in, out] and
        # "vocab" for a [vocab, C] matrix, whose inputs run along its rows.
        def stored(a, matrix):
            if not matrix or matrices is None:
                return a
            if matrices not in ("int8", "q8"):
                return a.astype(matrices)
            return quantize_int8(a.T).T if matrix == "vocab" \
                else quantize_int8(a)

        C, V, T = self.n_embd, self.vocab_size, self.n_ctx
        self.wte = get("wte.weight", (V, C))
        self.wpe = get("wpe.weight", (T, C))
        self.layers = []
        for i in range(self.n_layer):
            p = "h.%d." % i
            self.layers.append({
                "ln_1_w": get(p + "ln_1.weight", (C,)),
                "ln_1_b": get(p + "ln_1.bias", (C,)),
                "attn_w": get(p + "attn.c_attn.weight", (C, 3 * C), "in_out"),
                "attn_b": get(p + "attn.c_attn.bias", (3 * C,)),
                "proj_w": get(p + "attn.c_proj.weight", (C, C), "in_out"),
                "proj_b": get(p + "attn.c_proj.bias", (C,)),
                "ln_2_w": get(p + "ln_2.weight", (C,)),
                "ln_2_b": get(p + "ln_2.bias", (C,)),
                "fc_w": get(p + "mlp.c_fc.weight", (C, 4 * C), "in_out"),
                "fc_b": get(p + "mlp.c_fc.bias", (4 * C,)),
                "mproj_w": get(p + "mlp.c_proj.weight", (4 * C, C), "in_out"),
                "mproj_b": get(p + "mlp.c_proj.bias", (C,)),
            })
        self.ln_f_w = get("ln_f.weight", (C,))
        self.ln_f_b = get("ln_f.bias", (C,))
        # A saved GPT2LMHeadModel keeps lm_head outside `transformer.`.
        self.tied = True
        for key in ("lm_head.weight", prefix + "lm_head.weight"):
            # a copy of wte is the tied matrix saved twice (gpt2d shares it)
            if key in t and not np.array_equal(t[key],
                                               t[prefix + "wte.weight"]):
                if t[key].shape != (V, C):
                    raise ValueError("lm_head.weight has shape %s"
                                     % (t[key].shape,))
                self.lm_head = stored(t[key], "vocab").astype(dtype)
                self.tied = False
                break
        if self.tied:
            # tied: the embedding reads the unembedding matrix, so it is
            # rounded with it
            self.wte = get("wte.weight", (V, C), "vocab")
            self.lm_head = self.wte

    def _mm(self, a, w):
        """a @ w for a weight matrix w, its inputs quantized under q8."""
        if self.q8:
            self.q8_margin = min(self.q8_margin, q8_tie_margin(a))
            a = quantize_rows_q8(a).astype(self.dtype)
        return a @ w

    def new_cache(self):
        return Cache(self.n_layer)

    def _attention(self, q, cache, layer, k_new, v_new):
        # q, k_new, v_new are (n, C) for the n new tokens at positions
        # cache.n_tokens .. cache.n_tokens + n - 1.
        n, H, D = q.shape[0], self.n_head, self.head_dim
        split = lambda a: a.reshape(n, H, D).transpose(1, 0, 2)  # (H, n, D)
        if self.kv:
            # cached, and so attended to, as rounded, the new rows included
            k_new = k_new.astype(self.kv).astype(self.dtype)
            v_new = v_new.astype(self.kv).astype(self.dtype)
        qh, kh, vh = split(q), split(k_new), split(v_new)
        if cache.k[layer] is not None:
            kh = np.concatenate([cache.k[layer], kh], axis=1)
            vh = np.concatenate([cache.v[layer], vh], axis=1)
        cache.k[layer], cache.v[layer] = kh, vh
        past = cache.n_tokens
        total = past + n
        s = qh @ kh.transpose(0, 2, 1) / math.sqrt(D)        # (H, n, total)
        # row i (position past+i) sees positions 0 .. past+i
        visible = np.arange(total)[None, :] <= (past + np.arange(n))[:, None]
        s = np.where(visible[None, :, :], s, -np.inf)
        p = softmax_rows(s)                                   # (H, n, total)
        y = p @ vh                                            # (H, n, D)
        return y.transpose(1, 0, 2).reshape(n, H * D), p

    def forward(self, tokens, cache, record=None):
        """Appends `tokens` to `cache` and returns the logits (n, V) of every
        new token.  With `record` (a dict of two lists), appends for each
        layer record["attention"]: the new tokens' attention probabilities
        (H, n, total), and record["residual"]: the residual stream after
        the block (n, C)."""
        tokens = np.asarray(tokens, dtype=np.int64).reshape(-1)
        n = tokens.shape[0]
        if n == 0:
            raise ValueError("no tokens")
        if tokens.min() < 0 or tokens.max() >= self.vocab_size:
            raise ValueError("token id out of range")
        past = cache.n_tokens
        if past + n > self.n_ctx:
            raise ValueError("sequence would pass n_ctx %d" % self.n_ctx)
        C = self.n_embd
        x = self.wte[tokens] + self.wpe[past:past + n]
        for i, L in enumerate(self.layers):
            a = layer_norm(x, L["ln_1_w"], L["ln_1_b"], self.eps)
            qkv = self._mm(a, L["attn_w"]) + L["attn_b"]
            q, k, v = qkv[:, :C], qkv[:, C:2 * C], qkv[:, 2 * C:]
            y, p = self._attention(q, cache, i, k, v)
            x = x + (self._mm(y, L["proj_w"]) + L["proj_b"])
            m = layer_norm(x, L["ln_2_w"], L["ln_2_b"], self.eps)
            h = gelu_tanh(self._mm(m, L["fc_w"]) + L["fc_b"])
            x = x + (self._mm(h, L["mproj_w"]) + L["mproj_b"])
            if record is not None:
                record["attention"].append(p)
                record["residual"].append(x)
        cache.n_tokens = past + n
        x = layer_norm(x, self.ln_f_w, self.ln_f_b, self.eps)
        return self._mm(x, self.lm_head.T)

    def full(self, tokens):
        """Logits (n, V) of every position, recomputed from scratch."""
        return self.forward(tokens, self.new_cache())

    def inspect(self, tokens):
        """One run over `tokens` from an empty cache, looked inside.  Returns
        three lists over the layers: the attention probabilities (H, n, n),
        zero above the diagonal (row i is the query at position i); the
        residual stream after the block (n, C); and the logit lens, that
        stream through the final LayerNorm and the unembedding (n, V): the
        last layer's is the model's own logits."""
        record = {"attention": [], "residual": []}
        self.forward(tokens, self.new_cache(), record)
        lens = [self._mm(layer_norm(x, self.ln_f_w, self.ln_f_b, self.eps),
                         self.lm_head.T) for x in record["residual"]]
        return record["attention"], record["residual"], lens

    def greedy(self, prompt, n_new):
        """Argmax generation through the KV cache.  Returns (tokens,
        step_logits): the n_new generated tokens and, for each, the logits
        (V,) it was chosen from."""
        cache = self.new_cache()
        logits = self.forward(prompt, cache)[-1]
        out, steps = [], []
        for _ in range(n_new):
            tok = int(np.argmax(logits))
            out.append(tok)
            steps.append(logits)
            if len(out) == n_new:
                break
            logits = self.forward([tok], cache)[-1]
        return out, steps


def main(argv):
    if len(argv) < 3:
        print("usage: gpt2_numpy.py MODEL_DIR TOKEN...", file=sys.stderr)
        return 2
    m = GPT2(argv[1])
    toks, _ = m.greedy([int(t) for t in argv[2:]], 16)
    print(" ".join(str(t) for t in toks))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
