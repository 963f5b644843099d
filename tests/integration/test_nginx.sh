#!/usr/bin/env bash
# test_nginx.sh — two gpt2d instances behind a real nginx, with session
# affinity (etc/nginx-gpt2d.conf).
#
# Starts two `gpt2d --port 0` on 127.0.0.1 (ports the kernel picks) with the
# tiny fixture model (given a 1024-token context when numpy is there, for the
# mid-stream cancellation check), then nginx (the Debian package) in the
# foreground with its own prefix, pid file, logs and temp directories under a
# mktemp directory, listening on a free 127.0.0.1 port.  Its configuration is the shipped
# etc/nginx-gpt2d.conf itself, with only the two upstream addresses and the
# listen address replaced, inside a minimal nginx.conf.  Then shows:
#   - a conversation (two turns, one session_id in the body) reaches one
#     instance: turn 2 reports cached_tokens > 0, both turns are in that
#     instance's log and neither is in the other's; the same turn sent cold to
#     the other instance gives the same text with nothing cached;
#   - DELETE /v1/sessions/{id} reaches the instance that holds the session;
#   - an X-Session-Id header routes too; the body's session_id is found in any
#     JSON layout and never in the prompt text; other sessions, and requests
#     without a session, land on both instances;
#   - streaming passes through (same text as non-streaming, then [DONE]), and
#     a client that leaves after the first chunk cancels the request upstream;
#   - nginx's own errors are OpenAI error objects (413; 503 when no instance
#     answers), and a session whose instance is down moves to the other one.
# Ends with "N passed, N failed"; exits 77 when nginx is not installed.
#
# Environment (from `make check`): GPT2D_BUILDDIR, GPT2D_TEST_DATA, PYTHON.
# NGINX may name the nginx binary (default: nginx on PATH, else
# /usr/sbin/nginx).  By hand:
#   GPT2D_BUILDDIR=$PWD GPT2D_TEST_DATA=$PWD/tests/data \
#   bash /path/to/src/tests/integration/test_nginx.sh
set -euo pipefail

# shellcheck source=tests/integration/harness.sh
. "$(dirname "$0")/harness.sh"
example=$srcdir/etc/nginx-gpt2d.conf

nginx=${NGINX:-}
if [[ -z $nginx ]]; then
    nginx=$(command -v nginx || true)
    [[ -z $nginx && -x /usr/sbin/nginx ]] && nginx=/usr/sbin/nginx
fi
if [[ -z $nginx || ! -x $nginx ]]; then
    skip "nginx not installed (Debian: apt-get install nginx)"
fi
require_tiny
require_curl

work=$(mktemp -d "${TMPDIR:-/tmp}/gpt2d-nginx.XXXXXX")
pid_a=
pid_b=
pid_nginx=

# Stop one process we started: politely, then for sure.
stop_pid() {
    local pid=$1 sig=${2:-TERM}
    [[ -n $pid ]] || return 0
    if kill -0 "$pid" 2>/dev/null; then
        kill "-$sig" "$pid" 2>/dev/null || true
        for _ in $(seq 1 100); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.05
        done
        kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
}
# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() {
    stop_pid "$pid_nginx" QUIT
    stop_pid "$pid_a"
    stop_pid "$pid_b"
    rm -rf "$work"
}
trap cleanup EXIT

# shellcheck source=tests/integration/tally.sh
. "$srcdir/tests/integration/tally.sh"
show() { sed 's/^/  | /' "$1" | tail -n "${2:-20}"; }

# ---- small JSON helpers (python3's json; numpy is not needed) ----

# completion_body PROMPT MAX_TOKENS [SESSION [STREAM]] -> a request body
completion_body() {
    "$python" -c '
import json, sys
prompt, max_tokens = sys.argv[1], int(sys.argv[2])
body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
        "logit_bias": {"50256": -100}}
if len(sys.argv) > 3 and sys.argv[3]:
    body["session_id"] = sys.argv[3]
if len(sys.argv) > 4 and sys.argv[4] == "stream":
    body["stream"] = True
print(json.dumps(body))
' "$@"
}

# jq_py FILE EXPR -> prints EXPR evaluated with d = the JSON in FILE
jq_py() {
    "$python" -c '
import json, sys
d = json.load(open(sys.argv[1]))
print(eval(sys.argv[2]))
' "$1" "$2"
}

