#!/usr/bin/env bash
# test_fair.sh — two API keys sharing the KV slots of a real gpt2d on
# 127.0.0.1: a key's short request pauses one of another key's long ones
# at once, which resumes to exactly the answer it makes alone (streamed and
# whole), counted in /metrics and the access log (paused=1); a key alone
# takes every slot right after another key's request ended
# (tests/integration/fair_tests.py, which starts its own servers).  Ends
# with the line "N passed, N failed".
#
# Environment (from `make check`): GPT2D_BUILDDIR, GPT2D_SRCDIR,
# GPT2D_TEST_DATA, PYTHON (a python3 with numpy, for the generated model).
# By hand:
#   GPT2D_BUILDDIR=$PWD GPT2D_SRCDIR=/path/to/src GPT2D_TEST_DATA=$PWD/tests/data \
#   PYTHON=/usr/bin/python3 bash $GPT2D_SRCDIR/tests/integration/test_fair.sh [TEST...]
# Arguments select tests by substring.
set -euo pipefail

# shellcheck source=tests/integration/harness.sh
. "$(dirname "$0")/harness.sh"
require_numpy
require_tiny
run_python_suite fair_tests.py GPT2D_FAIR_WORKDIR "$@"
