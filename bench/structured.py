#!/usr/bin/env python3
"""structured.py — what a JSON Schema costs a stream (issue 27): gpt2d and,
beside it, llama.cpp's server on the same weights, each with and without the
same schema.

Decode.  For K in --clients (default 1 and 16) concurrent streams, each
server runs every condition: no constraint, then the schema (SCHEMA below:
an order with strings under maxLength, an integer range, an enum, an array
of 1 to 4 objects and a nullable field).  gpt2d gets it as response_format
{"type": "json_schema", ...} on /v1/completions, llama.cpp's server as its
own "json_schema" field on /v1/completions (its response_format is read on
chat only).  Every request is greedy (temperature 0), streamed, a 100-token
prompt given as token ids whose first token no other request of the run
has (so no prompt is served from another's KV cache, and both servers see
the same prompts), with the 344 tokens that are not UTF-8 on their own
banned (llama.cpp's server ends a stream whose text is not valid UTF-8;
see load.py --utf8-only).  Without a schema, end-of-text is banned too,
so each stream runs --max-tokens; with it, a stream ends when its JSON is
complete (--max-tokens must leave room for that: an answer cut by the
limit is counted as "length", not checked).  Figures:

  tpot    time per output token of one stream, decode only: (last token -
          first token) / (tokens - 1); median over every request of every
          repeat.  A stream's tokens are the chunks that carry text (one
          token each: no stop strings, no partial UTF-8).
  step    the median gap between successive tokens of a stream, counted
          only while all K streams of a run are decoding (from the latest
          first token to the earliest last one): the time of one batched
          step at K.

Schema answers end at their own lengths (about 100 tokens here), streams
without a schema run --max-tokens.  A step reads every stream's KV cache,
so longer streams make slower steps: in the table, an answer without a
schema counts only as many tokens as the same server's schema answer to
the same prompt (each condition gets the same prompts), so token i sits
at the same position in both.  At K > 1 the schema's streams still end
one by one and the last ones share fewer steps, which flatters its tpot;
"step" compares like with like.  (The lines printed as runs finish count
every token.)

Time to first token (K = 1, --ttft-pairs times per server): a request
without a schema, one with a schema never sent before (a property renamed
with a counter, so gpt2d compiles it anew: compile and first mask inside
the TTFT) and the same schema again (gpt2d finds it compiled).  gpt2d's
/metrics grammar-cache counters confirm which was which.  llama.cpp's
server converts and parses the schema on every request: its "fresh" and
"cached" are the same work.

Every gpt2d and llama.cpp answer with finish_reason "stop" under a schema
must parse as JSON and validate against it (python3-jsonschema); the
table counts the invalid ones.

Fairness.  Both servers run side by side for the whole benchmark, one
loaded at a time.  Each repeat runs every (server, condition) once, the
servers alternating (gpt2d none, llama none, gpt2d schema, llama schema,
the order rotated by one each repeat), and before each run the machine must
be --idle percent idle (waiting up to --max-wait s): llama.cpp slows down
far more than gpt2d when other jobs take the CPU.  A job may also start
during a run, so each decode run measures the CPU time the machine spent
on anything but the two servers and this script (/proc/stat less their
/proc/PID/stat), and one where that exceeds --max-others percent is run
again, up to --retries times (the last attempt counts; the table says how
many runs were repeated).  A warm-up request per
server and condition pages the weights in and compiles the decode schema
first.

  python3 bench/structured.py --gpt2d build/src/gpt2d \\
      --model build/bench/models/gpt2-124m-random \\
      --peer-server $PEER/llama.cpp/build-cpu/bin/llama-server \\
      --gguf $PEER/gpt2-f32.gguf --repeats 3 --idle 80

Without --peer-server only gpt2d runs; without --gpt2d only the peer (its
prompts then come from its own /tokenize).  About 6 minutes with both on
a quiet machine; on a busy one the runs not made within --budget seconds
(default 900) are skipped and named, and the rest reported.
--json FILE keeps every request's figures.  Exit 1 when a request failed
or an answer was invalid; never on a figure."""

import argparse
import copy
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))

# bench/inspect.py would stand in for the standard library's inspect, which
# jsonschema needs: import jsonschema with bench/ off the path first.
_path = sys.path[:]
sys.path[:] = [p for p in sys.path
               if os.path.abspath(p or os.curdir) != HERE]
