#!/usr/bin/env bash
# test_api.sh — the HTTP API against a real gpt2d on 127.0.0.1.
#
# Starts `gpt2d --model tiny --port 0 --port-file F --slots 4` (a port the
# kernel picks, so parallel runs never collide), waits for /health, checks a
# few things with curl (start-up line, plain and streaming completion), runs
# the Python suite (api_tests.py, which starts further servers of its own for
# the API key, queue and drain cases), then stops the server with SIGTERM and
# checks it exits 0 promptly.  Ends with the line "N passed, N failed".
#
# Environment (from `make check`): GPT2D_BUILDDIR, GPT2D_SRCDIR,
# GPT2D_TEST_DATA, PYTHON (a python3 with numpy).  By hand:
#   GPT2D_BUILDDIR=$PWD GPT2D_SRCDIR=/path/to/src GPT2D_TEST_DATA=$PWD/tests/data \
#   PYTHON=/usr/bin/python3 bash $GPT2D_SRCDIR/tests/integration/test_api.sh [TEST...]
# Arguments select Python tests by substring.
set -euo pipefail

# shellcheck source=tests/integration/harness.sh
. "$(dirname "$0")/harness.sh"
require_numpy
require_tiny
require_curl

make_workdir api

# shellcheck source=tests/integration/tally.sh
. "$srcdir/tests/integration/tally.sh"
show_log() { sed 's/^/  | /' "$work/main.log" | tail -n "${1:-20}"; }

# ---- start the main server ----
# every draft prompt lookup finds is verified, so each test on this server
# also checks that speculation leaves its answer as it was
gpt2d_start "$work/main.log" "$work/main.port" "$tiny" --slots 4 --threads 2 \
    --test-speculate-always
server_pid=$gpt2d_pid
if ! port=$(gpt2d_wait "$server_pid" "$work/main.port"); then
    fail "server starts and answers /health within 10 s"
    show_log 30
    finish
fi
pass "server starts on port $port and answers /health"
base=http://127.0.0.1:$port

# one start-up summary line naming the model, and the slot pool
if grep -q 'tiny' "$work/main.log" && grep -qi 'slot' "$work/main.log"; then
    pass "start-up log names the model and the KV slots"
else
    fail "start-up log names the model and the KV slots"
    show_log
fi

# ---- curl: a plain and a streaming completion ----
body=$(curl -sS -H 'Content-Type: application/json' \
    -d '{"prompt": "Hello world", "max_tokens": 3, "temperature": 0}' \
    "$base/v1/completions" || true)
if "$python" -c '
import json, sys
b = json.loads(sys.argv[1])
assert b["object"] == "text_completion", b
assert b["usage"]["prompt_tokens"] == 2, b
assert b["choices"][0]["finish_reason"] in ("length", "stop"), b
' "$body"; then
    pass "curl completion"
else
    fail "curl completion: $body"
fi

curl -sS -N -H 'Content-Type: application/json' \
    -d '{"prompt": "Hello world", "max_tokens": 4, "stream": true, "logit_bias": {"50256": -100}}' \
    "$base/v1/completions" >"$work/stream.txt" || true
n_data=$(grep -c '^data: {' "$work/stream.txt" || true)
if [[ $(grep -c '^data: ' "$work/stream.txt" || true) -gt 0 ]] &&
    [[ $(grep '^data: ' "$work/stream.txt" | tail -n 1) == 'data: [DONE]' ]] &&
    [[ $n_data -ge 1 && $n_data -le 5 ]]; then
    pass "curl stream: $n_data chunks then data: [DONE]"
else
    fail "curl stream"
    sed 's/^/  | /' "$work/stream.txt" | head -n 20
fi

# ---- the Python suite ----
rc=0
GPT2D_API_PORT=$port GPT2D_API_WORKDIR=$work \
GPT2D_API_SUMMARY=$work/summary GPT2D_SRCDIR=$srcdir GPT2D_BUILDDIR=$builddir \
GPT2D_TEST_DATA=$data \
    timeout 300 "$python" "$srcdir/tests/integration/api_tests.py" "$@" || rc=$?
if [[ -s $work/summary ]]; then
    read -r py_passed py_failed <"$work/summary"
    passed=$((passed + py_passed))
    failed=$((failed + py_failed))
else
    fail "api_tests.py ran to the end (exit $rc)"
fi

# ---- SIGTERM: exit 0, promptly ----
if ! kill -0 "$server_pid" 2>/dev/null; then
    fail "server still running after the suite"
    show_log 30
    finish
fi
kill -TERM "$server_pid"
start=$SECONDS
rc=0
for _ in $(seq 1 100); do
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.05
done
if kill -0 "$server_pid" 2>/dev/null; then
    fail "SIGTERM: still running after 5 s"
    kill -KILL "$server_pid"
    wait "$server_pid" 2>/dev/null || true
    show_log
else
    wait "$server_pid" || rc=$?
    if [[ $rc -eq 0 ]]; then
        pass "SIGTERM: exit 0 in $((SECONDS - start)) s"
    else
        fail "SIGTERM: exit $rc"
        show_log
    fi
fi
server_pid=

# a sanitizer build reports into the log (UBSan even keeps running)
if grep -qE 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$work/main.log"; then
    fail "main server log has a sanitizer report"
    grep -m1 -A30 -E 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$work/main.log" |
        sed 's/^/  | /'
else
    pass "main server log has no sanitizer report"
fi
finish
