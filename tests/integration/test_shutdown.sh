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

builddir=${GPT2D_BUILDDIR:?}
srcdir=${GPT2D_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
data=${GPT2D_TEST_DATA:-$builddir/tests/data}
python=${PYTHON:-python3}
tiny=$data/models/tiny
export PYTHONDONTWRITEBYTECODE=1

if ! "$python" -c 'import numpy' >/dev/null 2>&1; then
    echo "test_shutdown: SKIP: '$python' cannot import numpy" >&2
    exit 77
fi
if [[ ! -s $tiny/model.safetensors ]]; then
    echo "test_shutdown: SKIP: $tiny missing (tests/reference/make-fixtures.sh makes it)" >&2
    exit 77
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/gpt2d-shutdown.XXXXXX")
trap 'rm -rf "$work"' EXIT

"$python" "$srcdir/tests/reference/make_model.py" "$work/long" --vocab-dir "$tiny" \
    --n-layer 2 --n-head 4 --n-embd 64 --n-ctx 1024 --seed 5 >/dev/null

timeout 300 "$python" "$srcdir/tests/integration/shutdown_tests.py" \
    "$builddir/src/gpt2d" "$work/long" "$work" "$@"
