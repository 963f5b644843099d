#!/bin/bash
# test-train.sh — `make check` step: tests/reference/test_train.py (the
# trainer's backward pass against finite differences, its reproducibility,
# the written model against the reference, the Python BPE against the JS
# reference) on the vocabulary fetch-tokenizer.sh installs.
set -euo pipefail
: "${GPT2D_TEST_DATA:?set GPT2D_TEST_DATA (make check does)}"
: "${GPT2D_SRCDIR:?set GPT2D_SRCDIR (make check does)}"
export PYTHONDONTWRITEBYTECODE=1
tok=$GPT2D_TEST_DATA/tokenizer
exec "${PYTHON:-python3}" "$GPT2D_SRCDIR/tests/reference/test_train.py" "$tok" \
    "$GPT2D_SRCDIR/tests/tokenizer/corpus.json" "$tok/expected.json"