# post URL BODY OUT [curl args...] -> prints the HTTP status
post() {
    local url=$1 body=$2 out=$3
    shift 3
    curl -sS --max-time 30 -o "$out" -w '%{http_code}' \
        -H 'Content-Type: application/json' "$@" --data-binary "$body" "$url" ||
        echo 000
}

free_port() {
    "$python" -c '
import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()
'
}

# ---- two gpt2d instances ----

# start_instance NAME -> sets pid_NAME; the port goes to $work/NAME.port
start_instance() {
    local name=$1
    # --log-prompts puts each request body, session_id included, in the
    # instance's log: that is how the test sees which instance served what.
    gpt2d_start "$work/$name.log" "$work/$name.port" "$model" \
        --slots 4 --threads 1 --log-prompts
    printf -v "pid_$name" '%s' "$gpt2d_pid"
}

# wait_instance NAME PID -> prints the port once /health answers 200
wait_instance() {
    gpt2d_wait "$2" "$work/$1.port"
}

# The tiny fixture, with a 1024-token context when numpy can make one (the
# same shape as tests/browser's): a 900-token stream then lasts long enough
# to be cut off mid-way through nginx.  Without numpy that one check is
# skipped.
model=$tiny
long_ctx=0
if "$python" -c 'import numpy' >/dev/null 2>&1 &&
    "$python" "$srcdir/tests/reference/make_model.py" "$work/tiny-ctx1024" \
        --vocab-dir "$data/tokenizer" --n-layer 2 --n-head 4 --n-embd 64 \
        --n-ctx 1024 --seed 11 >"$work/make_model.log" 2>&1; then
    model=$work/tiny-ctx1024
    long_ctx=1
fi

start_instance a
start_instance b
if ! port_a=$(wait_instance a "$pid_a") || ! port_b=$(wait_instance b "$pid_b"); then
    fail "two gpt2d instances start and answer /health within 10 s"
    show "$work/a.log"
    show "$work/b.log"
    finish
fi
pass "two gpt2d instances on 127.0.0.1:$port_a (a) and 127.0.0.1:$port_b (b)"
addr_a=127.0.0.1:$port_a
addr_b=127.0.0.1:$port_b

# ---- nginx with the shipped example config ----

mkdir -p "$work/nginx/temp"
# write_nginx_conf LISTEN_PORT: the example with the test's addresses, in a
# minimal main config that keeps every file nginx writes under $work/nginx.
write_nginx_conf() {
    local listen_port=$1 pattern
    for pattern in 'server 127.0.0.1:8081 ' 'server 127.0.0.1:8082 ' 'listen 127.0.0.1:8080;'; do
        if [[ $(grep -cF "$pattern" "$example") -ne 1 ]]; then
            echo "$example: expected exactly one line with '$pattern'" >&2
            return 1
        fi
    done
    sed -e "s/server 127\.0\.0\.1:8081 /server $addr_a /" \
        -e "s/server 127\.0\.0\.1:8082 /server $addr_b /" \
        -e "s/listen 127\.0\.0\.1:8080;/listen 127.0.0.1:$listen_port;/" \
        "$example" >"$work/nginx/gpt2d.conf"
    {
        # As root, nginx would switch its workers to "nobody", who cannot
        # enter the private mktemp directory.
        if [[ $(id -u) -eq 0 ]]; then
            echo "user root;"
        fi
        cat <<EOF
worker_processes 1;
pid $work/nginx/nginx.pid;
error_log $work/nginx/error.log info;
events { worker_connections 64; }
http {
    client_body_temp_path $work/nginx/temp/body;
    proxy_temp_path $work/nginx/temp/proxy;
    fastcgi_temp_path $work/nginx/temp/fastcgi;
    uwsgi_temp_path $work/nginx/temp/uwsgi;
    scgi_temp_path $work/nginx/temp/scgi;
    include $work/nginx/gpt2d.conf;
    access_log $work/nginx/access.log gpt2d;
}
EOF
    } >"$work/nginx/nginx.conf"
}

nginx_args=(-p "$work/nginx/" -c "$work/nginx/nginx.conf" -e "$work/nginx/error.log")

