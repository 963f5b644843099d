#!/usr/bin/env bash
# fetch-model.sh — download a GPT-2 checkpoint from the Hugging Face Hub into
# models/NAME/, checking every file before it is put in place.
#
#   scripts/fetch-model.sh [NAME] [--dest DIR] [--revision REV]
#
# NAME: gpt2 (124M, default), gpt2-medium (355M), gpt2-large (774M),
#       gpt2-xl (1.5B), distilgpt2 (82M).
#
# What is checked: vocab.json and merges.txt against the sha256 pinned below
# (the GPT-2 vocabulary is the same for every size); model.safetensors against
# the sha256 the Hub publishes for that exact revision (its Git LFS object
# id); config.json against its git blob id at that revision.  A file that does
# not match is deleted and the script fails.  Downloads go to a temporary
# file first, so an interrupted run never leaves a half file in place, and
# a run that fails removes the directories it made.
#
# Exit status: 0 the model is in place (the last lines say how to serve it
# from the repository root); 1 a download or a check failed (also: the
# "Hub" answered something that is not its API, e.g. a captive portal's
# page); 2 usage;
# 3 the Hub could not be reached (the message says what to do instead).
# GPT2D_HF_ENDPOINT names another Hub (a mirror); curl honours https_proxy.
set -euo pipefail

VOCAB_SHA256=196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783
MERGES_SHA256=1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5
ENDPOINT=${GPT2D_HF_ENDPOINT:-https://huggingface.co}
top=$(cd "$(dirname "$0")/.." && pwd -P)

usage() {
    sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'
    exit "${1:-0}"
}

name=gpt2
dest=
revision=main
while [[ $# -gt 0 ]]; do
    case $1 in
        -h|--help) usage 0 ;;
        --dest) dest=${2:?--dest needs a directory}; shift 2 ;;
        --revision) revision=${2:?--revision needs a value}; shift 2 ;;
        -*) echo "fetch-model.sh: unknown option $1" >&2; usage 2 >&2 ;;
        *) name=$1; shift ;;
    esac
done

case $name in
    gpt2|gpt2-medium|gpt2-large|gpt2-xl) repo=openai-community/$name ;;
    distilgpt2) repo=distilbert/distilgpt2 ;;
    *) echo "fetch-model.sh: unknown model '$name' (gpt2, gpt2-medium, gpt2-large, gpt2-xl, distilgpt2)" >&2
       exit 2 ;;
esac
dest=${dest:-models/$name}
# $dest as a command run from the repository root names it
shown=$(realpath -m --relative-base="$top" "$dest")

for tool in curl sha256sum python3 realpath; do
    command -v "$tool" >/dev/null || { echo "fetch-model.sh: needs $tool (apt-get install $tool)" >&2; exit 1; }
done

# The Hub's answer about the revision goes to $work, before $dest is made;
# downloads to $tmp inside $dest, so that putting a file in place is a
# rename.  $made: the outermost directory of $dest this run creates,
# removed with all in it when the run fails.
work=$(mktemp -d "${TMPDIR:-/tmp}/gpt2d-fetch.XXXXXX")
tmp=
made=
# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() {
    local rc=$?
    rm -rf "$work"
    if [[ -n $tmp ]]; then rm -rf "$tmp"; fi
    if [[ $rc -ne 0 && -n $made ]]; then rm -rf "$made"; fi
    return "$rc"
}
trap cleanup EXIT

has_model() {
    local f
    for f in config.json model.safetensors vocab.json merges.txt; do
        [[ -s $1/$f ]] || return 1
    done
}

# failed URL CURL_STATUS CURL_MESSAGE: says what went wrong and what to do,
# and exits 3 when the Hub was out of reach, else 1.
failed() {
    local url=$1 rc=$2 why=${3:-curl exit $2}
    # curl's statuses for a Hub it could not talk to at all: proxy or host
    # not resolved, no connection, a timeout, the TLS handshake or certificate
    case $rc in
        5|6|7|28|35|60) ;;
        *) echo "fetch-model.sh: $url: $why" >&2; exit 1 ;;
    esac
    echo "fetch-model.sh: cannot reach the Hugging Face Hub at $ENDPOINT: $why" >&2
    if has_model "$dest"; then
        echo "fetch-model.sh: $dest was not checked against the Hub; its files are as they were" >&2
        exit 3
    fi
    cat >&2 <<EOF
