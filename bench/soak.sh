#!/bin/bash
# soak.sh — the full soak (not part of `make check`): tests/soak/soak.py with
# 10,000 requests from 16 concurrent clients, 20 % of them dropped at a random
# point, against a gpt2d it starts on 127.0.0.1; every answer, the server's
# state, its request counters and its RSS growth after the warm-up (< 5 MB)
# are checked, and the figures printed.
#
#     BUILDDIR=/path/to/build PYTHON=python3 bench/soak.sh [MODEL_DIR] [soak.py options]
#
# MODEL_DIR defaults to the build's tiny test model ($BUILDDIR/tests/data/
# models/tiny, made by `make check`); `make bench` generates the GPT-2-124M-
# shaped $BUILDDIR/bench/models/gpt2-124m-random (give it a smaller
# --max-tokens: 10,000 requests of up to 16 tokens take a while on 2 cores).
# Defaults: --requests 10000 --clients 16 --drop 0.2 --slots 8 --threads 2
# --max-tokens 16 --seed 1; options given here override them.  The figures
# also go to $BUILDDIR/bench/soak-MODEL.json, the server's log to
# $BUILDDIR/bench/soak-MODEL.log.  Exit status: soak.py's (0 = every check
# passed).
set -euo pipefail

srcdir=$(cd "$(dirname "$0")/.." && pwd)
builddir=$(cd "${BUILDDIR:-.}" && pwd)
python=${PYTHON:-python3}

model=$builddir/tests/data/models/tiny
if [[ $# -gt 0 && $1 != -* ]]; then
    model=$1
    shift
fi
if [[ ! -s $model/model.safetensors ]]; then
    echo "soak.sh: no model in $model (make check makes tiny, make bench the 124M-shaped one)" >&2
    exit 2
fi

name=$(basename "$model")
mkdir -p "$builddir/bench"
work=$(mktemp -d "${TMPDIR:-/tmp}/gpt2d-soak.XXXXXX")
trap 'rm -rf "$work"' EXIT

rc=0
PYTHONDONTWRITEBYTECODE=1 "$python" "$srcdir/tests/soak/soak.py" \
    --gpt2d "$builddir/src/gpt2d" --model "$model" \
    --requests 10000 --clients 16 --drop 0.2 --slots 8 --threads 2 --max-tokens 16 \
    --seed 1 --workdir "$work" --json "$builddir/bench/soak-$name.json" "$@" || rc=$?
cp "$work"/*.log "$builddir/bench/soak-$name.log" 2>/dev/null || true
echo "soak.sh: figures in $builddir/bench/soak-$name.json, server log in $builddir/bench/soak-$name.log"
exit "$rc"