# A free port can be taken between our check and nginx's bind: retry.
port_n=
for attempt in 1 2 3 4 5; do
    port=$(free_port)
    if ! write_nginx_conf "$port"; then
        break
    fi
    if [[ $attempt -eq 1 ]]; then
        if "$nginx" -t "${nginx_args[@]}" >"$work/nginx-t.out" 2>&1; then
            pass "etc/nginx-gpt2d.conf passes nginx -t ($("$nginx" -v 2>&1))"
        else
            fail "etc/nginx-gpt2d.conf passes nginx -t"
            show "$work/nginx-t.out"
            finish
        fi
    fi
    "$nginx" "${nginx_args[@]}" -g 'daemon off;' >"$work/nginx/stderr.log" 2>&1 &
    pid_nginx=$!
    for _ in $(seq 1 250); do
        kill -0 "$pid_nginx" 2>/dev/null || break
        if curl -fsS -o /dev/null "http://127.0.0.1:$port/v1/models" 2>/dev/null; then
            port_n=$port
            break
        fi
        sleep 0.02
    done
    [[ -n $port_n ]] && break
    stop_pid "$pid_nginx" QUIT
    pid_nginx=
    grep -q 'Address already in use' "$work/nginx/error.log" "$work/nginx/stderr.log" \
        2>/dev/null || break
done
if [[ -z $port_n ]]; then
    fail "nginx starts and proxies /v1/models"
    show "$work/nginx/error.log"
    show "$work/nginx/stderr.log"
    finish
fi
pass "nginx on 127.0.0.1:$port_n proxies to both instances"
front=http://127.0.0.1:$port_n

# served_by SESSION -> "a", "b", "both" or "none", from the instances' logs
served_by() {
    local in_a=0 in_b=0
    grep -qF "\"$1\"" "$work/a.log" && in_a=1
    grep -qF "\"$1\"" "$work/b.log" && in_b=1
    case $in_a$in_b in
        10) echo a ;;
        01) echo b ;;
        11) echo both ;;
        *) echo none ;;
    esac
}
# await_access REGEX COUNT: nginx writes its access log line just after the
# response's last byte, so a fast client can look before it is there.
await_access() {
    for _ in $(seq 1 100); do
        [[ $(grep -cE "$1" "$work/nginx/access.log" 2>/dev/null || true) -ge $2 ]] && return 0
        sleep 0.02
    done
    return 1
}
# log_count NAME SESSION -> request lines of that session in NAME's log
log_count() { grep -cF "\"$2\"" "$work/$1.log" || true; }

# ---- a conversation sticks to its instance ----

sid="nginx-conversation-1"
prompt1="The quick brown fox"
status=$(post "$front/v1/completions" "$(completion_body "$prompt1" 6 "$sid")" "$work/t1.json")
if [[ $status != 200 ]]; then
    fail "turn 1 through nginx: HTTP $status"
    show "$work/t1.json"
    finish
fi
text1=$(jq_py "$work/t1.json" 'd["choices"][0]["text"]')
cached1=$(jq_py "$work/t1.json" 'd["usage"]["prompt_tokens_details"]["cached_tokens"]')
prompt2="$prompt1$text1 and then"
body2=$(completion_body "$prompt2" 6 "$sid")
status=$(post "$front/v1/completions" "$body2" "$work/t2.json")
if [[ $status != 200 ]]; then
    fail "turn 2 through nginx: HTTP $status"
    show "$work/t2.json"
    finish
fi
cached2=$(jq_py "$work/t2.json" 'd["usage"]["prompt_tokens_details"]["cached_tokens"]')
prompt_tokens2=$(jq_py "$work/t2.json" 'd["usage"]["prompt_tokens"]')
text2=$(jq_py "$work/t2.json" 'd["choices"][0]["text"]')
if [[ $cached1 -eq 0 && $cached2 -gt 0 && $cached2 -lt $prompt_tokens2 ]]; then
    pass "turn 2 of session $sid reuses $cached2 of $prompt_tokens2 prompt tokens (turn 1: $cached1)"
else
    fail "turn 2 reports cached tokens: turn 1 cached $cached1, turn 2 cached $cached2 of $prompt_tokens2"
fi

home=$(served_by "$sid")
if [[ $home == a || $home == b ]]; then
    other=$([[ $home == a ]] && echo b || echo a)
    n_home=$(log_count "$home" "$sid")
    if [[ $n_home -eq 2 ]]; then
        pass "both turns are in instance $home's log, none in $other's"
    else
        fail "both turns in instance $home's log: found $n_home"
    fi
else
    fail "the conversation stayed on one instance: logs say '$home'"
    show "$work/a.log" 8
    show "$work/b.log" 8
    other=
