#!/usr/bin/env python3
"""shutdown_tests.py — SIGTERM while 16 streams run (test_shutdown.sh).

Each case starts its own gpt2d on 127.0.0.1 with MODEL (tiny's shape with a
1024-token context, so a stream can outlast a drain deadline), opens 16
streaming completions and waits until every one has sent a token, then sends
SIGTERM and checks:

  - every stream ends on purpose: a final chunk with a finish_reason for each
    choice (then the usage chunk when asked for), or an error event saying
    the server is shutting down; then `data: [DONE]` and the end of the body.
    A stream cut without one of those, or by a socket error, fails;
  - while the server drains, a new connection is refused or reset (the
    listening socket is closed) or answered 503, and a connection opened
    before the signal gets 503 for /health ({"status": "stopping"}) and for a
    new completion (an OpenAI error object);
  - the process exits 0 within --drain-timeout plus the 2 s the daemon gives
    connections to flush their last event;
  - the log says it drained and stopped, and has no sanitizer report.

Cases:
  deadline_cuts_streams   --drain-timeout 1000 against 1000-token streams
                          (and 4 plain requests waiting in the queue): every
                          stream gets the error event, every plain request a
                          503 error object, exit 0 by 1 s + 2 s;
  deadline_lets_finish    --drain-timeout 60000 against 100-token streams:
                          every stream finishes normally with all its tokens,
                          and the process exits as soon as they are done,
                          long before the deadline;
  stalled_client          a client that stopped reading before the signal:
                          its stream still ends with the error event (read
                          from the socket buffers afterwards) and the exit is
                          not held up.

    shutdown_tests.py GPT2D MODEL WORKDIR [CASE...]
Prints one line per check and "N passed, N failed"; exit 1 on any failure.
"""

import http.client
import json
import os
import re
import signal
import socket
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from gpt2d_client import (NO_EOT, Client, Server, StreamError,  # noqa: E402
                          dechunk, error_object_problem, head_complete,
                          read_raw)

N_STREAMS = 16
GRACE_S = 2.0               # main.c: SHUTDOWN_FLUSH_MS
EXIT_SLACK_S = 1.0          # process teardown and our polling
SHUTDOWN_MESSAGE = "the server is shutting down; the request was cancelled"


class Checks:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def check(self, ok, what, detail=""):
        if ok:
            self.passed += 1
            print("ok: " + what, flush=True)
        else:
            self.failed += 1
            print("FAIL: " + what + (("\n    " + detail) if detail else ""), flush=True)
        return ok


class StreamRun:
    """One streaming completion read to its end on its own thread."""

    def __init__(self, client, body):
        self.client = client
        self.body = body
        self.events = []
        self.done = False
        self.error = None
        self.rest = b""
        self.first = threading.Event()
        self.thread = threading.Thread(target=self.run)

    def run(self):
        try:
            es = self.client.open_stream("/v1/completions", self.body)
            try:
                for ev in es:
                    self.events.append(ev)
                    self.first.set()
                self.done = es.done
                self.rest = es.resp.read()
            finally:
                es.close()
        except (OSError, http.client.HTTPException, ValueError, StreamError) as e:
            self.error = e
        finally:
            self.first.set()

    def ending(self, max_tokens, include_usage):
        """'finished', 'cancelled', or why the stream did not end cleanly."""
        if self.error is not None:
            return "cut by %s: %s" % (type(self.error).__name__, self.error)
        if not self.done:
            return "no data: [DONE] after %d events" % len(self.events)
        if self.rest:
            return "bytes after [DONE]: %r" % self.rest[:100]
        if not self.events:
            return "no event at all"
        last = self.events[-1]
        tokens = [ev for ev in self.events
                  if ev.get("choices") and ev["choices"][0].get("finish_reason") is None]
        finals = [ev for ev in self.events
                  if ev.get("choices") and ev["choices"][0].get("finish_reason")]
        if "error" in last:
            # the error event takes the place of the final chunk
            if (error_object_problem(last["error"], "server_error", None, None,
                                     re.escape(SHUTDOWN_MESSAGE)) is None
                    and len(tokens) == len(self.events) - 1):
                return "cancelled"
            return "a wrong error event %r after %d token chunks, %d final chunks" % (
                last, len(tokens), len(finals))
        usage = [ev for ev in self.events if "usage" in ev]
        if len(finals) != 1 or finals[0]["choices"][0]["finish_reason"] != "length":
            return "final chunks %r" % (finals,)
        if len(tokens) != max_tokens:
            return "finished after %d of %d tokens" % (len(tokens), max_tokens)
        if include_usage and (len(usage) != 1 or usage[0] is not last
                              or usage[0]["usage"]["completion_tokens"] != max_tokens):
            return "usage chunk %r" % (usage,)
        if not include_usage and (usage or finals[0] is not last):
            return "events after the final chunk"
        return "finished"


