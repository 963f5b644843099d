#!/usr/bin/env bash
# gpt2d --model refuses each malformed model directory with exactly one line
# on stderr that names the problem, and exits 1; a good directory loads.
set -euo pipefail

gpt2d="${GPT2D_BUILDDIR:?}/src/gpt2d"
tiny="${GPT2D_TEST_DATA:?}/models/tiny"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0

# expect_error NAME EXIT_CODE PATTERN -- ARGS...
expect_error() {
    local name=$1 want_rc=$2 pattern=$3
    shift 4
    local rc=0
    # a daemon that should have refused to start is stopped after 60 s
    timeout -s KILL 60 "$gpt2d" "$@" >"$work/out" 2>"$work/err" || rc=$?
    local lines
    lines=$(wc -l <"$work/err")
    if [[ $rc -ne $want_rc ]] || [[ $lines -ne 1 ]] || ! grep -qF -- "$pattern" "$work/err"; then
        echo "FAIL: $name: exit $rc (want $want_rc), $lines stderr lines, wanted '$pattern':"
        sed 's/^/  | /' "$work/err"
        failures=$((failures + 1))
    else
        echo "ok: $name: $(cat "$work/err")"
    fi
}

# make_dir NAME: a copy of the tiny model to break
make_dir() {
    mkdir -p "$work/$1"
    cp "$tiny/config.json" "$tiny/model.safetensors" "$tiny/vocab.json" "$tiny/merges.txt" "$work/$1/"
    echo "$work/$1"
}

expect_error "no --model" 2 "--model DIR (or --models-dir DIR) is required" --
expect_error "unknown option" 2 "gpt2d: unrecognized option '--bogus'" -- --bogus
expect_error "option without value" 2 "gpt2d: option '--model' needs a value" -- --model
expect_error "missing directory" 1 "gpt2d: $work/absent: No such file or directory" -- --model "$work/absent"

d=$(make_dir no-config); rm "$d/config.json"
expect_error "missing config.json" 1 "$d/config.json: No such file or directory" -- --model "$d"

d=$(make_dir bad-config); echo '{"n_layer": 2' >"$d/config.json"
expect_error "config.json not JSON" 1 "config.json: not valid JSON" -- --model "$d"

d=$(make_dir no-weights); rm "$d/model.safetensors"
expect_error "missing weights" 1 "$d/model.safetensors: No such file or directory" -- --model "$d"

d=$(make_dir truncated)
size=$(stat -c %s "$d/model.safetensors")
truncate -s $((size / 2)) "$d/model.safetensors"
expect_error "truncated weights" 1 "outside the" -- --model "$d"

d=$(make_dir wrong-config)
sed -i 's/"n_layer": *[0-9]*/"n_layer": 7/' "$d/config.json"
expect_error "config disagrees with weights" 1 "missing tensor 'h." -- --model "$d"

d=$(make_dir no-vocab); rm "$d/vocab.json"
expect_error "missing vocab.json" 1 "$d/vocab.json" -- --model "$d"

d=$(make_dir bad-merges); printf '#version: 0.2\nonlyonefield\n' >"$d/merges.txt"
expect_error "malformed merges.txt" 1 "$d/merges.txt" -- --model "$d"

# Settings that cannot work together for this model are usage errors too.
expect_error "slots leave a step no room" 2 "--max-batch-rows 4 must exceed the 4 KV slots" \
    -- --model "$tiny" --slots 4 --max-batch-rows 4
expect_error "kv-memory below one context" 2 "--kv-memory of 1024 bytes cannot hold one full context" \
    -- --model "$tiny" --kv-memory 1k
expect_error "response-memory below 8 x max-body" 2 "--response-memory of 67108864 bytes is too small for --max-body 16777216" \
    -- --model "$tiny" --max-body 16M --response-memory 64M