fi
await_access "session=$sid " 2 || true
ups=$(grep -F "session=$sid " "$work/nginx/access.log" | sed -n 's/.* upstream=\([^ ]*\) .*/\1/p' | sort -u)
home_addr=$([[ $home == a ]] && echo "$addr_a" || echo "$addr_b")
if [[ $ups == "$home_addr" ]]; then
    pass "nginx's access log agrees: both turns went to $ups"
else
    fail "nginx's access log: turns went to '$ups', instance log says $home_addr"
fi

# The cache lives in one instance: the same turn sent straight to the other
# instance (no session) is computed cold, with the same text.
if [[ -n $other ]]; then
    other_port=$([[ $other == a ]] && echo "$port_a" || echo "$port_b")
    status=$(post "http://127.0.0.1:$other_port/v1/completions" \
        "$(completion_body "$prompt2" 6)" "$work/cold.json")
    cold_cached=$(jq_py "$work/cold.json" 'd["usage"]["prompt_tokens_details"]["cached_tokens"]' 2>/dev/null || echo '?')
    cold_text=$(jq_py "$work/cold.json" 'd["choices"][0]["text"]' 2>/dev/null || echo '?')
    if [[ $status == 200 && $cold_cached == 0 && $cold_text == "$text2" ]]; then
        pass "instance $other, asked directly, has nothing cached and gives the same text"
    else
        fail "cold run on instance $other: HTTP $status, cached $cold_cached, text '$cold_text' vs '$text2'"
    fi
fi

# ---- DELETE /v1/sessions/{id} reaches the session's instance ----
status=$(curl -sS --max-time 30 -o "$work/del.json" -w '%{http_code}' -X DELETE \
    "$front/v1/sessions/$sid" || echo 000)
status_again=$(curl -sS --max-time 30 -o "$work/del2.json" -w '%{http_code}' -X DELETE \
    "$front/v1/sessions/$sid" || echo 000)
if [[ $status == 200 && $status_again == 404 ]]; then
    pass "DELETE /v1/sessions/$sid through nginx: 200, then 404"
else
    fail "DELETE /v1/sessions/$sid through nginx: $status then $status_again (want 200, 404)"
    show "$work/del.json"
fi

# ---- an X-Session-Id header routes as well ----
# No session_id in the body: gpt2d reuses the longest cached prefix of an idle
# slot, so cached tokens on the second request show the same instance again.
hdr="nginx-header-1"
status=$(post "$front/v1/completions" "$(completion_body "Once upon a time there" 4)" \
    "$work/h1.json" -H "X-Session-Id: $hdr")
status2=$(post "$front/v1/completions" "$(completion_body "Once upon a time there was" 4)" \
    "$work/h2.json" -H "X-Session-Id: $hdr")
h_cached=$(jq_py "$work/h2.json" 'd["usage"]["prompt_tokens_details"]["cached_tokens"]' 2>/dev/null || echo 0)
await_access "session=$hdr " 2 || true
h_ups=$(grep -F "session=$hdr " "$work/nginx/access.log" | sed -n 's/.* upstream=\([^ ]*\) .*/\1/p' | sort -u)
if [[ $status == 200 && $status2 == 200 && $h_cached -gt 0 && $(wc -l <<<"$h_ups") -eq 1 ]]; then
    pass "X-Session-Id routes both requests to $h_ups (second one cached $h_cached tokens)"
else
    fail "X-Session-Id routing: HTTP $status/$status2, cached $h_cached, upstreams '$h_ups'"
fi

