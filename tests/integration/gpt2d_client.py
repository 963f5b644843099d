#!/usr/bin/env python3
"""gpt2d_client.py — a small stdlib-only client for a gpt2d on loopback.

Used by the integration suites (api_tests.py, limits_tests.py,
shutdown_tests.py), the soak (tests/soak/soak.py) and the load benchmark
(bench/load.py).  Nothing here knows about the model; it speaks HTTP.

    c = Client("127.0.0.1", port)
    r = c.post("/v1/completions", {"prompt": "Hi", "max_tokens": 4})
    r.status, r.headers, r.json
    for event in c.stream("/v1/completions", {..., "stream": True}):
        ...                     # parsed `data:` JSON objects, up to [DONE]

    srv = Server(gpt2d_binary, model_dir, workdir, extra_args=[...])
    srv.start()                 # --port 0 --port-file, waits for /health 200
    rc, seconds = srv.stop()    # SIGTERM, waits for the exit

    sock.sendall(http_request("POST", "/tokenize", b'{"content": "hi"}'))
    r = read_response(sock)     # a Response, off a raw socket
    data, reset = read_raw(sock, until=...)  # bytes as they came, to a point
    error_problem(r, 400, param="prompt")    # None, or what is wrong with
                                             # r as an OpenAI error object
    {"logit_bias": NO_EOT}      # generation that never ends early

    percentile(latencies, 99)   # the soak's and load.py's figures

Only ever point it at 127.0.0.1.
"""

import http.client
import json
import os
import re
import signal
import subprocess
import time

# GPT-2's <|endoftext|>, and a logit_bias that keeps it from being sampled,
# so a generation runs to max_tokens.
EOT = 50256
NO_EOT = {str(EOT): -100}

# The error object's "type" for each status (README's error table); any
# other status is an invalid_request_error.
ERROR_TYPES = {401: "authentication_error", 429: "rate_limit_error",
               500: "server_error", 503: "server_error"}
ERROR_KEYS = {"message", "type", "param", "code"}


class Response:
    """A finished HTTP exchange: status, headers (lower-case keys), body."""

    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        self.body = body

    @property
    def json(self):
        return json.loads(self.body.decode("utf-8"))

    def __repr__(self):
        return "Response(%d, %r)" % (self.status, self.body[:300])


class StreamError(Exception):
    """The server answered a streaming request with something other than a
    200 event stream; `response` holds what it said."""

    def __init__(self, response):
        Exception.__init__(self, "HTTP %d: %r" % (response.status,
                                                 response.body[:300]))
        self.response = response


class EventStream:
    """Server-sent events of one streaming response.

    Iterating yields each `data:` payload parsed as JSON and stops after
    `data: [DONE]` (then .done is True) or at the end of the body.  .raw
    keeps every data payload as bytes, to check encodings.  close() drops
    the connection at once, as a client that goes away would."""

    def __init__(self, conn, resp):
        self.conn = conn
        self.resp = resp
        self.status = resp.status
        self.headers = {k.lower(): v for k, v in resp.getheaders()}
        self.done = False
        self.raw = []

    def __iter__(self):
        data = []
        while True:
            line = self.resp.readline()
            if not line:
                return                      # server closed without [DONE]
            line = line.rstrip(b"\r\n")
            if line.startswith(b"data:"):
                payload = line[5:]
                if payload.startswith(b" "):
                    payload = payload[1:]
                data.append(payload)
            elif line == b"" and data:
                payload = b"\n".join(data)
                data = []
                self.raw.append(payload)
                if payload == b"[DONE]":
                    self.done = True
                    return
                yield json.loads(payload.decode("utf-8"))
            # comments (":"), event:, id:, retry: lines are ignored

    def close(self):
        try:
            self.resp.close()
        finally:
            self.conn.close()


