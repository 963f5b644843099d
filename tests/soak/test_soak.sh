#!/usr/bin/env bash
# test_soak.sh — the short soak in `make check`: tests/soak/soak.py against a
# gpt2d it starts on 127.0.0.1 with the `tiny` model and 8 KV slots.
#
# 16 concurrent clients send GPT2D_SOAK_REQUESTS requests (default 800; 500 in
# a sanitizer build), a mix of streaming and plain completions, n > 1, several
# prompts, echo scoring, sessions, tokenize/detokenize and bad inputs, 20 %
# of them dropped at a random point.  Every answer is checked in full; then
# the slots, queue, sessions and request counters, and the RSS growth after
# the warm-up (< 5 MB; not checked under ASan, whose allocator keeps freed
# memory in quarantine).  About 10 s on 2 idle cores.  The full 10,000-request
# run is bench/soak.sh.
#
# Environment (from `make check`): GPT2D_BUILDDIR, GPT2D_TEST_DATA, PYTHON;
#   GPT2D_SOAK_REQUESTS, GPT2D_SOAK_SEED (default 1) to vary the run.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/integration/harness.sh
. "$here/../integration/harness.sh"
require_tiny

# An ASan build is several times slower and its RSS says nothing about leaks
# (LeakSanitizer does, at exit).
requests=${GPT2D_SOAK_REQUESTS:-800}
rss_limit=5
if grep -qa __asan_init "$gpt2d"; then
    requests=${GPT2D_SOAK_REQUESTS:-500}
    rss_limit=0
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/gpt2d-soak.XXXXXX")
trap 'rm -rf "$work"' EXIT

rc=0
timeout 600 "$python" "$here/soak.py" --gpt2d "$gpt2d" --model "$tiny" \
    --requests "$requests" --clients 16 --drop 0.2 --slots 8 --threads 2 \
    --seed "${GPT2D_SOAK_SEED:-1}" --rss-limit-mb "$rss_limit" \
    --workdir "$work" || rc=$?
if [[ $rc -ne 0 ]]; then
    echo "test_soak: soak.py exited $rc; the server log ends:"
    tail -n 30 "$work"/*.log 2>/dev/null | sed 's/^/  | /'
fi
exit "$rc"
