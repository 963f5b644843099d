#!/usr/bin/env bash
# test_service.sh — gpt2d under a real systemd, as it is installed.
#
# Builds the daemon (--prefix=/usr --sysconfdir=/etc, in build-system/),
# `make install DESTDIR=` into a copy of a minimal Debian tree of the host's
# release (tests/system/debian-tree.sh: debootstrap from the archive apt
# uses, cached in $GPT2D_SYSTEM_CACHE and reused while its package list is
# unchanged), boots it with `systemd-nspawn -b` on a private network (only
# its own loopback), and drives the installed unit from inside with
# systemctl, journalctl and curl.  The set-up is the documented one: a
# directory of two models where the README puts them, gpt2d.conf's own examples for port-file
# and api-key-file, the keys as the README's credential drop-in.  A test
# drop-in only shortens WatchdogSec=, slows engine steps (so a stream is
# still running when the service is stopped) and empties
# SystemCallErrorNumber= (a filtered system call kills with SIGSYS).
#
# Checks, in order (one "ok:"/"FAIL:" line each):
#   start      READY reached, the STATUS= line, no state-directory migration
#   serve      a completion and a stream, with the key; 401 without it;
#              the other model when named, 404 for one the directory lacks
#   reload     keeps the PID and serves; the credential copy, not the edited
#              file, is what a reload re-reads (the docs say: restart)
#   restart    a new PID, the edited keys in force
#   disk tier  a session's turn, a restart, and its next turn reports its
#              history in cached_tokens, read back from the unit's
#              CacheDirectory= (/var/cache/private/gpt2d/tiny holds *.kv files,
#              the journal's "KV disk: N blocks" line, the disk-tier hit
#              counter in /metrics)
#   kill -9    restarted
#   SIGSTOP    the watchdog kills it and it is restarted
#   stop       a running stream is drained to [DONE], exit 0
#   broken     an unreadable key file: bounded restarts, `failed`, the
#              daemon's error-priority journal line names the file; a usage
#              error is not restarted at all
#   sandbox    no SIGSYS/seccomp line in the journal; `systemd-analyze
#              security` at or below 1.4
#
# Needs root, systemd-nspawn (Debian package systemd-container), debootstrap
# and, for the first run only, the Debian archive; without them it prints
# "SKIP: ..." and exits 77.  Anywhere it runs, any failed check exits 1.
# Also needs what the build needs, python3-numpy (the test model) and the
# GPT-2 vocabulary (taken from build/tests/data/tokenizer when `make check`
# made it, else fetched by tests/data/fetch-tokenizer.sh).
#
# `test_service.sh --build-only` makes the build and stops (CI runs it
# ahead, at low priority, while other stages run).
#
# Environment: GPT2D_SYSTEM_BUILD (default build-system), GPT2D_SYSTEM_CACHE
# (default /var/cache/gpt2d-system-test), GPT2D_CACHE_DIR (the tokenizer
# download cache), GPT2D_SYSTEM_KEEP=1 keeps the work directory.
set -euo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
build=${GPT2D_SYSTEM_BUILD:-$top/build-system}
cache=${GPT2D_SYSTEM_CACHE:-/var/cache/gpt2d-system-test}
export PYTHONDONTWRITEBYTECODE=1
start_time=$SECONDS

skip() {
    echo "test_service: SKIP: $*"
    exit 77
}
[[ $(id -u) -eq 0 ]] || skip "not root (systemd-nspawn and debootstrap need it)"
command -v systemd-nspawn >/dev/null || skip "no systemd-nspawn (Debian package systemd-container)"
command -v debootstrap >/dev/null || skip "no debootstrap (Debian package debootstrap)"
command -v nsenter >/dev/null || skip "no nsenter (Debian package util-linux)"

failures=0
pass() { echo "ok: $*"; }
fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}
# check WHAT COMMAND...: ok or FAIL by the command's status.
check() {
    local what=$1
    shift
    if "$@"; then pass "$what"; else fail "$what"; fi
}
elapsed() { echo "$((SECONDS - start_time)) s"; }
# has ERE TEXT / lacks ERE TEXT: whether a line of TEXT matches.
has() { grep -qE -- "$1" <<<"$2"; }
lacks() { ! grep -qiE -- "$1" <<<"$2"; }

# ---- the daemon, built and installed as a distribution would ----

echo "== build ($build)"
mkdir -p "$build"
if [[ ! -x $top/configure || $top/configure.ac -nt $top/configure ]]; then
    (cd "$top" && autoreconf -fi) >"$build/autoreconf.out" 2>&1 ||
        { cat "$build/autoreconf.out"; exit 1; }
