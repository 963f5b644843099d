#!/bin/bash
# test_grammar_property.sh — make check's run of the grammar property test:
# random GBNF grammars decoded over GPT-2's tokens by the C engine
# (BUILD/tests/grammar/grammar_sample), every text checked by the independent
# recognizer tests/reference/gbnf_reference.py (test_grammar_property.py says
# what is checked).  About 15 s; extra arguments go to the Python script
# (--grammars N, --seed S, --only K --dump to look at one grammar).
set -euo pipefail

: "${GPT2D_SRCDIR:?set GPT2D_SRCDIR (make check does)}"
: "${GPT2D_BUILDDIR:?set GPT2D_BUILDDIR (make check does)}"
: "${GPT2D_TEST_DATA:?set GPT2D_TEST_DATA (make check does)}"
tokenizer=$GPT2D_TEST_DATA/tokenizer
[[ -f $tokenizer/vocab.json && -f $tokenizer/merges.txt ]] || {
    echo "test_grammar_property.sh: no tokenizer in $GPT2D_TEST_DATA (tests/data/fetch-tokenizer.sh makes it)" >&2
    exit 1
}
sample=$GPT2D_BUILDDIR/tests/grammar/grammar_sample
[[ -x $sample ]] || {
    echo "FAIL: $sample is not built (make check builds it)" >&2
    exit 1
}
exec "${PYTHON:-python3}" "$GPT2D_SRCDIR/tests/grammar/test_grammar_property.py" \
    --sample "$sample" --tokenizer "$tokenizer" "$@"