try:
    import jsonschema
except ImportError:                     # Debian: python3-jsonschema
    jsonschema = None
sys.path[:] = _path
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))

from compare import healthy, stop, wait_quiet  # noqa: E402
from gpt2d_client import (Client, Server, StreamError,  # noqa: E402
                          parse_metrics)
from load import PASSAGE, invalid_utf8_tokens  # noqa: E402

EOT = 50256

# A realistic request: the kind of object an application asks for.
SCHEMA = {
    "type": "object",
    "properties": {
        "order_id": {"type": "string", "maxLength": 12},
        "customer": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "maxLength": 24},
                "email": {"type": "string", "maxLength": 32},
            },
            "required": ["name", "email"],
            "additionalProperties": False,
        },
        "status": {"enum": ["pending", "paid", "shipped", "cancelled"]},
        "priority": {"type": "integer", "minimum": 1, "maximum": 5},
        "items": {
            "type": "array",
            "minItems": 1,
            "maxItems": 4,
            "items": {
                "type": "object",
                "properties": {
                    "sku": {"type": "string", "maxLength": 10},
                    "quantity": {"type": "integer", "minimum": 1, "maximum": 99},
                    "gift": {"type": "boolean"},
                },
                "required": ["sku", "quantity", "gift"],
                "additionalProperties": False,
            },
        },
        "note": {"type": ["string", "null"], "maxLength": 40},
    },
    "required": ["order_id", "customer", "status", "priority", "items", "note"],
    "additionalProperties": False,
}


def fresh_schema(n):
    """SCHEMA with "order_id" renamed "order_id_N": a text neither server
    has seen, the same work otherwise."""
    s = copy.deepcopy(SCHEMA)
    name = "order_id_%d" % n
    s["properties"] = {(name if k == "order_id" else k): v
                       for k, v in s["properties"].items()}
    s["required"] = [name if k == "order_id" else k for k in s["required"]]
    return s


class Target:
    """One server and how it is asked for a schema."""

    def __init__(self, name, kind, port, pid):
        self.name = name
        self.kind = kind                # "gpt2d" or "llama"
        self.client = Client("127.0.0.1", port, timeout=300)
        self.pid = pid
        self.schema_ok = True
        self.schema_error = None

    def body(self, prompt, max_tokens, schema, banned):
        bias = {str(t): -100 for t in banned}
        if schema is None:
            bias[str(EOT)] = -100       # run the whole length
        b = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
             "logit_bias": bias, "stream": True,
             "stream_options": {"include_usage": True}}
        if schema is not None:
            if self.kind == "gpt2d":
                b["response_format"] = {"type": "json_schema", "json_schema": {
                    "name": "order", "strict": True, "schema": schema}}
            else:
                b["json_schema"] = schema
        return b

    def grammar_counters(self):
        """gpt2d's grammar-cache counters (None for the peer, or a gpt2d
        without them)."""
        if self.kind != "gpt2d":
            return None
        r = self.client.get("/metrics")
        if r.status != 200:
            return None
        m = parse_metrics(r.body.decode("utf-8", "replace"))
        keys = {"hits": 'gpt2d_grammar_cache_lookups_total{result="hit"}',
                "misses": 'gpt2d_grammar_cache_lookups_total{result="miss"}',
                "compiles": "gpt2d_grammar_compiles_total",
                "masks_cached": 'gpt2d_grammar_masks_total{result="cached"}',
                "masks_computed": 'gpt2d_grammar_masks_total{result="computed"}',
                "mask_seconds": "gpt2d_grammar_mask_seconds_total",
                "compile_seconds": "gpt2d_grammar_compile_seconds_total"}
        if keys["compiles"] not in m:
            return None
        return {k: m.get(v, 0.0) for k, v in keys.items()}


def counters_delta(before, after):
    if before is None or after is None:
        return None
    return {k: after[k] - before[k] for k in before}


class Answer:
    """One streamed request."""

    def __init__(self):
        self.t_send = None
        self.token_times = []
        self.text = []
        self.finish = None
        self.usage_tokens = None
        self.error = None
        self.valid = None               # schema answers that stopped

    def ttft(self):
        return self.token_times[0] - self.t_send if self.token_times else None

    def tpot(self):
        t = self.token_times
        return (t[-1] - t[0]) / (len(t) - 1) if len(t) >= 2 else None


