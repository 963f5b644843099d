#!/usr/bin/env bash
# test_sdk_messages.sh — gpt2d's Anthropic Messages API through Anthropic's
# own TypeScript SDK (tests/integration/sdk_messages_test.js:
# messages.create whole and streamed, messages.stream, countTokens,
# stop_sequences, its error classes, the key as x-api-key) against a real
# gpt2d on 127.0.0.1 with one API key.
#
# The model is the `tiny` fixture's shape (2 layers, 64 wide, 4 heads, the
# real GPT-2 vocabulary) with a 512-token context, made by make_model.py.
#
# Exit 77 (skipped) when Node.js (20 or later), the kit with
# @anthropic-ai/sdk (tests/data/fetch-sdk-kit.sh), numpy or the tokenizer
# fixture is missing.  Ends with the line "N passed, N failed".
#
# Environment (from `make check`): GPT2D_BUILDDIR, GPT2D_SRCDIR,
# GPT2D_TEST_DATA, PYTHON, NODE.  By hand:
#   GPT2D_BUILDDIR=$PWD GPT2D_SRCDIR=/path/to/src GPT2D_TEST_DATA=$PWD/tests/data \
#   bash $GPT2D_SRCDIR/tests/integration/test_sdk_messages.sh [NAME-SUBSTRING...]
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
[[ -f $kit/node_modules/@anthropic-ai/sdk/package.json ]] ||
    skip "$kit missing (tests/data/fetch-sdk-kit.sh installs it)"
[[ -s $data/tokenizer/vocab.json ]] ||
    skip "$data/tokenizer missing (tests/data/fetch-tokenizer.sh fetches it)"
[[ -x $gpt2d ]] || { echo "$test_name: $gpt2d not built" >&2; exit 99; }

make_workdir sdk-messages

# shellcheck source=tests/integration/tally.sh
. "$srcdir/tests/integration/tally.sh"

model=$work/tiny-ctx512
"$python" "$srcdir/tests/reference/make_model.py" "$model" --vocab-dir "$data/tokenizer" \
    --n-layer 2 --n-head 4 --n-embd 64 --n-ctx 512 --seed 31 >/dev/null

key=sk-sdk-messages
printf '%s name=sdk\n' "$key" >"$work/keys"
gpt2d_start "$work/gpt2d.log" "$work/port" "$model" --slots 2 --threads 1 \
    --api-key-file "$work/keys"
gpt2d_up

GPT2D_SDK_KIT=$kit GPT2D_BASE_URL=http://127.0.0.1:$port GPT2D_API_KEY_FOR_TEST=$key \
    node_suite 300 sdk_messages_test.js "$@"

gpt2d_stop_clean
finish
