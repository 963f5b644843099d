#!/usr/bin/env bash
# test_openai_sdk.sh — the official OpenAI SDK (openai@6, the fixture of
# tests/data/fetch-openai-sdk.sh) in a web page on another origin than
# gpt2d's, in a real headless Chromium (Debian's chromium + chromium-driver):
# plain and streamed completions, the X-Session-Id and X-Request-Id
# headers, an error the page can read, and an origin gpt2d was not told
# about being refused.  openai_sdk_test.py serves the page, starts gpt2d
# (the `tiny` model, an API key, --cors-origin) and drives the browser.
#
# Exit 77 (skipped) when Chromium, chromedriver, the SDK or the tiny model
# is missing.  Ends with the line "N passed, N failed".
#
# Environment (from `make check`): GPT2D_BUILDDIR, GPT2D_SRCDIR,
# GPT2D_TEST_DATA, PYTHON; CHROMIUM and CHROMEDRIVER override the browser
# paths.  By hand:
#   GPT2D_BUILDDIR=$PWD GPT2D_SRCDIR=/path/to/src GPT2D_TEST_DATA=$PWD/tests/data \
#   PYTHON=/usr/bin/python3 bash $GPT2D_SRCDIR/tests/browser/test_openai_sdk.sh [TEST...]
# Arguments select tests by substring.
set -euo pipefail

# shellcheck source=tests/integration/harness.sh
. "$(dirname "$0")/../integration/harness.sh"
chromium=${CHROMIUM:-/usr/bin/chromium}
chromedriver=${CHROMEDRIVER:-/usr/bin/chromedriver}
sdk=$data/openai-sdk/package

[[ -x $chromium ]] || skip "chromium not installed ($chromium; apt-get install chromium chromium-driver)"
[[ -x $chromedriver ]] || skip "chromedriver not installed ($chromedriver; apt-get install chromium-driver)"
[[ -s $sdk/index.mjs ]] || skip "$sdk missing (tests/data/fetch-openai-sdk.sh fetches it)"
require_tiny
[[ -x $gpt2d ]] || { echo "$test_name: $gpt2d not built" >&2; exit 99; }

work=$(mktemp -d "${TMPDIR:-/tmp}/gpt2d-openai-sdk.XXXXXX")
trap 'rm -rf "$work"' EXIT

rc=0
timeout 300 "$python" "$srcdir/tests/browser/openai_sdk_test.py" \
    --sdk "$sdk" --model "$tiny" --gpt2d "$gpt2d" --work "$work" \
    --out "$builddir/tests/browser/openai-sdk" \
    --chromium "$chromium" --chromedriver "$chromedriver" "$@" || rc=$?
if [[ $rc -ne 0 && -s $work/gpt2d.log ]]; then
    echo "gpt2d's log:"
    tail -n 30 "$work/gpt2d.log" | sed 's/^/  | /'
fi
exit "$rc"
