#!/usr/bin/env bash
# tmpdir-guard.sh — runs one test of `make check` with a temporary
# directory of its own, and fails it if it leaves anything there.  A suite
# removes what it makes, when it fails too: a Check test's process ends at
# its first failed assertion, so cleanup belongs in a teardown that runs
# anyway (an unchecked fixture, or the shell's EXIT trap).
#
#   tmpdir-guard.sh COMMAND [ARGS...]     Makefile.am's LOG_COMPILER
#
# TMPDIR is a fresh directory under the caller's TMPDIR (default /tmp),
# removed afterwards either way; so is TEMP, where the Check library puts
# the scratch files of its own runner.  The test's exit status stands, except
# that a pass (0) or a skip (77) that left something becomes a failure (1),
# after the leftovers are listed.  Only what honours TMPDIR is watched.
set -uo pipefail

dir=$(mktemp -d "${TMPDIR:-/tmp}/gpt2d-check.XXXXXX") || exit 99
TMPDIR=$dir TEMP=$dir "$@"
rc=$?
if [[ -n $(ls -A "$dir") ]]; then
    echo "tmpdir-guard: $* left this in its TMPDIR:"
    (cd "$dir" && find . -mindepth 1 | sort | head -n 20 | sed 's/^/  /')
    if [[ $rc -eq 0 || $rc -eq 77 ]]; then rc=1; fi
fi
rm -rf "$dir"
exit "$rc"
