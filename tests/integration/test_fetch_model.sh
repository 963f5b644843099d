#!/usr/bin/env bash
# scripts/fetch-model.sh against a fake Hugging Face Hub on 127.0.0.1: a good
# checkpoint is installed and loads, and the command it prints serves it
# from the repository root; a file whose bytes do not match the published
# checksum is refused and never put in place.  Then a Hub that cannot be
# reached: fetch-model.sh and `scripts/quickstart.sh serve` exit 3, say what
# failed and what to do, and leave nothing behind; a model directory copied
# in by hand is served all the same.  quickstart.sh runs in a copy of the
# repository's scripts whose build is a stub (nothing is built or installed).
set -euo pipefail

src=${GPT2D_SRCDIR:?}
tiny=${GPT2D_TEST_DATA:?}/models/tiny
python=${PYTHON:-python3}
work=$(mktemp -d)
server_pid=
cleanup() { [[ -n $server_pid ]] && kill "$server_pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
# the scripts' own temporary files go here, to be checked for leftovers
mkdir -p "$work/tmp"
export TMPDIR=$work/tmp

mkdir -p "$work/hub"
cp "$tiny/config.json" "$tiny/model.safetensors" "$tiny/vocab.json" "$tiny/merges.txt" "$work/hub/"

# The Hub's two endpoints: revision info with blob ids / LFS sha256, and
# resolve/<commit>/<file>.  CORRUPT=1 serves model.safetensors with one byte
# flipped while still announcing the true checksum.
cat >"$work/hub.py" <<'PY'
import hashlib, http.server, json, os, sys
root, port_file = sys.argv[1], sys.argv[2]
COMMIT = "0123456789abcdef0123456789abcdef01234567"
def blob(path):
    d = open(path, "rb").read()
    return hashlib.sha1(b"blob %d\0" % len(d) + d).hexdigest()
class Hub(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_GET(self):
        if self.path.startswith("/portal/"):
            # a captive portal, or a mirror URL that names no Hub: a page
            body = b"<!DOCTYPE html>\n<html><head><title>Sign in</title></head></html>\n"
        elif self.path.startswith("/other/"):
            body = json.dumps({"error": "no such thing"}).encode()
        elif self.path == "/api/models/openai-community/gpt2/revision/main?blobs=true":
            sib = []
            for f in sorted(os.listdir(root)):
                p = os.path.join(root, f)
                e = {"rfilename": f, "blobId": blob(p)}
                if f == "model.safetensors":
                    e["lfs"] = {"sha256": hashlib.sha256(open(p, "rb").read()).hexdigest()}
                sib.append(e)
            body = json.dumps({"sha": COMMIT, "siblings": sib}).encode()
        elif self.path.startswith(f"/openai-community/gpt2/resolve/{COMMIT}/"):
            f = self.path.rsplit("/", 1)[1]
            body = open(os.path.join(root, f), "rb").read()
            if f == "model.safetensors" and os.path.exists(os.path.join(root, "../CORRUPT")):
                body = body[:-1] + bytes([body[-1] ^ 1])
        else:
            self.send_error(404); return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
srv = http.server.HTTPServer(("127.0.0.1", 0), Hub)
open(port_file, "w").write(str(srv.server_address[1]))
srv.serve_forever()
PY
"$python" "$work/hub.py" "$work/hub" "$work/port" &
server_pid=$!
for _ in $(seq 50); do [[ -s $work/port ]] && break; sleep 0.1; done
GPT2D_HF_ENDPOINT="http://127.0.0.1:$(cat "$work/port")"
export GPT2D_HF_ENDPOINT
failures=0

gpt2d=${GPT2D_BUILDDIR:?}/src/gpt2d

# serves [VAR=VALUE...] COMMAND...: the command (a gpt2d, and what runs it)
# loads its model, listens on 127.0.0.1 and serves the playground's page;
# then it is stopped.  Listening settings come by environment (GPT2D_PORT...).
serves() {
    local pid ok=1 port
    rm -f "$work/gpt2d.port"
    env GPT2D_HOST=127.0.0.1 GPT2D_PORT=0 GPT2D_PORT_FILE="$work/gpt2d.port" \
        "$@" >"$work/serve.log" 2>&1 &
    pid=$!
    for _ in $(seq 100); do
        if [[ -s $work/gpt2d.port ]]; then
            port=$(cat "$work/gpt2d.port")
            curl -fsS -o /dev/null "http://127.0.0.1:$port/" && ok=0
            break
        fi
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" || ok=1
    [[ $ok -eq 0 ]] || sed 's/^/  | /' "$work/serve.log"
    return "$ok"
}

# fake_repo DIR: the repository's scripts and web/ under DIR, and a build
# that is a stub around the real daemon (quickstart.sh's build() finds
# configure and a Makefile, and `make` does nothing).
fake_repo() {
    mkdir -p "$1/scripts" "$1/build/src"
    cp "$src/scripts/fetch-model.sh" "$src/scripts/quickstart.sh" "$1/scripts/"
    ln -s "$src/web" "$1/web"
    ln -s "$gpt2d" "$1/build/src/gpt2d"
    printf '#!/bin/sh\nexit 0\n' >"$1/configure"
    chmod +x "$1/configure"
    printf 'all:\n\t@:\n' >"$1/build/Makefile"
}

# nothing_left DIR: DIR is empty (the temporary directory of a run).
nothing_left() {
    [[ -z $(ls -A "$1") ]] || { ls -lA "$1"; return 1; }
}

if "$src/scripts/fetch-model.sh" gpt2 --dest "$work/good" >"$work/log" 2>&1 &&
   cmp -s "$tiny/model.safetensors" "$work/good/model.safetensors" &&
   serves "$gpt2d" --model "$work/good" --web-root "$src/web" &&
   nothing_left "$TMPDIR"; then
    echo "ok: good checkpoint fetched, verified and loadable"
else
    echo "FAIL: good checkpoint"; cat "$work/log"; failures=$((failures + 1))
fi

# The last line is a command that serves the model from the repository
# root (the build in build/, the playground from web/); a --dest outside
# the repository is named whole.
fake_repo "$work/repo"
line=
if (cd "$work/repo" && scripts/fetch-model.sh gpt2) >"$work/log" 2>&1; then
    line=$(tail -n 1 "$work/log")
fi
read -r -a run <<<"$line"
if [[ $line == "  build/src/gpt2d --model models/gpt2 --web-root web" ]] &&
   (cd "$work/repo" && serves "${run[@]}"); then
    echo "ok: the command printed serves the model from the repository root: $line"
else
    echo "FAIL: the command printed: '$line'"; cat "$work/log"; failures=$((failures + 1))
fi
if (cd "$work/repo/scripts" && ./fetch-model.sh gpt2 --dest "$work/elsewhere") >"$work/log" 2>&1 &&
   [[ $(tail -n 1 "$work/log") == "  build/src/gpt2d --model $work/elsewhere --web-root web" ]]; then
    echo "ok: a --dest outside the repository is named whole"
else
    echo "FAIL: a --dest outside the repository"; cat "$work/log"; failures=$((failures + 1))
fi

# Running again downloads nothing: every file already verifies.
if "$src/scripts/fetch-model.sh" gpt2 --dest "$work/good" >"$work/log" 2>&1 &&
   [[ $(grep -c 'already present' "$work/log") -eq 4 ]]; then
    echo "ok: second run re-verifies and skips"
else
    echo "FAIL: second run"; cat "$work/log"; failures=$((failures + 1))
fi

touch "$work/CORRUPT"
if "$src/scripts/fetch-model.sh" gpt2 --dest "$work/bad" >"$work/log" 2>&1; then
    echo "FAIL: corrupted download accepted"; failures=$((failures + 1))
elif grep -q 'model.safetensors: sha256 mismatch' "$work/log" && [[ ! -e $work/bad ]] &&
     nothing_left "$TMPDIR"; then
    echo "ok: corrupted model.safetensors refused, and the directory made for it removed"
else
    echo "FAIL: corrupted download: wrong message or file left behind"; cat "$work/log"; failures=$((failures + 1))
fi

if "$src/scripts/fetch-model.sh" gpt3 >"$work/log" 2>&1; then
    echo "FAIL: unknown model name accepted"; failures=$((failures + 1))
else
    echo "ok: unknown model name refused: $(cat "$work/log")"
fi

# ---- a "Hub" that answers something else ----

# a captive portal's page, or JSON that is not a revision: exit 1, the URL
# and what came back named, no traceback, nothing left behind
for where in portal other; do
    case $where in
        portal) begins="not JSON, not the Hugging Face Hub's API" ;;
        *) begins="without a revision's commit and files, not the Hugging Face Hub's API" ;;
    esac
    case $where in
        portal) shown="it begins: '<!DOCTYPE html> <html><head><title>Sign in</title></head></html>'" ;;
        *) shown="it begins: '{\"error\": \"no such thing\"}'" ;;
    esac
    rc=0
    GPT2D_HF_ENDPOINT="$GPT2D_HF_ENDPOINT/$where" \
        "$src/scripts/fetch-model.sh" gpt2 --dest "$work/$where/gpt2" >"$work/log" 2>&1 || rc=$?
    if [[ $rc -eq 1 ]] &&
       grep -qF "fetch-model.sh: $GPT2D_HF_ENDPOINT/$where/api/models/openai-community/gpt2/revision/main?blobs=true answered " "$work/log" &&
       grep -qF "$begins" "$work/log" && grep -qF "$shown" "$work/log" &&
       ! grep -q Traceback "$work/log" &&
       [[ ! -e $work/$where ]] && nothing_left "$TMPDIR"; then
        echo "ok: a \"Hub\" answering $where: exit 1, says what came back, nothing left behind"
    else
        echo "FAIL: a \"Hub\" answering $where: exit $rc"; cat "$work/log"; failures=$((failures + 1))
    fi
