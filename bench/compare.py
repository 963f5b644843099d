#!/usr/bin/env python3
"""compare.py — several servers under the same bench/load.py bursts,
their runs interleaved, medians side by side.

On a shared machine a figure from one minute says little about one from
the next, so each repeat runs every target once, one after the other (the
order rotated by one each repeat, so no target always follows the same
one), and the summary gives each target's median over all its rounds.
Targets:

  --gpt2d NAME BINARY [VAR=VALUE ...]   gpt2d, started by load.py on --model
                                        with these environment variables
                                        (any option: GPT2D_STEP_COST=0, ...)
  --llama NAME BINARY GGUF [OPTION ...] llama.cpp's server on the same
                                        weights converted to GGUF, started on
                                        --llama-port with --parallel K, a
                                        1024-position slot per client,
                                        --threads for -t and -tb, and these
                                        options after them; stopped after
                                        its run

Every run is `load.py --clients K --rounds R --json ...
--utf8-only MODEL/vocab.json`: the tokens that are not UTF-8 on their own
are banned (llama.cpp's server ends a stream whose text is not valid
UTF-8), so both servers get the same requests.  Each run is bounded by --timeout; a server that has not
stopped 10 s after SIGTERM is killed.

Example (issue 16: the step-cost bound off and on, beside llama.cpp):

  python3 bench/compare.py --model build/bench/models/gpt2-124m-random \\
      --gpt2d off build/src/gpt2d GPT2D_STEP_COST=0 \\
      --gpt2d on build/src/gpt2d \\
      --llama llama $PEER/build-cpu/bin/llama-server $PEER/gpt2-f32.gguf \\
      --repeats 5 --clients 16 --rounds 1

Prints one line per round as it comes, then the medians (tokens/s, TTFT
p50, chunk-gap p50 and p99, and gpt2d's engine steps in a round: nan for
llama.cpp) and how idle the machine was before each run (--idle makes
each run wait for a quieter moment, up to --max-wait seconds).
--json FILE writes every round's numbers with its target and repeat.
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
LOAD = os.path.join(HERE, "load.py")
FIGURES = (("tokens_per_s", "tok/s", "%.1f"), ("ttft_p50_ms", "TTFT p50 ms", "%.0f"),
           ("itl_p50_ms", "gap p50 ms", "%.1f"), ("itl_p99_ms", "gap p99 ms", "%.1f"),
           ("engine_steps", "steps", "%.0f"))


def healthy(port):
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def stop(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def cpu_idle(seconds=2.0):
    """The share of CPU time the whole machine left idle over `seconds`
    (/proc/stat), 0-100."""
    def sample():
        with open("/proc/stat", encoding="ascii") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        return fields[3] + fields[4], sum(fields)      # idle + iowait, all
    idle0, all0 = sample()
    time.sleep(seconds)
    idle1, all1 = sample()
    return 100.0 * (idle1 - idle0) / max(1, all1 - all0)


def wait_quiet(args):
    """Waits (at most --max-wait seconds) until the machine is at least
    --idle percent idle; returns the last idle share seen."""
    deadline = time.monotonic() + args.max_wait
    idle = cpu_idle()
    while idle < args.idle and time.monotonic() < deadline:
        idle = cpu_idle()
    return idle


def load_args(args, out):
    return [sys.executable, LOAD, "--clients", str(args.clients), "--rounds",
            str(args.rounds), "--threads", str(args.threads), "--json", out,
            "--utf8-only", os.path.join(args.model, "vocab.json")]


def run_gpt2d(args, target, out):
    _, binary, env_words = target
    env = dict(os.environ)
    for word in env_words:
        var, _, value = word.partition("=")
        env[var] = value
    cmd = load_args(args, out) + ["--gpt2d", binary, "--model", args.model]
    return subprocess.run(cmd, env=env, timeout=args.timeout,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True).stdout


def run_llama(args, target, out):
    _, binary, (gguf, *extra) = target
    log = open(os.path.join(os.path.dirname(out), "llama.log"), "w")
    cmd = [binary, "-m", gguf, "--host", "127.0.0.1", "--port", str(args.llama_port),
           "-c", str(1024 * args.clients), "--parallel", str(args.clients),
           "-t", str(args.threads), "-tb", str(args.threads), "--no-webui"] + extra
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while not healthy(args.llama_port):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("compare.py: %s did not start: see %s" % (binary, log.name))
            time.sleep(0.2)
        cmd = load_args(args, out) + ["http://127.0.0.1:%d" % args.llama_port,
                                      "--pid", str(proc.pid)]
        return subprocess.run(cmd, timeout=args.timeout, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True).stdout
    finally:
        stop(proc)
        log.close()


def median(rows, key):
    values = [r[key] for r in rows if r.get(key) is not None and r[key] == r[key]]
    return statistics.median(values) if values else float("nan")


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="the gpt2d model directory")
    ap.add_argument("--gpt2d", nargs="+", action="append", default=[],
                    metavar="NAME BINARY [VAR=VALUE]")
    ap.add_argument("--llama", nargs="+", action="append", default=[],
                    metavar="NAME BINARY GGUF [OPTION]")
    ap.add_argument("--llama-port", type=int, default=18150)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=1, help="load.py rounds per run")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per run")
    ap.add_argument("--idle", type=float, default=0.0, metavar="PERCENT",
                    help="before each run, wait until the machine is this idle")
    ap.add_argument("--max-wait", type=float, default=120.0,
                    help="seconds to wait for --idle before running anyway")
    ap.add_argument("--json", help="write every round here")
    args = ap.parse_args(argv)
    targets = []
    for t in args.gpt2d:
        if len(t) < 2:
            ap.error("--gpt2d needs NAME BINARY")
        targets.append(("gpt2d", (t[0], t[1], t[2:])))
    for t in args.llama:
        if len(t) < 3:
            ap.error("--llama needs NAME BINARY GGUF")
        targets.append(("llama", (t[0], t[1], t[2:])))
    if not targets or args.repeats < 1:
        ap.error("give at least one target and one repeat")

    rows = []
    with tempfile.TemporaryDirectory(prefix="gpt2d-compare.") as tmp:
        for rep in range(args.repeats):
            for i in range(len(targets)):
                kind, target = targets[(i + rep) % len(targets)]
                out = os.path.join(tmp, "run.json")
                idle = wait_quiet(args)
                load = os.getloadavg()[0]
                run = run_gpt2d if kind == "gpt2d" else run_llama
                text = run(args, target, out)
                try:
                    with open(out, encoding="utf-8") as f:
                        got = json.load(f)
                    os.unlink(out)
                except (OSError, ValueError):
                    print("repeat %d %-10s wrote no figures:\n%s" % (rep, target[0], text),
                          flush=True)
                    continue
                for r in got:
                    r.update(target=target[0], repeat=rep, load_before=load,
                             idle_before=idle)
                    rows.append(r)
                    print("repeat %d %-10s idle %3.0f%% load %4.1f  %s  errors %d" % (
                        rep, target[0], idle, load, "  ".join(
                            (name + " " + fmt) % r[key] for key, name, fmt in FIGURES
                            if r.get(key) is not None), len(r["errors"])), flush=True)
    print("\nmedians over every round (%d repeats, K = %d):" % (args.repeats, args.clients))
    print("%-10s %6s %8s %12s %11s %11s %6s %7s  %s" % (
        "target", "rounds", "tok/s", "TTFT p50 ms", "gap p50 ms", "gap p99 ms",
        "steps", "errors", "idle % at start"))
    for _, (name, _, _) in targets:
        mine = [r for r in rows if r["target"] == name]
        print("%-10s %6d %8.1f %12.0f %11.1f %11.1f %6.0f %7d  %s" % (
            name, len(mine), median(mine, "tokens_per_s"), median(mine, "ttft_p50_ms"),
            median(mine, "itl_p50_ms"), median(mine, "itl_p99_ms"),
            median(mine, "engine_steps"),
            sum(len(r["errors"]) for r in mine),
            " ".join("%.0f" % r["idle_before"] for r in mine)))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
