#!/usr/bin/env bash
# The README's first command on a machine that cannot reach the Hugging
# Face Hub: `scripts/quickstart.sh serve` says the Hub is out of reach,
# serves the toy model trained here (tests/reference/train.py tiny, from
# the cache the train-tiny fixture filled), says plainly that it is not
# GPT-2, and its first completion is English-like: most of its words are
# words of the training texts.  The same check on a random model's
# completion fails, so it can.  The server tokenizes held-out texts as
# tests/reference/gpt2_bpe.py does.  quickstart.sh runs in a copy of the
# repository's scripts whose build is the real one (GPT2D_SKIP_BUILD) and
# whose models/ is a temporary directory: nothing is written to the tree.
set -euo pipefail

src=${GPT2D_SRCDIR:?}
build=${GPT2D_BUILDDIR:?}
data=${GPT2D_TEST_DATA:?}
python=${PYTHON:-python3}
work=$(mktemp -d)
pid=
cleanup() { [[ -n $pid ]] && kill "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
failures=0

# English-like TEXT_FILE: at least 8 words, 80 % of them words of the
# training texts (case aside); prints the share.
english_like() {
    PYTHONDONTWRITEBYTECODE=1 "$python" - "$src/tests/reference" "$1" <<'PY'
import re, sys
sys.path.insert(0, sys.argv[1])
import corpus
known = set()
for d in corpus.split(corpus.documents())[0]:
    known.update(w.lower() for w in re.findall(r"[A-Za-z]+", d))
words = [w.lower() for w in re.findall(r"[A-Za-z]+", open(sys.argv[2]).read())]
share = sum(w in known for w in words) / max(1, len(words))
print("%d words, %.0f %% of them in the training texts" % (len(words), 100 * share))
sys.exit(0 if len(words) >= 8 and share >= 0.8 else 1)
PY
}

# complete PORT OUT: 40 greedy tokens after an English prompt (no
# <|endoftext|>: the toy model ends its texts early), the text to OUT.
complete() {
    curl -fsS "http://127.0.0.1:$1/v1/completions" -H 'Content-Type: application/json' \
        -d '{"prompt": "The secret of a happy life is", "max_tokens": 40, "temperature": 0,
             "logit_bias": {"50256": -100}}' |
        "$python" -c 'import json, sys; print(json.load(sys.stdin)["choices"][0]["text"])' >"$2"
}

# wait_port FILE PID: the port gpt2d wrote, once it is up (or nothing).
wait_port() {
    for _ in $(seq 600); do
        [[ -s $1 ]] && { cat "$1"; return 0; }
        kill -0 "$2" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}

mkdir -p "$work/repo/scripts" "$work/tmp"
cp "$src/scripts/fetch-model.sh" "$src/scripts/quickstart.sh" "$work/repo/scripts/"
ln -s "$src/web" "$work/repo/web"
ln -s "$src/tests" "$work/repo/tests"

env GPT2D_SKIP_APT=1 GPT2D_SKIP_BUILD=1 BUILD_DIR="$build" GPT2D_MODELS_DIR="$work/models" \
    GPT2D_HF_ENDPOINT=http://127.0.0.1:1 PYTHON="$python" TMPDIR="$work/tmp" \
    GPT2D_HOST=127.0.0.1 GPT2D_PORT=0 GPT2D_PORT_FILE="$work/port" \
    "$work/repo/scripts/quickstart.sh" serve >"$work/log" 2>&1 &
pid=$!
port=$(wait_port "$work/port" "$pid") || port=
if [[ -n $port ]] && complete "$port" "$work/text" && english_like "$work/text" >"$work/share" &&
   grep -q "quickstart.sh: the Hugging Face Hub is out of reach, so: the toy model instead" "$work/log" &&
   grep -q "It is not GPT-2" "$work/log" &&
   [[ -s $work/models/tiny/model.safetensors && -s $work/models/tiny/training.json ]]; then
    echo "ok: quickstart.sh serve, no Hub: the toy model served, says so; \"$(head -c 80 "$work/text" | tr '\n' ' ')\" ($(cat "$work/share"))"
else
    echo "FAIL: quickstart.sh serve, no Hub, the toy model"
    sed 's/^/  | /' "$work/log"
    [[ -s $work/text ]] && { echo "  text:"; sed 's/^/  | /' "$work/text"; cat "$work/share" 2>/dev/null; }
    failures=$((failures + 1))
fi
# the daemon serving it tokenizes the held-out texts as gpt2_bpe.py does
# (the stream the toy model was scored on)
if [[ -n $port ]] && PYTHONDONTWRITEBYTECODE=1 "$python" - "$src/tests/reference" "$port" \
        "$data/tokenizer" >"$work/tok" 2>&1 <<'PY'; then
import json, sys, urllib.request
sys.path.insert(0, sys.argv[1])
import corpus, gpt2_bpe
enc = gpt2_bpe.Encoder(sys.argv[3])
held = corpus.split(corpus.documents())[1][:200]
tokens = 0
for text in held:
    req = urllib.request.Request("http://127.0.0.1:%s/tokenize" % sys.argv[2],
                                 json.dumps({"content": text}).encode())
    got = json.load(urllib.request.urlopen(req))["tokens"]
    if got != enc.encode(text):
        sys.exit("differs on %r" % text[:60])
    tokens += len(got)
print("%d texts, %d tokens" % (len(held), tokens))
PY
    echo "ok: the toy model's server tokenizes held-out texts as gpt2_bpe.py ($(cat "$work/tok"))"
else
    echo "FAIL: tokenizing held-out texts"; sed 's/^/  | /' "$work/tok"
    failures=$((failures + 1))
fi
kill -TERM "$pid" 2>/dev/null || true
wait "$pid" 2>/dev/null || true
pid=

# the check can fail: a random model's text is not English-like
"$build/src/gpt2d" --model "$data/models/tiny" --host 127.0.0.1 --port 0 \
    --port-file "$work/port2" >"$work/log2" 2>&1 &
pid=$!
port=$(wait_port "$work/port2" "$pid") || port=
if [[ -n $port ]] && complete "$port" "$work/noise" && ! english_like "$work/noise" >"$work/share2"; then
    echo "ok: a random model's completion is not English-like ($(cat "$work/share2"))"
else
    echo "FAIL: the English check passed a random model's text (or it did not run)"
    sed 's/^/  | /' "$work/log2"
    failures=$((failures + 1))
fi

echo "quickstart tiny: $failures failed"
[[ $failures -eq 0 ]]
