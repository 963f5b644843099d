#!/usr/bin/env bash
# test_batch.sh — OpenAI's Files and Batch APIs against real gpt2d processes
# on 127.0.0.1 (tests/integration/batch_tests.py): uploads, each key's own
# files and batches, answers equal to the same requests sent alone, error
# lines, cancel, and a restart in the middle of a batch.
#
# batch_tests.py starts each server it needs (--port 0, a port file), so
# this script only checks the prerequisites and runs it.  Ends with the line
# "N passed, N failed".
#
# Environment (from `make check`): GPT2D_BUILDDIR, GPT2D_SRCDIR,
# GPT2D_TEST_DATA, PYTHON (a python3 with numpy, for the generated model).
# By hand:
#   GPT2D_BUILDDIR=$PWD GPT2D_SRCDIR=/path/to/src GPT2D_TEST_DATA=$PWD/tests/data \
#   PYTHON=/usr/bin/python3 bash $GPT2D_SRCDIR/tests/integration/test_batch.sh [TEST...]
# Arguments select tests by substring.
set -euo pipefail

# shellcheck source=tests/integration/harness.sh
. "$(dirname "$0")/harness.sh"
require_numpy
require_tiny

run_python_suite batch_tests.py GPT2D_BATCH_WORKDIR "$@"
