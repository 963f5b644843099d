"""fairlib.py — what the fairness benchmarks (fairness.py, outside_queue.py)
share: a gpt2d on 127.0.0.1 with API keys A, B and C, a streamed completion
timed token by token, and closed-loop clients.  Standard library only."""

import contextlib
import http.client
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

KEY_A, KEY_B, KEY_C = "bench-key-a", "bench-key-b", "bench-key-c"


def add_server_args(ap):
    """The flags that start the daemon: --gpt2d, --model, --threads, --args."""
    ap.add_argument("--gpt2d", default="build/src/gpt2d")
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--args", default="", help="more gpt2d flags, space-separated")


def start(args, workdir):
    """gpt2d with a keys file naming keys A, B and C a, b and c, each with
    the attributes args.key_a, key_b, key_c give it (none when absent);
    returns (process, port) once /health answers."""
    keys = os.path.join(workdir, "keys")
    with open(keys, "w") as f:
        for key, name in ((KEY_A, "a"), (KEY_B, "b"), (KEY_C, "c")):
            f.write("%s name=%s %s\n" % (key, name, getattr(args, "key_" + name, "")))
    port_file = os.path.join(workdir, "port")
    log = open(os.path.join(workdir, "gpt2d.log"), "w")
    cmd = [args.gpt2d, "--model", args.model, "--port", "0", "--port-file", port_file,
           "--threads", str(args.threads), "--api-key-file", keys] + args.args.split()
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 120:
        if proc.poll() is not None:
            sys.exit("gpt2d exited: see %s" % log.name)
        try:
            with open(port_file) as f:
                port = int(f.read().strip())
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return proc, port
        except (OSError, ValueError):
            pass
        time.sleep(0.2)
    proc.kill()
    sys.exit("gpt2d did not start")


@contextlib.contextmanager
def running(args, prefix):
    """start() in a temporary directory: yields (process, port), and stops
    the daemon (SIGTERM, SIGKILL after 30 s) and removes the directory at
    the end."""
    with tempfile.TemporaryDirectory(prefix=prefix) as workdir:
        proc, port = start(args, workdir)
        try:
            yield proc, port
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


def stream(port, key, body, timeout=300):
    """Streamed POST /v1/completions: (status, ttft seconds, the seconds at
    which each chunk came)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    t0 = time.monotonic()
    c.request("POST", "/v1/completions", json.dumps(dict(body, stream=True)),
              {"Authorization": "Bearer " + key, "Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        r.read()
        c.close()
        return r.status, None, []
    times = []
    for line in r:
        line = line.strip()
        if not line.startswith(b"data: "):
            continue
        if line == b"data: [DONE]":
            break
        times.append(time.monotonic() - t0)
    c.close()
    return 200, (times[0] if times else None), times


def tokens_per_second(port, key, n):
    """Key `key`'s stream of n tokens (end of text banned): tokens/s from
    its first token to its last, or None."""
    st, _, times = stream(port, key, {"prompt": [464], "max_tokens": n,
                                      "logit_bias": {"50256": -100}})
    if st != 200 or len(times) < 2:
        return None
    return (len(times) - 1) / (times[-1] - times[0])


class Flood:
    """`n` closed-loop clients calling `send()` until stopped; send returns
    (status, Retry-After or None, tokens used).  Answers are counted by
    status; after anything but a 200 a client waits 50 ms, or with `obey`
    the Retry-After it was given."""

    def __init__(self, n, send, obey=False):
        self.stop = threading.Event()
        self.status = {}
        self.tokens = 0
        self.retry_afters = []
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.run, args=(send, obey))
                        for _ in range(n)]
        for t in self.threads:
            t.start()

    def run(self, send, obey):
        while not self.stop.is_set():
            retry_after = None
            try:
                st, retry_after, tokens = send()
            except OSError:
                st, tokens = "error", 0
            with self.lock:
                self.status[st] = self.status.get(st, 0) + 1
                self.tokens += tokens
                if retry_after is not None:
                    self.retry_afters.append(retry_after)
            if st != 200:
                self.stop.wait(retry_after if obey and retry_after else 0.05)

    def end(self):
        self.stop.set()
        for t in self.threads:
            t.join(600)
