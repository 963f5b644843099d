#!/bin/bash
# test_schema_property.sh — the schema, regex and choice compilers against
# independent references (tests/grammar/schema_property.py says what is
# checked): python3-jsonschema, Python's re, and the independent GBNF
# recognizer tests/reference/gbnf_recognizer.py.  When the engine's sampler
# is built (BUILD/tests/grammar/grammar_sample) and GPT-2's tokenizer is in
# GPT2D_TEST_DATA, the grammars also go through the real engine: samples
# over GPT-2's tokens at temperatures 0, 1 and 2 must validate when they
# end by themselves, and the engine's verdicts must equal the recognizer's.
#
# By hand:  GPT2D_SRCDIR=. GPT2D_BUILDDIR=build GPT2D_TEST_DATA=build/tests/data \
#           bash tests/grammar/test_schema_property.sh
# More:     SCHEMA_PROPERTY_SEEDS="1 2 3 4 5" SCHEMA_PROPERTY_SCHEMAS=500 ...
set -euo pipefail

: "${GPT2D_SRCDIR:?set GPT2D_SRCDIR (make check does)}"
: "${GPT2D_BUILDDIR:?set GPT2D_BUILDDIR (make check does)}"
TOOL=$GPT2D_BUILDDIR/tests/grammar/schema_to_gbnf
SAMPLER=$GPT2D_BUILDDIR/tests/grammar/grammar_sample
TOKENIZER=${GPT2D_TEST_DATA:-$GPT2D_BUILDDIR/tests/data}/tokenizer
SCRIPT=$GPT2D_SRCDIR/tests/grammar/schema_property.py
[[ -x $TOOL ]] || {
    echo "FAIL: $TOOL is not built (make tests/grammar/schema_to_gbnf)" >&2
    exit 1
}

# A Python with jsonschema (Debian: python3-jsonschema).
PY=
for candidate in "${PYTHON:-}" /usr/bin/python3 python3; do
    [[ -n $candidate ]] || continue
    if "$candidate" -c 'import jsonschema' 2>/dev/null; then
        PY=$candidate
        break
    fi
done
[[ -n $PY ]] || {
    echo "FAIL: no Python with jsonschema (apt-get install python3-jsonschema)" >&2
    exit 1
}

status=0
for seed in ${SCHEMA_PROPERTY_SEEDS:-1 2}; do
    echo "== seed $seed: recognizer and references"
    "$PY" "$SCRIPT" --tool "$TOOL" --seed "$seed" \
        --schemas "${SCHEMA_PROPERTY_SCHEMAS:-150}" \
        --regexes "${SCHEMA_PROPERTY_REGEXES:-200}" || status=1
    if [[ -x $SAMPLER && -f $TOKENIZER/vocab.json ]]; then
        echo "== seed $seed: through the engine (grammar_sample, GPT-2's tokens)"
        "$PY" "$SCRIPT" --tool "$TOOL" --seed "$((seed + 1000))" \
            --schemas "${SCHEMA_PROPERTY_ENGINE_SCHEMAS:-60}" \
            --regexes "${SCHEMA_PROPERTY_ENGINE_REGEXES:-80}" \
            --sampler "$SAMPLER" --tokenizer "$TOKENIZER" || status=1
    else
        echo "== the engine part is skipped: $SAMPLER or $TOKENIZER is missing"
    fi
done
exit $status
