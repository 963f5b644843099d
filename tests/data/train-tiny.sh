#!/bin/bash
# train-tiny.sh — test fixture: the toy GPT-2 trained on this machine
# (tests/reference/train.py tiny: Debian's fortunes, GPT-2's tokenizer), in
# $GPT2D_TEST_DATA/models/trained-tiny/, and the held-out texts it never saw
# in $GPT2D_TEST_DATA/heldout.txt.  The model comes from the cache
# (${GPT2D_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/gpt2d}/trained/, keyed
# by the trainer's sources, the corpus, the vocabulary and the preset), or
# is trained now: about 12 minutes on 2 cores, once.  Needs $PYTHON with
# numpy, the package fortunes, and the vocabulary fetch-tokenizer.sh
# installs.  Exit 0 = the fixture is ready.
set -euo pipefail

: "${GPT2D_TEST_DATA:?set GPT2D_TEST_DATA (make check does)}"
: "${GPT2D_SRCDIR:?set GPT2D_SRCDIR (make check does)}"
python=${PYTHON:-python3}
export PYTHONDONTWRITEBYTECODE=1

if [[ ! -d /usr/share/games/fortunes && -z ${GPT2D_FORTUNES:-} ]]; then
    echo "train-tiny.sh: FAIL: /usr/share/games/fortunes missing (install the Debian package fortunes)" >&2
    exit 1
fi
exec "$python" "$GPT2D_SRCDIR/tests/reference/train.py" tiny \
    "$GPT2D_TEST_DATA/models/trained-tiny" \
    --vocab-dir "$GPT2D_TEST_DATA/tokenizer" \
    --cache "${GPT2D_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/gpt2d}" \
    --heldout-text "$GPT2D_TEST_DATA/heldout.txt"