fi
if [[ ! -f $build/Makefile ]]; then
    (cd "$build" && "$top/configure" --prefix=/usr --sysconfdir=/etc --localstatedir=/var \
        --with-systemdsystemunitdir=/lib/systemd/system >configure.out 2>&1) ||
        { tail -20 "$build/configure.out"; exit 1; }
fi
make -C "$build" -j"$(nproc)" >"$build/make.out" 2>&1 || { tail -40 "$build/make.out"; exit 1; }
# --build-only: the build above and nothing else (CI makes it ahead).
[[ ${1:-} == --build-only ]] && { echo "built $build"; exit 0; }
# The Python configure found (with numpy, for the test model), as make check uses.
python=${PYTHON:-$(sed -n 's/^PYTHON = //p' "$build/Makefile")}

# The tree: systemd, kill(1) for ExecReload=, curl, and the packages that
# hold the libraries the daemon links directly (their dependencies follow).
packages=(systemd systemd-sysv procps curl)
while read -r lib; do
    path=$(ldd "$build/src/gpt2d" | awk -v l="$lib" '$1 == l { print $3 }')
    [[ -n $path ]] || { echo "FAIL: ldd does not resolve $lib"; exit 1; }
    pkg=$(dpkg -S "$path" 2>/dev/null || dpkg -S "$(readlink -f "$path")" 2>/dev/null) ||
        { echo "FAIL: no package holds $path"; exit 1; }
    packages+=("${pkg%%:*}")
