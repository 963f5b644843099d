#!/usr/bin/env bash
# test_systemd.sh — gpt2d as a systemd service.
#
#  1. The unit: `systemd-analyze verify` passes on a copy whose ExecStart
#     names the built binary (verify insists the binary exists), with our man
#     page on MANPATH for Documentation=; its hardening directives are there;
#     `systemd-analyze security --offline` rates it OK.
#  2. The man page: formats without warnings and names every option and
#     variable of `gpt2d --help` (src/core/settings.c's table is the source).
#  3. The readiness protocol against the real daemon on the tiny model.  Under
#     a running user manager, via `systemd-run --user`; always (this machine
#     and CI have no systemd running), with a NOTIFY_SOCKET this test owns:
#     STATUS= while loading; READY=1 only once /health answers 200; WATCHDOG=1
#     keeps arriving with WATCHDOG_USEC, idle and busy, never a gap as long as
#     the interval; RELOADING=1 then READY=1 on SIGHUP; STOPPING=1 after READY
#     on SIGTERM and exit 0; an abstract (@) socket works; a WATCHDOG_PID
#     naming another process means no pings.  The daemon runs with the kernel's
#     MemoryDenyWriteExecute (PR_SET_MDWE) where the kernel has it, so the unit's
#     MemoryDenyWriteExecute=yes is known not to break our stack.
#
# Needs GPT2D_SRCDIR, GPT2D_BUILDDIR, GPT2D_TEST_DATA (make check sets them)
# and a Python 3 (standard library only).  Parts whose tool is missing say so
# and are skipped; the test fails only on a real failure.
set -euo pipefail

: "${GPT2D_SRCDIR:?run from make check}" "${GPT2D_BUILDDIR:?}" "${GPT2D_TEST_DATA:?}"
GPT2D=$GPT2D_BUILDDIR/src/gpt2d
MODEL=$GPT2D_TEST_DATA/models/tiny
UNIT=$GPT2D_SRCDIR/systemd/gpt2d.service
MANPAGE=$GPT2D_SRCDIR/doc/gpt2d.8

PY=
for p in "${PYTHON:-}" python3 /usr/bin/python3; do
    if [[ -n $p ]] && "$p" -c 'import socket, subprocess' >/dev/null 2>&1; then
        PY=$p
        break
    fi
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/gpt2d-systemd.XXXXXX")
cleanup() { rm -rf "$tmp"; }
trap cleanup EXIT

failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }
skip() { echo "SKIP: $*"; }

[[ -x $GPT2D ]] || { echo "FAIL: $GPT2D not built"; exit 1; }
[[ -f $MODEL/config.json ]] || { echo "FAIL: $MODEL missing (run tests/reference/make-fixtures.sh)"; exit 1; }

# ---- 1. the unit ----

check_unit_directives() {
    local d missing=0
    for d in 'Type=notify' 'NotifyAccess=main' 'ExecStart=/usr/sbin/gpt2d --config /etc/gpt2d/gpt2d.conf' \
             "ExecReload=/bin/kill -HUP \$MAINPID" 'Restart=on-failure' 'WatchdogSec=' \
             'StartLimitIntervalSec=' 'StartLimitBurst=' 'RestartPreventExitStatus=2' \
             'DynamicUser=yes' 'StateDirectory=gpt2d' 'ConfigurationDirectory=gpt2d' \
             'RuntimeDirectory=gpt2d' \
             'ProtectSystem=strict' 'ProtectHome=yes' 'PrivateTmp=yes' 'NoNewPrivileges=yes' \
             'RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6' \
             'SystemCallFilter=@system-service' 'MemoryDenyWriteExecute=yes'; do
        if ! grep -qxF -- "$d" "$UNIT" && ! grep -q "^${d}[0-9]" "$UNIT"; then
            fail "unit lacks '$d'"
            missing=1
        fi
    done
    [[ $missing -eq 0 ]] && pass "unit has every required directive"
    return 0
}

