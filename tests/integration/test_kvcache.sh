#!/usr/bin/env bash
# test_kvcache.sh — the KV cache's tiers against real gpt2d processes on
# 127.0.0.1: conversations after a restart, kill -9, damaged files, another
# model's cache directory (other shapes; the same shape with other weights;
# other kernels), a disk that refuses writes, the RAM and disk budgets, and
# a shared context computed once
# (tests/integration/kvcache_tests.py, which starts its own servers).  Ends
# with the line "N passed, N failed".
#
# Environment (from `make check`): GPT2D_BUILDDIR, GPT2D_SRCDIR,
# GPT2D_TEST_DATA, PYTHON (a python3 with numpy, for the generated model).
# By hand:
#   GPT2D_BUILDDIR=$PWD GPT2D_SRCDIR=/path/to/src GPT2D_TEST_DATA=$PWD/tests/data \
#   PYTHON=/usr/bin/python3 bash $GPT2D_SRCDIR/tests/integration/test_kvcache.sh [TEST...]
# Arguments select tests by substring.
set -euo pipefail

# shellcheck source=tests/integration/harness.sh
. "$(dirname "$0")/harness.sh"
require_numpy
require_tiny
run_python_suite kvcache_tests.py GPT2D_KVCACHE_WORKDIR "$@"
