#!/usr/bin/env bash
# test_sdk_chat.sh — POST /v1/chat/completions through the official OpenAI
# Node SDK (tests/integration/sdk_chat_test.js), against a real gpt2d on
# 127.0.0.1 serving the `tiny` model.
#
# Exit 77 (skipped) when Node.js, the SDK fixture (tests/data/fetch-openai-sdk.sh)
# or the tiny model is missing.  Ends with the line "N passed, N failed".
#
# Environment (from `make check`): GPT2D_BUILDDIR, GPT2D_SRCDIR,
# GPT2D_TEST_DATA, NODE.  By hand:
#   GPT2D_BUILDDIR=$PWD GPT2D_SRCDIR=/path/to/src GPT2D_TEST_DATA=$PWD/tests/data \
#   bash $GPT2D_SRCDIR/tests/integration/test_sdk_chat.sh
set -euo pipefail

# shellcheck source=tests/integration/harness.sh
. "$(dirname "$0")/harness.sh"
require_tiny
require_curl
node=${NODE:-node}
"$node" --version >/dev/null 2>&1 || skip "Node.js not found ('$node')"
sdk=$data/openai-sdk/package
[[ -f $sdk/index.js ]] || skip "$sdk missing (tests/data/fetch-openai-sdk.sh fetches it)"

make_workdir sdk-chat

# shellcheck source=tests/integration/tally.sh
. "$srcdir/tests/integration/tally.sh"

gpt2d_start "$work/gpt2d.log" "$work/port" "$tiny" --slots 4 --threads 2
gpt2d_up

GPT2D_SDK_DIR=$sdk GPT2D_BASE_URL=http://127.0.0.1:$port \
    node_suite 120 sdk_chat_test.js

gpt2d_stop_clean
finish
