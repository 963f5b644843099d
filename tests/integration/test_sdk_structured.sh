#!/usr/bin/env bash
# test_sdk_structured.sh — structured output and tool calls through the
# client libraries people use (tests/integration/sdk_structured_test.js:
# the OpenAI Node SDK's zod helpers, the Vercel AI SDK, LangChain; then the
# wire contract by plain fetch), against a real gpt2d on 127.0.0.1.
#
# The model is the `tiny` fixture's shape (2 layers, 64 wide, 4 heads, the
# real GPT-2 vocabulary) with a 2048-token context instead of 64: a schema's
# answer is up to a few hundred tokens, and the tools a request declares may
# be written into its prompt.  make_model.py makes it in a second.
#
# Exit 77 (skipped) when Node.js (20 or later), the kit
# (tests/data/fetch-sdk-kit.sh), numpy or the tokenizer fixture is missing.
# Ends with the line "N passed, N failed".
#
# Environment (from `make check`): GPT2D_BUILDDIR, GPT2D_SRCDIR,
# GPT2D_TEST_DATA, PYTHON, NODE.  By hand:
#   GPT2D_BUILDDIR=$PWD GPT2D_SRCDIR=/path/to/src GPT2D_TEST_DATA=$PWD/tests/data \
#   bash $GPT2D_SRCDIR/tests/integration/test_sdk_structured.sh [NAME-SUBSTRING...]
# Arguments select checks by substring.
set -euo pipefail

# shellcheck source=tests/integration/harness.sh
. "$(dirname "$0")/harness.sh"
require_numpy
require_curl
node=${NODE:-node}
node_version=$("$node" --version 2>/dev/null) || skip "Node.js not found ('$node')"
node_major=${node_version#v}
node_major=${node_major%%.*}
[[ $node_major =~ ^[0-9]+$ && $node_major -ge 20 ]] ||
    skip "Node.js $node_version is too old for the kit (20 or later)"
kit=$data/sdk-kit-tree
[[ -f $kit/node_modules/openai/package.json ]] ||
    skip "$kit missing (tests/data/fetch-sdk-kit.sh installs it)"
[[ -s $data/tokenizer/vocab.json ]] ||
    skip "$data/tokenizer missing (tests/data/fetch-tokenizer.sh fetches it)"
[[ -x $gpt2d ]] || { echo "$test_name: $gpt2d not built" >&2; exit 99; }

make_workdir sdk-structured

# shellcheck source=tests/integration/tally.sh
. "$srcdir/tests/integration/tally.sh"

model=$work/tiny-ctx2048
"$python" "$srcdir/tests/reference/make_model.py" "$model" --vocab-dir "$data/tokenizer" \
    --n-layer 2 --n-head 4 --n-embd 64 --n-ctx 2048 --seed 27 >/dev/null

gpt2d_start "$work/gpt2d.log" "$work/port" "$model" --slots 4 --threads 2
gpt2d_up

GPT2D_SDK_KIT=$kit GPT2D_BASE_URL=http://127.0.0.1:$port \
    node_suite 600 sdk_structured_test.js "$@"

gpt2d_stop_clean
finish
