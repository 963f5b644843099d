#!/usr/bin/env bash
# test_models.sh — several models behind one gpt2d on 127.0.0.1: each
# model's own reference tokens, the models' list and states, 404 for an
# unknown model, 503 while the memory is held by models in use, least
# recently used and idle unloading without failing a running request, a
# broken model's 500, tokenizing for an unloaded model without loading it,
# bad lists and unreadable tokenizers refused at start
# (tests/integration/models_tests.py, which starts its own servers).  Ends
# with the line "N passed, N failed".
#
# Environment (from `make check`): GPT2D_BUILDDIR, GPT2D_SRCDIR,
# GPT2D_TEST_DATA, PYTHON (a python3 with numpy, for the reference).
# By hand:
#   GPT2D_BUILDDIR=$PWD GPT2D_SRCDIR=/path/to/src GPT2D_TEST_DATA=$PWD/tests/data \
#   PYTHON=/usr/bin/python3 bash $GPT2D_SRCDIR/tests/integration/test_models.sh [TEST...]
# Arguments select tests by substring.
set -euo pipefail

# shellcheck source=tests/integration/harness.sh
. "$(dirname "$0")/harness.sh"
require_numpy
require_tiny
run_python_suite models_tests.py GPT2D_MODELS_WORKDIR "$@"
