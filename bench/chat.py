#!/usr/bin/env python3
"""chat.py — multi-user chat benchmark: KV-cache reuse under memory pressure
and across a restart.

Mode "chat" (the default).  U users hold T-turn conversations.  Turn k of
user u sends the whole history (every earlier prompt and completion) plus
new user text, with "session_id": "chat-u" (--no-session: none), greedy,
max_tokens --max-tokens (end-of-text banned, so every reply has that length).
The workload goes turn by turn: all users' turn 1, then all users' turn 2,
..., each turn's requests handed round-robin, in user order, to
--concurrency closed-loop clients.  Each request streams, so its time to
first token (TTFT) is measured; usage.prompt_tokens_details.cached_tokens
says how many prompt tokens the server reused.

Token ids, exactly.  Prompts go as lists of token ids.  The new user text of
each turn is --user-tokens ids from a RNG seeded by (--seed, user, turn).
The reply enters the history as the ids the server generated, recovered
from the stream's logprobs ("logprobs": 0): each entry of logprobs.tokens
is one generated token's bytes, as text when they are valid UTF-8, else
"bytes:\\xNN...", and GPT-2's vocabulary maps bytes to ids one to one, so
vocab.json inverts them exactly.  Re-tokenizing the reply's text would not
do: BPE of the decoded text need not give back the ids that were sampled
(a reply that ends mid-character, or any non-canonical split), and every
such drift would cut the reusable prefix short and be charged to the cache.
The mapping is checked against the reply's text; a token that does not
map (none should) falls back to /tokenize of that reply and is counted.

What can be reused.  The server caches every prompt token and every
generated token except the last (its KV is never computed: no step feeds
it), so a returning turn can reuse at most len(previous prompt) +
max_tokens - 1 tokens: the "ideal" column.

Runs (--variants, comma-separated; each one a fresh server, the same
workload, so greedy histories are identical and the run says so):
  baseline       --kv-memory for every user's whole history (plus a full
                 context per slot), no restart: every session in RAM.
  small          --kv-memory of --kv-contexts full contexts (default 8),
                 fewer than the users' histories, no restart.
  small-restart  as small, and before the last turn the daemon gets SIGTERM
                 and is started again with the same flags.
  disk-restart   as small-restart plus --kv-cache-dir (a fresh temporary
                 directory) and --kv-disk --disk-size: the disk tier.
                 Skipped, with a message, when the server lacks those
                 flags (it exits 2 on an unknown option); so is any variant
                 whose --server-arg flags the server refuses.
--server-arg ARG (repeatable) is passed to every variant but the baseline.

The figure of merit: reused tokens (the sum of cached_tokens over turns
2..T) of a variant over the baseline's; issue 14's target for
disk-restart is >= 95 %.  Printed per variant: per turn requests, prompt
tokens, cached tokens, the ideal, reuse as % of the ideal, TTFT p50/p95 and
wall time; then totals, the ratio to the baseline (all returning turns and
the last turn alone), wall time, the server's RSS, the start-up and
shutdown times around the restart, and the /metrics KV series
(gpt2d_kv_blocks{state=...}, gpt2d_kv_evictions_total, any gpt2d_kv_disk_*)
at the end of the run (and just before the restart).

Mode "ttft" (--mode ttft; meant for the GPT-2-124M-shaped model).  TTFT of
a returning turn whose history is --history tokens (default 900): --reps
sessions are primed with a history each (one turn, --max-tokens replies),
then each returns with history + reply + --new-tokens new ids, and the
TTFT of that turn is taken in three states: from RAM (the same server), cold
(the same prompt with a fresh session id and a cache_salt no request used:
a miss by construction, on a warm server), and from disk (the sessions are
primed on a server started with the disk tier, which then gets SIGTERM and
is started again; "disk tier not available" when the server lacks
--kv-cache-dir).  Medians over the repetitions, one request at a time.

Commands (small model: 2 layers, 2 heads, 64 wide, 1024 positions):

    /usr/bin/python3 tests/reference/make_model.py /tmp/small \\
        --vocab-dir build/tests/data/tokenizer --n-layer 2 --n-head 2 \\
        --n-embd 64 --n-ctx 1024 --seed 1 --std 0.02
    python3 bench/chat.py --gpt2d build/src/gpt2d --model /tmp/small \\
        --users 48 --turns 3
    python3 bench/chat.py --gpt2d build/src/gpt2d --model /tmp/small \\
        --users 500 --turns 4
    python3 bench/chat.py --gpt2d build/src/gpt2d \\
        --model build/bench/models/gpt2-124m-random --mode ttft

Only ever 127.0.0.1: it starts its own servers.  It reports; it never fails
on a number (exit 1 only when requests fail or no variant could run).
--json FILE writes every run's figures.
"""

