#!/usr/bin/env bash
# test_shutdown.sh — graceful shutdown under load: SIGTERM while 16 streams
# run, with a drain deadline shorter than the generations (every stream gets
# the shutdown error event, queued plain requests a 503), one long enough for
# them (every stream finishes normally and the process exits as soon as they
# are done), and a client that stopped reading.  Each time: new connections
# are refused while draining, an open connection gets 503 for /health and for
# a new completion, and the process exits 0 within --drain-timeout plus the
# 2 s grace.  The checks are in shutdown_tests.py; the model is tiny's shape
# with a 1024-token context, generated here.
#
# Environment (from `make check`): GPT2D_BUILDDIR, GPT2D_SRCDIR,
# GPT2D_TEST_DATA, PYTHON (a python3 with numpy).  Arguments select cases.
set -euo pipefail

# shellcheck source=tests/integration/harness.sh
. "$(dirname "$0")/harness.sh"
require_numpy
require_tiny

work=$(mktemp -d "${TMPDIR:-/tmp}/gpt2d-shutdown.XXXXXX")
trap 'rm -rf "$work"' EXIT

"$python" "$srcdir/tests/reference/make_model.py" "$work/long" --vocab-dir "$tiny" \
    --n-layer 2 --n-head 4 --n-embd 64 --n-ctx 1024 --seed 5 >/dev/null

timeout 300 "$python" "$srcdir/tests/integration/shutdown_tests.py" \
    "$gpt2d" "$work/long" "$work" "$@"
