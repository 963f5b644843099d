#!/usr/bin/env bash
# test_messages.sh — Anthropic's Messages API (POST /v1/messages and
# /v1/messages/count_tokens) against real gpt2d processes on 127.0.0.1
# (tests/integration/messages_tests.py): answers equal to the same chat
# completion, whole and streamed, stop_reason and stop_sequence, usage,
# the prefill, count_tokens, refusals in Anthropic's error shape, x-api-key.
#
# messages_tests.py starts each server it needs (--port 0, a port file), so
# this script only checks the prerequisites and runs it.  Ends with the
# line "N passed, N failed".
#
# Environment (from `make check`): GPT2D_BUILDDIR, GPT2D_SRCDIR,
# GPT2D_TEST_DATA, PYTHON (a python3 with numpy, for the generated model).
# By hand:
#   GPT2D_BUILDDIR=$PWD GPT2D_SRCDIR=/path/to/src GPT2D_TEST_DATA=$PWD/tests/data \
#   PYTHON=/usr/bin/python3 bash $GPT2D_SRCDIR/tests/integration/test_messages.sh [TEST...]
# Arguments select tests by substring.
set -euo pipefail

# shellcheck source=tests/integration/harness.sh
. "$(dirname "$0")/harness.sh"
require_numpy
require_tiny

run_python_suite messages_tests.py GPT2D_MESSAGES_WORKDIR "$@"
