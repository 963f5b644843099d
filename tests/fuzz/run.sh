#!/bin/bash
# run.sh — build and run gpt2d's libFuzzer targets.
#
#   tests/fuzz/run.sh TARGET|all [SECONDS]   fuzz each target SECONDS (default 60)
#   tests/fuzz/run.sh replay                 only replay seeds + regressions
#   tests/fuzz/run.sh build                  only build the library and targets
#   FUZZ_RUNS=10000000 tests/fuzz/run.sh tokenizer    a fixed number of executions
#   FUZZ_JOBS=2 tests/fuzz/run.sh all 20      two targets at a time (one core each)
#
# Targets: completion_request, inspect_request, tokenizer, safetensors,
# grammar, json_schema, multipart (tests/fuzz/fuzz_*.c).
# CI smoke run: FUZZ_JOBS=2 tests/fuzz/run.sh all 20   (140 s of fuzzing in
# all, 70 s on 2 cores).
#
# How it builds: a dedicated `configure CC=clang` build directory
# ($GPT2D_FUZZ_BUILD, default ${TMPDIR:-/tmp}/gpt2d-fuzz) compiles
# src/libgpt2d.a with -fsanitize=fuzzer-no-link,address,undefined; each
# target is then linked with -fsanitize=fuzzer.  Nothing is written to the
# source tree except new findings, which are copied to
# tests/fuzz/regressions/TARGET/ for you to keep (make check replays them).
#
# Before fuzzing, every target replays its seeds (tests/fuzz/corpus/TARGET) and
# regression inputs; the working corpus grows in BUILD/fuzz/corpus/TARGET.
# The tokenizer (vocab.json, merges.txt) comes from $GPT2D_FUZZ_TOKENIZER, or
# is fetched into BUILD/tests/data/tokenizer by tests/data/fetch-tokenizer.sh.
# completion_request also serves /tokenize and /detokenize from a model:
# $GPT2D_FUZZ_MODEL, the tiny fixture `make check` makes
# (build/tests/data/models/tiny).
#
# Exit status: 0 when every target ran clean, 1 on a finding, 2 on misuse.
set -euo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
FUZZ_SRC=$SRC/tests/fuzz
BUILD=${GPT2D_FUZZ_BUILD:-${TMPDIR:-/tmp}/gpt2d-fuzz}
CC=${FUZZ_CC:-clang}
TARGETS=(completion_request inspect_request tokenizer safetensors grammar json_schema multipart)
# shellcheck disable=SC2054  # the commas belong to -fsanitize=
FUZZ_CFLAGS=(-g -O2 -fno-omit-frame-pointer -fsanitize=fuzzer-no-link
    -fsanitize=address,undefined -fno-sanitize-recover=undefined)
# Inputs larger than these add nothing the smaller ones do not reach.
declare -A MAX_LEN=([completion_request]=2048 [inspect_request]=2048 [tokenizer]=1024
    [safetensors]=8192 [grammar]=2048 [json_schema]=2048 [multipart]=4096)

die() {
    echo "run.sh: $*" >&2
    exit 2
}

usage() {
    sed -n '2,10p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

# ---- arguments ----
[[ $# -ge 1 ]] || usage
WHAT=$1
SECONDS_EACH=${2:-60}
JOBS=${FUZZ_JOBS:-1}
[[ $JOBS =~ ^[1-9][0-9]*$ ]] || die "FUZZ_JOBS must be a positive number, got '$JOBS'"
[[ $SECONDS_EACH =~ ^[0-9]+$ ]] || die "SECONDS must be a number, got '$SECONDS_EACH'"
case $WHAT in
all | replay | build) SELECTED=("${TARGETS[@]}") ;;
completion_request | inspect_request | tokenizer | safetensors | grammar | json_schema | multipart) SELECTED=("$WHAT") ;;
*) usage ;;
esac
command -v "$CC" >/dev/null || die "$CC not found (Debian: apt-get install clang libclang-rt-14-dev)"

# ---- build ----
# The library, once per flag set (a stamp notices a changed flag set).
build_library() {
    mkdir -p "$BUILD"
    if [[ ! -f $BUILD/Makefile ]]; then
        echo "run.sh: configuring $BUILD with CC=$CC" >&2
        (cd "$BUILD" && "$SRC/configure" CC="$CC" >configure.log 2>&1) ||
            die "configure failed, see $BUILD/configure.log"
    fi
    local stamp=$BUILD/fuzz-cflags.stamp
    if [[ ! -f $stamp || $(cat "$stamp") != "${FUZZ_CFLAGS[*]}" ]]; then
        make -C "$BUILD" -s clean >/dev/null 2>&1 || true
        echo "${FUZZ_CFLAGS[*]}" >"$stamp"
    fi
    make -C "$BUILD" -s -j2 src/libgpt2d.a CFLAGS="${FUZZ_CFLAGS[*]}" >"$BUILD/make.log" 2>&1 ||
        die "building src/libgpt2d.a failed, see $BUILD/make.log"
}

# The libraries the daemon links (Makefile.am's GPT2D_LIBS, expanded by make
# itself so that a library added there is picked up here), less the archive.
link_libs() {
    # shellcheck disable=SC2016  # $(GPT2D_LIBS) is make's, not the shell's
    printf 'fuzz-print-libs:\n\t@echo $(GPT2D_LIBS)\n' |
        make -s -C "$BUILD" --no-print-directory -f Makefile -f - fuzz-print-libs |
        sed 's|src/libgpt2d\.a||'
}