def stream_body(i, max_tokens):
    return {"prompt": "Once upon a time, stream %d" % i, "max_tokens": max_tokens,
            "temperature": 1.0, "seed": 100 + i, "logit_bias": NO_EOT, "stream": True,
            "stream_options": {"include_usage": i % 2 == 0}}


def wait_exit(proc, limit):
    """Seconds until the process exits (None if it does not within limit)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        if proc.poll() is not None:
            return time.monotonic() - t0
        time.sleep(0.01)
    return None


def wait_stopping(keepalive, limit=5.0):
    """Asks /health on an open connection until the server says it is
    stopping (it has taken the signal); returns the last (status, body)."""
    deadline = time.monotonic() + limit
    while True:
        keepalive.request("GET", "/health")
        r = keepalive.getresponse()
        got = (r.status, r.read())
        if r.status != 200 or time.monotonic() > deadline:
            return got
        time.sleep(0.01)


def probe_draining(checks, port, keepalive):
    """What a client sees while the server drains (the signal was sent)."""
    status, body = wait_stopping(keepalive)
    checks.check(status == 503 and json.loads(body) == {"status": "stopping"},
                 "/health on an open connection while draining: 503 stopping",
                 "%d %r" % (status, body))
    try:
        fresh = Client("127.0.0.1", port, timeout=5).get("/health")
        checks.check(fresh.status == 503, "a new connection while draining: 503",
                     repr(fresh))
    except (ConnectionRefusedError, ConnectionResetError, http.client.RemoteDisconnected) as e:
        # reset: it reached the backlog just before the listening socket closed
        checks.check(True, "a new connection while draining is refused (%s)"
                     % type(e).__name__)
    except OSError as e:
        checks.check(False, "a new connection while draining is refused or gets 503", repr(e))
    keepalive.request("POST", "/v1/completions",
                      body=json.dumps({"prompt": "Hi", "max_tokens": 1}),
                      headers={"Content-Type": "application/json"})
    r = keepalive.getresponse()
    body = r.read()
    e = json.loads(body).get("error", {}) if r.status == 503 else {}
    checks.check(r.status == 503 and e.get("type") == "server_error"
                 and e.get("message") == "the server is shutting down",
                 "a new completion while draining: 503 error object",
                 "%d %r" % (r.status, body))


def start_streams(checks, srv, max_tokens):
    client = srv.client(timeout=60)
    runs = [StreamRun(client, stream_body(i, max_tokens)) for i in range(N_STREAMS)]
    for run in runs:
        run.thread.start()
    for run in runs:
        run.first.wait(60)
    checks.check(all(run.events and run.error is None for run in runs),
                 "%d streams each sent a token before SIGTERM" % N_STREAMS,
                 repr([(len(r.events), r.error) for r in runs]))
    return runs


def finish_case(checks, srv, name, drain_s, elapsed):
    limit = drain_s + GRACE_S + EXIT_SLACK_S
    rc = srv.proc.returncode
    checks.check(elapsed is not None and rc == 0,
                 "%s: exit 0 %.2f s after SIGTERM (deadline %.0f s + %.0f s grace)"
                 % (name, elapsed or -1, drain_s, GRACE_S),
                 "rc %r after %r s\n%s" % (rc, elapsed, srv.log_tail()))
    checks.check(elapsed is not None and elapsed <= limit,
                 "%s: exited within %.1f s" % (name, limit), "took %r s" % elapsed)
    srv.kill()
    with open(srv.log_path, "rb") as f:
        log = f.read().decode("utf-8", "replace")
    checks.check("draining" in log and "stopped" in log,
                 "%s: the log says it drained and stopped" % name, srv.log_tail())
    report = srv.sanitizer_report()
    checks.check(report is None, "%s: no sanitizer report" % name, report or "")


# Every engine step lasts at least 3 ms (test instrumentation): a 1000-token
# stream runs for 3 s or more, past the 1 s drain deadline, and a 100-token
# one is still running while the probes run, on a machine of any speed.
PACED = {"GPT2D_TEST_MIN_STEP_US": "3000"}


def case_deadline_cuts_streams(checks, gpt2d, model, workdir):
    drain_ms = 1000
    srv = Server(gpt2d, model, workdir, ["--slots", str(N_STREAMS), "--threads", "2",
                                         "--drain-timeout", str(drain_ms)],
                 env=PACED, name="shutdown-cut").start(timeout=60)
    try:
        runs = start_streams(checks, srv, 1000)
        keepalive = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
        keepalive.request("GET", "/health")
        checks.check(keepalive.getresponse().read() == b'{"status":"ok"}',
                     "cut: /health before SIGTERM is ok")
        # every slot is taken: these wait in the queue when the signal comes
        plain = [{} for _ in range(4)]

        def plain_request(box, i):
            try:
                box["r"] = srv.client(timeout=60).post("/v1/completions", {
                    "prompt": "Queued %d" % i, "max_tokens": 1000, "logit_bias": NO_EOT})
            except OSError as e:
                box["r"] = e
        waiters = [threading.Thread(target=plain_request, args=(plain[i], i))
                   for i in range(4)]
        for w in waiters:
            w.start()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            m = srv.client().metrics()
            if m.get("gpt2d_queue_depth", 0) >= 4:
                break
            time.sleep(0.02)
        checks.check(m.get("gpt2d_queue_depth", 0) >= 4,
                     "cut: 4 plain requests wait in the queue", repr(m.get("gpt2d_queue_depth")))
        t0 = time.monotonic()
        srv.proc.send_signal(signal.SIGTERM)
        probe_draining(checks, srv.port, keepalive)
        elapsed = wait_exit(srv.proc, drain_ms / 1e3 + GRACE_S + 10)
        if elapsed is not None:
            elapsed = time.monotonic() - t0      # from the signal
        for run in runs:
            run.thread.join(10)
        for w in waiters:
            w.join(10)
        endings = [run.ending(1000, run.body["stream_options"]["include_usage"])
                   for run in runs]
        checks.check(endings == ["cancelled"] * N_STREAMS,
                     "cut: every stream ends with the shutdown error event and [DONE]",
                     repr(endings))
        got = [box.get("r") for box in plain]
        ok = all(getattr(r, "status", None) == 503
                 and r.json == {"error": {"message": SHUTDOWN_MESSAGE, "type": "server_error",
                                          "param": None, "code": None}} for r in got)
        checks.check(ok, "cut: every queued plain request gets a 503 error object",
                     repr(got))
        finish_case(checks, srv, "cut", drain_ms / 1e3, elapsed)
    finally:
        srv.kill()


def case_deadline_lets_finish(checks, gpt2d, model, workdir):
    # long enough to be running while the probes run, far within the drain
    drain_ms = 60000
    max_tokens = 100
    srv = Server(gpt2d, model, workdir, ["--slots", str(N_STREAMS), "--threads", "2",
                                         "--drain-timeout", str(drain_ms)],
                 env=PACED, name="shutdown-finish").start(timeout=60)
    try:
        runs = start_streams(checks, srv, max_tokens)
        keepalive = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
        keepalive.request("GET", "/health")
        checks.check(keepalive.getresponse().read() == b'{"status":"ok"}',
                     "finish: /health before SIGTERM is ok")
        t0 = time.monotonic()
        srv.proc.send_signal(signal.SIGTERM)
        probe_draining(checks, srv.port, keepalive)
        for run in runs:
            run.thread.join(60)
        all_done = time.monotonic() - t0
        elapsed = wait_exit(srv.proc, drain_ms / 1e3 + GRACE_S + 10)
        if elapsed is not None:
            elapsed = time.monotonic() - t0      # from the signal
        endings = [run.ending(max_tokens, run.body["stream_options"]["include_usage"])
                   for run in runs]
        checks.check(endings == ["finished"] * N_STREAMS,
                     "finish: every stream finishes with all %d tokens, its final chunk "
                     "and [DONE]" % max_tokens, repr(endings))
        checks.check(elapsed is not None and elapsed < all_done + 1.5,
                     "finish: exits once the streams are done (%.2f s after them), not at "
                     "the deadline" % ((elapsed or 0) - all_done), "elapsed %r" % elapsed)
        finish_case(checks, srv, "finish", drain_ms / 1e3, elapsed)
    finally:
        srv.kill()


def open_stalled_stream(port, body):
    """A streaming request whose client reads the response headers and then
    stops reading, with a small receive buffer."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.settimeout(30)
    s.connect(("127.0.0.1", port))
    raw = json.dumps(body).encode("utf-8")
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
              b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(raw)
              + raw)
    head, _ = read_raw(s, 30, head_complete, size=1)
    return s, head


