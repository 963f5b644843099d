#!/usr/bin/env bash
# test_structured.sh — structured output against a real gpt2d on 127.0.0.1
# (tests/integration/structured_tests.py): response_format and
# structured_outputs on both endpoints, answers checked by
# python3-jsonschema and Python's re.  Ends with "N passed, N failed".
#
# Environment (from `make check`): GPT2D_BUILDDIR, GPT2D_SRCDIR,
# GPT2D_TEST_DATA, PYTHON (a python3 with numpy and jsonschema).
# By hand:
#   GPT2D_BUILDDIR=$PWD GPT2D_SRCDIR=/path/to/src GPT2D_TEST_DATA=$PWD/tests/data \
#   PYTHON=/usr/bin/python3 bash $GPT2D_SRCDIR/tests/integration/test_structured.sh [TEST...]
# Arguments select tests by substring.
set -euo pipefail

# shellcheck source=tests/integration/harness.sh
. "$(dirname "$0")/harness.sh"
require_numpy
require_tiny
"$python" -c 'import jsonschema' 2>/dev/null ||
    skip "python3-jsonschema missing (apt-get install python3-jsonschema)"

run_python_suite structured_tests.py GPT2D_STRUCTURED_WORKDIR "$@"
