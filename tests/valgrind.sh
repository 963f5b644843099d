#!/usr/bin/env bash
# valgrind.sh — `make check-valgrind`: every Check suite under memcheck.
#
#   tests/valgrind.sh tests/unit/test_x ...   (programs, from the build dir)
#
# A suite fails when one of its own checks fails, when memcheck reports any
# error (invalid read or write, use of uninitialised memory, bad free), or
# any definitely, indirectly or possibly lost block at exit.  Suites run with
# CK_FORK=no, so memcheck sees every test in the one process it watches, and
# with the two knobs of tests/unit/test_util.h:
#   GPT2D_TEST_QUICK=1       statistical sample counts and repetitions shrink
#                            (every test still runs; memcheck needs each code
#                            path once, not the statistics)
#   GPT2D_TEST_SLOWDOWN=50   hang-detecting deadlines and time bounds stretch
#                            by memcheck's slowdown
# Environment: GPT2D_SRCDIR, GPT2D_TEST_DATA (the Makefile passes them, as for
# `make check`); VALGRIND (default valgrind); GPT2D_VALGRIND_JOBS, suites run
# at once (default: online CPUs; valgrind runs one thread at a time, so each
# suite keeps one core busy); GPT2D_VALGRIND_TIMEOUT, seconds one suite may
# take before it counts as hung (default 1800).
# Each suite leaves PROGRAM.valgrind.log (memcheck) and PROGRAM.valgrind.out
# (the suite's own output) beside the program; a failed one also
# PROGRAM.valgrind.origins.log, memcheck again with --track-origins=yes.  One suite alone:
#   make check-valgrind UNIT_TESTS=tests/unit/test_sampler
set -euo pipefail

: "${GPT2D_SRCDIR:?set GPT2D_SRCDIR (make check-valgrind does)}"
: "${GPT2D_TEST_DATA:?set GPT2D_TEST_DATA (make check-valgrind does)}"
VALGRIND=${VALGRIND:-valgrind}
jobs=${GPT2D_VALGRIND_JOBS:-$(nproc)}
suite_timeout=${GPT2D_VALGRIND_TIMEOUT:-1800}

if [[ $# -eq 0 ]]; then
    echo "valgrind.sh: no Check suites to run (did configure find check?)" >&2
    exit 1
fi
if ! command -v "$VALGRIND" >/dev/null; then
    echo "valgrind.sh: $VALGRIND not found (Debian: apt-get install valgrind)" >&2
    exit 1
fi

export VALGRIND suite_timeout
export CK_FORK=no GPT2D_TEST_QUICK=1 GPT2D_TEST_SLOWDOWN=50

# run_one PROGRAM: one suite under memcheck; prints PASS or FAIL with its
# time and leaves PROGRAM.valgrind.status for the summary.
run_one() {
    local prog=$1 start=$SECONDS status=PASS
    # Definite, indirect and possible leaks are errors; "still reachable"
    # blocks (held by a live pointer at exit) are not leaks.
    # --track-origins=yes changes no verdict (memcheck finds the same
    # uninitialised uses without it; it only says where each value came
    # from) and makes a suite about 1.5 times slower, so the first run goes
    # without it and only a failed suite runs again with it, for the report.
    local opts=(--tool=memcheck --leak-check=full
                "--show-leak-kinds=definite,indirect,possible"
                "--errors-for-leak-kinds=definite,indirect,possible"
                --error-exitcode=1)
    local TIMEFORMAT='%0U' rc=0    # CPU seconds, for `time` below
    { time timeout --kill-after=30 "$suite_timeout" \
          "$VALGRIND" "${opts[@]}" --log-file="$prog.valgrind.log" "$prog" \
          >"$prog.valgrind.out" 2>&1 \
          || rc=$?; } 2>"$prog.valgrind.cpu"
    if [[ $rc -eq 124 || $rc -eq 137 ]]; then
        status="FAIL (hung: stopped after $suite_timeout s)"
    elif [[ $rc -ne 0 ]]; then
        status=FAIL
        # The verdict stands; this run only adds the origins, in
        # PROGRAM.valgrind.origins.log (the summary shows it when it has
        # errors too, else the first run's log).
        timeout --kill-after=30 "$suite_timeout" "$VALGRIND" "${opts[@]}" \
            --track-origins=yes --log-file="$prog.valgrind.origins.log" \
            "$prog" >/dev/null 2>&1 || true
    fi
    echo "$status" >"$prog.valgrind.status"
    echo "$status: $prog ($((SECONDS - start)) s, $(cat "$prog.valgrind.cpu") s CPU)"
}
export -f run_one

# Slowest first, so the last suites to start are short ones and the parallel
# runs end together; the rest keep the order they were given in.
slow="test_engine test_spec test_forward test_sampler test_inspect test_matmul_q8 test_tokenizer"
ordered=()
for name in $slow; do
    for prog in "$@"; do
        [[ $(basename "$prog") == "$name" ]] && ordered+=("$prog")
    done
done
for prog in "$@"; do
    [[ " $slow " == *" $(basename "$prog") "* ]] || ordered+=("$prog")
done

start=$SECONDS
rm -f "${ordered[@]/%/.valgrind.status}" "${ordered[@]/%/.valgrind.cpu}" \
    "${ordered[@]/%/.valgrind.origins.log}"
echo "memcheck: ${#ordered[@]} suite(s), $jobs at a time"
# shellcheck disable=SC2016 # $1 is the child shell's argument
printf '%s\n' "${ordered[@]}" |
    xargs -P "$jobs" -I{} bash -c 'run_one "$1"' _ {} || true

failed=0
for prog in "${ordered[@]}"; do
    if [[ $(cat "$prog.valgrind.status" 2>/dev/null) != PASS ]]; then
        failed=$((failed + 1))
        echo "==== $prog: the suite's output (tail)"
        tail -n 30 "$prog.valgrind.out" 2>/dev/null || true
        report=$prog.valgrind.log
        if grep -qE 'ERROR SUMMARY: [1-9]' "$prog.valgrind.origins.log" 2>/dev/null; then
            report=$prog.valgrind.origins.log    # the same errors, with origins
        fi
        echo "==== $prog: memcheck's report (errors and leaks; $report)"
        grep -v -E '^==[0-9]+== *$' "$report" 2>/dev/null |
            sed -n '/Invalid\|uninitialised\|Mismatched\|lost in loss record\|free()\|ERROR SUMMARY\|Process terminating/,+14p' |
            head -n 200 || true
    fi
done
echo "memcheck: $((${#ordered[@]} - failed)) of ${#ordered[@]} suites clean in $((SECONDS - start)) s"
[[ $failed -eq 0 ]]
