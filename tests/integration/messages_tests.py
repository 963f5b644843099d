"""messages_tests.py — Anthropic's Messages API (POST /v1/messages and
/v1/messages/count_tokens) against real gpt2d processes on 127.0.0.1: an
answer is the same conversation's chat completion in Anthropic's shapes
(the text equal, seeded or greedy, whole and streamed), its stop_reason
and stop_sequence, its usage (input_tokens + cache_read_input_tokens is
the prompt), the prefill, count_tokens, every refusal in Anthropic's error
shape (the token budget's 400 and 429 too), and the API key sent as
x-api-key.

Run by test_messages.sh; by hand:
    GPT2D_BUILDDIR=$PWD GPT2D_SRCDIR=/path/to/src \\
    GPT2D_TEST_DATA=$PWD/tests/data python3 messages_tests.py [TEST...]
Environment:
    GPT2D_MESSAGES_WORKDIR   scratch directory (server logs, models)
    GPT2D_MESSAGES_SUMMARY   where "PASSED FAILED" is written"""

import json
import os
import socket
import sys
import tempfile

from testlib import (TINY, ServerCase, key_file, long_context_model,
                     run_module, wait_for)
from gpt2d_client import metric_sum

WORKDIR = os.environ.get("GPT2D_MESSAGES_WORKDIR", tempfile.gettempdir())
KEY_A, KEY_B = "sk-messages-a", "sk-messages-b"
KEY_SMALL = "sk-messages-small"  # a token budget of 40 a minute
SYSTEM = "You answer briefly."
HELLO = "Hello there, who are you?"

# The built-in chat template (chat_template.c), written out here so that
# the prefill is checked against an independent rendering.
USER_PREFIX, ASSISTANT_PREFIX, SUFFIX = "User: ", "Assistant:", "\n"


def model():
    return long_context_model(os.path.join(WORKDIR, "ctx1024-model"), TINY, 33)


def sse_events(body):
    """(event, data) pairs of an SSE body; every data line must follow an
    event: line of its block."""
    out = []
    for block in body.decode("utf-8").split("\n\n"):
        if not block.strip():
            continue
        event, data = None, None
        for line in block.split("\n"):
            if line.startswith("event: "):
                event = line[len("event: "):]
            elif line.startswith("data: "):
                data = json.loads(line[len("data: "):])
        out.append((event, data))
    return out


def chat_body(messages, **kw):
    return dict({"messages": messages}, **kw)


class MessagesCase(ServerCase):
    WORKDIR = WORKDIR
    MODEL = staticmethod(model)

    @classmethod
    def setUpClass(cls):
        os.makedirs(WORKDIR, exist_ok=True)
        keys = key_file(os.path.join(WORKDIR, cls.NAME + "-keys"),
                        [KEY_A + " name=a", KEY_B + " name=b",
                         KEY_SMALL + " name=small tokens-per-minute=40"])
        cls.ARGS = tuple(cls.ARGS) + ("--api-key-file", keys)
        super().setUpClass()

    def a(self):
        return self.client(api_key=KEY_A)

    def message(self, body, client=None, headers=None):
        r = (client or self.a()).post("/v1/messages", body, headers=headers)
        self.assertEqual(r.status, 200, r)
        return r.json

    def chat(self, body):
        r = self.a().post("/v1/chat/completions", body)
        self.assertEqual(r.status, 200, r)
        return r.json

    def assert_message_shape(self, m):
        self.assertTrue(m["id"].startswith("msg_"), m["id"])
        self.assertEqual(m["type"], "message")
        self.assertEqual(m["role"], "assistant")
        self.assertEqual(len(m["content"]), 1)
        self.assertEqual(m["content"][0]["type"], "text")
        self.assertIsNone(m["stop_details"])
        self.assertIsNone(m["container"])
        self.assertEqual(m["usage"]["cache_creation_input_tokens"], 0)

    def assert_anthropic_error(self, r, status, type_, message_start):
        self.assertEqual(r.status, status, r)
        self.assertEqual(set(r.json), {"type", "error", "request_id"}, r)
        self.assertEqual(r.json["type"], "error")
        self.assertEqual(set(r.json["error"]), {"type", "message"}, r)
        self.assertEqual(r.json["error"]["type"], type_, r)
        self.assertTrue(r.json["error"]["message"].startswith(message_start),
                        r.json["error"]["message"])


