#!/usr/bin/env python3
"""outside_queue.py — work outside the engine's queue: /tokenize and
/detokenize floods against a running stream, and clients that never read
(issue 19, findings 2 and 3).  Standard library only.

Starts gpt2d (--gpt2d, --model; default limits unless --args adds some)
on 127.0.0.1 with two API keys, A (the flood) and B (everyone else), then:

  single   One 1 MB /tokenize, then one 1 MB /detokenize (the bodies below),
           each read whole, --rounds times: the daemon's peak RSS above
           its RSS before (VmHWM, reset through /proc/PID/clear_refs), and
           its CPU time (utime + stime), medians.

  stream   Key B streams --stream-tokens tokens alone (idle tokens/s), then
           again while --loops clients of key A POST a 1 MB /tokenize body
           over and over, reading every answer (they share the machine:
           --client-nice keeps their own CPU out of the figure).  Repeated
           --rounds times, idle and loaded interleaved.  Reported: B's
           tokens/s (median), the ratio, and A's answers by status.

  unread   --unread clients of key A each send a 1 MB body, half to
           /detokenize (the vocabulary's longest token, 174,000 times:
           22 MB of text out) and half to /tokenize (1.04 M tokens out),
           and never read a byte.  Meanwhile key B sends a completion
           (--completion-tokens tokens) and times it.  Reported: the
           daemon's RSS growth (VmRSS, and VmHWM: the peak) over
           --hold seconds, and B's completion time.

Everything is bounded: every phase has a time limit, the server is stopped
at the end.  Example (GPT-2 124M shapes, as `make bench` generates them):

  bench/outside_queue.py --gpt2d build/src/gpt2d \\
      --model build/bench/models/gpt2-124m-random --threads 2
"""

import argparse
import http.client
import json
import os
import socket
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fairlib import (KEY_A, KEY_B, Flood, add_server_args,  # noqa: E402
                     running, tokens_per_second)

LONGEST_TOKEN = 35496           # 128 bytes of text in GPT-2's vocabulary
TOKENIZE_BODY = json.dumps({"content": "a." * 520000}).encode()
DETOKENIZE_BODY = json.dumps({"tokens": [LONGEST_TOKEN] * 174000},
                             separators=(",", ":")).encode()


def kib(pid, field):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError("no %s in /proc/%d/status" % (field, pid))


def request(port, key, path, body, timeout=300):
    """POST `body` (bytes) and read the whole answer: (status, seconds)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    t0 = time.monotonic()
    c.request("POST", path, body, {"Authorization": "Bearer " + key,
                                   "Content-Type": "application/json"})
    r = c.getresponse()
    r.read()
    c.close()
    return r.status, time.monotonic() - t0


def tokenize_loops(port, n):
    """`n` clients of key A sending the 1 MB /tokenize body over and over,
    reading every answer (fairlib.Flood)."""
    return Flood(n, lambda: (request(port, KEY_A, "/tokenize", TOKENIZE_BODY)[0], None, 0))


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def single_case(args, proc, port):
    for path, body in (("/tokenize", TOKENIZE_BODY), ("/detokenize", DETOKENIZE_BODY)):
        peaks, cpus = [], []
        for _ in range(args.rounds):
            before = kib(proc.pid, "VmRSS")
            with open("/proc/%d/clear_refs" % proc.pid, "w") as f:
                f.write("5")        # VmHWM := VmRSS
            cpu = cpu_seconds(proc.pid)
            st, _ = request(port, KEY_B, path, body)
            cpus.append(cpu_seconds(proc.pid) - cpu)
            peaks.append((kib(proc.pid, "VmHWM") - before) / 1024.0)
            if st != 200:
                print("%s: HTTP %s" % (path, st))
        print("one 1 MB %s: peak RSS +%.1f MB %r, CPU %.0f ms (medians)" % (
            path, statistics.median(peaks), [round(p, 1) for p in peaks],
            1e3 * statistics.median(cpus)))


def stream_case(args, port):
    idle, loaded, status = [], [], {}
    for _ in range(args.rounds):
        idle.append(tokens_per_second(port, KEY_B, args.stream_tokens) or 0.0)
        loops = tokenize_loops(port, args.loops)
        time.sleep(args.warmup)
        loaded.append(tokens_per_second(port, KEY_B, args.stream_tokens) or 0.0)
        loops.end()
        for k, v in loops.status.items():
            status[k] = status.get(k, 0) + v
    i, l = statistics.median(idle), statistics.median(loaded)
    print("B stream tokens/s: idle %.1f %r, under %d x 1 MB /tokenize loops %.1f %r "
          "(%.0f %%); A's answers: %r" % (
              i, [round(x, 1) for x in idle], args.loops, l,
              [round(x, 1) for x in loaded], 100.0 * l / (i or 1), status))


def unread_case(args, proc, port):
    base_rss, base_hwm = kib(proc.pid, "VmRSS"), kib(proc.pid, "VmHWM")
    socks = []
    for i in range(args.unread):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", port))
        path, body = (("/detokenize", DETOKENIZE_BODY) if i % 2 == 0
                      else ("/tokenize", TOKENIZE_BODY))
        s.sendall(b"POST %s HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer %s\r\n"
                  b"Content-Length: %d\r\n\r\n" % (path.encode(), KEY_A.encode(),
                                                    len(body)) + body)
        socks.append(s)
    sent = time.monotonic()
    done = {}

    def completion():
        done["result"] = request(port, KEY_B, "/v1/completions", json.dumps({
            "prompt": [464], "max_tokens": args.completion_tokens,
            "logit_bias": {"50256": -100}}).encode())
    t = threading.Thread(target=completion)
    t.start()
    most = 0
    while time.monotonic() - sent < args.hold:
        most = max(most, kib(proc.pid, "VmRSS"))
        time.sleep(0.05)
    t.join(600)
    hwm = kib(proc.pid, "VmHWM")
    for s in socks:
        s.close()
    st, took = done.get("result", ("none", 0.0))
    print("%d unread 1 MB bodies: RSS %d MB -> most %d MB (+%d MB), VmHWM +%d MB "
          "over %.0f s; B's completion (%d tokens): HTTP %s in %.2f s" % (
              args.unread, base_rss // 1024, most // 1024, (most - base_rss) // 1024,
              (hwm - base_hwm) // 1024, args.hold, args.completion_tokens, st, took))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_server_args(ap)
    ap.add_argument("--case", default="single,stream,unread")
    ap.add_argument("--loops", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--stream-tokens", type=int, default=100)
    ap.add_argument("--unread", type=int, default=64)
    ap.add_argument("--hold", type=float, default=10.0)
    ap.add_argument("--completion-tokens", type=int, default=16)
    ap.add_argument("--client-nice", type=int, default=0,
                    help="run this script's clients at this nice value, so that "
                    "on a small machine their own CPU is not what slows the stream")
    args = ap.parse_args()
    # keys A and B with the options' limits (no attributes of their own)
    with running(args, "gpt2d-outside-") as (proc, port):
        os.nice(args.client_nice)       # after start: the daemon keeps its own
        if "single" in args.case:
            single_case(args, proc, port)
        if "stream" in args.case:
            stream_case(args, port)
        if "unread" in args.case:
            unread_case(args, proc, port)


if __name__ == "__main__":
    main()
