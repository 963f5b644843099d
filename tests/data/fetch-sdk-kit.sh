#!/bin/bash
# fetch-sdk-kit.sh — test fixture: the client SDKs structured output and
# tool calls are checked with (tests/integration/test_sdk_structured.sh),
# and Anthropic's, which drives /v1/messages (test_sdk_messages.sh).
#
# Installs the npm packages of tests/data/sdk-kit/package.json (openai,
# zod, ai with @ai-sdk/openai-compatible, @langchain/openai with
# @langchain/core, @anthropic-ai/sdk) and their dependencies, exactly as
# tests/data/sdk-kit/package-lock.json pins them: `npm ci` checks every
# tarball against the lockfile's sha512 `integrity` and runs no install
# script.  The tree lands in $GPT2D_TEST_DATA/sdk-kit-tree/node_modules
# (not .../sdk-kit: in an in-tree build that is the committed directory),
# and is installed again only when the two files' sha256 changes.  npm's
# tarball cache is kept in ${GPT2D_CACHE_DIR:-~/.cache/gpt2d}/npm, so
# repeated runs (and distcheck) need the network only once.
# Exit 0 = the fixture is ready; anything else says why on stderr.
set -euo pipefail

die() {
    echo "fetch-sdk-kit.sh: $*" >&2
    exit 1
}

: "${GPT2D_TEST_DATA:?set GPT2D_TEST_DATA (make check does)}"
: "${GPT2D_SRCDIR:?set GPT2D_SRCDIR (make check does)}"
KIT=$GPT2D_SRCDIR/tests/data/sdk-kit
DEST=$GPT2D_TEST_DATA/sdk-kit-tree
npm=${NPM:-npm}
# The packages package.json names, which must be there once npm is done.
DIRECT=(openai zod ai @ai-sdk/openai-compatible @langchain/openai @langchain/core
    @anthropic-ai/sdk)
# shellcheck source=tests/data/npm-package.sh
. "$GPT2D_SRCDIR/tests/data/npm-package.sh"

command -v sha256sum >/dev/null || die "sha256sum not found (Debian package coreutils)"
sum=$(cat "$KIT/package.json" "$KIT/package-lock.json" | sha256sum | awk '{ print $1 }')
if [[ -f $DEST/.installed ]] && [[ $(cat "$DEST/.installed") == "$sum" ]]; then
    echo "fetch-sdk-kit.sh: $DEST is up to date"
    exit 0
fi

command -v "$npm" >/dev/null 2>&1 || die "npm not found ('$npm'): install the Debian package npm"

mkdir -p "$GPT2D_TEST_DATA"
WORK=$(mktemp -d "$GPT2D_TEST_DATA/sdk-kit-tree.tmp.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
NEW=$WORK/sdk-kit-tree
mkdir -p "$NEW"
cp "$KIT/package.json" "$KIT/package-lock.json" "$NEW/"

# Caching is a convenience: an unwritable cache directory is not an error.
cache=$(npm_cache_dir)/npm
if ! mkdir -p "$cache" 2>/dev/null || [[ ! -w $cache ]]; then
    echo "fetch-sdk-kit.sh: warning: cannot write the cache $cache" >&2
    cache=$WORK/npm-cache
fi

echo "fetch-sdk-kit.sh: npm ci (cache $cache)"
start=$SECONDS
# --prefer-offline: a tarball already in the cache is not asked for again
# (npm verifies it against the lockfile's integrity either way);
# --engine-strict: a lockfile that picks a package this Node.js cannot run
# fails here, not as a puzzling error in the tests.
if ! (cd "$NEW" && "$npm" ci --ignore-scripts --no-audit --no-fund --prefer-offline \
    --engine-strict --cache "$cache" --loglevel=error) >"$WORK/npm.log" 2>&1; then
    cat "$WORK/npm.log" >&2
    die "npm ci failed (no network and an empty cache $cache? an integrity mismatch?)"
fi
for pkg in "${DIRECT[@]}"; do
    [[ -f $NEW/node_modules/$pkg/package.json ]] || die "npm ci left no $pkg"
done
echo "$sum" >"$NEW/.installed"

rm -rf "$DEST"
mv "$NEW" "$DEST"
echo "fetch-sdk-kit.sh: installed $DEST ($(du -sh "$DEST" | cut -f1), $((SECONDS - start)) s)"
