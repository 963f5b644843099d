"""batch_tests.py — OpenAI's Files and Batch APIs against real gpt2d
processes on 127.0.0.1 (--batch-dir): uploads and their refusals, each
key's files and batches its own, a batch's answers equal to the same
requests sent alone, a malformed line answered with its error line, cancel,
and a restart in the middle of a batch that loses and repeats nothing.

Run by test_batch.sh; by hand:
    GPT2D_BUILDDIR=$PWD GPT2D_SRCDIR=/path/to/src \\
    GPT2D_TEST_DATA=$PWD/tests/data python3 batch_tests.py [TEST...]
Environment:
    GPT2D_BATCH_WORKDIR   scratch directory (server logs, batch dirs)
    GPT2D_BATCH_SUMMARY   where "PASSED FAILED" is written"""

import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time

from testlib import (GPT2D, TINY, Case, ServerCase, key_file,
                     long_context_model, run_module, wait_for)
from gpt2d_client import Server, metric_sum, parse_metrics

WORKDIR = os.environ.get("GPT2D_BATCH_WORKDIR", tempfile.gettempdir())
KEY_A, KEY_B, KEY_C = "sk-batch-a", "sk-batch-b", "sk-batch-c"


def slow_model():
    """tiny with a 1024-token context: room for lines long enough to be
    caught in flight."""
    return long_context_model(os.path.join(WORKDIR, "ctx1024-model"), TINY, 7)


def multipart(fields, boundary="gpt2d-test-boundary"):
    """A multipart/form-data body of `fields` (name -> bytes, or name ->
    (filename, bytes)), as httpx writes one; returns (content_type, body)."""
    out = b""
    for name, value in fields.items():
        out += b"--" + boundary.encode() + b"\r\n"
        if isinstance(value, tuple):
            out += ('Content-Disposition: form-data; name="%s"; filename="%s"'
                    '\r\nContent-Type: application/octet-stream\r\n\r\n'
                    % (name, value[0])).encode() + value[1] + b"\r\n"
        else:
            out += ('Content-Disposition: form-data; name="%s"\r\n\r\n'
                    % name).encode() + value + b"\r\n"
    out += b"--" + boundary.encode() + b"--\r\n"
    return "multipart/form-data; boundary=" + boundary, out


def upload(client, data, purpose=b"batch", filename="in.jsonl"):
    ctype, body = multipart({"purpose": purpose, "file": (filename, data)})
    return client.post("/v1/files", raw=body, headers={"Content-Type": ctype})


def jsonl(lines):
    return "".join(json.dumps(x) + "\n" for x in lines).encode()


def line(custom_id, body, url="/v1/completions"):
    return {"custom_id": custom_id, "method": "POST", "url": url,
            "body": body}


def answer_part(body):
    """What a completion's answer says, without what names this one
    answer (its id, when it was made) or the load it ran beside (the
    cache's cached_tokens; the guesses speculation made, which depend on
    what else runs: never the tokens)."""
    out = {k: v for k, v in body.items() if k not in ("id", "created")}
    out["usage"] = dict(out["usage"])
    out["usage"].pop("prompt_tokens_details", None)
    out["usage"].pop("completion_tokens_details", None)
    return out


def wait_batch(client, batch_id, statuses, timeout=60.0):
    """Polls the batch until its status is one of `statuses`."""
    def done():
        r = client.get("/v1/batches/" + batch_id)
        return r.json if r.json.get("status") in statuses else None
    b = wait_for(done, timeout, interval=0.05)
    if b is None:
        raise AssertionError("batch %s did not reach %s: %r"
                             % (batch_id, statuses,
                                client.get("/v1/batches/" + batch_id).json))
    return b


def file_lines(client, file_id):
    if file_id is None:
        return []
    r = client.get("/v1/files/%s/content" % file_id)
    assert r.status == 200, r
    return [json.loads(x) for x in r.body.decode().splitlines()]


