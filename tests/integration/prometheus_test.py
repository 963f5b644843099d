#!/usr/bin/env python3
"""prometheus_test.py — the shipped dashboard and alert rules, evaluated by
a real Prometheus that scrapes a real gpt2d (run by test_prometheus.sh,
which starts both).

Loads the daemon (completions whole and streamed, chat, a stored response
read back, a 400, a key's token budget spent until 429), waits until
Prometheus has scraped it, then checks:
  - the dashboard's shape (unique panel ids, 24 columns, every target with
    a refId and the ${datasource} variable);
  - every dashboard query, its $job and $__rate_interval set as Grafana
    would, returns at least one series;
  - every metric a query or a rule names is one the daemon exports;
  - the rules Prometheus loaded are the file's, each evaluated without
    error, and each one's signal (the expression before its threshold)
    returns a series.
Prints "ok: ..." / "FAIL: ..." per check and "N passed, N failed"; exits 0
only when every check passed.  Standard library only."""

import argparse
import json
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

passed = failed = 0


def check(ok, name, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print("ok: " + name)
    else:
        failed += 1
        print("FAIL: " + name + (("\n    " + detail) if detail else ""))
    return ok


def call(url, body=None, key=None, method=None):
    """(status, parsed JSON or text) of one request; never raises on a
    status."""
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = "Bearer " + key
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers=headers,
                                 method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            status, raw = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode("utf-8", "replace")


def load(base, key, tight):
    """Traffic that touches every series the dashboard draws; returns the
    statuses seen."""
    seen = set()
    for i in range(6):
        for path, body in (
                ("/v1/completions", {"prompt": "Hello %d" % i,
                                     "max_tokens": 8, "seed": i}),
                ("/v1/completions", {"prompt": "Streamed %d" % i,
                                     "max_tokens": 8, "stream": True}),
                ("/v1/chat/completions", {"messages": [
                    {"role": "user", "content": "Hi %d" % i}],
                    "max_tokens": 6}),
        ):
            status, _ = call(base + path, body, key)
            seen.add(status)
    status, r = call(base + "/v1/responses", {"input": "Stored",
                                              "max_output_tokens": 4}, key)
    seen.add(status)
    if status == 200:
        seen.add(call(base + "/v1/responses/" + r["id"], key=key)[0])
    seen.add(call(base + "/v1/completions", {"prompt": 5}, key)[0])
    for _ in range(6):  # 15 tokens a request against 40 a minute
        seen.add(call(base + "/v1/completions",
                      {"prompt": "Tight", "max_tokens": 12}, tight)[0])
    return seen


def query(prom, expr):
    url = prom + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    status, r = call(url)
    if status != 200 or not isinstance(r, dict) or r.get("status") != "success":
        return None, str(r)[:300]
    return r["data"]["result"], ""


def grafana(expr):
    """A dashboard query as Grafana sends it for job gpt2d."""
    return expr.replace("$__rate_interval", "1m").replace("$job", "gpt2d")


METRIC = re.compile(r"\b(gpt2d_[a-z0-9_]+)")
THRESHOLD = re.compile(r"^(.*?)\s*(==|!=|>=|<=|>|<)\s*[-0-9.e+]+\s*$", re.S)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpt2d", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--tight-key", required=True)
    ap.add_argument("--prometheus", required=True)
    ap.add_argument("--dashboard", required=True)
    ap.add_argument("--rules", required=True)
    a = ap.parse_args()
    prom = a.prometheus

    dash = json.load(open(a.dashboard, encoding="utf-8"))
    panels = dash["panels"]
    ids = [p["id"] for p in panels]
    targets = [(p["title"], t) for p in panels for t in p.get("targets", [])]
    shape = (len(ids) == len(set(ids)) and
             all(p["gridPos"]["x"] + p["gridPos"]["w"] <= 24 for p in panels) and
             all(t.get("refId") and t.get("expr") and
                 t["datasource"]["uid"] == "${datasource}"
                 for _, t in targets) and
             {v["name"] for v in dash["templating"]["list"]} ==
             {"datasource", "job"})
    check(shape, "the dashboard: unique ids, 24 columns, every target a "
          "query on ${datasource}, variables datasource and job")

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if urllib.request.urlopen(prom + "/-/ready", timeout=2).status == 200:
                break
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    else:
        check(False, "Prometheus is ready within 30 s")
        return finish()

    seen = load(a.gpt2d, a.key, a.tight_key)
    check({200, 400, 429} <= seen, "the load had answers 200, 400 and 429",
          "statuses: %s" % sorted(seen))

    # Prometheus has scraped the load's end: its counter is the daemon's.
    _, text = call(a.gpt2d + "/metrics", key=a.key)
    want = float(re.search(r"^gpt2d_generated_tokens_total (\S+)$", text,
                           re.M).group(1))
    deadline = time.monotonic() + 30
    got = None
    while time.monotonic() < deadline:
        res, _ = query(prom, 'gpt2d_generated_tokens_total{job="gpt2d"}')
        got = float(res[0]["value"][1]) if res else None
        if got == want:
            break
        time.sleep(0.5)
    check(got == want, "Prometheus scraped the daemon (generated tokens %s)"
          % want, "Prometheus has %s" % got)
    time.sleep(2)  # a second sample after the load, for rate()

    names = set()
    for title, t in targets:
        expr = grafana(t["expr"])
        names |= set(METRIC.findall(expr))
        res, err = query(prom, expr)
        check(bool(res), "dashboard %r %s returns a series" % (title, t["refId"]),
              "%s -> %s" % (expr, err or "no series"))

    # the rules Prometheus loaded, once each has been evaluated
    want_rules = len(re.findall(r"^\s*- alert:", open(a.rules).read(), re.M))
    deadline = time.monotonic() + 30
    rules = []
    while time.monotonic() < deadline:
        status, r = call(prom + "/api/v1/rules")
        rules = [rule for g in (r["data"]["groups"] if status == 200 else [])
                 for rule in g["rules"]]
        if (len(rules) == want_rules and
                all(rule.get("lastEvaluation", "").startswith("2")
                    and not rule["lastEvaluation"].startswith("0001")
                    for rule in rules)):
            break
        time.sleep(0.5)
    check(len(rules) == want_rules and want_rules > 0,
          "Prometheus loaded the %d alert rules of the file" % want_rules,
          "loaded %d" % len(rules))
    for rule in rules:
        q = rule["query"]
        names |= set(METRIC.findall(q))
        check(rule.get("health") == "ok" and not rule.get("lastError"),
              "rule %s evaluates without error" % rule["name"],
              "%s: %s" % (rule.get("health"), rule.get("lastError")))
        m = THRESHOLD.match(q)
        signal = m.group(1) if m else q
        res, err = query(prom, signal)
        check(m is not None and bool(res),
              "rule %s's signal returns a series" % rule["name"],
              "%s -> %s" % (signal, err or "no series"))

    for name in sorted(names):
        res, err = query(prom, 'count({__name__="%s", job="gpt2d"})' % name)
        check(bool(res), "%s is exported by the daemon" % name,
              err or "no such series")
    return finish()


def finish():
    print("%d passed, %d failed" % (passed, failed))
    return 0 if failed == 0 and passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