done < <(readelf -d "$build/src/gpt2d" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')

echo "== Debian tree ($(elapsed))"
rc=0
tree=$("$top/tests/system/debian-tree.sh" "$cache" "${packages[@]}") || rc=$?
[[ $rc -eq 77 ]] && skip "no cached Debian tree and the archive cannot be reached"
[[ $rc -eq 0 ]] || { echo "FAIL: no Debian tree"; exit 1; }

work=$(mktemp -d /var/tmp/gpt2d-system.XXXXXX)
root=$work/root
machine=gpt2d-test-$$
nspawn_pid=
cleanup() {
    if [[ -n $nspawn_pid ]] && kill -0 "$nspawn_pid" 2>/dev/null; then
        kill -TERM "$nspawn_pid" 2>/dev/null || true   # the container powers off
        for _ in $(seq 1 100); do
            kill -0 "$nspawn_pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$nspawn_pid" 2>/dev/null || true
        wait "$nspawn_pid" 2>/dev/null || true
    fi
    if [[ ${GPT2D_SYSTEM_KEEP:-0} == 1 ]]; then
        echo "kept $work"
    elif ! findmnt -rno TARGET | grep -qF "$work/"; then
        rm -rf --one-file-system "$work"
    fi
}
trap cleanup EXIT
cp -a --reflink=auto "$tree" "$root"
make -C "$build" install DESTDIR="$root" >"$work/install.out" 2>&1 || { tail -20 "$work/install.out"; exit 1; }

# ---- the documented set-up, done from the host into the tree ----

# The tokenizer: make check's copy, or the fixture script's.
vocab=$top/build/tests/data/tokenizer
if [[ ! -s $vocab/vocab.json || ! -s $vocab/merges.txt ]]; then
    GPT2D_TEST_DATA=$work/data GPT2D_SRCDIR=$top "$top/tests/data/fetch-tokenizer.sh" >"$work/tokenizer.out" 2>&1 ||
        { cat "$work/tokenizer.out"; echo "FAIL: no GPT-2 vocabulary"; exit 1; }
    vocab=$work/data/tokenizer
fi
# README: the model goes into /var/lib/private/gpt2d, the state directory
# DynamicUser= uses, so systemd has nothing to migrate.
install -d -m 0700 "$root/var/lib/private"
# Two models, one directory each, served as a directory of models: tiny
# (the default: the first by name) and wide.
"$python" "$top/tests/reference/make_model.py" "$root/var/lib/private/gpt2d/models/tiny" \
    --vocab-dir "$vocab" --n-layer 2 --n-head 4 --n-embd 64 --n-ctx 256 >/dev/null
"$python" "$top/tests/reference/make_model.py" "$root/var/lib/private/gpt2d/models/wide" \
    --vocab-dir "$vocab" --n-layer 1 --n-head 2 --n-embd 96 --n-ctx 128 >/dev/null

# gpt2d.conf as installed, with its own models-dir, port-file and
# api-key-file examples switched on.
conf=$root/etc/gpt2d/gpt2d.conf
sed -i -e 's|^# \(models-dir = .*\)|\1|' \
    -e 's|^# \(port-file = .*\)|\1|' -e 's|^# \(api-key-file = .*\)|\1|' "$conf"
for name in models-dir port-file api-key-file; do
    grep -q "^$name = " "$conf" || { echo "FAIL: gpt2d.conf has no '# $name = ' example"; exit 1; }
done
port_file=$(sed -n 's/^port-file = //p' "$conf")
key_one=sk-system-test-one
key_two=sk-system-test-two
install -m 0600 /dev/null "$root/etc/gpt2d/api-keys"
echo "$key_one" >"$root/etc/gpt2d/api-keys"
dropins=$root/etc/systemd/system/gpt2d.service.d
mkdir -p "$dropins"
# The README's credential drop-in, verbatim.
printf '[Service]\nLoadCredential=api-keys:/etc/gpt2d/api-keys\n' >"$dropins/credential.conf"
# The test's own: a short watchdog; steps of at least 20 ms, so that a
# 150-token stream runs for 3 s; and a system call outside the unit's filter
# kills the daemon with SIGSYS instead of failing with EPERM, so that the
# journal would show it.
printf '[Service]\nWatchdogSec=3s\nEnvironment=GPT2D_TEST_MIN_STEP_US=20000\nSystemCallErrorNumber=\n' \
    >"$dropins/zz-test.conf"

# ---- the container ----

echo "== boot ($(elapsed))"
systemd-nspawn -D "$root" -b -M "$machine" --register=no --keep-unit --private-network \
    --console=read-only </dev/null >"$work/console.log" 2>&1 &
nspawn_pid=$!
# The container's PID 1: the child of systemd-nspawn that runs systemd
# (its first child is a short-lived helper that sets up the namespaces).
leader=
for _ in $(seq 1 200); do
    leader=$(ps -o pid=,comm= --ppid "$nspawn_pid" | awk '$2 == "systemd" { print $1; exit }' || true)
    [[ -n $leader ]] && break
    kill -0 "$nspawn_pid" 2>/dev/null || break
    sleep 0.1
done
[[ -n $leader ]] || { cat "$work/console.log"; echo "FAIL: systemd-nspawn started no container"; exit 1; }

# inside COMMAND...: runs in the container's namespaces, with a clean
# environment.
in_container=(nsenter -t "$leader" -a env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8
              SYSTEMD_PAGER= SYSTEMD_COLORS=0)
inside() { "${in_container[@]}" "$@"; }
# Until the manager listens, systemctl cannot connect and prints nothing.
state=
for _ in $(seq 1 300); do
    state=$(timeout 60 "${in_container[@]}" systemctl is-system-running --wait 2>/dev/null || true)
    [[ -n $state && $state != offline ]] && break
    sleep 0.2
done
if [[ $state != running && $state != degraded ]]; then
    cat "$work/console.log"
    echo "FAIL: the container did not boot (state '$state')"
    exit 1
fi
[[ $state == degraded ]] && inside systemctl --failed --no-legend
echo "   $(inside systemctl --version | head -1) is PID 1 ($(elapsed))"

show() { inside systemctl show -p "$1" --value gpt2d; }
main_pid() { show MainPID; }
# journal ARGS...: the unit's records since boot, message text only.
journal() { inside journalctl -b --no-pager -o cat "$@"; }
# wait_for SECONDS COMMAND...: polls every 0.2 s until COMMAND succeeds.
wait_for() {
    local polls=$(($1 * 5))
    shift
    for _ in $(seq 1 "$polls"); do
        "$@" && return 0
        sleep 0.2
    done
    return 1
}
# A new main process is up and READY: active, with a PID other than $1.
serving_again() {
    [[ $(show ActiveState) == active && $(main_pid) != "$1" && $(main_pid) != 0 ]]
}

port=
# api KEY PATH BODY: POSTs BODY; prints the body then the status on a last line.
api() {
    inside curl -sS -N --max-time 30 -w '\n%{http_code}' -H "Authorization: Bearer $1" \
        -H 'Content-Type: application/json' -d "$3" "http://127.0.0.1:$port$2"
}
# status_with KEY: the status of a small completion with that key.
status_with() {
    api "$1" /v1/completions '{"prompt": "Hello", "max_tokens": 2}' | tail -1
}

# ---- the checks ----

check_start() {
    local t0=$SECONDS
    # Type=notify: start returns once READY=1 has arrived.
    if ! timeout 120 "${in_container[@]}" systemctl start gpt2d; then
        fail "systemctl start gpt2d: did not reach READY"
        journal -u gpt2d | tail -20
        return 1
    fi
    pass "systemctl start gpt2d returns after READY=1 ($((SECONDS - t0)) s)"
    local status
    status=$(show StatusText)
    check "the STATUS= line: '$status'" [ "${status#Serving 2 models on }" != "$status" ]
    port=$(inside cat "$port_file" | tr -dc 0-9)
    check "gpt2d.conf's port-file example ($port_file) holds the port ($port)" [ -n "$port" ]
    check "no migration of the state directory (the model is where the README puts it)" \
        lacks migrat "$(journal -u gpt2d)"
    [[ -n $port ]]
}

check_serve() {
    local out
    out=$(api "$key_one" /v1/completions '{"prompt": "Hello, my name is", "max_tokens": 8, "seed": 1}')
    check "a completion: 200 with a choice" has '"choices"' "$out"
    check "a completion: 200" [ "$(tail -1 <<<"$out")" = 200 ]
    check "the default model answers it (tiny)" has '"model": *"tiny"' "$out"
    out=$(api "$key_one" /v1/completions '{"model": "wide", "prompt": "Hello", "max_tokens": 4}')
    check "the directory's other model answers when named: 200, wide" \
        has '"model": *"wide".*' "$out"
    check "a model the directory lacks: 404 model_not_found" \
        has '"code": *"model_not_found"' "$(api "$key_one" /v1/completions '{"model": "nope", "prompt": "Hi"}')"
    out=$(api "$key_one" /v1/completions '{"prompt": "Once upon a time", "max_tokens": 8, "stream": true}')
    check "a stream: data chunks" has '^data: \{.*"choices"' "$out"
    check "a stream: ends in [DONE], 200" [ "$(grep -v '^$' <<<"$out" | tail -2 | paste -sd' ')" = "data: [DONE] 200" ]
    check "the credential's key is required: 401 without it" [ "$(status_with sk-wrong)" = 401 ]
    out=$(inside curl -sS --max-time 30 -w '\n%{http_code}' "http://127.0.0.1:$port/server.html")
    check "the installed playground's Server page: 200" \
        [ "$(tail -1 <<<"$out")" = 200 ]
    check "the Server page is the installed one" has '<title>gpt2d server</title>' "$out"
}

check_reload_and_restart() {
    local pid
    pid=$(main_pid)
    echo "$key_two" >"$root/etc/gpt2d/api-keys"
    inside systemctl reload gpt2d
    check "reload keeps the PID ($pid) and serves" \
        [ "$(main_pid) $(show ActiveState) $(status_with "$key_one")" = "$pid active 200" ]
    check "reload re-reads the keys (journal: 'API keys reloaded')" \
        has 'SIGHUP: API keys reloaded' "$(journal -u gpt2d)"
    check "after reload the edited key file is not in force (the copy is: docs say restart)" \
        [ "$(status_with "$key_two")" = 401 ]
    local t0 t1
    t0=$(date +%s%N)
    inside systemctl restart gpt2d
    t1=$(date +%s%N)
    check "restart: a new PID, serving again in $(((t1 - t0) / 1000000)) ms" serving_again "$pid"
    check "after restart the edited keys are in force (new 200, old 401)" \
        [ "$(status_with "$key_two") $(status_with "$key_one")" = "200 401" ]
}

# get KEY PATH: GETs PATH with the key; prints the body.
get() {
    inside curl -sS --max-time 30 -H "Authorization: Bearer $1" "http://127.0.0.1:$port$2"
}
# metric NAME{LABELS} TEXT: the sample's value in a /metrics text (0 if absent).
metric() {
    awk -v n="$1" '$1 == n { v = $2 } END { print v + 0 }' <<<"$2"
}

# The KV cache's disk tier as a user meets it, with the unit's defaults
# (gpt2d.conf's kv-cache-dir is the unit's CacheDirectory=, which
# DynamicUser= keeps in /var/cache/private): a conversation's turn, a
# restart, and its next turn reports its history as cached_tokens, read back
# from disk.  The turns go as token-id lists, so that turn 2 extends turn 1
# exactly, as a client that sends the whole history does: 40 ids (two full
# blocks of 16 and a partial one), then the same plus 3.
check_disk_tier() {
    local turn1 turn2 out pid files line n m0 m1 cached
    turn1=$(seq -s, 1000 1039)
    turn2=$turn1,$(seq -s, 2000 2002)
    out=$(api "$key_two" /v1/completions \
        "{\"prompt\": [$turn1], \"max_tokens\": 2, \"session_id\": \"chat-disk\"}")
    check "disk tier: turn 1 of a session (40 tokens), 200" [ "$(tail -1 <<<"$out")" = 200 ]
    # a stored response (gpt2d.conf's responses-dir, under StateDirectory=)
    local stored
    stored=$(api "$key_two" /v1/responses '{"input": "Remember me", "max_output_tokens": 2}' |
        grep -o '"id": *"resp_[0-9a-f]*"' | head -1 | grep -o 'resp_[0-9a-f]*' || true)
    check "stored responses: one made before the restart (${stored:-none})" [ -n "$stored" ]
    pid=$(main_pid)
    inside systemctl restart gpt2d
    check "disk tier: systemctl restart: a new PID, serving" serving_again "$pid"
    # The test's third start in a minute; with kill -9 and the watchdog's
    # restarts it would be the start limit's fifth (StartLimitBurst=5 counts
    # manual starts too).  Clear the count, as an operator would.
    inside systemctl reset-failed gpt2d
    files=$(inside find /var/cache/private/gpt2d/tiny -maxdepth 1 -name '*.kv' | wc -l)
    check "disk tier: /var/cache/private/gpt2d/tiny (CacheDirectory=, DynamicUser=; a directory per model) holds $files *.kv files" \
        [ "$files" -gt 0 ]
    check "disk tier: /var/cache/gpt2d is systemd's link to it" \
        [ "$(inside readlink /var/cache/gpt2d)" = private/gpt2d ]
    check "stored responses: kept in /var/lib/private/gpt2d/responses" \
        inside test -s "/var/lib/private/gpt2d/responses/$stored.json"
    check "stored responses: retrieved after the restart" \
        has "\"id\": *\"$stored\"" "$(get "$key_two" "/v1/responses/$stored")"
    line=$(journal _PID="$(main_pid)" | grep -m1 -E 'KV disk: [0-9]+ blocks' || true)
    n=$(sed -n 's/.*KV disk: \([0-9]*\) blocks .*/\1/p' <<<"$line")
    check "disk tier: the new process's start-up line: '${line%%;*}'" [ "${n:-0}" -gt 0 ]
    m0=$(get "$key_two" /metrics)
    out=$(api "$key_two" /v1/completions \
        "{\"prompt\": [$turn2], \"max_tokens\": 2, \"session_id\": \"chat-disk\"}")
    m1=$(get "$key_two" /metrics)
    cached=$(sed -n 's/.*"cached_tokens": *\([0-9]*\).*/\1/p' <<<"$out" | head -1)
    check "disk tier: turn 2 (43 tokens) after the restart, 200" [ "$(tail -1 <<<"$out")" = 200 ]
    check "disk tier: turn 2's cached_tokens: ${cached:-?} (at least turn 1's 40 - 1)" \
        [ "${cached:-0}" -ge 39 ]
    local hits0 hits1 name='gpt2d_kv_hit_tokens_total{tier="disk"}'
    hits0=$(metric "$name" "$m0")
    hits1=$(metric "$name" "$m1")
    check "disk tier: $name $hits0 -> $hits1 (gpt2d_kv_disk_blocks $(metric gpt2d_kv_disk_blocks "$m1"))" \
        [ "$hits1" -ge $((hits0 + 39)) ]
}

check_kill9() {
    local pid restarts
    pid=$(main_pid)
    restarts=$(show NRestarts)
    inside kill -KILL "$pid"
    check "kill -9: restarted (RestartSec=2s)" wait_for 20 serving_again "$pid"
    check "kill -9: NRestarts $restarts -> $(show NRestarts)" [ "$(show NRestarts)" -gt "$restarts" ]
    check "kill -9: serving again" [ "$(status_with "$key_two")" = 200 ]
}

check_watchdog() {
    local pid
    pid=$(main_pid)
    inside kill -STOP "$pid"
    check "SIGSTOP: the watchdog (WatchdogSec=3s) restarts it" wait_for 30 serving_again "$pid"
    check "SIGSTOP: the journal says 'Watchdog timeout'" \
        has 'Watchdog timeout' "$(journal -u gpt2d)"
    check "SIGSTOP: serving again" [ "$(status_with "$key_two")" = 200 ]
}

check_stop_drains() {
    local out=$work/stream.out
    api "$key_two" /v1/completions '{"prompt": "Once upon a time", "max_tokens": 150, "stream": true}' \
        >"$out" 2>&1 &
    local curl_pid=$!
    wait_for 20 grep -q '^data: {' "$out" || true
    local t0=$SECONDS
    inside systemctl stop gpt2d
    wait "$curl_pid" || true
    check "stop: the running stream is drained (finish_reason length, then [DONE])" \
        has '"finish_reason": *"length"' "$(cat "$out")"
    check "stop: the stream ends in [DONE]" [ "$(grep -v '^$' "$out" | tail -2 | paste -sd' ')" = "data: [DONE] 200" ]
    check "stop: exit 0, result success ($((SECONDS - t0)) s)" \
        [ "$(show ExecMainStatus) $(show Result) $(show ActiveState)" = "0 success inactive" ]
    check "stop: the journal says it drained" \
        has 'SIGTERM: draining' "$(journal -u gpt2d)"
}

# An unreadable key file (gpt2d.conf's old example) must end in `failed`.
check_broken_config() {
    sed -i 's|^api-key-file = .*|api-key-file = /etc/gpt2d/api-keys|' "$conf"
    inside systemctl reset-failed gpt2d 2>/dev/null || true   # an unloaded unit has no state
    local t0=$SECONDS
    inside systemctl start gpt2d 2>/dev/null && fail "broken config: start succeeded"
    if wait_for 60 start_limit_hit; then
        pass "broken config: 'failed' after $((SECONDS - t0)) s and $(show NRestarts) restarts"
    else
        fail "broken config: not 'failed' after 60 s (NRestarts=$(show NRestarts), state $(show ActiveState)/$(show SubState))"
    fi
    check "broken config: systemd says why ('Start request repeated too quickly')" \
        has 'Start request repeated too quickly' "$(journal -u gpt2d)"
    local errors
    errors=$(journal -p err -t gpt2d)
    check "broken config: an error-priority line names the problem: '$(head -1 <<<"$errors")'" \
        has '/etc/gpt2d/api-keys: Permission denied' "$errors"

    # A usage error (exit 2) is the same on every try: no restart at all.
    sed -i 's|^api-key-file = .*|no-such-setting = 1|' "$conf"
    inside systemctl reset-failed gpt2d 2>/dev/null || true   # an unloaded unit has no state
    inside systemctl start gpt2d 2>/dev/null && fail "usage error: start succeeded"
    check "usage error: 'failed' at once, no restart (RestartPreventExitStatus=2)" \
        wait_for 10 failed_without_restart
    check "usage error: the error-priority line names it" \
        has 'no-such-setting' "$(journal -p err -t gpt2d)"
}
# failed/failed is final: no restart is pending (auto-restart is "activating").
start_limit_hit() { [[ $(show ActiveState)/$(show SubState) == failed/failed ]]; }
failed_without_restart() {
    [[ $(show ActiveState) == failed && $(show NRestarts) == 0 && $(show ExecMainStatus) == 2 ]]
}

check_sandbox() {
    # 2147483646 is systemd's "kill" (an empty SystemCallErrorNumber=).
    check "the test drop-in makes a filtered system call fatal" \
        [ "$(show SystemCallErrorNumber)" = 2147483646 ]
    check "no SIGSYS or seccomp line in the journal" \
        lacks 'SIGSYS|seccomp|status=31' "$(journal)"
    local out level
    out=$(inside systemd-analyze security --no-pager gpt2d.service 2>&1 || true)
    level=$(sed -n 's/.*Overall exposure level for gpt2d.service: \([0-9.]*\).*/\1/p' <<<"$out")
    check "systemd-analyze security: ${level:-?} (at most 1.4)" \
        awk -v l="${level:-9}" 'BEGIN { exit !(l <= 1.4) }'
}

echo "== the unit ($(elapsed))"
if check_start; then
    check_serve
    check_reload_and_restart
    check_disk_tier
    check_kill9
    check_watchdog
    check_stop_drains
else
    fail "not started: serve, reload, restart, kill -9, watchdog and stop not checked"
fi
check_broken_config
check_sandbox

if [[ $failures -ne 0 ]]; then
    echo "--- journal of gpt2d.service"
    journal -u gpt2d -o short-monotonic | tail -60
    echo "test_service: $failures failure(s) in $(elapsed)"
    exit 1
fi
echo "test_service: all checks passed in $(elapsed)"
