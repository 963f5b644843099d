#!/bin/bash
# test-train.sh — `make check` step: tests/reference/test_train.py (the
# trainer's backward pass against finite differences, its reproducibility,
# its optimizer, the written model against the reference, the Python BPE
# against the JS reference on tests/tokenizer/corpus.json and on
# tests/reference/bpe_edge_cases.json) on the vocabulary fetch-tokenizer.sh
# installs.  The edge cases' reference ids are computed here with the JS
# reference (node), as fetch-tokenizer.sh computes expected.json.
set -euo pipefail
: "${GPT2D_TEST_DATA:?set GPT2D_TEST_DATA (make check does)}"
: "${GPT2D_SRCDIR:?set GPT2D_SRCDIR (make check does)}"
export PYTHONDONTWRITEBYTECODE=1
tok=$GPT2D_TEST_DATA/tokenizer
edge=$GPT2D_SRCDIR/tests/reference/bpe_edge_cases.json
work=$(mktemp -d "${TMPDIR:-/tmp}/test-train.XXXXXX")
trap 'rm -rf "$work"' EXIT
"${NODE:-node}" "$GPT2D_SRCDIR/tests/tokenizer/js_reference.js" "$tok/package" \
    "$edge" >"$work/edge_expected.json" || {
    echo "test-train.sh: FAIL: the JS reference failed on $edge" >&2
    exit 1
}
"${PYTHON:-python3}" "$GPT2D_SRCDIR/tests/reference/test_train.py" "$tok" \
    "$GPT2D_SRCDIR/tests/tokenizer/corpus.json" "$tok/expected.json" \
    "$edge" "$work/edge_expected.json"
