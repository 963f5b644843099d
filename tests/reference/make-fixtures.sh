#!/bin/bash
# make-fixtures.sh — `make check` fixture step: tiny random GPT-2 models in
# Hugging Face layout and the numpy reference's logits for them, written into
# $GPT2D_TEST_DATA/models/ and $GPT2D_TEST_DATA/fixtures/ (format documented
# in make_fixtures.py).  Up-to-date outputs are kept, so a repeated
# `make check` costs a second.  Needs $PYTHON (python3 with numpy) and the
# vocabulary that tests/data/fetch-tokenizer.sh puts in
# $GPT2D_TEST_DATA/tokenizer/; without them the step fails: the forward
# pass must never go untested quietly.
set -euo pipefail

srcdir=${GPT2D_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
data=${GPT2D_TEST_DATA:-tests/data}
python=${PYTHON:-python3}
# The source tree may be read-only (distcheck); keep it clean anyway.
export PYTHONDONTWRITEBYTECODE=1

if ! "$python" -c 'import numpy' >/dev/null 2>&1; then
    echo "make-fixtures: FAIL: '$python' cannot import numpy" \
         "(install python3-numpy or set PYTHON)" >&2
    exit 1
fi
for f in vocab.json merges.txt; do
    if [ ! -s "$data/tokenizer/$f" ]; then
        echo "make-fixtures: FAIL: $data/tokenizer/$f missing" \
             "(tests/data/fetch-tokenizer.sh provides it)" >&2
        exit 1
    fi
done

mkdir -p "$data"
if ! "$python" "$srcdir/tests/reference/make_fixtures.py" "$data"; then
    echo "make-fixtures: FAIL: generating models and reference logits" \
         "into $data failed (see above)" >&2
    exit 1
fi