# ---- the body's session_id is found in any JSON layout, never in the prompt ----
# Pretty-printed, the field last, and the prompt quoting a decoy field (inside
# a JSON string every quote is escaped, so the decoy cannot match).
pretty=$("$python" -c '
import json
print(json.dumps({"prompt": "say \"session_id\": \"decoy-1\"", "max_tokens": 1,
                  "session_id": "nginx-pretty-1"}, indent=2, separators=(",", " :  ")))
')
status=$(post "$front/v1/completions" "$pretty" "$work/p.json")
if [[ $status == 200 ]] && await_access 'session=nginx-pretty-1 ' 1 &&
    ! grep -qF 'session=decoy-1 ' "$work/nginx/access.log"; then
    pass "nginx reads session_id from a pretty-printed body and ignores one quoted in the prompt"
else
    fail "session_id from a pretty-printed body: HTTP $status"
    grep -F 'POST /v1/completions' "$work/nginx/access.log" | tail -n 1 | sed 's/^/  | /'
fi

# ---- other sessions land on both instances ----
# Where a session lands depends on the instances' (random) ports, so try
# sessions until each instance has had one: 2^-40 odds of a false failure.
seen_a=0
seen_b=0
tried=0
moved=0
for i in $(seq 1 40); do
    s=nginx-spread-$i
    status=$(post "$front/v1/completions" "$(completion_body "Hello" 1 "$s")" "$work/s.json")
    tried=$i
    [[ $status == 200 ]] || { moved=1; break; }
    case $(served_by "$s") in
        a) seen_a=$((seen_a + 1)) ;;
        b) seen_b=$((seen_b + 1)) ;;
        *) moved=1 ;;
    esac
    [[ $seen_a -gt 0 && $seen_b -gt 0 ]] && break
done
if [[ $moved -eq 0 && $seen_a -gt 0 && $seen_b -gt 0 ]]; then
    pass "different sessions land on both instances ($seen_a on a, $seen_b on b after $tried)"
else
    fail "different sessions on both instances: a $seen_a, b $seen_b after $tried (error: $moved)"
fi

# ---- requests without a session spread too ($request_id, not one fixed key) ----
ups_seen=
for i in $(seq 1 40); do
    post "$front/v1/completions" "$(completion_body "No session $i" 1)" "$work/n.json" >/dev/null
    await_access 'POST /v1/completions .* session=[0-9a-f]{32} ' "$i" || true
    ups_seen=$(grep -E 'session=[0-9a-f]{32} ' "$work/nginx/access.log" |
        grep -F 'POST /v1/completions' |
        sed -n 's/.* upstream=\([^ ]*\) .*/\1/p' | sort -u | tr '\n' ' ')
    [[ $(wc -w <<<"$ups_seen") -ge 2 ]] && break
done
if [[ $(wc -w <<<"$ups_seen") -eq 2 ]]; then
    pass "requests without a session spread over both instances (after $i)"
else
    fail "requests without a session spread: only '$ups_seen' after $i"
fi

# ---- streaming passes through nginx ----
sbody=$(completion_body "In a hole in the ground" 8 "" stream)
curl -sS -N --max-time 30 -D "$work/stream.hdr" -o "$work/stream.txt" \
    -H 'Content-Type: application/json' --data-binary "$sbody" "$front/v1/completions" || true
status=$(post "$front/v1/completions" "$(completion_body "In a hole in the ground" 8)" "$work/ns.json")
stream_text=$("$python" -c '
import json, sys
text = ""
for line in open(sys.argv[1]):
    if line.startswith("data: {"):
        text += "".join(c["text"] for c in json.loads(line[6:])["choices"])
print(text)
' "$work/stream.txt" 2>/dev/null || echo '?')
plain_text=$(jq_py "$work/ns.json" 'd["choices"][0]["text"]' 2>/dev/null || echo '!')
n_chunks=$(grep -c '^data: {' "$work/stream.txt" || true)
if grep -qi '^content-type: text/event-stream' "$work/stream.hdr" &&
    [[ $(grep '^data: ' "$work/stream.txt" | tail -n 1) == 'data: [DONE]' ]] &&
    [[ $n_chunks -ge 2 && $status == 200 && $stream_text == "$plain_text" ]]; then
    pass "SSE through nginx: $n_chunks chunks, [DONE], same text as non-streaming"
else
    fail "SSE through nginx: $n_chunks chunks, '$stream_text' vs '$plain_text'"
    show "$work/stream.hdr" 12
    show "$work/stream.txt" 12
fi

# ---- a client that leaves mid-stream cancels the request upstream ----
# Reading the first chunk while the instance is still generating shows the
# stream is not held back by nginx; closing then must reach gpt2d (which logs
# status 499) well before the 900 tokens are done.
if [[ $long_ctx -eq 1 ]]; then
    "$python" -c '
import http.client, json, sys
conn = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=30)
body = {"prompt": "Far away", "max_tokens": 900, "stream": True,
        "session_id": "nginx-cancel-1", "logit_bias": {"50256": -100}}
conn.request("POST", "/v1/completions", json.dumps(body),
             {"Content-Type": "application/json"})
