#!/bin/bash
# test_fuzz_regressions.sh — make check's share of the fuzzing: every seed
# (tests/fuzz/corpus/TARGET) and every kept finding
# (tests/fuzz/regressions/TARGET) goes once more through its target's oracle,
# built by the ordinary compiler as BUILD/tests/fuzz/replay_TARGET
# (fuzz_TARGET.c + replay_main.c, no libFuzzer).  A finding that comes back
# aborts its replay and fails this test.  Fuzzing itself: tests/fuzz/run.sh.
set -euo pipefail

: "${GPT2D_SRCDIR:?set GPT2D_SRCDIR (make check does)}"
: "${GPT2D_BUILDDIR:?set GPT2D_BUILDDIR (make check does)}"
: "${GPT2D_TEST_DATA:?set GPT2D_TEST_DATA (make check does)}"
[[ -f $GPT2D_TEST_DATA/tokenizer/vocab.json ]] || {
    echo "test_fuzz_regressions.sh: no tokenizer in $GPT2D_TEST_DATA (tests/data/fetch-tokenizer.sh makes it)" >&2
    exit 1
}

status=0
for target in completion_request inspect_request tokenizer safetensors grammar json_schema multipart; do
    replay=$GPT2D_BUILDDIR/tests/fuzz/replay_$target
    [[ -x $replay ]] || {
        echo "FAIL: $replay is not built" >&2
        status=1
        continue
    }
    dirs=()
    for d in "$GPT2D_SRCDIR/tests/fuzz/corpus/$target" "$GPT2D_SRCDIR/tests/fuzz/regressions/$target"; do
        [[ -d $d ]] && dirs+=("$d")
    done
    if [[ ${#dirs[@]} -eq 0 ]]; then
        echo "FAIL: $target has no seeds" >&2
        status=1
    elif "$replay" "${dirs[@]}"; then
        echo "PASS: $target"
    else
        echo "FAIL: $target (a committed input trips the oracle; see above)" >&2
        status=1
    fi
done
exit $status
