# npm-package.sh — sourced by the fixture fetchers: one npm tarball, pinned
# by sha256, from the cache or the npm registry.
#
#   npm_package_fetch PKG VERSION SUMS WORK   leaves $WORK/PKG-VERSION.tgz
#
# The tarball must match its line in SUMS (sha256sum format).  It is cached
# in ${GPT2D_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/gpt2d}, so repeated
# runs (and distcheck) need the network only once.  The caller defines
# die(); npm is $NPM (default npm).
# shellcheck shell=bash

npm_cache_dir() { echo "${GPT2D_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/gpt2d}"; }

# The expected sha256 of file $2 as SUMS file $1 lists it.
npm_expected_sum() {
    local sum
    sum=$(awk -v f="$2" '$2 == f || $2 == "*" f { print $1 }' "$1")
    [[ -n $sum ]] || die "$1 has no entry for $2"
    echo "$sum"
}

# Succeeds if file $1 has the sha256 SUMS file $3 lists for name $2.
npm_sum_ok() {
    [[ -f $1 ]] || return 1
    local got
    got=$(sha256sum "$1" | awk '{ print $1 }')
    [[ $got == "$(npm_expected_sum "$3" "$2")" ]]
}

npm_package_fetch() {
    local pkg=$1 version=$2 sums=$3 work=$4
    local tgz=$pkg-$version.tgz npm=${NPM:-npm} cache_dir cached
    cache_dir=$(npm_cache_dir)
    cached=$cache_dir/$tgz
    command -v sha256sum >/dev/null || die "sha256sum not found (Debian package coreutils)"
    if npm_sum_ok "$cached" "$tgz" "$sums"; then
        echo "using cached $cached"
        cp "$cached" "$work/$tgz"
        return 0
    fi
    command -v "$npm" >/dev/null 2>&1 ||
        die "npm not found ('$npm') and no valid $cached: install the Debian package npm"
    echo "npm pack $pkg@$version"
    mkdir -p "$work/npm"
    if ! (cd "$work/npm" && "$npm" pack --silent "$pkg@$version") >"$work/npm.log" 2>&1; then
        cat "$work/npm.log" >&2
        die "npm pack $pkg@$version failed (no network? put a verified $tgz in $cache_dir)"
    fi
    [[ -f $work/npm/$tgz ]] || die "npm pack did not produce $tgz"
    mv "$work/npm/$tgz" "$work/$tgz"
    npm_sum_ok "$work/$tgz" "$tgz" "$sums" ||
        die "$tgz from npm does not match the sha256 in $sums"
    # Caching is a convenience: an unwritable cache directory is not an error.
    if mkdir -p "$cache_dir" 2>/dev/null && cp "$work/$tgz" "$cached.tmp.$$" 2>/dev/null; then
        mv -f "$cached.tmp.$$" "$cached"
    else
        rm -f "$cached.tmp.$$"
        echo "warning: cannot write the cache $cache_dir" >&2
    fi
}