resp = conn.getresponse()
assert resp.status == 200, resp.status
while True:
    line = resp.fp.readline()
    assert line, "stream ended before its first chunk"
    if line.startswith(b"data: {"):
        break
conn.sock.close()   # leave without reading the rest
resp.close()
' "$port_n" >"$work/cancel.out" 2>&1 || true
    cancel_line=
    for _ in $(seq 1 250); do
        cancel_line=$(grep -h 'POST /v1/completions 499 ' "$work/a.log" "$work/b.log" || true)
        [[ -n $cancel_line ]] && break
        sleep 0.02
    done
    cancel_tokens=$(sed -n 's/.*completion_tokens=\([0-9]*\).*/\1/p' <<<"$cancel_line" | head -n 1)
    if [[ -s $work/cancel.out ]]; then
        fail "stream cut off through nginx: the client failed"
        show "$work/cancel.out" 10
    elif [[ -n $cancel_tokens && $cancel_tokens -lt 900 ]]; then
        pass "a client leaving mid-stream through nginx: instance logs 499 after $cancel_tokens of 900 tokens"
    else
        fail "a client leaving mid-stream through nginx: no 499 under 900 tokens ('$cancel_line')"
    fi
else
    echo "skip: mid-stream cancellation through nginx ('$python' cannot import numpy to make a long-context model)"
fi

# ---- nginx's own errors are OpenAI error objects ----
head -c 1200000 /dev/zero | tr '\0' 'x' >"$work/big.txt"
status=$(curl -sS --max-time 30 -o "$work/big.json" -w '%{http_code}' \
    -H 'Content-Type: application/json' --data-binary "@$work/big.txt" \
    "$front/v1/completions" || echo 000)
if [[ $status == 413 ]] && [[ $(jq_py "$work/big.json" 'd["error"]["type"]' 2>/dev/null) == invalid_request_error ]]; then
    pass "a body over 1 MiB: 413 with an OpenAI error object from nginx"
else
    fail "a body over 1 MiB: HTTP $status"
    show "$work/big.json" 5
fi

# ---- fail-over: a session whose instance is down moves; none left -> 503 ----
# Stop the instance that served the conversation; its session goes on on the
# other one (which has the prompt cached from the cold run above, unpinned).
if [[ $home == a || $home == b ]]; then
    if [[ $home == a ]]; then stop_pid "$pid_a"; pid_a=; else stop_pid "$pid_b"; pid_b=; fi
    status=$(post "$front/v1/completions" "$body2" "$work/fo.json")
    fo_cached=$(jq_py "$work/fo.json" 'd["usage"]["prompt_tokens_details"]["cached_tokens"]' 2>/dev/null || echo '?')
    fo_text=$(jq_py "$work/fo.json" 'd["choices"][0]["text"]' 2>/dev/null || echo '?')
    if [[ $status == 200 && $fo_text == "$text2" ]] &&
        [[ $(log_count "$other" "$sid") -ge 1 ]]; then
        pass "instance $home down: session $sid moves to $other, same text ($fo_cached cached)"
    else
        fail "fail-over to $other: HTTP $status, cached $fo_cached, text '$fo_text'"
    fi
fi
stop_pid "$pid_a"
pid_a=
stop_pid "$pid_b"
pid_b=
status=$(post "$front/v1/completions" "$body2" "$work/down.json")
if [[ $status == 503 ]] && [[ $(jq_py "$work/down.json" 'd["error"]["type"]' 2>/dev/null) == server_error ]]; then
    pass "no instance left: 503 with an OpenAI error object"
else
    fail "no instance left: HTTP $status"
    show "$work/down.json" 5
fi

# ---- clean shutdown and clean logs ----
stop_pid "$pid_nginx" QUIT
pid_nginx=
if grep -E '\[(emerg|alert|crit)\]' "$work/nginx/error.log" >/dev/null 2>&1; then
    fail "nginx's error log has no emerg/alert/crit entries"
    grep -E '\[(emerg|alert|crit)\]' "$work/nginx/error.log" | sed 's/^/  | /' | head -5
else
    pass "nginx's error log has no emerg/alert/crit entries"
fi
if grep -qE 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$work/a.log" "$work/b.log"; then
    fail "instance logs have a sanitizer report"
    grep -h -m1 -A30 -E 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$work/a.log" "$work/b.log" |
        sed 's/^/  | /'
else
    pass "instance logs have no sanitizer report"
fi
finish
