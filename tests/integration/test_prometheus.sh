#!/usr/bin/env bash
# test_prometheus.sh — the shipped Grafana dashboard and alert rules
# (etc/grafana/) against a real Prometheus scraping a real gpt2d.
#
# Starts gpt2d on 127.0.0.1 (the tiny fixture model, two API keys, one with
# a small token budget, a KV disk tier) and Prometheus (the Debian package)
# in the foreground with its own storage under a mktemp directory, its
# configuration the shipped etc/grafana/prometheus-gpt2d.yml with only the
# target, the key file, the intervals (1 s) and the rules file's path
# replaced.  Then tests/integration/prometheus_test.py loads the daemon,
# and checks through Prometheus's HTTP API that every query of the
# dashboard returns a series, every alert rule is loaded and evaluates
# without error (its signal, the expression before its threshold, returns
# a series), no query or rule names a metric the daemon does not export,
# and `promtool check rules` passes.
# Ends with "N passed, N failed"; exits 77 when prometheus or promtool is
# not installed (Debian: apt-get install prometheus).
#
# Environment (from `make check`): GPT2D_BUILDDIR, GPT2D_SRCDIR,
# GPT2D_TEST_DATA, PYTHON.  By hand:
#   GPT2D_BUILDDIR=$PWD GPT2D_SRCDIR=/path/to/src GPT2D_TEST_DATA=$PWD/tests/data \
#   bash /path/to/src/tests/integration/test_prometheus.sh
set -euo pipefail

# shellcheck source=tests/integration/harness.sh
. "$(dirname "$0")/harness.sh"
prometheus=${PROMETHEUS:-$(command -v prometheus || true)}
promtool=${PROMTOOL:-$(command -v promtool || true)}
[[ -n $prometheus && -n $promtool ]] ||
    skip "prometheus and promtool not installed (Debian: apt-get install prometheus)"
require_tiny
require_curl
[[ -x $gpt2d ]] || { echo "$test_name: $gpt2d not built" >&2; exit 99; }

make_workdir prometheus
prom_pid=
# shellcheck disable=SC2317  # called by the EXIT trap
stop_prometheus() {
    if [[ -n $prom_pid ]] && kill -0 "$prom_pid" 2>/dev/null; then
        kill -TERM "$prom_pid" 2>/dev/null || true
        wait "$prom_pid" 2>/dev/null || true
    fi
    remove_workdir
}
trap stop_prometheus EXIT

# shellcheck source=tests/integration/tally.sh
. "$srcdir/tests/integration/tally.sh"

key=sk-prometheus-reader tight=sk-prometheus-tight
printf '%s name=reader\n%s name=tight tokens-per-minute=40\n' "$key" "$tight" >"$work/keys"
gpt2d_start "$work/gpt2d.log" "$work/port" "$tiny" --slots 2 --threads 1 \
    --api-key-file "$work/keys" --kv-cache-dir "$work/kv"
gpt2d_up

# The shipped configuration, pointed at this daemon.
printf '%s\n' "$key" >"$work/prom-key"
cp "$srcdir/etc/grafana/gpt2d-alerts.yml" "$work/gpt2d-alerts.yml"
sed -e "s|127.0.0.1:8080|127.0.0.1:$port|" \
    -e "s|/etc/prometheus/gpt2d-key|$work/prom-key|" \
    -e 's|scrape_interval: 15s|scrape_interval: 1s|' \
    -e 's|evaluation_interval: 15s|evaluation_interval: 1s|' \
    "$srcdir/etc/grafana/prometheus-gpt2d.yml" >"$work/prometheus.yml"
if ! grep -q "127.0.0.1:$port" "$work/prometheus.yml"; then
    fail "the shipped scrape example names the target 127.0.0.1:8080"
    finish
fi
prom_port=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
(cd "$work" && exec "$prometheus" --config.file="$work/prometheus.yml" \
    --storage.tsdb.path="$work/tsdb" --web.listen-address="127.0.0.1:$prom_port" \
    >"$work/prometheus.log" 2>&1) &
prom_pid=$!

if "$promtool" check rules "$srcdir/etc/grafana/gpt2d-alerts.yml" >"$work/promtool.out" 2>&1; then
    pass "promtool check rules etc/grafana/gpt2d-alerts.yml"
else
    fail "promtool check rules etc/grafana/gpt2d-alerts.yml"
    sed 's/^/  | /' "$work/promtool.out"
fi

rc=0
"$python" "$srcdir/tests/integration/prometheus_test.py" \
    --gpt2d "http://127.0.0.1:$port" --key "$key" --tight-key "$tight" \
    --prometheus "http://127.0.0.1:$prom_port" \
    --dashboard "$srcdir/etc/grafana/gpt2d-dashboard.json" \
    --rules "$srcdir/etc/grafana/gpt2d-alerts.yml" >"$work/out" 2>&1 || rc=$?
cat "$work/out"
if read -r n_pass _ n_fail _ < <(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$work/out"); then
    passed=$((passed + n_pass))
    failed=$((failed + n_fail))
fi
if [[ $rc -ne 0 ]]; then
    fail "prometheus_test.py exits 0 (exit $rc)"
    tail -n 20 "$work/prometheus.log" | sed 's/^/  | /'
fi

gpt2d_stop_clean
finish