class Messages(MessagesCase):
    NAME = "messages"
    ARGS = ("--slots", "2", "--threads", "1")

    def test_message_text_equals_the_chat_answer_seeded_and_greedy(self):
        for sampling in ({"temperature": 1, "top_k": 40, "top_p": 0.9,
                          "seed": 5}, {"temperature": 0}):
            m = self.message(dict({"max_tokens": 12, "system": SYSTEM,
                                   "messages": [{"role": "user",
                                                 "content": HELLO}]},
                                  **sampling))
            c = self.chat(chat_body([{"role": "system", "content": SYSTEM},
                                     {"role": "user", "content": HELLO}],
                                    max_tokens=12, **sampling))
            self.assert_message_shape(m)
            choice = c["choices"][0]
            self.assertEqual(m["content"][0]["text"],
                             choice["message"]["content"], sampling)
            self.assertEqual(m["stop_reason"],
                             {"length": "max_tokens",
                              "stop": "end_turn"}[choice["finish_reason"]])
            self.assertIsNone(m["stop_sequence"])
            u = m["usage"]
            self.assertEqual(u["input_tokens"] + u["cache_read_input_tokens"],
                             c["usage"]["prompt_tokens"])
            self.assertEqual(u["output_tokens"],
                             c["usage"]["completion_tokens"])

    def test_text_blocks_and_same_role_turns_read_as_chat_parts(self):
        m = self.message({
            "max_tokens": 8, "temperature": 0,
            "system": [{"type": "text", "text": SYSTEM,
                        "cache_control": {"type": "ephemeral"}}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "a"},
                                             {"type": "text", "text": "b"}]},
                {"role": "user", "content": "c"}],
            "metadata": {"user_id": "u-1"}})
        c = self.chat(chat_body([{"role": "system", "content": SYSTEM},
                                 {"role": "user", "content": "a\nb\nc"}],
                                max_tokens=8, temperature=0))
        self.assertEqual(m["content"][0]["text"],
                         c["choices"][0]["message"]["content"])
        u = m["usage"]
        self.assertEqual(u["input_tokens"] + u["cache_read_input_tokens"],
                         c["usage"]["prompt_tokens"])

    def test_second_turn_reads_the_first_from_the_cache(self):
        first = [{"role": "user", "content": HELLO * 4}]
        m1 = self.message({"max_tokens": 8, "temperature": 0,
                           "system": "turns", "messages": first})
        m2 = self.message({"max_tokens": 8, "temperature": 0,
                           "system": "turns",
                           "messages": first + [
                               {"role": "assistant",
                                "content": m1["content"][0]["text"]},
                               {"role": "user", "content": "And then?"}]})
        total1 = (m1["usage"]["input_tokens"] +
                  m1["usage"]["cache_read_input_tokens"])
        self.assertGreaterEqual(m2["usage"]["cache_read_input_tokens"],
                                total1 - 16)

    def test_stream_events_in_order_and_equal_to_the_whole_answer(self):
        body = {"max_tokens": 16, "system": SYSTEM, "temperature": 1,
                "seed": 9, "messages": [{"role": "user", "content": HELLO}]}
        whole = self.message(body)
        r = self.a().post("/v1/messages", dict(body, stream=True))
        self.assertEqual(r.status, 200, r)
        self.assertTrue(r.headers["content-type"].startswith(
            "text/event-stream"), r.headers)
        self.assertNotIn(b"[DONE]", r.body)
        events = sse_events(r.body)
        for name, data in events:
            self.assertEqual(name, data["type"])
        names = [n for n, _ in events]
        deltas = [d for n, d in events if n == "content_block_delta"]
        self.assertEqual(names, ["message_start", "content_block_start",
                                 "ping"] + ["content_block_delta"] *
                         len(deltas) + ["content_block_stop", "message_delta",
                                        "message_stop"])
        start = events[0][1]["message"]
        self.assertEqual(start["content"], [])
        self.assertIsNone(start["stop_reason"])
        self.assertEqual(start["id"][:4], "msg_")
        self.assertEqual(events[1][1]["content_block"],
                         {"type": "text", "text": "", "citations": None})
        for d in deltas:
            self.assertEqual(d["index"], 0)
            self.assertEqual(d["delta"]["type"], "text_delta")
            self.assertNotEqual(d["delta"]["text"], "")
        text = "".join(d["delta"]["text"] for d in deltas)
        self.assertEqual(text, whole["content"][0]["text"])
        end = events[-2][1]
        self.assertEqual(end["delta"]["stop_reason"], whole["stop_reason"])
        self.assertIsNone(end["delta"]["stop_sequence"])
        self.assertEqual(end["usage"]["output_tokens"],
                         whole["usage"]["output_tokens"])
        self.assertEqual(end["usage"]["input_tokens"] +
                         end["usage"]["cache_read_input_tokens"],
                         whole["usage"]["input_tokens"] +
                         whole["usage"]["cache_read_input_tokens"])

    def test_stop_sequence_names_the_string_that_ended_it(self):
        base = {"max_tokens": 24, "temperature": 0,
                "messages": [{"role": "user", "content": HELLO}]}
        free = self.message(base)["content"][0]["text"]
        self.assertGreaterEqual(len(free), 6, free)
        stop = free[len(free) // 2:len(free) // 2 + 3]
        want = free[:free.index(stop)]
        for stream in (False, True):
            body = dict(base, stop_sequences=["\u2603never", stop])
            if not stream:
                m = self.message(body)
                self.assertEqual(m["content"][0]["text"], want)
                self.assertEqual(m["stop_reason"], "stop_sequence")
                self.assertEqual(m["stop_sequence"], stop)
                continue
            r = self.a().post("/v1/messages", dict(body, stream=True))
            events = sse_events(r.body)
            text = "".join(d["delta"]["text"] for n, d in events
                           if n == "content_block_delta")
            self.assertEqual(text, want)
            end = [d for n, d in events if n == "message_delta"][0]
            self.assertEqual(end["delta"]["stop_reason"], "stop_sequence")
            self.assertEqual(end["delta"]["stop_sequence"], stop)

    def test_prefill_continues_the_last_assistant_turn(self):
        m = self.message({"max_tokens": 10, "temperature": 0,
                          "messages": [{"role": "user", "content": HELLO},
                                       {"role": "assistant",
                                        "content": " I am"}]})
        prompt = USER_PREFIX + HELLO + SUFFIX + ASSISTANT_PREFIX + " I am"
        r = self.a().post("/v1/completions",
                          {"prompt": prompt, "max_tokens": 10,
                           "temperature": 0, "stop": ["\nUser:",
                                                      "\nSystem:"]})
        self.assertEqual(r.status, 200, r)
        self.assertEqual(m["content"][0]["text"], r.json["choices"][0]["text"])
        u = m["usage"]
        self.assertEqual(u["input_tokens"] + u["cache_read_input_tokens"],
                         r.json["usage"]["prompt_tokens"])

    def test_count_tokens_is_the_chat_prompt(self):
        convo = [{"role": "user", "content": HELLO},
                 {"role": "assistant", "content": "Me."},
                 {"role": "user", "content": "Sure?"}]
        r = self.a().post("/v1/messages/count_tokens",
                          {"model": "tiny", "system": SYSTEM,
                           "messages": convo, "max_tokens": 5,
                           "temperature": 0.5, "stream": True})
        self.assertEqual(r.status, 200, r)
        self.assertEqual(set(r.json), {"input_tokens"})
        c = self.chat(chat_body([{"role": "system", "content": SYSTEM}] +
                                convo, max_tokens=1))
        self.assertEqual(r.json["input_tokens"], c["usage"]["prompt_tokens"])
        # counting runs nothing: no tokens generated, none charged
        before = metric_sum(self.a().metrics(), "gpt2d_generated_tokens_total")
        self.a().post("/v1/messages/count_tokens",
                      {"system": SYSTEM, "messages": convo})
        self.assertEqual(metric_sum(self.a().metrics(),
                                    "gpt2d_generated_tokens_total"), before)

    def test_refusals_use_anthropic_error_shape_and_name_the_field(self):
        user = {"role": "user", "content": HELLO}
        ok = {"max_tokens": 4, "messages": [user]}
        image = {"type": "image", "source": {"type": "base64",
                                             "media_type": "image/png",
                                             "data": "AAAA"}}
        cases = [
            ({"messages": [user]}, "max_tokens"),
            (dict(ok, max_tokens=0), "max_tokens"),
            (dict(ok, max_tokens=5000), "max_tokens"),
            (dict(ok, messages=[{"role": "user", "content": [image]}]),
             "messages.0.content.0.type"),
            (dict(ok, messages=[user, {"role": "assistant", "content": [
                {"type": "tool_use", "id": "t", "name": "f", "input": {}}]}]),
             "messages.1.content.0.type"),
            (dict(ok, messages=[user, {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t",
                 "content": "x"}]}]), "messages.1.content.0.type"),
            (dict(ok, messages=[{"role": "user", "content": [
                {"type": "document", "source": {}}]}]),
             "messages.0.content.0.type"),
            (dict(ok, system=[{"type": "image"}]), "system.0.type"),
            (dict(ok, messages=[{"role": "tool", "content": "x"}]),
             "messages.0.role"),
            (dict(ok, messages=[]), "messages"),
            (dict(ok, tools=[{"name": "f", "input_schema": {}}]), "tools"),
            (dict(ok, tool_choice={"type": "any"}), "tool_choice"),
            (dict(ok, thinking={"type": "enabled", "budget_tokens": 1024}),
             "thinking"),
            (dict(ok, output_config={"format": {"type": "json_schema"}}),
             "output_config"),
            (dict(ok, temperature=1.5), "temperature"),
            (dict(ok, stop_sequences=["a", "b", "c", "d", "e"]),
             "stop_sequences"),
            (dict(ok, n=2), "n"),
        ]
        for body, field in cases:
            with self.subTest(field=field, body=body):
                r = self.a().post("/v1/messages", body)
                self.assert_anthropic_error(r, 400, "invalid_request_error",
                                            field)
        # what is accepted and has nothing to do
        m = self.message(dict(ok, thinking={"type": "disabled"},
                              tool_choice={"type": "none"}, tools=[],
                              service_tier="auto", metadata={"user_id": "u"}))
        self.assert_message_shape(m)
        r = self.a().post("/v1/messages/count_tokens",
                          {"messages": [{"role": "user", "content": [image]}]})
        self.assert_anthropic_error(r, 400, "invalid_request_error",
                                    "messages.0.content.0.type")
        r = self.a().post("/v1/messages", raw=b"{not json")
        self.assert_anthropic_error(r, 400, "invalid_request_error",
                                    "request body is not valid JSON")
        r = self.a().get("/v1/messages")
        self.assert_anthropic_error(r, 405, "invalid_request_error", "GET")
        # the HTTP layer's own refusals too: a body over --max-body (1 MiB),
        # declared (refused before it is read), and chunked (the answer
        # written to the socket by hand once the bytes pass the limit)
        head = (b"POST /v1/messages HTTP/1.1\r\nHost: x\r\n"
                b"Authorization: Bearer " + KEY_A.encode() + b"\r\n")
        chunk = b"x" * (1 << 16)
        for framing, body, said in (
                (b"Content-Length: %d\r\n\r\n" % (2 << 20), [],
                 "request body of"),
                (b"Transfer-Encoding: chunked\r\n\r\n",
                 [b"%x\r\n" % len(chunk) + chunk + b"\r\n"] * 40,
                 "request body is over the limit")):
            with self.subTest(framing=framing):
                self.assert_413_is_anthropic(head + framing, body, said)

    def assert_413_is_anthropic(self, head, pieces, said):
        data = b""
        with socket.create_connection(("127.0.0.1", self.server.port),
                                      timeout=30) as s:
            try:
                s.sendall(head)
                for piece in pieces:
                    s.sendall(piece)
            except OSError:
                pass  # the server answered and closed while we sent
            while True:
                try:
                    more = s.recv(65536)
                except OSError:
                    break
                if not more:
                    break
                data += more
        head, _, body = data.partition(b"\r\n\r\n")
        self.assertTrue(head.startswith(b"HTTP/1.1 413"), data[:200])
        err = json.loads(body)
        self.assertEqual(err["type"], "error", err)
        self.assertEqual(err["error"]["type"], "request_too_large")
        self.assertTrue(err["error"]["message"].startswith(said), err)

    def test_x_api_key_is_a_key_like_bearer_and_a_wrong_one_is_401(self):
        body = {"max_tokens": 2, "messages": [{"role": "user",
                                               "content": "hi"}]}
        anon = self.client()
        for path in ("/v1/messages", "/v1/messages/count_tokens"):
            for headers in ({"x-api-key": "sk-wrong"},
                            {"Authorization": "Bearer sk-wrong"}, {},
                            {"x-api-key": KEY_A,
                             "Authorization": "Bearer " + KEY_B}):
                with self.subTest(path=path, headers=headers):
                    r = anon.post(path, body, headers=headers)
                    self.assert_anthropic_error(r, 401,
                                                "authentication_error",
                                                "missing or incorrect API key")
        before = self.a().metrics()
        self.message(body, client=anon, headers={"x-api-key": KEY_B})
        self.message(body, client=anon, headers={
            "x-api-key": KEY_B, "Authorization": "Bearer " + KEY_B})
        r = anon.post("/v1/chat/completions",
                      {"max_tokens": 2, "messages": body["messages"]},
                      headers={"x-api-key": KEY_B})
        self.assertEqual(r.status, 200, r)
        key = 'gpt2d_key_requests_total{key="b"}'
        # counted when the connection completes, just after the answer
        grown = wait_for(lambda: self.a().metrics().get(key, 0) -
                         before.get(key, 0) >= 3, 5.0)
        self.assertTrue(grown)
        self.assertEqual(self.a().metrics().get(key, 0) - before.get(key, 0),
                         3)
        # the other routes keep OpenAI's error object
        r = anon.post("/v1/chat/completions", {"messages": body["messages"]},
                      headers={"x-api-key": "sk-wrong"})
        self.assert_error(r, 401)

    def test_token_budget_refusals_in_anthropic_shape(self):
        small = self.client(api_key=KEY_SMALL)
        user = [{"role": "user", "content": "Hi"}]
        r = small.post("/v1/messages", {"max_tokens": 100, "messages": user})
        self.assert_anthropic_error(r, 400, "invalid_request_error",
                                    "max_tokens")
        self.assertIn("max_tokens", r.json["error"]["message"])
        first = small.post("/v1/messages", {"max_tokens": 30,
                                            "temperature": 0,
                                            "messages": user})
        self.assertEqual(first.status, 200, first)
        r = small.post("/v1/messages", {"max_tokens": 30, "messages": user})
        self.assert_anthropic_error(r, 429, "rate_limit_error",
                                    "the token budget of this API key")
        self.assertGreater(int(r.headers["retry-after"]), 0)

    def test_metrics_count_both_routes_as_messages(self):
        before = self.a().metrics()
        self.message({"max_tokens": 2, "messages": [{"role": "user",
                                                     "content": "x"}]})
        self.a().post("/v1/messages/count_tokens",
                      {"messages": [{"role": "user", "content": "x"}]})
        self.a().post("/v1/messages", {"messages": []})
        ok = 'gpt2d_requests_total{endpoint="messages",code="200"}'
        bad = 'gpt2d_requests_total{endpoint="messages",code="400"}'
        def counted():
            m = self.a().metrics()
            return (m.get(ok, 0) - before.get(ok, 0) >= 2 and
                    m.get(bad, 0) > before.get(bad, 0))
        wait_for(counted, 5.0)
        after = self.a().metrics()
        self.assertEqual(after.get(ok, 0) - before.get(ok, 0), 2)
        self.assertEqual(after.get(bad, 0) - before.get(bad, 0), 1)