def read_chunked_events(sock):
    """Reads a chunked body to the end of the connection; returns its SSE
    data payloads and whether the body ended with the last (empty) chunk."""
    raw, _ = read_raw(sock, sock.gettimeout())
    body, ended = dechunk(raw)
    events = [e[len(b"data: "):] for e in body.split(b"\n\n") if e.startswith(b"data: ")]
    return events, ended


def case_stalled_client(checks, gpt2d, model, workdir):
    """A client that stopped reading before the signal: its stream still
    ends on purpose (the last events wait in the socket buffers), and it
    does not hold the exit past the deadline and the grace."""
    drain_ms = 1000
    srv = Server(gpt2d, model, workdir, ["--slots", "4", "--threads", "2",
                                         "--drain-timeout", str(drain_ms)],
                 env=PACED, name="shutdown-stalled").start(timeout=60)
    stalled = None
    try:
        stalled, head = open_stalled_stream(srv.port, stream_body(0, 1000))
        checks.check(head.startswith(b"HTTP/1.1 200"), "stalled: the stream was accepted",
                     repr(head[:100]))
        run = StreamRun(srv.client(timeout=60), stream_body(1, 1000))
        run.thread.start()
        deadline = time.monotonic() + 60
        while len(run.events) < 100 and run.thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        checks.check(len(run.events) >= 100, "stalled: the reading stream ran 100 tokens",
                     "%d events" % len(run.events))
        t0 = time.monotonic()
        srv.proc.send_signal(signal.SIGTERM)
        elapsed = wait_exit(srv.proc, drain_ms / 1e3 + GRACE_S + 10)
        if elapsed is not None:
            elapsed = time.monotonic() - t0      # from the signal
        run.thread.join(10)
        ending = run.ending(1000, True)
        checks.check(ending == "cancelled", "stalled: the reading stream gets the error event",
                     ending)
        events, ended = read_chunked_events(stalled)
        last = json.loads(events[-2]) if len(events) >= 2 else None
        checks.check(ended and events[-1] == b"[DONE]" and isinstance(last, dict)
                     and last.get("error", {}).get("message") == SHUTDOWN_MESSAGE,
                     "stalled: read afterwards, its stream ends with the error event, "
                     "[DONE] and the last chunk",
                     "ended %r, last events %r" % (ended, events[-2:]))
        finish_case(checks, srv, "stalled", drain_ms / 1e3, elapsed)
    finally:
        if stalled is not None:
            stalled.close()
        srv.kill()