def run_request(target, body, schema, ans):
    ans.t_send = time.monotonic()
    try:
        es = target.client.open_stream("/v1/completions", body)
        try:
            for ev in es:
                now = time.monotonic()
                if ev.get("usage"):
                    ans.usage_tokens = ev["usage"].get("completion_tokens")
                for c in ev.get("choices") or []:
                    if c.get("text"):
                        ans.token_times.append(now)
                        ans.text.append(c["text"])
                    if c.get("finish_reason") is not None:
                        ans.finish = c["finish_reason"]
            if not es.done:
                ans.error = "stream ended without [DONE]"
        finally:
            es.close()
    except StreamError as e:
        ans.error = "HTTP %d: %s" % (e.response.status,
                                     e.response.body[:300].decode("utf-8", "replace"))
    except (OSError, ValueError) as e:
        ans.error = repr(e)
    if schema is not None and ans.error is None and ans.finish == "stop":
        ans.valid = check(schema, "".join(ans.text))


def check(schema, text):
    try:
        value = json.loads(text)
    except ValueError:
        return False
    if jsonschema is None:
        return True
    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError:
        return False
    return True


class PromptMaker:
    """100-token prompts: a first token of their own, then a rotation of
    the passage.  The n-th prompt is the same for every server."""

    def __init__(self, passage_ids, banned, length):
        self.base = passage_ids
        self.length = length
        skip = set(banned) | {EOT}
        self.leads = [t for t in range(1000, 50000) if t not in skip]

    def prompt(self, n):
        lead = self.leads[(n * 7919) % len(self.leads)]
        off = (n * 13) % len(self.base)
        return [lead] + [self.base[(off + i) % len(self.base)]
                         for i in range(self.length - 1)]


