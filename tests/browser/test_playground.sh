#!/usr/bin/env bash
# test_playground.sh — the playground page against a live gpt2d, in a real
# headless Chromium (Debian's chromium + chromium-driver).
#
# Starts gpt2d on 127.0.0.1 (a port the kernel picks) with an API key and
# --web-root pointing at the source tree's web/, runs playground_test.py
# (WebDriver over HTTP, standard library only), then stops the server with
# SIGTERM and checks it exits 0.  Screenshots and logs are left in
# $GPT2D_BUILDDIR/tests/browser/ (playground.png is the README picture).
#
# The model is the `tiny` fixture's shape (2 layers, 64 wide, 4 heads, the real
# GPT-2 vocabulary) with a 1024-token context instead of 64: pressing Stop
# "mid-stream" needs a generation that lasts seconds, and tiny's 64 positions
# are generated in a fraction of one.  It is made once by make_model.py.
#
# Exit 77 (skipped) when Chromium, chromedriver, numpy or the tokenizer
# fixture is missing.  Ends with the line "N passed, N failed".
#
# Environment (from `make check`): GPT2D_BUILDDIR, GPT2D_SRCDIR,
# GPT2D_TEST_DATA, PYTHON (a python3 with numpy); CHROMIUM and CHROMEDRIVER
# override the browser paths.  By hand:
#   GPT2D_BUILDDIR=$PWD GPT2D_SRCDIR=/path/to/src GPT2D_TEST_DATA=$PWD/tests/data \
#   PYTHON=/usr/bin/python3 bash $GPT2D_SRCDIR/tests/browser/test_playground.sh [TEST...]
# Arguments select tests by substring.
set -euo pipefail

# shellcheck source=tests/integration/harness.sh
. "$(dirname "$0")/../integration/harness.sh"
chromium=${CHROMIUM:-/usr/bin/chromium}
chromedriver=${CHROMEDRIVER:-/usr/bin/chromedriver}
out=$builddir/tests/browser
model=$out/tiny-ctx1024

[[ -x $chromium ]] || skip "chromium not installed ($chromium; apt-get install chromium chromium-driver)"
[[ -x $chromedriver ]] || skip "chromedriver not installed ($chromedriver; apt-get install chromium-driver)"
require_numpy
require_tiny
require_curl
[[ -s $data/tokenizer/vocab.json ]] || skip "$data/tokenizer missing (tests/data/fetch-tokenizer.sh fetches it)"
[[ -x $gpt2d ]] || { echo "test_playground: $gpt2d not built" >&2; exit 99; }

mkdir -p "$out"
rm -f "$out"/*.png
if [[ ! -s $model/model.safetensors ]]; then
    "$python" "$srcdir/tests/reference/make_model.py" "$model.tmp" \
        --vocab-dir "$data/tokenizer" --n-layer 2 --n-head 4 --n-embd 64 \
        --n-ctx 1024 --seed 11
    rm -rf "$model"
    mv "$model.tmp" "$model"
fi

make_workdir browser

key="pg-test-$RANDOM$RANDOM"
# A second key with a small token budget: the Server page shows its 429s.
tight="pg-tight-$RANDOM$RANDOM"
printf '%s name=playground\n%s name=tight tokens-per-minute=40\n' "$key" "$tight" >"$work/keys"
# Steps of at least 2 ms (test instrumentation): the Stop test's long
# generation outlasts the click on a machine of any speed.
GPT2D_TEST_MIN_STEP_US=2000 \
    gpt2d_start "$out/gpt2d.log" "$work/port" "$model" \
    --model "second=$data/models/tiny" --web-root "$srcdir/web" --slots 2 --threads 2 \
    --api-key-file "$work/keys"
server_pid=$gpt2d_pid

if ! port=$(gpt2d_wait "$server_pid" "$work/port" 30); then
    cat "$out/gpt2d.log" >&2
    echo "test_playground: gpt2d did not answer /health within 30 s" >&2
    exit 1
fi
base="http://127.0.0.1:$port/"

rc=0
timeout 300 "$python" "$srcdir/tests/browser/playground_test.py" \
    --base "$base" --api-key "$key" --tight-key "$tight" --out "$out" \
    --chromium "$chromium" --chromedriver "$chromedriver" "$@" || rc=$?

# A clean stop after all that: SIGTERM, exit 0, promptly.
kill -TERM "$server_pid"
stop_rc=0
for _ in $(seq 150); do
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
done
if kill -0 "$server_pid" 2>/dev/null; then
    echo "test_playground: gpt2d still running 15s after SIGTERM" >&2
    kill -KILL "$server_pid"
fi
wait "$server_pid" || stop_rc=$?
server_pid=
if [[ $stop_rc -ne 0 ]]; then
    echo "test_playground: gpt2d exited $stop_rc after SIGTERM" >&2
    tail -20 "$out/gpt2d.log" >&2
    rc=1
fi
[[ -s $out/playground.png ]] && echo "test_playground: screenshot: $out/playground.png"
exit "$rc"