def case_signals_in_a_row(checks, gpt2d, model, workdir):
    """SIGHUP, SIGHUP, SIGTERM back to back, while the main thread is still
    busy with the first: every one reaches it (a thread a library started
    before main does not block them, and used to die of them by default),
    so the daemon reloads, drains and exits 0, five times of five."""
    for i in range(5):
        srv = Server(gpt2d, model, workdir, ["--slots", "1", "--threads", "1"],
                     name="shutdown-signals").start(timeout=60)
        try:
            for sig in (signal.SIGHUP, signal.SIGHUP, signal.SIGTERM):
                srv.proc.send_signal(sig)
            elapsed = wait_exit(srv.proc, 20)
            rc = srv.proc.returncode
            log = srv.log_tail()
        finally:
            srv.kill()
        checks.check(elapsed is not None and rc == 0,
                     "signals in a row %d: reloads, drains, exits 0" % i,
                     "exit %r\n%s" % (rc, log))
        checks.check("SIGTERM: draining" in log and "stopped" in log,
                     "signals in a row %d: the log shows the drain and the stop"
                     % i, log)


CASES = {
    "signals_in_a_row": case_signals_in_a_row,
    "deadline_cuts_streams": case_deadline_cuts_streams,
    "deadline_lets_finish": case_deadline_lets_finish,
    "stalled_client": case_stalled_client,
}


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    gpt2d, model, workdir = argv[:3]
    selected = argv[3:] or list(CASES)
    checks = Checks()
    for name in selected:
        print("== " + name, flush=True)
        try:
            CASES[name](checks, gpt2d, model, workdir)
        except (AssertionError, RuntimeError, OSError, KeyError, ValueError) as e:
            checks.check(False, "%s ran to the end" % name, "%s: %s" % (type(e).__name__, e))
    print("%d passed, %d failed" % (checks.passed, checks.failed), flush=True)
    return 0 if checks.failed == 0 and checks.passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