verify_unit() {
    if ! command -v systemd-analyze >/dev/null; then
        skip "systemd-analyze not installed (Debian package systemd): unit not verified"
        return 0
    fi
    # verify wants ExecStart's binary and Documentation='s man page to exist.
    mkdir -p "$tmp/unit" "$tmp/man/man8"
    cp "$MANPAGE" "$tmp/man/man8/gpt2d.8"
    : >"$tmp/unit/gpt2d.conf"
    local kill_bin
    kill_bin=$(command -v kill 2>/dev/null || echo /bin/kill)
    [[ $kill_bin == /* ]] || kill_bin=/bin/kill
    sed -e "s|^ExecStart=/usr/sbin/gpt2d --config /etc/gpt2d/gpt2d.conf|ExecStart=$GPT2D --config $tmp/unit/gpt2d.conf|" \
        -e "s|^ExecReload=/bin/kill|ExecReload=$kill_bin|" \
        "$UNIT" >"$tmp/unit/gpt2d.service"
    grep -q "^ExecStart=$GPT2D " "$tmp/unit/gpt2d.service" || fail "could not point the unit copy at $GPT2D"
    local out
    if out=$(MANPATH=$tmp/man SYSTEMD_LOG_COLOR=0 systemd-analyze verify "$tmp/unit/gpt2d.service" 2>&1) \
            && [[ -z $out ]]; then
        pass "systemd-analyze verify: clean"
    else
        fail "systemd-analyze verify:"
        echo "$out"
    fi
    # --offline appeared in systemd 250; older ones need a running manager.
    if systemd-analyze security --help 2>/dev/null | grep -q -- '--offline'; then
        if out=$(systemd-analyze security --offline=yes --threshold=25 --no-pager \
                     "$tmp/unit/gpt2d.service" 2>&1); then
            pass "systemd-analyze security: $(grep -o 'Overall exposure level.*' <<<"$out" || echo ok)"
        else
            fail "systemd-analyze security: exposure above 2.5"
            grep -E '✗|Overall' <<<"$out" || echo "$out"
        fi
    else
        skip "systemd-analyze security --offline needs systemd >= 250"
    fi
}

# ---- 2. the man page ----

check_man_page() {
    local help name env missing=0
    help=$("$GPT2D" --help)
    # Option names from the --help lines "  -m, --model DIR" / "      --host ADDR".
    while read -r name; do
        if ! grep -qF -- "\\-\\-${name//-/\\-}" "$MANPAGE"; then
            fail "man page does not document --$name"
            missing=1
        fi
    done < <(sed -n 's/^ \{2,6\}\(-., \)\{0,1\}--\([a-z-]*\).*/\2/p' <<<"$help")
    while read -r env; do
        if ! grep -qF -- "${env//-/\\-}" "$MANPAGE"; then
            fail "man page does not name $env"
            missing=1
        fi
    done < <(grep -o 'GPT2D_[A-Z_]*' <<<"$help" | sort -u)
    [[ $missing -eq 0 ]] && pass "man page documents every option and variable of --help"
    if command -v groff >/dev/null; then
        local warnings
        warnings=$(LC_ALL=C.UTF-8 groff -man -ww -z -Tutf8 "$MANPAGE" 2>&1 || true)
        if [[ -z $warnings ]]; then
            pass "man page formats without warnings"
        else
            fail "groff warnings:"
            echo "$warnings"
        fi
    else
        skip "groff not installed: man page not formatted"
    fi
}

# ---- 3. readiness protocol with a socket we own ----

# The stand-in service manager: binds the socket, starts gpt2d with
# NOTIFY_SOCKET (and the watchdog variables), records every datagram with
# its arrival time, and checks the daemon at each stage.  Prints one line per
# check; exits 1 on any failure.
cat >"$tmp/manager.py" <<'PYEOF'
import ctypes, json, os, signal, socket, subprocess, sys, time, urllib.request

gpt2d, model, workdir, mode = sys.argv[1:5]
checks_failed = 0

def check(ok, what):
    global checks_failed
    print(("ok: " if ok else "FAIL: ") + what, flush=True)
    if not ok:
        checks_failed += 1
    return ok

sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
if mode == "path":
    address = os.path.join(workdir, "notify")
    sock.bind(address)
    notify_socket = address
else:
    name = "gpt2d-test-%d-%d" % (os.getpid(), time.monotonic_ns())
    sock.bind("\0" + name)
    notify_socket = "@" + name

messages = []   # (arrival time, text)

def receive(until, want=None):
    """Collects datagrams until `until` (monotonic) or one starting with want."""
    while True:
        left = until - time.monotonic()
        if left <= 0:
            return None
        sock.settimeout(left)
        try:
            data = sock.recv(4096).decode()
        except socket.timeout:
            return None
        messages.append((time.monotonic(), data))
        if want is not None and data.split("\n")[0].startswith(want):
            return data

def non_watchdog():
    return [m for _, m in messages if m != "WATCHDOG=1"]

def watchdog_times(since=0.0):
    return [t for t, m in messages if m == "WATCHDOG=1" and t >= since]

port_file = os.path.join(workdir, "port-%s" % mode)
env = dict(os.environ, NOTIFY_SOCKET=notify_socket)
env.pop("WATCHDOG_PID", None)
watchdog_usec = 1000000
if mode == "path":
    env["WATCHDOG_USEC"] = str(watchdog_usec)
    # WATCHDOG_PID must be the daemon's own: a shell that execs it keeps $$.
    argv = ["/bin/sh", "-c", 'WATCHDOG_PID=$$; export WATCHDOG_PID; exec "$0" "$@"', gpt2d]
else:
    env["WATCHDOG_USEC"] = "200000"
    env["WATCHDOG_PID"] = "1"           # another process's watchdog
    argv = [gpt2d]
argv += ["--model", model, "--host", "127.0.0.1", "--port", "0",
         "--port-file", port_file, "--threads", "1", "--slots", "2",
         "--drain-timeout", "2000"]

# The kernel's MemoryDenyWriteExecute (Linux >= 6.3), inherited across exec:
# what the unit's MemoryDenyWriteExecute=yes asks of the daemon.
libc = ctypes.CDLL(None, use_errno=True)
PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN = 65, 1
mdwe = mode == "path" and libc.prctl(PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN, 0, 0, 0) == 0
# (set on this process, so the child inherits it; this script needs no W+X)
if mode == "path" and not mdwe:
    print("SKIP: kernel has no PR_SET_MDWE: MemoryDenyWriteExecute not exercised", flush=True)

def http(path, body=None):
    port = open(port_file).read().strip()
    req = urllib.request.Request("http://127.0.0.1:%s%s" % (port, path),
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()

log = open(os.path.join(workdir, "gpt2d-%s.log" % mode), "w")
proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
try:
    ready = None
    deadline = time.monotonic() + 120
    while ready is None and time.monotonic() < deadline and proc.poll() is None:
        ready = receive(min(deadline, time.monotonic() + 0.5), "READY=1")
    if not check(ready is not None, "READY=1 arrives (%s socket)" % mode):
        sys.exit(1)
    t_ready = time.monotonic()
    # Checked the moment READY arrives: the promise is that we can serve now.
    check(os.path.exists(port_file), "port file written before READY=1")
    status, body = http("/health")
    check(status == 200, "/health answers 200 as soon as READY=1 arrives (got %d)" % status)
    before = non_watchdog()[:-1]
    check(any(m.startswith("STATUS=Loading model") for m in before),
          "STATUS=Loading model ... arrives before READY=1")
    check(not any("READY=1" in m for m in before), "READY=1 is sent once")
    check("\nSTATUS=Serving " in ready, "READY=1 carries a STATUS=Serving line: %r" % ready)

    if mode == "path":
        if mdwe:
            check(proc.poll() is None,
                  "loads and serves under MemoryDenyWriteExecute (PR_SET_MDWE)")
        maps = open("/proc/%d/maps" % proc.pid).read().splitlines()
        wx = [l for l in maps if "w" in l.split()[1] and "x" in l.split()[1]]
        check(not wx, "no writable+executable mapping: %s" % wx[:3])

        # Idle: the engine loop keeps pinging.
        receive(time.monotonic() + 2.0)
        # Busy: a completion runs while the pings go on.
        status, body = http("/v1/completions", {"prompt": "Hello, my name is",
                                                "max_tokens": 24, "seed": 1})
        check(status == 200 and json.loads(body)["choices"][0]["text"] != "",
              "a completion is served (status %d)" % status)
        receive(time.monotonic() + 1.0)
        pings = watchdog_times(t_ready)
        check(len(pings) >= 8, "WATCHDOG=1 keeps arriving: %d in %.1f s (interval %.1f s)"
              % (len(pings), time.monotonic() - t_ready, watchdog_usec / 1e6))
        gaps = [b - a for a, b in zip([t_ready] + pings, pings)]
        check(gaps and max(gaps) < watchdog_usec / 1e6,
              "no gap between pings as long as the interval (longest %.3f s)"
              % (max(gaps) if gaps else -1))

        proc.send_signal(signal.SIGHUP)
        reloading = receive(time.monotonic() + 10, "RELOADING=1")
        check(reloading is not None, "SIGHUP: RELOADING=1")
        again = receive(time.monotonic() + 10, "READY=1")
        check(again is not None, "SIGHUP: READY=1 again after the reload")
        status, _ = http("/health")
        check(status == 200, "still serving after SIGHUP")
    else:
        receive(time.monotonic() + 1.0)
        check(not watchdog_times(), "WATCHDOG_PID of another process: no WATCHDOG=1")

    n_before_term = len(non_watchdog())
    proc.send_signal(signal.SIGTERM)
    stopping = receive(time.monotonic() + 30, "STOPPING=1")
    check(stopping is not None, "SIGTERM: STOPPING=1 arrives")
    try:
        rc = proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        rc = None
    check(rc == 0, "SIGTERM: the daemon exits 0 (got %r)" % rc)
    # Anything still queued on the socket.
    receive(time.monotonic() + 0.2)
    order = [m.split("\n")[0].split("=")[0] for m in non_watchdog()]
    want = (["STATUS", "READY", "RELOADING", "READY", "STOPPING"] if mode == "path"
            else ["STATUS", "READY", "STOPPING"])
    check(order == want, "messages in order: %s" % " ".join(order))
    check(len(non_watchdog()) > n_before_term and
          non_watchdog()[-1].startswith("STOPPING=1"), "STOPPING=1 is the last word")
finally:
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    log.close()
    if checks_failed:
        sys.stdout.write(open(os.path.join(workdir, "gpt2d-%s.log" % mode)).read())
sys.exit(1 if checks_failed else 0)
PYEOF

simulate_manager() {
    if [[ -z $PY ]]; then
        skip "no python3: readiness protocol not exercised"
        return 0
    fi
    local mode
    for mode in path abstract; do
        if ! "$PY" "$tmp/manager.py" "$GPT2D" "$MODEL" "$tmp" "$mode"; then
            fail "readiness protocol ($mode socket)"
        fi
    done
}

# ---- 3b. under a real user manager, when one runs ----

real_systemd_run() {
    if ! command -v systemd-run >/dev/null || ! command -v systemctl >/dev/null; then
        skip "systemd-run not installed: not run under a real service manager"
        return 0
    fi
    local state
    state=$(systemctl --user is-system-running 2>/dev/null || true)
    if [[ $state != running && $state != degraded ]]; then
        skip "no systemd user manager running (state '${state:-none}'): simulated above instead"
        return 0
    fi
    local unit=gpt2d-test-$$ port_file=$tmp/port-systemd-run
    # Type=notify: systemd-run returns once READY=1 has arrived (or fails).
    if ! systemd-run --user --quiet --collect --unit="$unit" \
            -p Type=notify -p WatchdogSec=10s -p TimeoutStartSec=120 \
            "$GPT2D" --model "$MODEL" --host 127.0.0.1 --port 0 \
            --port-file "$port_file" --threads 1 --slots 2 --drain-timeout 2000; then
        fail "systemd-run --user: the unit did not start"
        return 0
    fi
    if [[ $(systemctl --user is-active "$unit") == active ]] \
            && curl -fsS "http://127.0.0.1:$(cat "$port_file")/health" >/dev/null; then
        pass "systemd-run --user: active after READY=1 and /health answers"
    else
        fail "systemd-run --user: not active or /health not answering"
    fi
    local status
    status=$(systemctl --user show -p StatusText --value "$unit")
    if [[ $status == Serving* ]]; then
        pass "systemd-run --user: StatusText '$status'"
    else
        fail "systemd-run --user: StatusText '$status'"
    fi
    systemctl --user stop "$unit"
    local result
    result=$(systemctl --user show -p Result --value "$unit" 2>/dev/null || echo gone)
    if [[ $result == success || $result == gone || -z $result ]]; then
        pass "systemd-run --user: stopped cleanly ($result)"
    else
        fail "systemd-run --user: stop result '$result'"
    fi
}

check_unit_directives
verify_unit
check_man_page
simulate_manager
real_systemd_run

if [[ $failures -ne 0 ]]; then
    echo "$failures failure(s)"
    exit 1
fi
echo "all systemd checks passed"