class Client:
    def __init__(self, host, port, api_key=None, timeout=30.0):
        self.host = host
        self.port = port
        self.api_key = api_key
        self.timeout = timeout

    def _headers(self, extra, has_body):
        h = {}
        if has_body:
            h["Content-Type"] = "application/json"
        if self.api_key is not None:
            h["Authorization"] = "Bearer " + self.api_key
        h.update(extra or {})
        return h

    def request(self, method, path, body=None, headers=None, raw=None):
        """One request on a fresh connection.  `body` is JSON-encoded;
        `raw` (bytes) is sent as is."""
        if raw is None and body is not None:
            raw = json.dumps(body).encode("utf-8")
        conn = http.client.HTTPConnection(self.host, self.port,
                                          timeout=self.timeout)
        try:
            conn.request(method, path, body=raw,
                         headers=self._headers(headers, raw is not None))
            resp = conn.getresponse()
            data = resp.read()
            hdrs = {k.lower(): v for k, v in resp.getheaders()}
            return Response(resp.status, hdrs, data)
        finally:
            conn.close()

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, body=None, **kw):
        return self.request("POST", path, body=body, **kw)

    def delete(self, path, **kw):
        return self.request("DELETE", path, **kw)

    def complete(self, **params):
        """POST /v1/completions; returns the parsed body, asserting 200."""
        r = self.post("/v1/completions", params)
        if r.status != 200:
            raise AssertionError("completion %r -> %r" % (params, r))
        return r.json

    def open_stream(self, path, body, headers=None):
        """Starts a streaming request and returns its EventStream once the
        response headers are in; raises StreamError for a non-200."""
        raw = json.dumps(body).encode("utf-8")
        conn = http.client.HTTPConnection(self.host, self.port,
                                          timeout=self.timeout)
        conn.request("POST", path, body=raw,
                     headers=self._headers(headers, True))
        resp = conn.getresponse()
        if resp.status != 200:
            data = resp.read()
            hdrs = {k.lower(): v for k, v in resp.getheaders()}
            conn.close()
            raise StreamError(Response(resp.status, hdrs, data))
        return EventStream(conn, resp)

    def stream(self, path, body, headers=None):
        """Yields every event of a streaming request, then closes it."""
        es = self.open_stream(path, body, headers)
        try:
            for event in es:
                yield event
        finally:
            es.close()

    def metrics(self):
        """GET /metrics parsed: {'name{labels}': float}."""
        r = self.get("/metrics")
        if r.status != 200:
            raise AssertionError("/metrics -> %r" % (r,))
        return parse_metrics(r.body.decode("utf-8"))