done

# ---- a Hub that cannot be reached ----

# says_what_to_do LOG: the message names the Hub's failure and the ways on.
says_what_to_do() {
    grep -q "cannot reach the Hugging Face Hub at $GPT2D_HF_ENDPOINT: curl: ($2)" "$1" &&
        grep -q "GPT2D_HF_ENDPOINT=https://MIRROR" "$1" &&
        grep -q "copy its directory" "$1" &&
        grep -q "scripts/quickstart.sh serve tiny" "$1" &&
        [[ $(grep -c '^curl: ' "$1") -eq 0 ]]
}

# nothing listens on port 1: the connection is refused
rc=0
(cd "$work/repo" && GPT2D_HF_ENDPOINT=http://127.0.0.1:1 scripts/fetch-model.sh gpt2-medium) \
    >"$work/log" 2>&1 || rc=$?
if [[ $rc -eq 3 ]] && GPT2D_HF_ENDPOINT=http://127.0.0.1:1 says_what_to_do "$work/log" 7 &&
   [[ ! -e $work/repo/models/gpt2-medium ]] && nothing_left "$TMPDIR"; then
    echo "ok: fetch-model.sh, Hub refused: exit 3, what to do, nothing left behind"
else
    echo "FAIL: fetch-model.sh, Hub refused: exit $rc"; cat "$work/log"; failures=$((failures + 1))
fi

# `serve gpt2` (a model named: no toy instead) on a machine whose DNS does
# not know the Hub
# (.invalid never resolves, RFC 6761)
fake_repo "$work/fresh"
rc=0
GPT2D_SKIP_APT=1 GPT2D_HF_ENDPOINT=http://hub.invalid BUILD_DIR="$work/fresh/build" \
    "$work/fresh/scripts/quickstart.sh" serve gpt2 >"$work/log" 2>&1 || rc=$?
if [[ $rc -eq 3 ]] && GPT2D_HF_ENDPOINT=http://hub.invalid says_what_to_do "$work/log" 6 &&
   grep -q "quickstart.sh: no model in models/gpt2, so gpt2d is not started (exit 3)" "$work/log" &&
   [[ ! -e $work/fresh/models ]] && nothing_left "$TMPDIR"; then
    echo "ok: quickstart.sh serve, Hub not resolved: exit 3, what to do, no models/ left"
else
    echo "FAIL: quickstart.sh serve, Hub not resolved: exit $rc"; cat "$work/log"
    failures=$((failures + 1))
fi

# ...and once a model directory is copied in, it serves without the Hub
mkdir -p "$work/fresh/models"
cp -r "$work/good" "$work/fresh/models/gpt2"
if GPT2D_SKIP_APT=1 GPT2D_HF_ENDPOINT=http://127.0.0.1:1 BUILD_DIR="$work/fresh/build" \
       serves "$work/fresh/scripts/quickstart.sh" serve &&
   grep -q "quickstart.sh: serving models/gpt2 as it is, unchecked" "$work/serve.log" &&
   nothing_left "$TMPDIR"; then
    echo "ok: quickstart.sh serve, Hub refused, a model copied in: served"
else
    echo "FAIL: quickstart.sh serve with a model copied in"; failures=$((failures + 1))
fi

echo "fetch-model: $failures failed"
[[ $failures -eq 0 ]]