def run_decode(target, schema, k, per_client, first_prompt, prompts, args, banned):
    """K clients at once, each `per_client` requests back to back; returns
    the answers (per client) and gpt2d's grammar counters over the run."""
    before = target.grammar_counters()
    answers = [[Answer() for _ in range(per_client)] for _ in range(k)]
    barrier = threading.Barrier(k)

    def client(i):
        barrier.wait()
        for j in range(per_client):
            n = first_prompt + i * per_client + j
            body = target.body(prompts.prompt(n), args.max_tokens, schema, banned)
            run_request(target, body, schema, answers[i][j])

    threads = [threading.Thread(target=client, args=(i,)) for i in range(k)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return answers, counters_delta(before, target.grammar_counters())


def full_batch_gaps(answers):
    """Gaps between successive tokens of each first-round stream, while all
    of them decode (with one client, of every request: each runs alone)."""
    if len(answers) == 1:
        return [y - x for a in answers[0] if not a.error
                for x, y in zip(a.token_times, a.token_times[1:])]
    first = [a[0] for a in answers]
    if any(a.error or len(a.token_times) < 2 for a in first):
        return []
    lo = max(a.token_times[0] for a in first)
    hi = min(a.token_times[-1] for a in first)
    gaps = []
    for a in first:
        t = a.token_times
        gaps += [y - x for x, y in zip(t, t[1:]) if x >= lo and y <= hi]
    return gaps


def med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else float("nan")


def machine_jiffies():
    """(busy, all) CPU time of the whole machine so far (/proc/stat)."""
    with open("/proc/stat", encoding="ascii") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return sum(fields) - fields[3] - fields[4], sum(fields)


def process_jiffies(pid):
    """utime + stime of a process, every thread (/proc/PID/stat)."""
    with open("/proc/%d/stat" % pid, encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


class OthersMeter:
    """The share of the machine's CPU that neither the servers nor this
    script took while a run went on: another engineer's build slows
    llama.cpp's server far more than gpt2d."""

    def __init__(self, pids):
        self.pids = [os.getpid()] + list(pids)
        self.start = self.sample()

    def sample(self):
        busy, total = machine_jiffies()
        return busy - sum(process_jiffies(p) for p in self.pids), total

    def percent(self):
        others, total = self.sample()
        return 100.0 * max(0, others - self.start[0]) / max(1, total - self.start[1])


def start_llama(args, workdir):
    log = open(os.path.join(workdir, "llama.log"), "w")
    k = max(args.clients)
    cmd = [args.peer_server, "-m", args.gguf, "--host", "127.0.0.1",
           "--port", str(args.llama_port), "-c", str(1024 * k), "--parallel", str(k),
           "-t", str(args.threads), "-tb", str(args.threads), "--no-webui"]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while not healthy(args.llama_port):
        if proc.poll() is not None or time.monotonic() > deadline:
            stop(proc)
            raise SystemExit("structured.py: %s did not start: see %s"
                             % (args.peer_server, log.name))
        time.sleep(0.2)
    return proc, log


def warm_up(target, prompts, n, args, banned):
    """A short answer without a schema; a whole one with it (compiling the
    decode schema), which must stop and validate, or the server runs
    without the schema (a server that ignores response_format answers
    free text); then an untimed burst of K = the largest --clients
    streams of --max-tokens, so the first timed run does not pay for
    touching the KV memory of every slot.  Uses prompts n .. n + K + 1."""
    a = Answer()
    run_request(target, target.body(prompts.prompt(n), 8, None, banned), None, a)
    if a.error:
        raise SystemExit("structured.py: %s: warm-up failed: %s" % (target.name, a.error))
    a = Answer()
    run_request(target, target.body(prompts.prompt(n + 1), args.max_tokens, SCHEMA,
                                    banned), SCHEMA, a)
    text = "".join(a.text)
    if a.error or a.finish != "stop" or not a.valid:
        target.schema_ok = False
        target.schema_error = a.error or (
            "its answer (finish_reason %s, %d tokens) is not an object of the "
            "schema: %r" % (a.finish, len(a.token_times), text[:120]))
        print("%s: no schema runs: %s" % (target.name, target.schema_error), flush=True)
    else:
        print("%s warm-up: schema answer of %d tokens: %s"
              % (target.name, len(a.token_times), text[:200]), flush=True)
    k = max(args.clients)
    answers, _ = run_decode(target, None, k, 1, n + 2, prompts, args, banned)
    errors = [x.error for c in answers for x in c if x.error]
    if errors:
        raise SystemExit("structured.py: %s: warm-up burst failed: %s"
                         % (target.name, errors[0]))


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpt2d", help="the gpt2d binary")
    ap.add_argument("--model", help="gpt2d's model directory (with vocab.json)")
    ap.add_argument("--gpt2d-arg", action="append", default=[],
                    help="one more gpt2d flag (repeatable)")
    ap.add_argument("--peer-server", help="llama.cpp's llama-server")
    ap.add_argument("--gguf", help="the same weights as GGUF, for the peer")
    ap.add_argument("--vocab", help="vocab.json (default: MODEL/vocab.json)")
    ap.add_argument("--llama-port", type=int, default=18151)
    ap.add_argument("--clients", default="1,16", help="the K to run, comma-separated")
    ap.add_argument("--k1-requests", type=int, default=3,
                    help="requests back to back in a K = 1 run")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--prompt-tokens", type=int, default=100)
    ap.add_argument("--ttft-pairs", type=int, default=6,
                    help="fresh-then-cached schema pairs per server")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--idle", type=float, default=80.0, metavar="PERCENT",
                    help="before each run, wait until the machine is this idle")
    ap.add_argument("--max-wait", type=float, default=60.0,
                    help="seconds to wait for --idle before running anyway")
    ap.add_argument("--max-others", type=float, default=10.0, metavar="PERCENT",
                    help="a decode run during which other processes took more "
                         "of the machine's CPU than this is run again")
    ap.add_argument("--retries", type=int, default=2,
                    help="how many times a disturbed decode run is run again "
                         "(the last one counts)")
    ap.add_argument("--budget", type=float, default=900.0, metavar="SECONDS",
                    help="after this long, skip the runs not yet made (the "
                         "report says which) rather than wait on a busy machine")
    ap.add_argument("--json", help="write every request's figures here")
    args = ap.parse_args(argv)
    args.clients = [int(x) for x in args.clients.split(",") if x.strip()]
    if not args.clients or min(args.clients) < 1 or args.repeats < 1:
        ap.error("--clients and --repeats need positive numbers")
    if args.gpt2d and not args.model:
        ap.error("--gpt2d needs --model")
    if bool(args.peer_server) != bool(args.gguf):
        ap.error("--peer-server and --gguf go together")
    if not args.gpt2d and not args.peer_server:
        ap.error("give --gpt2d (and --model) or --peer-server (and --gguf), or both")
    vocab = args.vocab or (os.path.join(args.model, "vocab.json") if args.model else None)
    if not vocab:
        ap.error("without --model, give --vocab (GPT-2's vocab.json)")
    if jsonschema is None:
        print("python3-jsonschema is missing: answers are only checked to be JSON",
              file=sys.stderr)
    command = shlex.join(["python3"] + [os.path.relpath(sys.argv[0])] + argv)
    print("command:", command, flush=True)

    deadline = time.monotonic() + args.budget
    skipped = []
    banned = invalid_utf8_tokens(vocab)
    targets = []
    rows = []
    ttfts = []
    failed = False
    with tempfile.TemporaryDirectory(prefix="gpt2d-structured.") as tmp:
        server = llama = llama_log = None
        try:
            if args.gpt2d:
                k = max(args.clients)
                server = Server(args.gpt2d, args.model, tmp,
                                ["--threads", str(args.threads), "--slots", str(k),
                                 "--max-queue", str(max(64, k))] + args.gpt2d_arg,
                                name="bench")
                server.start(timeout=120)
                targets.append(Target("gpt2d", "gpt2d", server.port, server.pid))
            if args.peer_server:
                llama, llama_log = start_llama(args, tmp)
                targets.append(Target("llama.cpp", "llama", args.llama_port, llama.pid))
            r = targets[0].client.post("/tokenize", {"content": PASSAGE})
            if r.status != 200:
                raise SystemExit("structured.py: /tokenize -> %r" % (r,))
            prompts = PromptMaker(r.json["tokens"], banned, args.prompt_tokens)
            serial = 0
            for t in targets:
                warm_up(t, prompts, serial, args, banned)
            serial += 2 + max(args.clients)

            # decode: every repeat, every K, the (server, condition) runs in
            # an order rotated by one each repeat, servers alternating
            plan = [(t, s) for s in (None, SCHEMA) for t in targets]
            run_id = 0
            for rep in range(args.repeats):
                for k in args.clients:
                    per_client = args.k1_requests if k == 1 else 1
                    first = serial
                    serial += k * per_client
                    for i in range(len(plan)):
                        target, schema = plan[(i + rep) % len(plan)]
                        if schema is not None and not target.schema_ok:
                            continue
                        cond = "schema" if schema is not None else "none"
                        if time.monotonic() > deadline:
                            skipped.append("decode repeat %d K=%d %s %s" % (
                                rep, k, target.name, cond))
                            continue
                        for attempt in range(1 + args.retries):
                            idle = wait_quiet(args)
                            meter = OthersMeter(t.pid for t in targets)
                            answers, grammar = run_decode(target, schema, k, per_client,
                                                          first, prompts, args, banned)
                            others = meter.percent()
                            if others <= args.max_others or time.monotonic() > deadline:
                                break
                            print("repeat %d K=%-2d %-9s %-6s: other jobs took %.0f%% "
                                  "of the CPU during the run; again" % (
                                      rep, k, target.name,
                                      "schema" if schema else "none", others), flush=True)
                        flat = [a for c in answers for a in c]
                        gaps = full_batch_gaps(answers)
                        run_id += 1
                        for idx, a in enumerate(flat):
                            rows.append({
                                "run": run_id, "prompt": first + idx,
                                "client": idx // per_client,
                                "times": [round(x, 6) for x in a.token_times],
                                "repeat": rep, "clients": k, "server": target.name,
                                "schema": cond, "idle_before": idle,
                                "others_during": others, "attempts": attempt + 1,
                                "tokens": len(a.token_times),
                                "usage_tokens": a.usage_tokens,
                                "ttft_ms": a.ttft() * 1e3 if a.ttft() else None,
                                "tpot_ms": a.tpot() * 1e3 if a.tpot() else None,
                                "finish": a.finish, "valid": a.valid,
                                "error": a.error, "text": "".join(a.text)})
                        rows[-1]["grammar"] = grammar
                        errors = [a.error for a in flat if a.error]
                        invalid = sum(1 for a in flat if a.valid is False)
                        failed = failed or bool(errors) or invalid > 0
                        print("repeat %d K=%-2d %-9s %-6s idle %3.0f%% others %2.0f%%  "
                              "tpot %6.2f ms  step %6.2f ms  tokens %5.0f  "
                              "stop %2d length %2d invalid %d%s%s"
                              % (rep, k, target.name, cond, idle, others,
                                 med([a.tpot() for a in flat]) * 1e3,
                                 med(gaps) * 1e3,
                                 med([len(a.token_times) for a in flat]),
                                 sum(1 for a in flat if a.finish == "stop"),
                                 sum(1 for a in flat if a.finish == "length"),
                                 invalid,
                                 ("  masks computed %d (%.0f ms) cached %d"
                                  % (grammar["masks_computed"],
                                     grammar["mask_seconds"] * 1e3,
                                     grammar["masks_cached"]))
                                 if grammar and schema is not None else "",
                                 ("  %d errors: %s" % (len(errors), errors[0]))
                                 if errors else ""), flush=True)

            # time to first token, K = 1
            n_fresh = 0
            for p in range(args.ttft_pairs):
                if time.monotonic() > deadline:
                    skipped.append("time to first token, pairs %d to %d"
                                   % (p, args.ttft_pairs - 1))
                    break
                idle = wait_quiet(args)
                for i in range(len(targets)):
                    target = targets[(i + p) % len(targets)]
                    n_fresh += 1
                    fresh = fresh_schema(n_fresh)
                    for kind, schema in (("none", None), ("fresh", fresh),
                                         ("cached", fresh)):
                        if schema is not None and not target.schema_ok:
                            continue
                        before = target.grammar_counters()
                        a = Answer()
                        run_request(target, target.body(prompts.prompt(serial), 2,
                                                        schema, banned), None, a)
                        serial += 1
                        d = counters_delta(before, target.grammar_counters())
                        failed = failed or a.error is not None
                        ttfts.append({"pair": p, "server": target.name, "kind": kind,
                                      "idle_before": idle, "error": a.error,
                                      "ttft_ms": a.ttft() * 1e3 if a.ttft() else None,
                                      "grammar": d})
                        print("ttft %d %-9s %-6s %7.1f ms%s%s" % (
                            p, target.name, kind,
                            a.ttft() * 1e3 if a.ttft() else float("nan"),
                            "  (compiled %d in %.1f ms, cache hits %d, masks computed %d "
                            "in %.1f ms)" % (d["compiles"], d["compile_seconds"] * 1e3,
                                             d["hits"], d["masks_computed"],
                                             d["mask_seconds"] * 1e3)
                            if d and schema is not None else "",
                            "  error: " + a.error if a.error else ""), flush=True)
        finally:
            if server is not None:
                server.stop(timeout=30)
            if llama is not None:
                stop(llama)
                llama_log.close()

    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"command": command, "decode": rows, "ttft": ttfts}, f, indent=1)
    report(args, targets, rows, ttfts, command)
    if skipped:
        print("over --budget %.0f s, skipped: %s" % (args.budget, "; ".join(skipped)))
    return 1 if failed else 0