def batch_dir(name):
    path = os.path.join(WORKDIR, name)
    shutil.rmtree(path, ignore_errors=True)
    return path


class BatchCase(ServerCase):
    WORKDIR = WORKDIR

    @classmethod
    def setUpClass(cls):
        os.makedirs(WORKDIR, exist_ok=True)
        keys = key_file(os.path.join(WORKDIR, cls.NAME + "-keys"),
                        [KEY_A + " name=a", KEY_B + " name=b",
                         KEY_C + " name=c max-queued=1"])
        cls.ARGS = tuple(cls.ARGS) + ("--api-key-file", keys, "--batch-dir",
                                      batch_dir(cls.NAME + "-dir"))
        super().setUpClass()

    def a(self):
        return self.client(api_key=KEY_A)

    def b(self):
        return self.client(api_key=KEY_B)

    def new_batch(self, client, lines, endpoint="/v1/completions"):
        f = upload(client, jsonl(lines))
        self.assertEqual(f.status, 200, f)
        r = client.post("/v1/batches", {"input_file_id": f.json["id"],
                                        "endpoint": endpoint,
                                        "completion_window": "24h"})
        self.assertEqual(r.status, 200, r)
        return r.json


class Off(ServerCase):
    """Without --batch-dir the two APIs say they are off."""
    WORKDIR = WORKDIR
    NAME = "batch-off"
    ARGS = ("--slots", "1", "--threads", "1")

    def test_every_route_is_404_saying_why(self):
        c = self.client()
        for method, path in (("GET", "/v1/files"), ("POST", "/v1/batches"),
                             ("GET", "/v1/batches/batch_x"),
                             ("GET", "/v1/files/file-x/content")):
            r = c.request(method, path, body={} if method == "POST" else None)
            e = self.assert_error(r, 404)
            self.assertEqual(e["code"], "batch_api_off", r)
            self.assertIn("--batch-dir", e["message"])


