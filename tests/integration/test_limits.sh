#!/usr/bin/env bash
# test_limits.sh — the server's limits and input checks against real gpt2d
# processes on 127.0.0.1: the request deadline (slowloris), the idle
# timeout, --max-n, logs free of prompts and keys, and every kind of invalid
# input answered with its own 4xx (tests/integration/limits_tests.py).
#
# limits_tests.py starts each server it needs (--port 0, a port file), so
# this script only checks the prerequisites and runs it.  Ends with the line
# "N passed, N failed".
#
# Environment (from `make check`): GPT2D_BUILDDIR, GPT2D_SRCDIR,
# GPT2D_TEST_DATA, PYTHON (a python3 with numpy, for the generated model).
# By hand:
#   GPT2D_BUILDDIR=$PWD GPT2D_SRCDIR=/path/to/src GPT2D_TEST_DATA=$PWD/tests/data \
#   PYTHON=/usr/bin/python3 bash $GPT2D_SRCDIR/tests/integration/test_limits.sh [TEST...]
# Arguments select tests by substring.
set -euo pipefail

# shellcheck source=tests/integration/harness.sh
. "$(dirname "$0")/harness.sh"
require_numpy
require_tiny

work=$(mktemp -d "${TMPDIR:-/tmp}/gpt2d-limits.XXXXXX")
trap 'rm -rf "$work"' EXIT

rc=0
GPT2D_LIMITS_WORKDIR=$work GPT2D_LIMITS_SUMMARY=$work/summary \
GPT2D_SRCDIR=$srcdir GPT2D_BUILDDIR=$builddir GPT2D_TEST_DATA=$data \
    timeout 600 "$python" "$srcdir/tests/integration/limits_tests.py" "$@" || rc=$?
if [[ ! -s $work/summary ]]; then
    echo "FAIL: limits_tests.py ran to the end (exit $rc)"
    echo "0 passed, 1 failed"
    exit 1
fi
read -r passed failed <"$work/summary"
echo "$passed passed, $failed failed"
if [[ $failed -eq 0 && $passed -gt 0 && $rc -eq 0 ]]; then
    exit 0
fi
exit 1
