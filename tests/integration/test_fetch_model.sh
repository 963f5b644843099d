#!/usr/bin/env bash
# scripts/fetch-model.sh against a fake Hugging Face Hub on 127.0.0.1: a good
# checkpoint is installed and loads; a file whose bytes do not match the
# published checksum is refused and never put in place.
set -euo pipefail

src=${GPT2D_SRCDIR:?}
tiny=${GPT2D_TEST_DATA:?}/models/tiny
python=${PYTHON:-python3}
work=$(mktemp -d)
server_pid=
cleanup() { [[ -n $server_pid ]] && kill "$server_pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

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
        if self.path == "/api/models/openai-community/gpt2/revision/main?blobs=true":
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

# serves DIR: the daemon loads the model and starts listening, then stops.
serves() {
    local pid ok=1
    "${GPT2D_BUILDDIR:?}/src/gpt2d" --model "$1" --port 0 --port-file "$work/gpt2d.port" \
        >/dev/null 2>&1 &
    pid=$!
    for _ in $(seq 100); do
        [[ -s $work/gpt2d.port ]] && { ok=0; break; }
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" || ok=1
    rm -f "$work/gpt2d.port"
    return "$ok"
}

if "$src/scripts/fetch-model.sh" gpt2 --dest "$work/good" >"$work/log" 2>&1 &&
   cmp -s "$tiny/model.safetensors" "$work/good/model.safetensors" &&
   serves "$work/good"; then
    echo "ok: good checkpoint fetched, verified and loadable"
else
    echo "FAIL: good checkpoint"; cat "$work/log"; failures=$((failures + 1))
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
elif grep -q 'model.safetensors: sha256 mismatch' "$work/log" && [[ ! -e $work/bad/model.safetensors ]]; then
    echo "ok: corrupted model.safetensors refused and not installed"
else
    echo "FAIL: corrupted download: wrong message or file left behind"; cat "$work/log"; failures=$((failures + 1))
fi

if "$src/scripts/fetch-model.sh" gpt3 >"$work/log" 2>&1; then
    echo "FAIL: unknown model name accepted"; failures=$((failures + 1))
else
    echo "ok: unknown model name refused: $(cat "$work/log")"
fi

echo "fetch-model: $failures failed"
[[ $failures -eq 0 ]]
