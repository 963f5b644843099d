#!/usr/bin/env bash
# quickstart.sh — the README's two commands on a fresh Debian machine.
#
#   scripts/quickstart.sh serve [MODEL]   install build deps, build, fetch MODEL
#                                         (default gpt2) and start gpt2d on it
#   scripts/quickstart.sh test            install build + test deps, build with
#                                         -Werror, run the whole test suite
#
# Builds out of tree in build/ (override with BUILD_DIR).  Package installs
# use sudo when not run as root; set GPT2D_SKIP_APT=1 to skip them.
# `serve` exits with fetch-model.sh's status when it gets no model: 3 when
# the Hugging Face Hub cannot be reached (GPT2D_HF_ENDPOINT names a mirror;
# what else to do is printed), 1 when a download or check failed.  A
# complete models/MODEL/ copied in by hand is served without the Hub.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$top/build}

BUILD_PACKAGES=(build-essential autoconf automake libtool pkg-config
                libmicrohttpd-dev libjansson-dev libopenblas-dev libsystemd-dev)
TEST_PACKAGES=(check python3 python3-numpy python3-jsonschema curl ca-certificates chromium chromium-driver nginx systemd groff-base)

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
    # nginx is here only for the scale-out test, which runs its own instance:
    # don't leave the system's nginx service listening on port 80.
    if [[ " ${missing[*]} " == *" nginx "* && -d /run/systemd/system ]]; then
        echo "Stopping and disabling the nginx service the package started (the tests run their own)."
        as_root systemctl disable --now nginx >/dev/null 2>&1 || true
    fi
}

build() {
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

case ${1:-} in
    serve)
        model=${2:-gpt2}
        install_packages "${BUILD_PACKAGES[@]}" curl ca-certificates python3
        build
        rc=0
        "$top/scripts/fetch-model.sh" "$model" --dest "$top/models/$model" || rc=$?
        # exit 3 with the four files there: fetched before, or copied in
        if [[ $rc -eq 3 && -s $top/models/$model/config.json && -s $top/models/$model/model.safetensors &&
              -s $top/models/$model/vocab.json && -s $top/models/$model/merges.txt ]]; then
            echo "quickstart.sh: serving models/$model as it is, unchecked"
        elif [[ $rc -ne 0 ]]; then
            echo "quickstart.sh: no model in models/$model, so gpt2d is not started (exit $rc)" >&2
            exit "$rc"
        fi
        # the playground from the source tree: nothing is installed
        exec "$build/src/gpt2d" --model "$top/models/$model" --web-root "$top/web"
        ;;
    test)
        install_packages "${BUILD_PACKAGES[@]}" "${TEST_PACKAGES[@]}"
        build --enable-werror
        make -j"$(nproc)" check
        ;;
    *)
        sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
        exit 2
        ;;
esac
