#!/bin/bash
# fetch-openai-sdk.sh — test fixture: the official OpenAI Node SDK.
#
# Fetches the npm package openai@6.30.1 (no dependencies; CommonJS for
# Node.js, ES modules for a browser page), checks it against
# tests/data/openai-sdk.sha256 and unpacks it into
# $GPT2D_TEST_DATA/openai-sdk/package/.  The client-compatibility tests
# drive the daemon through it, from Node.js and from headless Chromium.
# Exit 0 = the fixture is ready; anything else says why on stderr.
set -euo pipefail

PKG=openai
VERSION=6.30.1
TGZ=$PKG-$VERSION.tgz

die() {
    echo "fetch-openai-sdk.sh: $*" >&2
    exit 1
}

: "${GPT2D_TEST_DATA:?set GPT2D_TEST_DATA (make check does)}"
: "${GPT2D_SRCDIR:?set GPT2D_SRCDIR (make check does)}"
SUMS=$GPT2D_SRCDIR/tests/data/openai-sdk.sha256
DEST=$GPT2D_TEST_DATA/openai-sdk
# shellcheck source=tests/data/npm-package.sh
. "$GPT2D_SRCDIR/tests/data/npm-package.sh"

if [[ -f $DEST/.installed ]] && [[ $(cat "$DEST/.installed") == "$(npm_expected_sum "$SUMS" "$TGZ")" ]]; then
    echo "fetch-openai-sdk.sh: $DEST is up to date"
    exit 0
fi

mkdir -p "$GPT2D_TEST_DATA"
WORK=$(mktemp -d "$GPT2D_TEST_DATA/openai-sdk.tmp.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

npm_package_fetch "$PKG" "$VERSION" "$SUMS" "$WORK" | sed 's/^/fetch-openai-sdk.sh: /'

NEW=$WORK/openai-sdk
mkdir -p "$NEW"
tar -xzf "$WORK/$TGZ" -C "$NEW" || die "cannot unpack $TGZ"
[[ -f $NEW/package/index.js && -f $NEW/package/index.mjs ]] ||
    die "$TGZ lacks package/index.js or package/index.mjs"
npm_expected_sum "$SUMS" "$TGZ" >"$NEW/.installed"

rm -rf "$DEST"
mv "$NEW" "$DEST"
echo "fetch-openai-sdk.sh: installed $DEST"
