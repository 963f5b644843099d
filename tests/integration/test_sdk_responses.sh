#!/usr/bin/env bash
# test_sdk_responses.sh — POST /v1/responses through the official OpenAI
# Node SDK (tests/integration/sdk_responses_test.js), against a real gpt2d
# on 127.0.0.1 serving a tiny-shaped model with a 1024-token context (room
# for tool descriptions and JSON answers), two API keys, stored responses
# under --responses-dir and the KV cache's disk tier.  The suite runs, the
# daemon is stopped (SIGTERM) and started again on the same directories,
# and the suite's second phase continues the first's conversation.
#
# Exit 77 (skipped) when Node.js, the SDK fixture (tests/data/fetch-openai-sdk.sh),
# numpy or the tokenizer is missing.  Ends with the line "N passed, N failed".
#
# Environment (from `make check`): GPT2D_BUILDDIR, GPT2D_SRCDIR,
# GPT2D_TEST_DATA, NODE, PYTHON.  By hand:
#   GPT2D_BUILDDIR=$PWD GPT2D_SRCDIR=/path/to/src GPT2D_TEST_DATA=$PWD/tests/data \
#   bash $GPT2D_SRCDIR/tests/integration/test_sdk_responses.sh
set -euo pipefail

# shellcheck source=tests/integration/harness.sh
. "$(dirname "$0")/harness.sh"
require_numpy
require_curl
node=${NODE:-node}
"$node" --version >/dev/null 2>&1 || skip "Node.js not found ('$node')"
sdk=$data/openai-sdk/package
[[ -f $sdk/index.js ]] || skip "$sdk missing (tests/data/fetch-openai-sdk.sh fetches it)"
[[ -s $data/tokenizer/vocab.json ]] ||
    skip "$data/tokenizer missing (tests/data/fetch-tokenizer.sh fetches it)"
[[ -x $gpt2d ]] || { echo "$test_name: $gpt2d not built" >&2; exit 99; }

make_workdir sdk-responses

# shellcheck source=tests/integration/tally.sh
. "$srcdir/tests/integration/tally.sh"

model=$work/tiny-ctx1024
"$python" "$srcdir/tests/reference/make_model.py" "$model" --vocab-dir "$data/tokenizer" \
    --n-layer 2 --n-head 4 --n-embd 64 --n-ctx 1024 --seed 33 >/dev/null

key=sk-sdk-responses other=sk-sdk-responses-other
printf '%s name=sdk\n%s name=other\n' "$key" "$other" >"$work/keys"
start_gpt2d() {
    gpt2d_start "$work/gpt2d.log" "$work/port" "$model" --slots 4 --threads 2 \
        --api-key-file "$work/keys" --responses-dir "$work/responses" \
        --kv-cache-dir "$work/kv"
    gpt2d_up
}
suite() {
    GPT2D_SDK_DIR=$sdk GPT2D_BASE_URL=http://127.0.0.1:$port GPT2D_API_KEY_FOR_TEST=$key \
        GPT2D_OTHER_KEY_FOR_TEST=$other GPT2D_PHASE=$1 GPT2D_STATE_FILE=$work/state.json \
        node_suite 300 sdk_responses_test.js
}

start_gpt2d
suite first
gpt2d_stop_clean
# A record damaged on disk (an input item's id no longer a string): the
# second phase finds it unusable, not a crash.
"$python" - "$work/state.json" "$work/responses" <<'PY'
import json, sys
first = json.load(open(sys.argv[1]))[0]["id"]
path = "%s/%s.json" % (sys.argv[2], first)
record = json.load(open(path))
record["input_items"][0]["id"] = 5
json.dump(record, open(path, "w"))
PY
start_gpt2d
suite restarted
gpt2d_stop_clean
finish
