#!/usr/bin/env bash
# check-format.sh — every C file of the repository laid out as .clang-format
# says (Debian's clang-format), but the generated Unicode table.
#
#   scripts/check-format.sh         list the files that differ; exit 1 if any
#   scripts/check-format.sh --fix   rewrite them in place
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "check-format.sh: clang-format is not installed (apt-get install clang-format)" >&2; exit 2; }
mapfile -t files < <(git ls-files '*.c' '*.h' | grep -v '^src/text/unicode_class\.c$')
if [[ ${1:-} == --fix ]]; then
    clang-format -i "${files[@]}"
    exit 0
fi
bad=0
for f in "${files[@]}"; do
    if ! clang-format --dry-run --Werror "$f" >/dev/null 2>&1; then
        echo "not formatted: $f (scripts/check-format.sh --fix)"
        bad=1
    fi
done
exit $bad