Nothing half-fetched is left behind. Other ways to a model:
  - a mirror of the Hub, or a proxy (curl honours https_proxy):
      GPT2D_HF_ENDPOINT=https://MIRROR scripts/fetch-model.sh $name
    (scripts/quickstart.sh passes GPT2D_HF_ENDPOINT on)
  - a machine that has the model: copy its directory (config.json,
    model.safetensors, vocab.json, merges.txt) to $shown/
  - a toy model trained on this machine (not GPT-2; English-like text;
    ~12 minutes on 2 cores the first time, then cached):
      scripts/quickstart.sh serve tiny
Then, from the repository root: build/src/gpt2d --model DIR --web-root web
EOF
    exit 3
}

echo "Resolving $repo at $revision ..."
info_url="$ENDPOINT/api/models/$repo/revision/$revision?blobs=true"
rc=0
curl -fsSL --retry 3 --connect-timeout 20 "$info_url" -o "$work/info.json" 2>"$work/curl.err" || rc=$?
[[ $rc -eq 0 ]] || failed "$info_url" "$rc" "$(grep '^curl: ' "$work/curl.err" | tail -n 1)"

# Prints "commit" then one "file kind expected" line per file we need.  An
# answer that is not the Hub's description of a revision (a captive
# portal's page, a GPT2D_HF_ENDPOINT that names no Hub) is said to be so,
# with its first bytes, and fails the fetch (exit 1).
python3 - "$work/info.json" "$info_url" >"$work/plan" <<'PY'
import json, re, sys
path, url = sys.argv[1], sys.argv[2]
raw = open(path, "rb").read()
def not_the_hub(what):
    start = re.sub(rb"\s+", b" ", raw[:120]).decode("utf-8", "replace").strip()
    sys.exit(f"fetch-model.sh: {url} answered {what}, not the Hugging Face Hub's "
             f"API (a captive portal's page, or GPT2D_HF_ENDPOINT not naming a "
             f"Hub or a mirror of it?); it begins: {start!r}")
try:
    info = json.loads(raw)
except ValueError:
    not_the_hub("something that is not JSON")
try:
    commit = info["sha"]
    files = {s["rfilename"]: s for s in info.get("siblings", [])}
    if not (isinstance(commit, str) and re.fullmatch(r"[0-9a-f]{40}", commit)):
        raise ValueError
except (KeyError, TypeError, ValueError, AttributeError):
    not_the_hub("JSON without a revision's commit and files")
print(commit)
for f in ("config.json", "model.safetensors", "vocab.json", "merges.txt"):
    s = files.get(f)
    if s is None:
        sys.exit(f"fetch-model.sh: the repository has no {f}")
    if s.get("lfs"):
        print(f, "sha256", s["lfs"]["sha256"])
    else:
        print(f, "gitblob", s["blobId"])
PY
commit=$(head -n1 "$work/plan")
echo "Revision $commit"

made=$dest
while [[ ! -e $(dirname "$made") ]]; do made=$(dirname "$made"); done
if [[ -e $made ]]; then made=; fi
mkdir -p "$dest"
tmp=$(mktemp -d "$dest/.fetch.XXXXXX")

git_blob_id() {
    python3 -c 'import hashlib,sys; d=open(sys.argv[1],"rb").read(); print(hashlib.sha1(b"blob %d\0" % len(d) + d).hexdigest())' "$1"
}

tail -n +2 "$work/plan" | while read -r file kind want; do
    case $file in
        vocab.json) kind=sha256; want=$VOCAB_SHA256 ;;
        merges.txt) kind=sha256; want=$MERGES_SHA256 ;;
    esac
    if [[ -f $dest/$file ]]; then
        if [[ $kind == sha256 ]]; then got=$(sha256sum "$dest/$file" | cut -d' ' -f1); else got=$(git_blob_id "$dest/$file"); fi
        if [[ $got == "$want" ]]; then echo "$file: already present, $kind ok"; continue; fi
    fi
    echo "Downloading $file ..."
    url="$ENDPOINT/$repo/resolve/$commit/$file"
    rc=0
    curl -fL --retry 3 --connect-timeout 20 --progress-bar "$url" -o "$tmp/$file" || rc=$?
    [[ $rc -eq 0 ]] || failed "$url" "$rc" "curl exit $rc (above)"
    if [[ $kind == sha256 ]]; then got=$(sha256sum "$tmp/$file" | cut -d' ' -f1); else got=$(git_blob_id "$tmp/$file"); fi
    if [[ $got != "$want" ]]; then
        echo "fetch-model.sh: $file: $kind mismatch (got $got, expected $want); not installed" >&2
        exit 1
    fi
    mv "$tmp/$file" "$dest/$file"
    echo "$file: $kind ok"
done
echo "$name is in $dest; to serve it, from the repository root:"
echo "  build/src/gpt2d --model $shown --web-root web"