def matched_lengths(rows):
    """Each answer's tokens that count: all of a schema answer; of an
    answer without a schema, as many as the same server's schema answer to
    the same prompt has (all when there is none), so that token i sits at
    the same position, over a KV cache as long, in both conditions."""
    schema_len = {(r["server"], r["prompt"]): r["tokens"] for r in rows
                  if r["schema"] == "schema" and not r["error"]}
    return [len(r["times"]) if r["schema"] == "schema" else
            min(len(r["times"]), schema_len.get((r["server"], r["prompt"]),
                                                len(r["times"])))
            for r in rows]


def tpot_ms(times, n):
    return (times[n - 1] - times[0]) / (n - 1) * 1e3 if n >= 2 else None


def step_gaps_ms(run_rows, lengths):
    """The gaps between successive counted tokens of a run's streams while
    all of its first requests decode (with one client, every request: each
    runs alone)."""
    if run_rows[0]["clients"] == 1:
        return [(y - x) * 1e3 for r, n in zip(run_rows, lengths)
                for x, y in zip(r["times"][:n], r["times"][1:n])]
    first = [(r, n) for r, n in zip(run_rows, lengths) if r["prompt"] ==
             min(q["prompt"] for q in run_rows if q["client"] == r["client"])]
    if any(r["error"] or n < 2 for r, n in first):
        return []
    lo = max(r["times"][0] for r, _ in first)
    hi = min(r["times"][n - 1] for r, n in first)
    return [(y - x) * 1e3 for r, n in first
            for x, y in zip(r["times"][:n], r["times"][1:n]) if x >= lo and y <= hi]


