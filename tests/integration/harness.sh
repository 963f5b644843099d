# harness.sh — what the shell tests share besides tally.sh (sourced, after
# `set -euo pipefail`): the build's paths, skipping when a prerequisite is
# missing, and a gpt2d on 127.0.0.1 started and waited for.
#
#   builddir srcdir data python gpt2d tiny    from make check's environment
#   skip REASON                 "NAME: SKIP: REASON" on stderr, exit 77
#   require_numpy, require_tiny, require_curl   skip without them
#   gpt2d_start LOG PORT_FILE MODEL [ARGS...]   in the background; sets gpt2d_pid
#   gpt2d_wait PID PORT_FILE [SECONDS]          prints the port once /health is 200
#   make_workdir NAME           sets work; killed and removed on exit: server_pid
#
# Environment (from `make check`): GPT2D_BUILDDIR (required), GPT2D_SRCDIR,
# GPT2D_TEST_DATA, PYTHON.
# shellcheck shell=bash
# shellcheck disable=SC2034  # the variables are the sourcing script's

builddir=${GPT2D_BUILDDIR:?}
srcdir=${GPT2D_SRCDIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
data=${GPT2D_TEST_DATA:-$builddir/tests/data}
python=${PYTHON:-python3}
gpt2d=$builddir/src/gpt2d
tiny=$data/models/tiny
export PYTHONDONTWRITEBYTECODE=1

test_name=$(basename "$0" .sh)

skip() {
    echo "$test_name: SKIP: $*" >&2
    exit 77
}
require_numpy() {
    "$python" -c 'import numpy' >/dev/null 2>&1 || skip "'$python' cannot import numpy"
}
require_tiny() {
    [[ -s $tiny/model.safetensors ]] ||
        skip "$tiny missing (tests/reference/make-fixtures.sh makes it)"
}
require_curl() {
    command -v curl >/dev/null || skip "curl not installed"
}

# gpt2d_start LOG PORT_FILE MODEL [ARGS...]: gpt2d on 127.0.0.1 and a port
# the kernel picks (so parallel runs never collide), which it writes to
# PORT_FILE; its output goes to LOG.  Environment for it goes before the
# call (VAR=value gpt2d_start ...).
gpt2d_start() {
    local log=$1 port_file=$2 model=$3
    shift 3
    rm -f "$port_file"
    "$gpt2d" --model "$model" --host 127.0.0.1 --port 0 --port-file "$port_file" \
        "$@" >"$log" 2>&1 &
    gpt2d_pid=$!
}

# gpt2d_wait PID PORT_FILE [SECONDS]: prints the port once /health answers
# 200; fails when the process exits first or SECONDS (default 10) pass.
gpt2d_wait() {
    local pid=$1 port_file=$2 polls=$((${3:-10} * 50)) port=
    for _ in $(seq 1 "$polls"); do
        kill -0 "$pid" 2>/dev/null || break
        if [[ -z $port && -s $port_file ]]; then
            port=$(tr -dc '0-9' <"$port_file")
        fi
        if [[ -n $port ]] && curl -fsS -o /dev/null "http://127.0.0.1:$port/health" 2>/dev/null; then
            echo "$port"
            return 0
        fi
        sleep 0.02
    done
    return 1
}

# gpt2d_up: after gpt2d_start, server_pid is its pid and port its port
# once /health answers; otherwise a failed check, its log's tail, and the
# script finishes (tally.sh).
gpt2d_up() {
    server_pid=$gpt2d_pid
    if ! port=$(gpt2d_wait "$server_pid" "$work/port"); then
        fail "server starts and answers /health within 10 s"
        tail -n 30 "$work/gpt2d.log" | sed 's/^/  | /'
        finish
    fi
}

# node_suite SECONDS SCRIPT [ARGS...]: tests/integration/SCRIPT under node
# for at most SECONDS (its environment goes before the call), its output
# shown and its "N passed, N failed" line added to the tally; a nonzero
# exit is a failed check.
node_suite() {
    local seconds=$1 script=$2 rc=0
    shift 2
    # shellcheck disable=SC2154  # node: set by the script that sources this
    timeout "$seconds" "$node" "$srcdir/tests/integration/$script" "$@" \
        >"$work/out" 2>&1 || rc=$?
    cat "$work/out"
    local n_pass n_fail
    if read -r n_pass _ n_fail _ < <(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$work/out"); then
        passed=$((passed + n_pass))
        failed=$((failed + n_fail))
    fi
    [[ $rc -eq 0 ]] || fail "$script exits 0 (exit $rc)"
}

# gpt2d_stop_clean: SIGTERM to server_pid; checks it exits 0 and that its
# log has no sanitizer report.
gpt2d_stop_clean() {
    kill -TERM "$server_pid"
    local rc=0
    wait "$server_pid" || rc=$?
    server_pid=
    if [[ $rc -eq 0 ]]; then
        pass "SIGTERM: exit 0"
    else
        fail "SIGTERM: exit $rc"
        tail -n 30 "$work/gpt2d.log" | sed 's/^/  | /'
    fi
    if grep -qE 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$work/gpt2d.log"; then
        fail "server log has a sanitizer report"
        grep -m1 -A30 -E 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$work/gpt2d.log" |
            sed 's/^/  | /'
    fi
}

# make_workdir NAME: sets work to a fresh directory under TMPDIR, and
# server_pid to empty.  On exit the gpt2d whose pid the script has put in
# server_pid, if still running, is killed, and the directory removed.
make_workdir() {
    work=$(mktemp -d "${TMPDIR:-/tmp}/gpt2d-$1.XXXXXX")
    server_pid=
    trap remove_workdir EXIT
}
# shellcheck disable=SC2317  # called by the EXIT trap
remove_workdir() {
    if [[ -n $server_pid ]] && kill -0 "$server_pid" 2>/dev/null; then
        kill -KILL "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}

# run_python_suite SCRIPT WORKVAR [TEST...]: runs a Python suite that starts
# its own servers (tests/integration/SCRIPT) with its scratch directory in
# the environment variable WORKVAR and its "PASSED FAILED" summary in
# ${WORKVAR%_WORKDIR}_SUMMARY; prints "N passed, N failed" and exits.
run_python_suite() {
    local script=$1 var=$2
    shift 2
    local work rc=0
    work=$(mktemp -d "${TMPDIR:-/tmp}/gpt2d-${script%.py}.XXXXXX")
    # shellcheck disable=SC2064  # expand now: the trap runs after we return
    trap "rm -rf '$work'" EXIT
    env "$var=$work" "${var%_WORKDIR}_SUMMARY=$work/summary" \
        GPT2D_SRCDIR="$srcdir" GPT2D_BUILDDIR="$builddir" GPT2D_TEST_DATA="$data" \
        timeout 600 "$python" "$srcdir/tests/integration/$script" "$@" || rc=$?
    if [[ ! -s $work/summary ]]; then
        echo "FAIL: $script ran to the end (exit $rc)"
        echo "0 passed, 1 failed"
        exit 1
    fi
    local passed failed
    read -r passed failed <"$work/summary"
    echo "$passed passed, $failed failed"
    [[ $failed -eq 0 && $passed -gt 0 && $rc -eq 0 ]] && exit 0
    exit 1
}