def http_request(method, path, body=b"", headers=()):
    """The bytes of a keep-alive HTTP/1.1 request, for a raw socket; a body
    (any POST) goes as JSON.  `headers`: extra "Name: value" lines."""
    lines = ["%s %s HTTP/1.1" % (method, path), "Host: 127.0.0.1"]
    lines += list(headers)
    if body or method == "POST":
        lines += ["Content-Type: application/json",
                  "Content-Length: %d" % len(body)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def read_raw(sock, timeout=60.0, until=None, size=65536):
    """Reads a raw socket until the server closes it (end of stream or a
    reset) or `until(bytes so far)` is true; returns (the bytes, True if it
    ended in a reset).  `size`: the most taken per recv (1 leaves what
    follows `until`'s point unread in the kernel).  socket.timeout when
    `timeout` seconds pass between two reads."""
    sock.settimeout(timeout)
    data = b""
    while until is None or not until(data):
        try:
            chunk = sock.recv(size)
        except ConnectionResetError:
            return data, True
        if not chunk:
            break
        data += chunk
    return data, False


def head_complete(data):
    return b"\r\n\r\n" in data


def response_complete(data):
    """True once `data` holds a whole HTTP response (Content-Length or
    chunked)."""
    head, sep, body = data.partition(b"\r\n\r\n")
    if not sep:
        return False
    m = re.search(rb"(?im)^content-length:\s*(\d+)", head)
    if m:
        return len(body) >= int(m.group(1))
    return body.endswith(b"0\r\n\r\n")


def read_response(sock, timeout=60.0):
    """One HTTP/1.1 response with a Content-Length or a chunked body from a
    raw socket, as a Response (a chunked body as it came, framing and
    all).  ConnectionError when the server closes before its end."""
    data, _ = read_raw(sock, timeout, response_complete)
    if not response_complete(data):
        raise ConnectionError("closed before the end of the response: %r" % data[:300])
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    if "content-length" in headers:
        rest = rest[:int(headers["content-length"])]
    return Response(status, headers, rest)


def dechunk(body):
    """A chunked body's payload, and whether it ended with the last (empty)
    chunk."""
    payload, pos = b"", 0
    while True:
        eol = body.find(b"\r\n", pos)
        if eol < 0:
            return payload, False
        size = int(body[pos:eol].split(b";")[0], 16)
        if size == 0:
            return payload, body[eol:eol + 4] == b"\r\n\r\n"
        payload += body[eol + 2:eol + 2 + size]
        pos = eol + 2 + size + 2


def error_object_problem(e, type_, param="any", code="any", message=None):
    """What is wrong with `e` as an OpenAI error object (the "error" member)
    of this type, or None.  `param`, `code`: "any" skips the check, a tuple
    allows each of its members; `message`: a regular expression it must
    match whole (None: any non-empty string)."""
    if not isinstance(e, dict) or set(e) != ERROR_KEYS:
        return "not an error object: %r" % (e,)
    if e["type"] != type_:
        return "type %r, expected %r: %r" % (e["type"], type_, e)
    for name, want in (("param", param), ("code", code)):
        if want != "any" and (e[name] not in want
                              if isinstance(want, (tuple, list, set))
                              else e[name] != want):
            return "%s %r, expected %r: %r" % (name, e[name], want, e)
    if not isinstance(e["message"], str) or not e["message"]:
        return "message %r" % (e["message"],)
    if message is not None and not re.fullmatch(message, e["message"]):
        return "message %r does not match %r" % (e["message"], message)
    return None


def error_problem(r, status, param="any", code="any", message=None, allow=None):
    """What is wrong with the Response `r` as an OpenAI error answer with
    this status (the type README's error table gives it), or None; with
    this Allow header when `allow` is given.  See error_object_problem."""
    if r.status != status:
        return "status %d, expected %d: %r" % (r.status, status, r.body[:300])
    if not r.headers.get("content-type", "").startswith("application/json"):
        return "content-type %r" % (r.headers.get("content-type"),)
    try:
        body = json.loads(r.body.decode("utf-8"))
    except ValueError as e:
        return "body is not JSON (%s): %r" % (e, r.body[:300])
    if not isinstance(body, dict) or set(body) != {"error"}:
        return "body %r" % (body,)
    problem = error_object_problem(body["error"],
                                   ERROR_TYPES.get(status, "invalid_request_error"),
                                   param, code, message)
    if problem is None and allow is not None and r.headers.get("allow") != allow:
        problem = "Allow %r, expected %r" % (r.headers.get("allow"), allow)
    return problem


def percentile(values, p):
    """The p-th percentile of `values`, by linear interpolation between
    closest ranks (numpy's default); nan for none."""
    if not values:
        return float("nan")
    v = sorted(values)
    k = (len(v) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def parse_metrics(text):
    """Prometheus text exposition -> {'name{labels}': value}; labels are
    kept exactly as written."""
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        # the value is the first field after the (possibly spaced) labels
        if "}" in line:
            key, rest = line.rsplit("}", 1)
            key += "}"
        else:
            key, _, rest = line.partition(" ")
        fields = rest.split()
        if not fields:
            continue
        out[key.strip()] = float(fields[0])
    return out


def metric_sum(metrics, name):
    """The sum of every series of `name` (all label sets)."""
    total = 0.0
    for key, value in metrics.items():
        if key == name or key.startswith(name + "{"):
            total += value
    return total


class Server:
    """One gpt2d process on 127.0.0.1 with a port chosen by the kernel."""

    def __init__(self, binary, model_dir, workdir, extra_args=(), env=None,
                 name="gpt2d"):
        self.binary = binary
        self.model_dir = model_dir
        self.workdir = workdir
        self.extra_args = list(extra_args)
        self.env = env
        self.name = name
        self.proc = None
        self._log = None
        self.port = None
        self.port_file = os.path.join(workdir, name + ".port")
        self.log_path = os.path.join(workdir, name + ".log")

    def start(self, timeout=20.0):
        """Starts the process; returns self once /health answers 200."""
        self.port = None
        if os.path.exists(self.port_file):
            os.unlink(self.port_file)
        env = dict(os.environ)
        env.pop("GPT2D_API_KEY", None)
        if self.env:
            env.update(self.env)
        args = [self.binary, "--model", self.model_dir, "--host", "127.0.0.1",
                "--port", "0", "--port-file", self.port_file] + self.extra_args
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(args, stdout=self._log,
                                     stderr=subprocess.STDOUT, env=env,
                                     preexec_fn=_die_with_parent)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("%s exited with %d during start-up:\n%s"
                                   % (self.name, self.proc.returncode,
                                      self.log_tail()))
            if self.port is None:
                self.port = read_port_file(self.port_file)
            if self.port is not None and self._healthy():
                return self
            time.sleep(0.02)
        self.kill()
        raise RuntimeError("%s not healthy within %.0f s:\n%s"
                           % (self.name, timeout, self.log_tail()))

    def _healthy(self):
        try:
            return Client("127.0.0.1", self.port, timeout=2).get(
                "/health").status == 200
        except OSError:
            return False

    def client(self, **kw):
        return Client("127.0.0.1", self.port, **kw)

    @property
    def pid(self):
        return self.proc.pid

    def stop(self, timeout=15.0):
        """SIGTERM and wait; returns (exit code or None on timeout, seconds)."""
        if self.proc is None:
            return None, 0.0
        t0 = time.monotonic()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            rc = None
            self.kill()
        elapsed = time.monotonic() - t0
        if self._log is not None and not self._log.closed:
            self._log.close()
        return rc, elapsed

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self._log is not None and not self._log.closed:
            self._log.close()

    def sanitizer_report(self):
        """The first sanitizer finding in the log (ASan, UBSan, LSan), or
        None: a UBSan build keeps running after one, so look."""
        try:
            with open(self.log_path, "rb") as f:
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return None
        for marker in ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer",
                       "runtime error:"):
            if marker in text:
                return self.log_tail(40)
        return None

    def log_tail(self, n=30):
        try:
            with open(self.log_path, "rb") as f:
                lines = f.read().decode("utf-8", "replace").splitlines()
        except OSError:
            return "(no log)"
        # a sanitizer report says what matters at its top
        for i, line in enumerate(lines):
            if "ERROR: AddressSanitizer" in line or "runtime error:" in line:
                lines = lines[max(0, i - 2):i + n]
                break
        else:
            lines = lines[-n:]
        return "\n".join("  | " + line for line in lines)


def _die_with_parent():
    """In the child before exec: SIGKILL when the starting thread dies, so a
    suite killed by a timeout leaves no server behind (Linux prctl)."""
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def read_port_file(path):
    try:
        with open(path, encoding="ascii") as f:
            text = f.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() and int(text) > 0 else None


def rss_kib(pid):
    """VmRSS of a process in KiB (Linux /proc), or None."""
    try:
        with open("/proc/%d/status" % pid, encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def bytes_to_unicode():
    """GPT-2's byte <-> printable-character table (the byte-level BPE
    alphabet): printable Latin-1 bytes stand for themselves, the others are
    shifted to code points 256 and up, in byte order."""
    keep = (list(range(ord("!"), ord("~") + 1))
            + list(range(ord("¡"), ord("¬") + 1))
            + list(range(ord("®"), ord("ÿ") + 1)))
    table = {}
    extra = 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


class Vocab:
    """Token id -> raw bytes, from a model directory's vocab.json."""

    def __init__(self, vocab_json):
        with open(vocab_json, encoding="utf-8") as f:
            enc = json.load(f)
        back = {c: b for b, c in bytes_to_unicode().items()}
        self.id_of = enc
        self.bytes_of = {}
        for s, i in enc.items():
            self.bytes_of[i] = bytes(back[c] for c in s)
        self.bytes_of.setdefault(50256, b"<|endoftext|>")

    def decode(self, ids):
        return b"".join(self.bytes_of[i] for i in ids)