import argparse
import json
import os
import queue
import random
import re
import statistics
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))

from gpt2d_client import (EOT, NO_EOT, Server, StreamError,  # noqa: E402
                          Vocab, percentile, rss_kib)

BLOCK_TOKENS = 16               # KV_BLOCK_TOKENS in src/kv/kvcache.h
UNSUPPORTED = 2                 # gpt2d's exit status for a bad option


# ---- the model's KV geometry (for --kv-memory) ----

def model_config(model_dir):
    with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    return {"n_layer": cfg["n_layer"], "n_embd": cfg["n_embd"],
            "n_ctx": cfg.get("n_ctx", cfg.get("n_positions"))}


def blocks_for(n_tokens):
    return (n_tokens + BLOCK_TOKENS - 1) // BLOCK_TOKENS


def block_bytes(cfg, kv_dtype):
    """Keys and values of BLOCK_TOKENS positions in every layer
    (kvcache_block_bytes)."""
    es = 2 if kv_dtype == "float16" else 4
    return 2 * es * BLOCK_TOKENS * cfg["n_layer"] * cfg["n_embd"]


def kib_arg(n_bytes):
    return "%dk" % ((n_bytes + 1023) // 1024)


# ---- token ids of a reply ----

class Ids:
    """Maps logprobs.tokens entries back to token ids (vocab.json is one to
    one between byte strings and ids)."""

    BYTES = re.compile(r"^bytes:((?:\\x[0-9a-f]{2})+)$")

    def __init__(self, model_dir):
        self.vocab = Vocab(os.path.join(model_dir, "vocab.json"))
        self.id_of_bytes = {b: i for i, b in self.vocab.bytes_of.items()}

    def of(self, token_string):
        m = self.BYTES.match(token_string)
        raw = (bytes.fromhex(m.group(1).replace("\\x", "")) if m
               else token_string.encode("utf-8"))
        return self.id_of_bytes.get(raw)


def user_text(seed, user, turn, n):
    """n token ids of user `user`'s turn `turn`: seeded, never <|endoftext|>."""
    rng = random.Random((seed * 1000003 + user) * 1009 + turn)
    return [rng.randrange(EOT) for _ in range(n)]


# ---- one request ----

def stream_turn(client, body, ids):
    """Streams one completion.  Returns a dict: ttft (s), latency (s),
    reply ids, prompt/cached/completion tokens, fallback (True when the
    reply ids came from /tokenize), error."""
    out = {"ttft": None, "latency": None, "reply": [], "cached": None,
           "prompt_tokens": None, "completion_tokens": None,
           "fallback": False, "text_mismatch": False, "error": None}
    strings, text = [], []
    t0 = time.monotonic()
    try:
        es = client.open_stream("/v1/completions", body)
        try:
            for ev in es:
                now = time.monotonic()
                usage = ev.get("usage")
                if usage:
                    out["prompt_tokens"] = usage["prompt_tokens"]
                    out["completion_tokens"] = usage["completion_tokens"]
                    out["cached"] = usage.get("prompt_tokens_details", {}).get(
                        "cached_tokens")
                for ch in ev.get("choices") or []:
                    lp = ch.get("logprobs")
                    if lp and lp.get("tokens"):
                        if out["ttft"] is None:
                            out["ttft"] = now - t0
                        strings += lp["tokens"]
                    text.append(ch.get("text") or "")
            if not es.done:
                out["error"] = "stream ended without [DONE]"
        finally:
            es.close()
    except (StreamError, OSError, ValueError) as e:
        out["error"] = repr(e)
    out["latency"] = time.monotonic() - t0
    if out["error"]:
        return out
    text = "".join(text)
    reply = [ids.of(s) for s in strings]
    if None in reply:
        r = client.post("/tokenize", {"content": text})
        reply = r.json["tokens"] if r.status == 200 else []
        out["fallback"] = True
    elif ids.vocab.decode(reply).decode("utf-8", "replace") != text:
        out["text_mismatch"] = True
    out["reply"] = reply
    return out


# ---- servers ----

def help_text(binary):
    import subprocess
    try:
        return subprocess.run([binary, "--help"], capture_output=True,
                              text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def start_server(args, workdir, flags, name):
    """A started Server, or (None, why) when gpt2d refused the flags."""
    srv = Server(args.gpt2d, args.model, workdir, flags, name=name)
    t0 = time.monotonic()
    try:
        srv.start(timeout=180)
    except RuntimeError as e:
        if srv.proc is not None and srv.proc.returncode == UNSUPPORTED:
            lines = [ln.strip(" |") for ln in srv.log_tail(5).splitlines()]
            return None, "gpt2d exited 2 (unsupported option): %s" % (
                "; ".join(ln for ln in lines if ln) or str(e))
        raise
    srv.start_s = time.monotonic() - t0
    return srv, None


def kv_series(client):
    """The KV series of /metrics, and the cached-tokens counter."""
    try:
        m = client.metrics()
    except (AssertionError, OSError):
        return {}
    return {k: v for k, v in m.items()
            if k.startswith("gpt2d_kv_") or k == "gpt2d_cached_tokens_total"}


def fmt_series(series):
    keys = sorted(series)
    return ", ".join("%s %s" % (k.replace("gpt2d_", ""), "%g" % series[k])
                     for k in keys)


# ---- mode chat ----

def run_turn(client, histories, turn, args, ids):
    """Every user's turn `turn`, over args.concurrency clients.  Returns
    (per-request results in user order, wall seconds)."""
    work = queue.Queue()
    for u in range(args.users):
        work.put(u)
    results = [None] * args.users

    def worker():
        while True:
            try:
                u = work.get_nowait()
            except queue.Empty:
                return
            prompt = histories[u] + user_text(args.seed, u, turn,
                                              args.user_tokens)
            body = {"prompt": prompt, "max_tokens": args.max_tokens,
                    "temperature": 0, "logprobs": 0,
                    "logit_bias": NO_EOT, "stream": True,
                    "stream_options": {"include_usage": True}}
            if not args.no_session:
                body["session_id"] = "chat-%d" % u
            r = stream_turn(client, body, ids)
            r["ideal"] = (len(histories[u]) - 1) if turn > 0 else 0
            r["prompt_len"] = len(prompt)
            if not r["error"]:
                histories[u] = prompt + r["reply"]
            results[u] = r

    t0 = time.monotonic()
    threads = [threading.Thread(target=worker) for _ in range(args.concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results, time.monotonic() - t0


def turn_row(turn, results, wall):
    ok = [r for r in results if not r["error"]]
    ttft = [r["ttft"] * 1e3 for r in ok if r["ttft"] is not None]
    cached = sum(r["cached"] or 0 for r in ok)
    ideal = sum(r["ideal"] for r in ok)
    return {"turn": turn + 1, "requests": len(results), "errors": len(results) - len(ok),
            "prompt_tokens": sum(r["prompt_tokens"] or 0 for r in ok),
            "cached": cached, "ideal": ideal,
            "ttft_p50_ms": percentile(ttft, 50), "ttft_p95_ms": percentile(ttft, 95),
            "wall_s": wall,
            "fallbacks": sum(r["fallback"] for r in ok),
            "text_mismatches": sum(r["text_mismatch"] for r in ok),
            "first_error": next((r["error"] for r in results if r["error"]), None)}


def run_variant(name, flags, restart, args, ids, tmp):
    """One fresh server through the whole workload.  None when the server
    refused its flags."""
    workdir = tempfile.mkdtemp(prefix=name + ".", dir=tmp)
    srv, why = start_server(args, workdir, flags, name)
    if srv is None:
        print("%s: skipped: %s" % (name, why), flush=True)
        return {"variant": name, "skipped": why}
    print("%s: gpt2d %s (started in %.1f s)" % (name, " ".join(flags), srv.start_s),
          flush=True)
    run = {"variant": name, "flags": flags, "restart": restart, "turns": [],
           "start_s": srv.start_s}
    histories = [[] for _ in range(args.users)]
    t_run = time.monotonic()
    try:
        client = srv.client(timeout=300)
        for turn in range(args.turns):
            if restart and turn == args.turns - 1 and args.turns > 1:
                run["kv_before_restart"] = kv_series(client)
                run["rss_before_restart_kib"] = rss_kib(srv.pid)
                rc, stop_s = srv.stop(timeout=120)
                run["stop_rc"], run["stop_s"] = rc, stop_s
                srv, why = start_server(args, workdir, flags, name)
                if srv is None:
                    raise RuntimeError("restart refused: %s" % why)
                run["restart_start_s"] = srv.start_s
                print("  restart: stopped (exit %s) in %.1f s, started in %.1f s"
                      % (rc, stop_s, srv.start_s), flush=True)
                client = srv.client(timeout=300)
            results, wall = run_turn(client, histories, turn, args, ids)
            row = turn_row(turn, results, wall)
            run["turns"].append(row)
            print_turn(row)
        run["wall_s"] = time.monotonic() - t_run
        run["rss_kib"] = rss_kib(srv.pid)
        run["kv"] = kv_series(client)
        r = client.get("/v1/sessions")
        run["sessions_listed"] = (len(r.json.get("data", []))
                                  if r.status == 200 else None)
    finally:
        rc, stop_s = srv.stop(timeout=120)
        run["final_stop_rc"] = rc
    # a digest of every history: the same workload in every variant
    run["histories"] = hash(tuple(tuple(h) for h in histories))
    return run


TURN_HEADER = ("  turn  reqs  prompt tok  cached tok   ideal  reuse%"
               "  TTFT p50  TTFT p95    wall s")


def print_turn(row):
    reuse = 100.0 * row["cached"] / row["ideal"] if row["ideal"] else float("nan")
    print("  %4d %5d %11d %11d %7d %7s %9.1f %9.1f %9.2f%s" % (
        row["turn"], row["requests"], row["prompt_tokens"], row["cached"],
        row["ideal"], "%.1f" % reuse if row["ideal"] else "-",
        row["ttft_p50_ms"], row["ttft_p95_ms"], row["wall_s"],
        ("   %d errors: %s" % (row["errors"], row["first_error"]))
        if row["errors"] else ""), flush=True)


def returning(run):
    rows = run["turns"][1:]
    return sum(r["cached"] for r in rows), sum(r["ideal"] for r in rows)


def summarize_chat(runs, args):
    base = next((r for r in runs if r["variant"] == "baseline" and "turns" in r), None)
    print()
    print("summary: %d users x %d turns, %d user tokens a turn, %d-token replies, "
          "%d clients, %s" % (args.users, args.turns, args.user_tokens,
                              args.max_tokens, args.concurrency,
                              "no session ids" if args.no_session else "session ids"))
    print("  %-14s %12s %10s %9s %10s %9s %8s %8s" % (
        "variant", "reused tok", "ideal", "% ideal", "% baseline",
        "last turn", "wall s", "RSS MiB"))
    base_total = returning(base)[0] if base else None
    base_last = base["turns"][-1]["cached"] if base else None
    for r in runs:
        if "turns" not in r:
            print("  %-14s skipped: %s" % (r["variant"], r["skipped"]))
            continue
        reused, ideal = returning(r)
        last = r["turns"][-1]["cached"]
        r["ratio"] = reused / base_total if base_total else None
        r["last_ratio"] = last / base_last if base_last else None
        print("  %-14s %12d %10d %9s %10s %9s %8.1f %8s" % (
            r["variant"], reused, ideal,
            "%.1f" % (100.0 * reused / ideal) if ideal else "-",
            "%.1f" % (100 * r["ratio"]) if r["ratio"] is not None else "-",
            "%.1f%%" % (100 * r["last_ratio"]) if r["last_ratio"] is not None else "-",
            r["wall_s"], "%.1f" % (r["rss_kib"] / 1024) if r["rss_kib"] else "n/a"))
    for r in runs:
        if "turns" not in r:
            continue
        if "kv_before_restart" in r:
            print("  %s before restart: %s" % (r["variant"], fmt_series(r["kv_before_restart"])))
            print("  %s restart: stop exit %s in %.1f s, start %.1f s" % (
                r["variant"], r["stop_rc"], r["stop_s"], r["restart_start_s"]))
        print("  %s at end: %s" % (r["variant"], fmt_series(r["kv"])))
        extra = sum(t["fallbacks"] for t in r["turns"])
        mism = sum(t["text_mismatches"] for t in r["turns"])
        if extra or mism:
            print("  %s: %d replies re-tokenized, %d whose ids did not decode "
                  "to their text" % (r["variant"], extra, mism))
        if base and r is not base and r["histories"] != base["histories"]:
            print("  %s: histories differ from the baseline's (not the same "
                  "workload: errors, or outputs that depend on the cache)"
                  % r["variant"])
    if base and any(r.get("variant") == "disk-restart" and "turns" in r for r in runs):
        d = next(r for r in runs if r["variant"] == "disk-restart")
        print("  target: disk-restart reuse >= 95%% of baseline: %.1f%% %s" % (
            100 * d["ratio"], "met" if d["ratio"] >= 0.95 else "MISSED"))


def mode_chat(args, ids, tmp):
    cfg = model_config(args.model)
    final_prompt = args.turns * args.user_tokens + (args.turns - 1) * args.max_tokens
    if final_prompt + args.max_tokens > cfg["n_ctx"]:
        raise SystemExit("chat.py: the last turn needs %d positions, the model "
                         "has %d" % (final_prompt + args.max_tokens, cfg["n_ctx"]))
    bb = block_bytes(cfg, args.kv_dtype)
    per_ctx = blocks_for(cfg["n_ctx"])
    # every user's whole history, plus the partial block each earlier turn
    # left behind (a returning turn copies the cached partial block and the
    # source stays cached), plus a full context per slot for what runs: a
    # baseline that never evicts
    big = (args.users * (blocks_for(final_prompt + args.max_tokens) + args.turns)
           + args.concurrency * per_ctx) * bb
    small = args.kv_contexts * per_ctx * bb
    need_all = args.users * blocks_for(final_prompt + args.max_tokens)
    print("model %s: %d layers, %d wide, n_ctx %d; KV block %d KiB, a full "
          "context %d blocks" % (args.model, cfg["n_layer"], cfg["n_embd"],
                                 cfg["n_ctx"], bb // 1024, per_ctx))
    print("workload: %d users x %d turns; last prompt %d tokens; every history "
          "%d blocks; small RAM %d blocks (%.0f%% of that), baseline %d blocks"
          % (args.users, args.turns, final_prompt, need_all,
             args.kv_contexts * per_ctx,
             100.0 * args.kv_contexts * per_ctx / need_all, big // bb))
    common = ["--threads", str(args.threads), "--slots", str(args.concurrency),
              "--max-queue", str(max(64, args.concurrency)),
              "--kv-dtype", args.kv_dtype]
    extra = list(args.server_arg or [])
    disk_ok = "--kv-cache-dir" in help_text(args.gpt2d)
    runs = []
    for v in args.variants.split(","):
        v = v.strip()
        if v == "baseline":
            flags, restart = common + ["--kv-memory", kib_arg(big)], False
        elif v in ("small", "small-restart", "disk-restart"):
            flags = common + ["--kv-memory", kib_arg(small)] + extra
            restart = v != "small"
            if v == "disk-restart":
                if not disk_ok:
                    print("%s: skipped: disk tier not available (gpt2d --help "
                          "lists no --kv-cache-dir)" % v, flush=True)
                    runs.append({"variant": v, "skipped": "disk tier not available"})
                    continue
                flags += ["--kv-cache-dir", tempfile.mkdtemp(prefix="kvdisk.", dir=tmp),
                          "--kv-disk", args.disk_size]
        else:
            raise SystemExit("chat.py: unknown variant %r" % v)
        print(flush=True)
        run = run_variant(v, flags, restart, args, ids, tmp)
        runs.append(run)
    summarize_chat(runs, args)
    ran = [r for r in runs if "turns" in r]
    failed = not ran or any(t["errors"] for r in ran for t in r["turns"])
    return runs, failed


# ---- mode ttft ----

def ttft_prompts(args, client, ids):
    """The primed histories and, after priming them through `client`, the
    returning prompts (history + reply + new ids), one per repetition."""
    back = []
    for i in range(args.reps):
        history = user_text(args.seed, 100000 + i, 0, args.history)
        r = stream_turn(client, ttft_body(history, "ttft-%d" % i, args), ids)
        if r["error"]:
            raise SystemExit("chat.py: priming failed: %s" % r["error"])
        back.append(history + r["reply"] + user_text(args.seed, 100000 + i, 1,
                                                     args.new_tokens))
    return back


def ttft_body(prompt, session, args, salt=None):
    body = {"prompt": prompt, "max_tokens": args.max_tokens, "temperature": 0,
            "logprobs": 0, "logit_bias": NO_EOT, "stream": True,
            "stream_options": {"include_usage": True}, "session_id": session}
    if salt:
        body["cache_salt"] = salt
    return body


def measure(client, prompts, args, ids, state):
    """TTFT (ms) and cached tokens of each returning prompt."""
    out = []
    for i, p in enumerate(prompts):
        if state == "cold":
            body = ttft_body(p, "cold-%d-%d" % (i, os.getpid()), args,
                             salt="cold-%d-%f" % (i, time.time()))
        else:
            body = ttft_body(p, "ttft-%d" % i, args)
        r = stream_turn(client, body, ids)
        if r["error"]:
            raise SystemExit("chat.py: %s turn failed: %s" % (state, r["error"]))
        out.append((r["ttft"] * 1e3, r["cached"], r["prompt_tokens"]))
    return out


def mode_ttft(args, ids, tmp):
    cfg = model_config(args.model)
    if args.history + args.max_tokens + args.new_tokens + args.max_tokens > cfg["n_ctx"]:
        raise SystemExit("chat.py: --history too long for n_ctx %d" % cfg["n_ctx"])
    bb = block_bytes(cfg, args.kv_dtype)
    per_ctx = blocks_for(cfg["n_ctx"])
    # every primed session (its returning turn included) and a context to run
    mem = (args.reps * (blocks_for(args.history + args.new_tokens
                                   + 2 * args.max_tokens) + 2) + per_ctx) * bb
    flags = ["--threads", str(args.threads), "--slots", "1",
             "--kv-dtype", args.kv_dtype, "--kv-memory", kib_arg(mem)]
    rows = {}
    workdir = tempfile.mkdtemp(prefix="ttft.", dir=tmp)
    srv, why = start_server(args, workdir, flags + list(args.server_arg or []), "ttft")
    if srv is None:
        raise SystemExit("chat.py: %s" % why)
    try:
        c = srv.client(timeout=600)
        stream_turn(c, ttft_body(user_text(args.seed, 99999, 0, 64), "warm", args), ids)
        prompts = ttft_prompts(args, c, ids)
        rows["ram"] = measure(c, prompts, args, ids, "ram")
        rows["cold"] = measure(c, prompts, args, ids, "cold")
        rss = rss_kib(srv.pid)
    finally:
        srv.stop(timeout=120)
    if "--kv-cache-dir" not in help_text(args.gpt2d):
        rows["disk"] = "disk tier not available"
    else:
        workdir = tempfile.mkdtemp(prefix="ttft-disk.", dir=tmp)
        dflags = flags + list(args.server_arg or []) + [
            "--kv-cache-dir", os.path.join(workdir, "kv"), "--kv-disk", args.disk_size]
        os.makedirs(os.path.join(workdir, "kv"), exist_ok=True)
        srv, why = start_server(args, workdir, dflags, "ttft-disk")
        if srv is None:
            rows["disk"] = "disk tier not available (%s)" % why
        else:
            try:
                prompts = ttft_prompts(args, srv.client(timeout=600), ids)
                srv.stop(timeout=120)
                srv, why = start_server(args, workdir, dflags, "ttft-disk")
                if srv is None:
                    raise SystemExit("chat.py: restart refused: %s" % why)
                rows["disk"] = measure(srv.client(timeout=600), prompts, args,
                                       ids, "disk")
                rows["disk_kv"] = kv_series(srv.client())
            finally:
                if srv is not None:
                    srv.stop(timeout=120)
    print()
    print("TTFT of a returning turn: %d-token history + %d reply + %d new tokens, "
          "model %s, %d threads, %d repetitions (medians)"
          % (args.history, args.max_tokens, args.new_tokens, args.model,
             args.threads, args.reps))
    print("  %-6s %10s %12s %14s   each (ms)" % ("from", "TTFT ms", "cached tok",
                                               "prompt tok"))
    for state in ("ram", "disk", "cold"):
        r = rows[state]
        if isinstance(r, str):
            print("  %-6s %s" % (state, r))
            continue
        print("  %-6s %10.1f %12d %14d   %s" % (
            state, statistics.median(x[0] for x in r),
            statistics.median(x[1] or 0 for x in r),
            statistics.median(x[2] or 0 for x in r),
            " ".join("%.0f" % x[0] for x in r)))
    print("  server RSS %.1f MiB" % (rss / 1024) if rss else "")
    if "disk_kv" in rows:
        print("  after restart: %s" % fmt_series(rows["disk_kv"]))
    return rows, False


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpt2d", required=True, help="the gpt2d binary")
    ap.add_argument("--model", required=True, help="model directory")
    ap.add_argument("--mode", choices=("chat", "ttft"), default="chat")
    ap.add_argument("--users", type=int, default=48)
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--user-tokens", type=int, default=64,
                    help="new user tokens a turn")
    ap.add_argument("--max-tokens", type=int, default=16, help="reply length")
    ap.add_argument("--concurrency", type=int, default=4,
                    help="clients at once (and --slots)")
    ap.add_argument("--no-session", action="store_true",
                    help="send no session_id (the prefix index alone)")
    ap.add_argument("--kv-contexts", type=int, default=8,
                    help="the small variants' --kv-memory, in full contexts")
    ap.add_argument("--kv-dtype", default="float32")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--variants", default="baseline,small,small-restart,disk-restart")
    ap.add_argument("--server-arg", action="append", metavar="ARG",
                    help="an extra gpt2d argument for every variant but the "
                         "baseline (repeat; --server-arg=--flag for dashes)")
    ap.add_argument("--disk-size", default="1G", help="--kv-disk of the disk runs")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--history", type=int, default=900, help="ttft: history tokens")
    ap.add_argument("--new-tokens", type=int, default=32, help="ttft: new tokens")
    ap.add_argument("--reps", type=int, default=5, help="ttft: repetitions")
    ap.add_argument("--json", help="write every run's figures here")
    args = ap.parse_args(argv)
    if min(args.users, args.turns, args.user_tokens, args.max_tokens,
           args.concurrency, args.kv_contexts, args.reps) < 1:
        ap.error("counts must be positive")

    ids = Ids(args.model)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="gpt2d-chat.") as tmp:
        if args.mode == "chat":
            result, failed = mode_chat(args, ids, tmp)
        else:
            result, failed = mode_ttft(args, ids, tmp)
    print("total %.1f s" % (time.monotonic() - t0))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1, default=str)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