class EndTurn(MessagesCase):
    """A template whose stop string is the letter "e" ends nearly every
    answer of a random model soon: by the template it is end_turn, and by a
    stop_sequences of the same string (the request's own come first) it is
    stop_sequence."""
    NAME = "messages-end-turn"

    @classmethod
    def setUpClass(cls):
        os.makedirs(WORKDIR, exist_ok=True)
        path = os.path.join(WORKDIR, "e-template.json")
        with open(path, "w", encoding="ascii") as f:
            json.dump({"system": {"prefix": "S: ", "suffix": "\n"},
                       "user": {"prefix": "U: ", "suffix": "\n"},
                       "assistant": {"prefix": "A:", "suffix": "\n"},
                       "stop": ["e"]}, f)
        cls.ARGS = ("--slots", "1", "--threads", "1", "--chat-template", path)
        super().setUpClass()

    def test_template_stop_is_end_turn_and_own_stop_is_stop_sequence(self):
        seen = 0
        for seed in range(8):
            body = {"max_tokens": 64, "temperature": 1, "seed": seed,
                    "messages": [{"role": "user", "content": HELLO}]}
            m = self.message(body)
            c = self.chat(chat_body(body["messages"], max_tokens=64,
                                    temperature=1, seed=seed))
            self.assertEqual(m["content"][0]["text"],
                             c["choices"][0]["message"]["content"])
            if c["choices"][0]["finish_reason"] != "stop":
                continue
            seen += 1
            self.assertEqual(m["stop_reason"], "end_turn")
            self.assertIsNone(m["stop_sequence"])
            own = self.message(dict(body, stop_sequences=["e"]))
            self.assertEqual(own["content"][0]["text"],
                             m["content"][0]["text"])
            self.assertEqual(own["stop_reason"], "stop_sequence")
            self.assertEqual(own["stop_sequence"], "e")
        self.assertGreater(seen, 0, "no answer met an 'e' in 64 tokens")


def main(argv):
    return run_module(__name__, argv, "messages_tests",
                      os.environ.get("GPT2D_MESSAGES_SUMMARY"))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