class Files(BatchCase):
    NAME = "batch-files"
    ARGS = ("--slots", "1", "--threads", "1", "--max-file-bytes", "4k")

    def test_upload_list_retrieve_content_delete(self):
        c = self.a()
        data = jsonl([line("x", {"prompt": "Hi", "max_tokens": 1})])
        r = upload(c, data, filename="mine.jsonl")
        self.assertEqual(r.status, 200, r)
        f = r.json
        self.assertEqual((f["object"], f["bytes"], f["filename"], f["purpose"],
                          f["status"]),
                         ("file", len(data), "mine.jsonl", "batch",
                          "processed"))
        self.assertTrue(f["id"].startswith("file-"))
        listed = c.get("/v1/files").json
        self.assertEqual(listed["object"], "list")
        self.assertIn(f["id"], [x["id"] for x in listed["data"]])
        self.assertEqual(c.get("/v1/files/" + f["id"]).json, f)
        content = c.get("/v1/files/%s/content" % f["id"])
        self.assertEqual((content.status, content.body), (200, data))
        r = c.delete("/v1/files/" + f["id"])
        self.assertEqual(r.json, {"id": f["id"], "object": "file",
                                  "deleted": True})
        self.assert_error(c.get("/v1/files/" + f["id"]), 404)
        self.assert_error(c.get("/v1/files/%s/content" % f["id"]), 404)
        self.assert_error(c.delete("/v1/files/" + f["id"]), 404)

    def test_list_pages_newest_first(self):
        c = self.client(api_key=KEY_B)
        ids = [upload(c, b'{"n": %d}\n' % i).json["id"] for i in range(3)]
        first = c.get("/v1/files?limit=2").json
        self.assertEqual([x["id"] for x in first["data"]], ids[:0:-1])
        self.assertTrue(first["has_more"])
        rest = c.get("/v1/files?limit=2&after=" + first["last_id"]).json
        self.assertEqual([x["id"] for x in rest["data"]][:1], ids[:1])
        oldest = c.get("/v1/files?order=asc&limit=1").json
        self.assertEqual(oldest["data"][0]["id"], ids[0])
        for i in ids:
            c.delete("/v1/files/" + i)
        self.assert_error(c.get("/v1/files?limit=0"), 400, "limit")
        self.assert_error(c.get("/v1/files?order=up"), 400, "order")

    def test_another_keys_file_is_not_found(self):
        f = upload(self.a(), b'{"a": 1}\n').json
        b = self.b()
        self.assert_error(b.get("/v1/files/" + f["id"]), 404)
        self.assert_error(b.get("/v1/files/%s/content" % f["id"]), 404)
        self.assert_error(b.delete("/v1/files/" + f["id"]), 404)
        self.assertNotIn(f["id"], [x["id"] for x in b.get("/v1/files").json["data"]])
        r = b.post("/v1/batches", {"input_file_id": f["id"],
                                   "endpoint": "/v1/completions",
                                   "completion_window": "24h"})
        self.assert_error(r, 404, "input_file_id")
        self.assertEqual(self.a().get("/v1/files/" + f["id"]).status, 200)

    def test_bad_uploads_get_their_400(self):
        c = self.a()
        self.assert_error(upload(c, b"{}\n", purpose=b"fine-tune"), 400,
                          "purpose")
        ctype, body = multipart({"purpose": b"batch"})
        self.assert_error(c.post("/v1/files", raw=body,
                                 headers={"Content-Type": ctype}), 400, "file")
        ctype, body = multipart({"file": ("a.jsonl", b"{}\n")})
        self.assert_error(c.post("/v1/files", raw=body,
                                 headers={"Content-Type": ctype}), 400,
                          "purpose")
        self.assert_error(upload(c, b""), 400, "file")
        self.assert_error(c.post("/v1/files", {"file": "x"}), 400)
        ctype, body = multipart({"purpose": b"batch", "file": ("a", b"x")})
        r = c.post("/v1/files", raw=body[:-8], headers={"Content-Type": ctype})
        self.assertIn("closing", self.assert_error(r, 400)["message"])

    def test_an_upload_over_max_file_bytes_is_413(self):
        r = upload(self.a(), b"x" * 5000)
        self.assert_error(r, 413)

    def test_bad_batches_get_their_400(self):
        c = self.a()
        f = upload(c, b'{"a": 1}\n').json["id"]
        ok = {"input_file_id": f, "endpoint": "/v1/completions",
              "completion_window": "24h"}
        for field, value, param in (
                ("endpoint", "/v1/embeddings", "endpoint"),
                ("completion_window", "1h", "completion_window"),
                ("metadata", {"k": 1}, "metadata"),
                ("input_file_id", "file-000000000000000000000000",
                 "input_file_id"),
                ("surprise", 1, "surprise")):
            with self.subTest(field=field):
                body = dict(ok, **{field: value})
                status = 404 if field == "input_file_id" else 400
                self.assert_error(c.post("/v1/batches", body), status, param)
        del ok["endpoint"]
        self.assert_error(c.post("/v1/batches", ok), 400, "endpoint")
        self.assert_error(c.post("/v1/batches", raw=b"[1]"), 400)
        self.assert_error(c.get("/v1/batches/batch_nope"), 404)
        self.assert_error(c.post("/v1/batches/batch_nope/cancel"), 404)
        self.assert_error(c.get("/v1/batches?limit=101"), 400, "limit")
        self.assert_error(c.request("DELETE", "/v1/batches"), 405,
                          allow="GET, POST")