def report(args, targets, rows, ttfts, command):
    lengths = matched_lengths(rows)
    for r, n in zip(rows, lengths):
        r["tokens_counted"] = n
        r["tpot_matched_ms"] = tpot_ms(r["times"], n)
    gaps = {}
    for run in sorted({r["run"] for r in rows}):
        mine = [(r, n) for r, n in zip(rows, lengths) if r["run"] == run]
        gaps[run] = step_gaps_ms([r for r, _ in mine], [n for _, n in mine])
    print("\ndecode, %d repeats, --max-tokens %d: medians over requests and repeats; "
          "without a schema only\nas many tokens count as the schema answer to the "
          "same prompt has" % (args.repeats, args.max_tokens))
    print("%3s  %-9s %9s %9s %6s  %9s %9s %6s  %9s  %5s %6s %7s %6s  %s" % (
        "K", "server", "tpot none", "schema", "ratio", "step none", "schema", "ratio",
        "tok/answ", "stop", "length", "invalid", "errors", "masks computed"))
    for k in args.clients:
        for t in targets:
            def sel(cond):
                return [r for r in rows if r["clients"] == k and r["server"] == t.name
                        and r["schema"] == cond]
            none, sch = sel("none"), sel("schema")
            tp_n = med([r["tpot_matched_ms"] for r in none])
            tp_s = med([r["tpot_matched_ms"] for r in sch])
            st_n = med([g for run in {r["run"] for r in none} for g in gaps[run]])
            st_s = med([g for run in {r["run"] for r in sch} for g in gaps[run]])
            grammar = [r["grammar"] for r in sch if r.get("grammar")]
            print("%3d  %-9s %9.2f %9.2f %6.3f  %9.2f %9.2f %6.3f  %9.0f  %5d %6d %7d %6d  %s" % (
                k, t.name, tp_n, tp_s, tp_s / tp_n, st_n, st_s, st_s / st_n,
                med([r["tokens"] for r in sch]),
                sum(1 for r in sch if r["finish"] == "stop"),
                sum(1 for r in sch if r["finish"] == "length"),
                sum(1 for r in sch if r["valid"] is False),
                sum(1 for r in none + sch if r["error"]),
                "%d of %d (%.0f ms)" % (
                    sum(g["masks_computed"] for g in grammar),
                    sum(g["masks_computed"] + g["masks_cached"] for g in grammar),
                    1e3 * sum(g["mask_seconds"] for g in grammar)) if grammar else ""))
    print("(tpot, step: ms; ratio: schema / none, the goal <= 1.05; tok/answ, stop, "
          "length, invalid: the schema answers)")
    for t in targets:
        if not t.schema_ok:
            print("%s ran no schema: %s" % (t.name, t.schema_error))
    if ttfts:
        print("\ntime to first token, K = 1, %d of each per server (ms, median)"
              % args.ttft_pairs)
        print("%-9s %9s %12s %13s %14s  %s" % ("server", "no schema", "fresh schema",
                                              "cached schema", "fresh - cached",
                                              "gpt2d's cache: compiles / hits"))
        for t in targets:
            def sel(kind):
                return [r for r in ttfts if r["server"] == t.name and r["kind"] == kind]
            n, f, c = (med([r["ttft_ms"] for r in sel(x)]) for x in ("none", "fresh", "cached"))
            gf = [r["grammar"] for r in sel("fresh") if r["grammar"]]
            gc = [r["grammar"] for r in sel("cached") if r["grammar"]]
            cache = ("fresh %d/%d compiled, cached %d/%d hits" % (
                sum(1 for g in gf if g["compiles"] >= 1), len(gf),
                sum(1 for g in gc if g["hits"] >= 1 and g["compiles"] == 0), len(gc))
                if gf else "")
            print("%-9s %9.1f %12.1f %13.1f %14.1f  %s" % (t.name, n, f, c, f - c, cache))
    idles = [r["idle_before"] for r in rows] + [r["idle_before"] for r in ttfts]
    if idles:
        print("\nidle before each run: min %.0f%%, median %.0f%%" % (min(idles), med(idles)))
    others = [r["others_during"] for r in rows]
    if others:
        print("other jobs' CPU during each decode run: median %.0f%%, max %.0f%% "
              "(%d runs repeated)" % (med(others), max(others), len({
                  (r["repeat"], r["clients"], r["server"], r["schema"])
                  for r in rows if r["attempts"] > 1})))
    print("command:", command)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
