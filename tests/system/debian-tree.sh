#!/usr/bin/env bash
# debian-tree.sh CACHE_DIR PACKAGE... — a minimal Debian tree that boots
# under systemd-nspawn, made once with debootstrap and then reused.
#
# The tree is the host's own release (VERSION_CODENAME of /etc/os-release),
# from the archive apt uses for it (`apt-get indextargets`), variant minbase
# plus PACKAGE...  It is kept in CACHE_DIR/<key>/root, where <key> is a hash
# of the release, the archive, the architecture and the sorted package list:
# the same list reuses the tree, another one makes a new tree.  Nothing in
# the tree is changed by the tests (they boot a copy), so a cached tree is
# never stale except for the archive's newer point releases.
#
# Prints the tree's path on stdout.  Exit 77 when there is no cached tree
# and the archive cannot be reached (nothing to test with); 1 on any other
# failure.  Concurrent callers wait for each other (flock).
set -euo pipefail

cache=${1:?usage: debian-tree.sh CACHE_DIR PACKAGE...}
shift
[[ $# -gt 0 ]] || { echo "debian-tree.sh: no packages" >&2; exit 1; }

# shellcheck source=/dev/null
codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
[[ -n $codename ]] || { echo "debian-tree.sh: /etc/os-release names no VERSION_CODENAME" >&2; exit 1; }
arch=$(dpkg --print-architecture)
# The archive apt uses for this release (not its -updates or -security).
# shellcheck disable=SC2016  # apt-get expands $(...), not the shell
mirror=$(apt-get indextargets --format '$(REPO_URI) $(CODENAME)' 'Identifier: Packages' 2>/dev/null |
             awk -v c="$codename" '$2 == c { print $1; exit }')
mirror=${mirror:-http://deb.debian.org/debian/}

packages=$(printf '%s\n' "$@" | sort -u | paste -sd, -)
key=$(printf '%s\n' "$codename" "$mirror" "$arch" minbase "$packages" | sha256sum | cut -c1-16)
dir=$cache/$key

mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9

if [[ -f $dir/complete ]]; then
    echo "$dir/root"
    exit 0
fi

if ! curl -fsS --max-time 20 -o /dev/null "${mirror%/}/dists/$codename/Release"; then
    echo "debian-tree.sh: the archive ${mirror%/}/dists/$codename cannot be reached and no tree is cached in $dir" >&2
    exit 77
fi

echo "debian-tree.sh: debootstrap $codename from $mirror with $packages into $dir (once)" >&2
# One tree at a time: a new package list replaces the old tree.
find "$cache" -mindepth 1 -maxdepth 1 -type d -exec rm -rf --one-file-system {} +
mkdir -p "$dir"
start=$SECONDS
if ! debootstrap --variant=minbase --arch="$arch" --include="$packages" \
        "$codename" "$dir/root" "$mirror" >"$dir/debootstrap.log" 2>&1; then
    tail -30 "$dir/debootstrap.log" >&2
    echo "debian-tree.sh: debootstrap failed (log: $dir/debootstrap.log)" >&2
    exit 1
fi
# The host's name and package caches are not the container's business.
rm -f "$dir/root/etc/hostname" "$dir/root/var/cache/apt/archives/"*.deb
printf '%s\n' "$codename" "$mirror" "$arch" "$packages" >"$dir/complete"
echo "debian-tree.sh: made in $((SECONDS - start)) s" >&2
echo "$dir/root"