class Answers(BatchCase):
    """A batch's answers are the same requests' answers sent alone."""
    NAME = "batch-answers"
    ARGS = ("--slots", "4", "--threads", "1")

    def test_every_line_answered_as_if_sent_alone(self):
        bodies = [
            {"prompt": "Hello there", "max_tokens": 8, "temperature": 0},
            {"prompt": "The cat sat", "max_tokens": 6, "seed": 11,
             "logprobs": 2},
            {"prompt": ["one", "two two"], "max_tokens": 4, "seed": 5,
             "n": 2},
            {"prompt": "Score me", "max_tokens": 0, "echo": True,
             "logprobs": 1},
        ]
        lines = [line("c%d" % i, b) for i, b in enumerate(bodies)]
        lines.insert(2, "not json")
        lines.append(line("bad", {"prompt": "x", "max_tokens": 5000}))
        lines.append(line("wrong-url", {"prompt": "x"}, url="/v1/chat/completions"))
        lines.append(line("streamed", {"prompt": "x", "stream": True}))
        c = self.a()
        f = upload(c, b"".join(
            (x.encode() + b"\n") if isinstance(x, str) else jsonl([x])
            for x in lines) + b"\n\n")
        b = c.post("/v1/batches", {"input_file_id": f.json["id"],
                                   "endpoint": "/v1/completions",
                                   "completion_window": "24h",
                                   "metadata": {"run": "answers"}}).json
        self.assertEqual((b["object"], b["status"], b["metadata"]),
                         ("batch", "validating", {"run": "answers"}))
        b = wait_batch(c, b["id"], ("completed", "failed"))
        self.assertEqual(b["status"], "completed", b)
        self.assertEqual(b["request_counts"],
                         {"total": 8, "completed": 4, "failed": 4})
        for at in ("in_progress_at", "finalizing_at", "completed_at"):
            self.assertIsInstance(b[at], int, at)
        out = file_lines(c, b["output_file_id"])
        err = file_lines(c, b["error_file_id"])
        self.assertEqual(sorted(x["custom_id"] for x in out),
                         ["c0", "c1", "c2", "c3"])
        for x in out:
            self.assertIsNone(x["error"])
            self.assertEqual(x["response"]["status_code"], 200)
            body = bodies[int(x["custom_id"][1:])]
            alone = c.post("/v1/completions", body)
            self.assertEqual(alone.status, 200, alone)
            self.assertEqual(answer_part(x["response"]["body"]),
                             answer_part(alone.json), x["custom_id"])
            self.assertEqual(x["response"]["request_id"],
                             x["response"]["body"]["id"])
        by_id = {x["custom_id"]: x for x in err}
        self.assertEqual(set(by_id), {None, "bad", "wrong-url", "streamed"})
        self.assertEqual(by_id[None]["error"]["code"], "invalid_json")
        self.assertEqual(by_id["wrong-url"]["error"]["code"], "invalid_url")
        self.assertEqual(by_id["streamed"]["error"]["code"], "invalid_body")
        self.assertEqual(by_id["bad"]["response"]["status_code"], 400)
        self.assertEqual(by_id["bad"]["response"]["body"]["error"]["param"],
                         "max_tokens")
        files = {x["id"]: x for x in c.get("/v1/files").json["data"]}
        self.assertEqual(files[b["output_file_id"]]["purpose"], "batch_output")
        listed = c.get("/v1/batches").json
        self.assertEqual(listed["data"][0]["id"], b["id"])
        self.assertNotIn(b["id"], [x["id"] for x in
                                   self.b().get("/v1/batches").json["data"]])
        self.assert_error(self.b().get("/v1/batches/" + b["id"]), 404)

    def test_a_chat_batch(self):
        body = {"messages": [{"role": "user", "content": "Hi"}],
                "max_tokens": 5, "seed": 2}
        c = self.b()
        b = self.new_batch(c, [line("q", body, url="/v1/chat/completions")],
                           endpoint="/v1/chat/completions")
        b = wait_batch(c, b["id"], ("completed",))
        [x] = file_lines(c, b["output_file_id"])
        alone = c.post("/v1/chat/completions", body).json
        self.assertEqual(answer_part(x["response"]["body"]), answer_part(alone))
        self.assertIsNone(b["error_file_id"])

    def test_an_upload_larger_than_max_body_is_kept_whole(self):
        """An upload is limited by --max-file-bytes, not --max-body (1M),
        and comes back byte for byte."""
        c = self.b()
        data = jsonl([line("big%d" % i, {"prompt": "x" * 200, "max_tokens": 1})
                      for i in range(6000)])
        self.assertGreater(len(data), 1 << 20)
        r = upload(c, data)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json["bytes"], len(data))
        content = c.get("/v1/files/%s/content" % r.json["id"])
        self.assertEqual(content.body, data)
        self.assertEqual(c.delete("/v1/files/" + r.json["id"]).status, 200)

    def test_an_answer_holding_nul_is_kept(self):
        """Token 188 decodes to U+0000: the answer holds it, and the line
        is answered like any other."""
        body = {"prompt": "hello", "max_tokens": 3, "temperature": 0,
                "logit_bias": {"188": 100}}
        c = self.a()
        b = self.new_batch(c, [line("nul", body),
                               line("dup", {"prompt": "a"}), ])
        b = wait_batch(c, b["id"], ("completed",))
        self.assertEqual(b["request_counts"],
                         {"total": 2, "completed": 2, "failed": 0})
        out = {x["custom_id"]: x for x in file_lines(c, b["output_file_id"])}
        self.assertEqual(out["nul"]["response"]["body"]["choices"][0]["text"],
                         "\u0000" * 3)

    def test_a_line_with_duplicate_keys_is_not_json(self):
        c = self.a()
        f = upload(c, b'{"custom_id": "d", "method": "POST", "url": '
                      b'"/v1/completions", "body": {"prompt": "a", '
                      b'"prompt": "b", "max_tokens": 1}}\n')
        b = c.post("/v1/batches", {"input_file_id": f.json["id"],
                                   "endpoint": "/v1/completions",
                                   "completion_window": "24h"}).json
        b = wait_batch(c, b["id"], ("completed",))
        [x] = file_lines(c, b["error_file_id"])
        self.assertEqual(x["error"]["code"], "invalid_json")
        self.assertIn("duplicate", x["error"]["message"])

    def test_a_filename_not_utf8_is_400(self):
        ctype, body = multipart({"purpose": b"batch",
                                 "file": ("x", b"{}\n")})
        body = body.replace(b'filename="x"', b'filename="bad\xff.jsonl"')
        r = self.a().post("/v1/files", raw=body,
                          headers={"Content-Type": ctype})
        self.assert_error(r, 400, "file")

    def test_a_file_is_either_deleted_or_read_by_a_batch(self):
        """A DELETE and a batch create on one file at once: the file is
        deleted only when no unfinished batch reads it, so no batch ever
        loses its input (both succeed only when the batch had finished)."""
        c = self.b()
        for _ in range(20):
            fid = upload(c, jsonl([line("x", {"prompt": "x",
                                               "max_tokens": 1})])).json["id"]
            got = {}
            def delete():
                got["delete"] = c.delete("/v1/files/" + fid).status
            def create():
                r = c.post("/v1/batches", {
                    "input_file_id": fid, "endpoint": "/v1/completions",
                    "completion_window": "24h"})
                got["create"] = r.status
                got["batch"] = r.json.get("id")
            threads = [threading.Thread(target=delete),
                       threading.Thread(target=create)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            self.assertIn(got["delete"], (200, 409))
            self.assertIn(got["create"], (200, 404))
            if got["create"] == 200:
                b = wait_batch(c, got["batch"], ("completed", "failed"))
                self.assertEqual(b["status"], "completed", (got, b))

    def test_repeated_custom_ids_fail_the_batch(self):
        c = self.a()
        b = self.new_batch(c, [line("same", {"prompt": "a", "max_tokens": 1}),
                               line("other", {"prompt": "b", "max_tokens": 1}),
                               line("same", {"prompt": "c", "max_tokens": 1})])
        b = wait_batch(c, b["id"], ("failed",))
        self.assertEqual(b["errors"]["data"][0]["code"], "duplicate_custom_id")
        self.assertIsInstance(b["failed_at"], int)
        self.assertIsNone(b["output_file_id"])

    def test_a_batchs_tokens_count_under_its_key(self):
        c = self.b()
        series = 'gpt2d_key_tokens_total{key="b",kind="completion"}'
        def completion_tokens():
            return parse_metrics(c.get("/metrics").body.decode()).get(series, 0)
        before = completion_tokens()
        b = self.new_batch(c, [line("t", {"prompt": "Count", "max_tokens": 7,
                                          "logit_bias": {"50256": -100}})])
        wait_batch(c, b["id"], ("completed",))
        self.assertEqual(completion_tokens() - before, 7)

    def test_an_input_file_in_use_is_not_deleted(self):
        c = self.a()
        b = self.new_batch(c, [line("q", {"prompt": "Hi", "max_tokens": 2})])
        r = c.delete("/v1/files/" + b["input_file_id"])
        if r.status == 409:  # still running: refused, and it finishes
            self.assertEqual(r.json["error"]["code"], "file_in_use")
        b = wait_batch(c, b["id"], ("completed",))
        self.assertEqual(b["request_counts"]["completed"], 1)


def slow_lines(n, tokens=200):
    return [line("s%d" % i, {"prompt": "Line %d says" % i,
                             "max_tokens": tokens, "seed": i,
                             "logit_bias": {"50256": -100}})
            for i in range(n)]


class Cancel(BatchCase):
    NAME = "batch-cancel"
    MODEL = staticmethod(slow_model)
    ARGS = ("--slots", "2", "--threads", "1", "--test-min-step-us", "3000",
            "--batch-parallel", "2")

    def test_cancel_keeps_what_finished_and_runs_nothing_more(self):
        c = self.a()
        b = self.new_batch(c, slow_lines(20, tokens=40))
        wait_for(lambda: c.get("/v1/batches/" + b["id"]).json
                 ["request_counts"]["completed"] >= 2, 60)
        r = c.post("/v1/batches/%s/cancel" % b["id"])
        self.assertEqual(r.status, 200, r)
        self.assertIn(r.json["status"], ("cancelling", "cancelled"))
        b = wait_batch(c, b["id"], ("cancelled",))
        self.assertIsInstance(b["cancelled_at"], int)
        done = b["request_counts"]["completed"]
        self.assertGreaterEqual(done, 2)
        self.assertLess(done, 20)
        out = file_lines(c, b["output_file_id"])
        self.assertEqual(len(out), done)
        self.assertEqual(len({x["custom_id"] for x in out}), done)
        time.sleep(0.5)
        self.assertEqual(c.get("/v1/batches/" + b["id"]).json
                         ["request_counts"]["completed"], done)
        # cancelling a finished batch changes nothing
        again = c.post("/v1/batches/%s/cancel" % b["id"]).json
        self.assertEqual(again["status"], "cancelled")


class Priority(BatchCase):
    """Batch lines give way to an interactive request at once, and neither
    answer changes."""
    NAME = "batch-priority"
    MODEL = staticmethod(slow_model)
    # more lines in flight than slots: two wait in the engine's queue;
    # memory for both slots' 900-token lines beside what another key's
    # cancelled batch keeps cached (its fair share)
    ARGS = ("--slots", "2", "--threads", "1", "--test-min-step-us", "3000",
            "--batch-parallel", "4", "--kv-memory", "8M")

    def test_an_interactive_request_takes_a_batch_lines_slot(self):
        c = self.a()
        # 900 tokens at >= 3 ms a step: no line can end within 2.7 s
        b = self.new_batch(c, slow_lines(4, tokens=900))
        def both_running():
            m = parse_metrics(c.get("/metrics").body.decode())
            return metric_sum(m, "gpt2d_sequences_running") >= 2
        self.assertTrue(wait_for(both_running, 30), "batch lines never ran")
        body = {"prompt": "Interactive", "max_tokens": 12, "seed": 9}
        t0 = time.monotonic()
        during = c.post("/v1/completions", body)
        took = time.monotonic() - t0
        self.assertEqual(during.status, 200, during)
        m = parse_metrics(c.get("/metrics").body.decode())
        self.assertGreaterEqual(
            metric_sum(m, "gpt2d_background_preemptions_total"), 1)
        mid = c.get("/v1/batches/" + b["id"]).json
        self.assertEqual(mid["request_counts"]["completed"], 0,
                         "a 900-token line finished within %.2f s" % took)
        c.post("/v1/batches/%s/cancel" % b["id"])
        wait_batch(c, b["id"], ("cancelled",))
        alone = c.post("/v1/completions", body)
        self.assertEqual(answer_part(during.json), answer_part(alone.json))

    def test_a_keys_batch_leaves_its_queue_to_its_requests(self):
        """Key c may queue one request: its batch lines, waiting for the
        engine, take none of that place from its interactive requests.

        Lines refused while one waits retry a second later, all at once:
        lines of 900 tokens (>= 2.7 s) keep both slots busy across a
        retry, so one of them is caught waiting (300-token lines ended in
        step with the retries on a slower machine and none ever was)."""
        c = self.client(api_key=KEY_C)
        b = self.new_batch(c, slow_lines(6, tokens=900))
        def queued():
            m = parse_metrics(c.get("/metrics").body.decode())
            return (metric_sum(m, "gpt2d_sequences_running") >= 2 and
                    metric_sum(m, "gpt2d_queue_depth") >= 1)
        self.assertTrue(wait_for(queued, 60), "no batch line waited")
        r = c.post("/v1/completions", {"prompt": "Mine", "max_tokens": 4,
                                       "seed": 1})
        self.assertEqual(r.status, 200, r)
        c.post("/v1/batches/%s/cancel" % b["id"])
        wait_batch(c, b["id"], ("cancelled",))


class Revoked(BatchCase):
    """A key taken out of the keys file (SIGHUP) stops its batches: the
    lines in flight end, no other starts, and the batch ends cancelled;
    another key's batch goes on."""
    NAME = "batch-revoked"
    MODEL = staticmethod(slow_model)
    ARGS = ("--slots", "2", "--threads", "1", "--test-min-step-us", "3000",
            "--batch-parallel", "2")

    def test_a_revoked_keys_batch_is_cancelled(self):
        a, b = self.a(), self.b()
        ba = self.new_batch(a, slow_lines(2, tokens=10))
        bb = self.new_batch(b, slow_lines(8, tokens=300))
        def b_running():
            m = parse_metrics(b.get("/metrics").body.decode())
            return metric_sum(m, "gpt2d_sequences_running") >= 1
        self.assertTrue(wait_for(b_running, 30), "b's lines never ran")
        key_file(os.path.join(WORKDIR, self.NAME + "-keys"),
                 [KEY_A + " name=a", KEY_C + " name=c max-queued=1"])
        os.kill(self.server.pid, signal.SIGHUP)
        self.assertTrue(wait_for(lambda: "API keys reloaded" in
                                 self.log_text(), 10))
        # b can no longer ask; its batch ends cancelled, not all answered
        done = wait_batch(a, ba["id"], ("completed",))
        self.assertEqual(done["request_counts"]["completed"], 2)
        self.assertEqual(b.get("/v1/batches/" + bb["id"]).status, 401)
        self.assertTrue(wait_for(lambda: "batch %s cancelled: its API key "
                                 "is no longer in the keys file" % bb["id"]
                                 in self.log_text(), 30))
        def cancelled():
            with open(os.path.join(WORKDIR, self.NAME + "-dir", "batches",
                                   bb["id"] + ".json")) as f:
                rec = json.load(f)
            return rec if rec["status"] == "cancelled" else None
        rec = wait_for(cancelled, 60)
        self.assertIsNotNone(rec, "b's batch did not end cancelled")
        self.assertLess(rec["request_counts"]["completed"], 8)


class Expiry(BatchCase):
    """A batch whose window passes (--test-batch-window: 2 s instead of
    24 h) ends expired: its answers so far kept, every other line an error
    line, each line exactly once."""
    NAME = "batch-expiry"
    MODEL = staticmethod(slow_model)
    ARGS = ("--slots", "1", "--threads", "1", "--test-min-step-us", "3000",
            "--batch-parallel", "1", "--test-batch-window", "2")

    def test_an_expired_batch_answers_every_line_once(self):
        c = self.a()
        n = 30
        b = self.new_batch(c, slow_lines(n, tokens=60))
        self.assertLessEqual(b["expires_at"] - b["created_at"], 2)
        b = wait_batch(c, b["id"], ("expired",), timeout=60)
        self.assertIsInstance(b["expired_at"], int)
        counts = b["request_counts"]
        self.assertEqual(counts["total"], n)
        self.assertEqual(counts["completed"] + counts["failed"], n)
        self.assertGreater(counts["failed"], 0)
        out = file_lines(c, b["output_file_id"])
        err = file_lines(c, b["error_file_id"])
        self.assertEqual(len(out), counts["completed"])
        self.assertTrue(all(x["error"]["code"] == "batch_expired" for x in err))
        self.assertEqual(sorted(x["custom_id"] for x in out + err),
                         sorted("s%d" % i for i in range(n)))


class Restart(Case):
    """SIGTERM in the middle of a batch, and a new daemon on the same
    directory: every line answered exactly once, each answer as sent
    alone."""

    def test_a_restart_loses_and_repeats_nothing(self):
        os.makedirs(WORKDIR, exist_ok=True)
        keys = key_file(os.path.join(WORKDIR, "restart-keys"), [KEY_A])
        args = ["--slots", "2", "--threads", "1", "--test-min-step-us",
                "3000", "--batch-parallel", "2", "--api-key-file", keys,
                "--batch-dir", batch_dir("restart-dir")]
        n = 12
        server = Server(GPT2D, slow_model(), WORKDIR, args, name="restart1")
        server.start()
        try:
            c = server.client(api_key=KEY_A)
            f = upload(c, jsonl(slow_lines(n, tokens=30))).json
            b = c.post("/v1/batches", {"input_file_id": f["id"],
                                       "endpoint": "/v1/completions",
                                       "completion_window": "24h"}).json
            wait_for(lambda: c.get("/v1/batches/" + b["id"]).json
                     ["request_counts"]["completed"] >= 3, 60)
        finally:
            rc, _ = server.stop()
        self.assertEqual(rc, 0, server.log_tail())
        server2 = Server(GPT2D, slow_model(), WORKDIR, args, name="restart2")
        server2.start()
        try:
            c = server2.client(api_key=KEY_A)
            mid = c.get("/v1/batches/" + b["id"]).json
            self.assertEqual(mid["status"], "in_progress", mid)
            self.assertGreaterEqual(mid["request_counts"]["completed"], 3)
            self.assertLess(mid["request_counts"]["completed"], n)
            done = wait_batch(c, b["id"], ("completed",), timeout=120)
            self.assertEqual(done["request_counts"],
                             {"total": n, "completed": n, "failed": 0})
            out = file_lines(c, done["output_file_id"])
            self.assertEqual(sorted(x["custom_id"] for x in out),
                             sorted("s%d" % i for i in range(n)))
            for x in out:
                body = slow_lines(n, tokens=30)[int(x["custom_id"][1:])]["body"]
                alone = c.post("/v1/completions", body).json
                self.assertEqual(answer_part(x["response"]["body"]),
                                 answer_part(alone), x["custom_id"])
        finally:
            rc2, _ = server2.stop()
        self.assertEqual(rc2, 0)
        with open(server2.log_path, "rb") as log:
            self.assertIn(b"resumed", log.read())
        self.assert_clean_log(server)
        self.assert_clean_log(server2)


def main(argv):
    return run_module(__name__, argv, "batch_tests",
                      os.environ.get("GPT2D_BATCH_SUMMARY"))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