# A good directory: the daemon loads it, logs a one-line summary (matching
# `want`), listens (--port 0 picks a free port and --port-file reports it)
# and exits 0 on SIGTERM.
expect_serving() {
    local name=$1 want=$2
    shift 2
    rm -f "$work/port"
    "$gpt2d" --model "$tiny" --host 127.0.0.1 --port 0 --port-file "$work/port" \
        "$@" >"$work/out" 2>"$work/err" &
    local pid=$! rc=0
    for _ in $(seq 100); do [[ -s $work/port ]] && break; sleep 0.1; done
    if [[ -s $work/port ]] && grep -q -- "$want" "$work/err"; then
        kill -TERM "$pid"
        wait "$pid" || rc=$?
        if [[ $rc -eq 0 ]]; then
            echo "ok: $name: $(grep -o 'loaded tiny: .*' "$work/err")"
        else
            echo "FAIL: $name: exit $rc after SIGTERM"; cat "$work/err"
            failures=$((failures + 1))
        fi
    else
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
        echo "FAIL: $name: no port file or no '$want' in:"; cat "$work/err"
        failures=$((failures + 1))
    fi
}

expect_serving "good directory" "loaded tiny: "
# one of a kind is named in the singular
expect_serving "one slot" "; 1 KV slot, KV cache of .*)$" --slots 1 --threads 1
expect_serving "one model and one thread" "gpt2d: 1 model (1 loaded, default tiny), 1 thread; listening" \
    --slots 1 --threads 1
expect_error "one slot leaves a step no room" 2 "--max-batch-rows 1 must exceed the 1 KV slot: " \
    -- --model "$tiny" --slots 1 --max-batch-rows 1

# A port another gpt2d listens on is refused, not shared (SO_REUSEPORT
# would have split the connections between the two).
"$gpt2d" --model "$tiny" --host 127.0.0.1 --port 0 --port-file "$work/port1" \
    >"$work/out1" 2>"$work/err1" &
first=$!
for _ in $(seq 100); do [[ -s $work/port1 ]] && break; sleep 0.1; done
if [[ -s $work/port1 ]]; then
    port1=$(cat "$work/port1")
    expect_error "port already in use" 1 "cannot listen on 127.0.0.1:$port1: Address already in use" \
        -- --model "$tiny" --host 127.0.0.1 --port "$port1"
else
    echo "FAIL: port already in use: the first daemon did not start"; cat "$work/err1"
    failures=$((failures + 1))
fi
kill -TERM "$first" 2>/dev/null || true
wait "$first" 2>/dev/null || true
# A web root that is not there (a build-tree daemon without --web-root)
# is served without the playground, and said so.
expect_serving "missing web root is reported" \
    "warn: web-root $work/no-web is not a directory: the playground is not served" \
    --web-root "$work/no-web"
# --kv-memory: as many blocks of 16 positions as it holds, whatever the
# slots: 13.5 blocks of floats (K/V and the scores, kv_layout.h) give 13,
# and as many bytes of halves what they hold
read -r kv_memory half_blocks < <("${PYTHON:-python3}" -c '
import json, sys
c = json.load(open(sys.argv[1]))
kv = c["n_layer"] * 2 * 16 * c["n_embd"] * 4
scores = (40 + 16 * 168 + c["n_embd"] * 4 + 63) // 64 * 64
memory = 13 * (kv + scores) + (kv + scores) // 2
print(memory, memory // (kv // 2 + scores))
' "$tiny/config.json")
expect_serving "blocks from --kv-memory" "; 4 KV slots, KV cache of 13 blocks of 16 tokens = 3.2 full contexts (.*sized by --kv-memory" \
    --kv-memory "$kv_memory"
expect_serving "half blocks from --kv-memory" "; 4 KV slots, KV cache of $half_blocks blocks of 16 tokens = [0-9.]* full contexts (.*float16, sized by --kv-memory" \
    --kv-memory "$kv_memory" --kv-dtype float16

echo "cli model errors: $failures failed"
[[ $failures -eq 0 ]]
