# tally.sh — pass/fail counting for the shell integration tests (sourced).
#   pass NAME    fail NAME    finish   (exit 0 only if something passed and nothing failed)
# shellcheck shell=bash

passed=0
failed=0
pass() { echo "ok: $1"; passed=$((passed + 1)); }
fail() {
    echo "FAIL: $1"
    failed=$((failed + 1))
}
finish() {
    echo "$passed passed, $failed failed"
    if [[ $failed -eq 0 && $passed -gt 0 ]]; then
        exit 0
    fi
    exit 1
}