build_target() {
    local t=$1 out=$BUILD/fuzz/fuzz_$1 libs
    mkdir -p "$BUILD/fuzz"
    read -ra libs <<<"$(link_libs)"
    "$CC" -std=c11 -Wall -Wextra "${FUZZ_CFLAGS[@]}" -fsanitize=fuzzer -pthread \
        -I"$SRC/src" -I"$BUILD" -include "$BUILD/config.h" \
        "$FUZZ_SRC/fuzz_$t.c" "$BUILD/src/libgpt2d.a" "${libs[@]}" -o "$out" ||
        die "linking fuzz_$t failed"
}

tokenizer_dir() {
    if [[ -n ${GPT2D_FUZZ_TOKENIZER:-} ]]; then
        echo "$GPT2D_FUZZ_TOKENIZER"
        return
    fi
    local data=$BUILD/tests/data
    if [[ ! -f $data/tokenizer/vocab.json ]]; then
        mkdir -p "$data"
        GPT2D_TEST_DATA=$data GPT2D_SRCDIR=$SRC bash "$SRC/tests/data/fetch-tokenizer.sh" >&2 ||
            die "cannot fetch the tokenizer; set GPT2D_FUZZ_TOKENIZER to a directory with vocab.json and merges.txt"
    fi
    echo "$data/tokenizer"
}

build_library
for t in "${SELECTED[@]}"; do
    build_target "$t"
done
[[ $WHAT == build ]] && exit 0
GPT2D_FUZZ_TOKENIZER=$(tokenizer_dir)
export GPT2D_FUZZ_TOKENIZER

# ---- replay, then fuzz ----
# The committed inputs of a target that exist (libFuzzer refuses missing dirs).
committed_dirs() {
    local d
    for d in "$FUZZ_SRC/corpus/$1" "$FUZZ_SRC/regressions/$1"; do
        [[ -d $d ]] && [[ -n $(ls -A "$d") ]] && echo "$d"
    done
    return 0
}

replay() {
    local t=$1 files
    mapfile -t files < <(committed_dirs "$t" | while read -r d; do
        find "$d" -type f ! -name '.*'
    done | sort)
    [[ ${#files[@]} -gt 0 ]] || return 0
    "$BUILD/fuzz/fuzz_$t" -runs=1 "${files[@]}" >"$BUILD/fuzz/replay_$t.log" 2>&1 || {
        tail -n 40 "$BUILD/fuzz/replay_$t.log" >&2
        echo "run.sh: $t: a committed input fails, see $BUILD/fuzz/replay_$t.log" >&2
        return 1
    }
    echo "run.sh: $t: replayed ${#files[@]} committed inputs"
}

fuzz() {
    local t=$1 log=$BUILD/fuzz/fuzz_$1.log artifacts=$BUILD/fuzz/artifacts/$1
    local work=$BUILD/fuzz/corpus/$1 dict=$FUZZ_SRC/$1.dict limit
    mkdir -p "$work" "$artifacts"
    rm -f "$artifacts"/*    # earlier findings were copied out already
    if [[ -n ${FUZZ_RUNS:-} ]]; then
        limit=-runs=$FUZZ_RUNS
    else
        limit=-max_total_time=$SECONDS_EACH
    fi
    local -a dirs
    mapfile -t dirs < <(committed_dirs "$t")
    echo "run.sh: $t: fuzzing ($limit), log $log"
    local rc=0
    "$BUILD/fuzz/fuzz_$t" "$limit" -print_final_stats=1 -timeout=10 \
        -rss_limit_mb=2048 -max_len="${MAX_LEN[$t]}" -dict="$dict" \
        -artifact_prefix="$artifacts/" "$work" "${dirs[@]}" >"$log" 2>&1 || rc=$?
    # The last status line and libFuzzer's final statistics.
    grep -E '^#[0-9]+.*(DONE|pulse|NEW|REDUCE)' "$log" | tail -n 1 || true
    grep -E '^stat::(number_of_executed_units|average_exec_per_sec|new_units_added|peak_rss_mb)' "$log" |
        tr '\n' ' ' || true
    echo
    if [[ $rc -ne 0 ]]; then
        grep -E 'ERROR|fuzz check failed|Test unit written' "$log" | head -n 5 >&2 || true
        local found
        for found in "$artifacts"/*; do
            [[ -f $found ]] || continue
            mkdir -p "$FUZZ_SRC/regressions/$t"
            cp "$found" "$FUZZ_SRC/regressions/$t/"
            echo "run.sh: $t: FINDING kept as tests/fuzz/regressions/$t/$(basename "$found")" >&2
        done
        return 1
    fi
}

# one_target TARGET: its replay, then its fuzzing (not for `replay`).
one_target() {
    local status=0
    replay "$1" || status=1
    if [[ $WHAT != replay ]]; then
        fuzz "$1" || status=1
    fi
    return $status
}

status=0
if [[ $JOBS -le 1 || ${#SELECTED[@]} -le 1 ]]; then
    for t in "${SELECTED[@]}"; do
        one_target "$t" || status=1
    done
    exit $status
fi
# FUZZ_JOBS targets at a time, each a single libFuzzer process on a core of
# its own, so each still gets its SECONDS of one core; their reports are
# printed whole, in the order of TARGETS.
out=$BUILD/fuzz/out
mkdir -p "$out"
rm -f "$out"/*.status "$out"/*.txt
for t in "${SELECTED[@]}"; do
    while [[ $(jobs -pr | wc -l) -ge $JOBS ]]; do
        wait -n || true
    done
    { rc=0; one_target "$t" || rc=$?; echo "$rc" >"$out/$t.status"; } >"$out/$t.txt" 2>&1 &
done
wait
for t in "${SELECTED[@]}"; do
    cat "$out/$t.txt"
    [[ $(cat "$out/$t.status" 2>/dev/null) == 0 ]] || status=1
done
exit $status
