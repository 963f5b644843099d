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
# file first, so an interrupted run never leaves a half file in place.
set -euo pipefail

VOCAB_SHA256=196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783
MERGES_SHA256=1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5
ENDPOINT=${GPT2D_HF_ENDPOINT:-https://huggingface.co}

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

for tool in curl sha256sum python3; do
    command -v "$tool" >/dev/null || { echo "fetch-model.sh: needs $tool (apt-get install $tool)" >&2; exit 1; }
done

mkdir -p "$dest"
tmp=$(mktemp -d "$dest/.fetch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

echo "Resolving $repo at $revision ..."
curl -fsSL --retry 3 "$ENDPOINT/api/models/$repo/revision/$revision?blobs=true" -o "$tmp/info.json"

# Prints "commit" then one "file kind expected" line per file we need.
python3 - "$tmp/info.json" >"$tmp/plan" <<'PY'
import json, sys
info = json.load(open(sys.argv[1]))
print(info["sha"])
files = {s["rfilename"]: s for s in info.get("siblings", [])}
for f in ("config.json", "model.safetensors", "vocab.json", "merges.txt"):
    s = files.get(f)
    if s is None:
        sys.exit(f"fetch-model.sh: the repository has no {f}")
    if s.get("lfs"):
        print(f, "sha256", s["lfs"]["sha256"])
    else:
        print(f, "gitblob", s["blobId"])
PY
commit=$(head -n1 "$tmp/plan")
echo "Revision $commit"

git_blob_id() {
    python3 -c 'import hashlib,sys; d=open(sys.argv[1],"rb").read(); print(hashlib.sha1(b"blob %d\0" % len(d) + d).hexdigest())' "$1"
}

tail -n +2 "$tmp/plan" | while read -r file kind want; do
    case $file in
        vocab.json) kind=sha256; want=$VOCAB_SHA256 ;;
        merges.txt) kind=sha256; want=$MERGES_SHA256 ;;
    esac
    if [[ -f $dest/$file ]]; then
        if [[ $kind == sha256 ]]; then got=$(sha256sum "$dest/$file" | cut -d' ' -f1); else got=$(git_blob_id "$dest/$file"); fi
        if [[ $got == "$want" ]]; then echo "$file: already present, $kind ok"; continue; fi
    fi
    echo "Downloading $file ..."
    curl -fL --retry 3 --progress-bar "$ENDPOINT/$repo/resolve/$commit/$file" -o "$tmp/$file"
    if [[ $kind == sha256 ]]; then got=$(sha256sum "$tmp/$file" | cut -d' ' -f1); else got=$(git_blob_id "$tmp/$file"); fi
    if [[ $got != "$want" ]]; then
        echo "fetch-model.sh: $file: $kind mismatch (got $got, expected $want); not installed" >&2
        exit 1
    fi
    mv "$tmp/$file" "$dest/$file"
    echo "$file: $kind ok"
done
echo "$name is in $dest — run: src/gpt2d --model $dest"
