"""structured_tests.py — structured output against a real gpt2d on
127.0.0.1 (tests/integration/test_structured.sh runs it): response_format
(json_object, json_schema) and structured_outputs (json, regex, choice,
grammar) on both endpoints, checked by independent validators
(python3-jsonschema, Python's re), whatever the random weights write.

What the design promises and these tests assert:
- an answer with finish_reason "stop" is whole and valid; "length" only when
  max_tokens cut it (and then its text is a prefix of a valid answer);
- a seed gives the same answer bit for bit alone or beside other requests,
  with the grammar compiled cold or found cached, streamed or not;
- logprobs describe the distribution the constraint leaves: every reported
  alternative is a token the constraint allowed;
- every bad constraint is a 400 naming the place at fault;
- the metrics count compiled constraints, cache hits and mask work."""

import json
import os
import re
import sys
import threading

import jsonschema

from testlib import DATA, ServerCase, long_context_model, run_module

WORKDIR = os.environ.get("GPT2D_STRUCTURED_WORKDIR", "structured-work")

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 130},
        "role": {"enum": ["admin", "user", "guest"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 6},
                 "minItems": 1, "maxItems": 3},
        "manager": {"anyOf": [{"type": "string", "maxLength": 8},
                              {"type": "null"}]},
        "score": {"type": "number", "minimum": -5, "exclusiveMaximum": 5},
        "active": {"type": "boolean"},
    },
    "required": ["name", "age", "role", "tags", "manager", "score", "active"],
    "additionalProperties": False,
}

CHOICES = ["yes", "no", "maybe later", "\u00e9t\u00e9 \u2603"]


def _model():
    return long_context_model(os.path.join(WORKDIR, "model-1024"),
                              os.path.join(DATA, "models", "tiny"), seed=27)


def schema_body(schema, **kw):
    body = {"messages": [{"role": "user", "content": "Describe a person."}],
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": "person",
                                                "schema": schema,
                                                "strict": True}},
            "max_tokens": 400, "seed": 7, "temperature": 1.0}
    body.update(kw)
    return body


def content_of(answer, i=0):
    return answer["choices"][i]["message"]["content"]


class StructuredOutput(ServerCase):
    WORKDIR = WORKDIR
    NAME = "structured"
    MODEL = staticmethod(_model)

    def chat(self, body, status=200):
        r = self.client().post("/v1/chat/completions", body)
        self.assertEqual(r.status, status, r.body[:400])
        return r.json

    def assert_valid(self, text, schema, finish):
        if finish == "stop":
            jsonschema.validate(json.loads(text), schema,
                                format_checker=jsonschema.FormatChecker())
        else:
            self.assertEqual(finish, "length")

    def test_json_schema_answers_validate_for_every_choice(self):
        for temperature in (0.0, 1.0, 2.0):
            a = self.chat(schema_body(PERSON, n=3, temperature=temperature))
            for i, c in enumerate(a["choices"]):
                self.assertEqual(c["finish_reason"], "stop",
                                 "t=%s choice %d: %r" % (temperature, i,
                                                         c["message"]))
                self.assert_valid(content_of(a, i), PERSON, "stop")

    def test_json_object_is_an_object(self):
        for seed in range(5):
            a = self.chat({"messages": [{"role": "user", "content": "x"}],
                           "response_format": {"type": "json_object"},
                           "max_tokens": 300, "seed": seed})
            c = a["choices"][0]
            if c["finish_reason"] == "stop":
                self.assertIsInstance(json.loads(c["message"]["content"]),
                                      dict)
            else:
                self.assertEqual(c["finish_reason"], "length")
                self.assertTrue(c["message"]["content"].startswith("{"))

    def test_same_seed_same_answer_cold_cached_alone_and_batched(self):
        # a schema no other test sends: its first request compiles it
        schema = json.loads(json.dumps(PERSON))
        schema["properties"]["name"]["maxLength"] = 11
        body = schema_body(schema, seed=1234, temperature=1.5)
        cold = content_of(self.chat(body))
        cached = content_of(self.chat(body))
        self.assertEqual(cold, cached)
        # beside three other constrained and free requests in one batch
        results = {}

        def run(key, b):
            results[key] = content_of(self.chat(b))
        others = [schema_body(PERSON, seed=s) for s in (1, 2)] + [
            {"messages": [{"role": "user", "content": "hi"}],
             "max_tokens": 60, "seed": 3}]
        threads = [threading.Thread(target=run, args=(k, b)) for k, b in
                   enumerate([body] + others)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(results[0], cold)
        # streamed: the deltas join to the same text
        streamed = "".join(
            ev["choices"][0]["delta"].get("content") or ""
            for ev in self.client().stream("/v1/chat/completions",
                                           dict(body, stream=True))
            if ev.get("choices"))
        self.assertEqual(streamed, cold)

    def test_completions_endpoint_takes_a_constraint(self):
        r = self.client().post("/v1/completions", {
            "prompt": "The answer:", "max_tokens": 400, "seed": 5,
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": "p",
                                                "schema": PERSON}}})
        self.assertEqual(r.status, 200, r.body[:300])
        c = r.json["choices"][0]
        self.assertEqual(c["finish_reason"], "stop")
        self.assert_valid(c["text"], PERSON, "stop")

    def test_choice_regex_and_grammar(self):
        seen = set()
        for seed in range(12):
            a = self.chat({"messages": [{"role": "user", "content": "?"}],
                           "structured_outputs": {"choice": CHOICES},
                           "max_tokens": 20, "seed": seed,
                           "temperature": 2.0})
            self.assertEqual(a["choices"][0]["finish_reason"], "stop")
            self.assertIn(content_of(a), CHOICES)
            seen.add(content_of(a))
        self.assertGreater(len(seen), 1)
        pattern = r"[A-Z][a-z]{1,5}-\d{2,3}(\.[a-z]+)?"
        for seed in range(8):
            a = self.chat({"messages": [{"role": "user", "content": "?"}],
                           "structured_outputs": {"regex": pattern},
                           "max_tokens": 30, "seed": seed,
                           "temperature": 1.5})
            c = a["choices"][0]
            if c["finish_reason"] == "stop":
                self.assertTrue(re.fullmatch(pattern, content_of(a)),
                                content_of(a))
            else:
                self.assertEqual(c["finish_reason"], "length")
        grammar = ('root ::= greeting " " name "!"\n'
                   'greeting ::= "Hello" | "Hi"\n'
                   'name ::= [A-Z] [a-z]{2,6}\n')
        for seed in range(6):
            a = self.chat({"messages": [{"role": "user", "content": "?"}],
                           "structured_outputs": {"grammar": grammar},
                           "max_tokens": 30, "seed": seed})
            self.assertEqual(a["choices"][0]["finish_reason"], "stop")
            self.assertTrue(re.fullmatch(r"(Hello|Hi) [A-Z][a-z]{2,6}!",
                                         content_of(a)), content_of(a))

    def test_logprobs_report_only_allowed_alternatives(self):
        a = self.chat({"messages": [{"role": "user", "content": "?"}],
                       "structured_outputs": {"choice": ["alpha", "beta"]},
                       "max_tokens": 10, "seed": 3, "logprobs": True,
                       "top_logprobs": 20})
        first = a["choices"][0]["logprobs"]["content"][0]
        total = 0.0
        self.assertGreater(len(first["top_logprobs"]), 1)
        for alt in first["top_logprobs"]:
            self.assertGreater(alt["logprob"], -9999)
            self.assertTrue("alpha".startswith(alt["token"]) or
                            "beta".startswith(alt["token"]), alt)
            total += 2.718281828459045 ** alt["logprob"]
        # the allowed tokens carry all the probability
        self.assertAlmostEqual(total, 1.0, places=4)

    def test_max_tokens_cut_is_length_and_a_prefix(self):
        a = self.chat(schema_body(PERSON, max_tokens=5))
        c = a["choices"][0]
        self.assertEqual(c["finish_reason"], "length")
        self.assertTrue(c["message"]["content"].startswith('{"name":"'),
                        c["message"]["content"])

    def test_stop_string_inside_the_answer_does_not_cut_it(self):
        # '"' occurs in every answer long before it is whole: the answer
        # runs on to a whole, valid object
        a = self.chat(schema_body(PERSON, stop=['"', ","]))
        c = a["choices"][0]
        self.assertEqual(c["finish_reason"], "stop")
        self.assert_valid(c["message"]["content"], PERSON, "stop")

    def test_session_reuses_the_cache_with_a_constraint(self):
        body = schema_body(PERSON, session_id="structured-1", seed=9)
        first = self.chat(body)
        second = self.chat(body)
        self.assertEqual(content_of(first), content_of(second))
        self.assertGreater(
            second["usage"]["prompt_tokens_details"]["cached_tokens"], 0)

    def test_bad_constraints_are_400_naming_the_place(self):
        bad_type = dict(PERSON, properties=dict(PERSON["properties"],
                                                age={"type": "strnig"}))
        cases = [
            (schema_body(bad_type),
             "response_format.json_schema.schema.properties.age.type"),
            ({"messages": [{"role": "user", "content": "x"}],
              "response_format": {"type": "json_schema"}},
             "response_format.json_schema"),
            ({"messages": [{"role": "user", "content": "x"}],
              "response_format": {"type": "xml"}},
             "response_format.type"),
            ({"messages": [{"role": "user", "content": "x"}],
              "response_format": {"type": "json_object"},
              "structured_outputs": {"regex": "a+"}},
             "structured_outputs"),
            ({"messages": [{"role": "user", "content": "x"}],
              "structured_outputs": {"regex": "(a"}},
             "structured_outputs.regex"),
            ({"messages": [{"role": "user", "content": "x"}],
              "structured_outputs": {"grammar": "root ::= missing"}},
             "structured_outputs.grammar"),
            ({"messages": [{"role": "user", "content": "x"}],
              "structured_outputs": {"choice": []}},
             "structured_outputs.choice"),
            ({"messages": [{"role": "user", "content": "x"}],
              "structured_outputs": {"json": "{not json"}},
             "structured_outputs.json"),
        ]
        for body, param in cases:
            with self.subTest(param=param):
                r = self.client().post("/v1/chat/completions", body)
                self.assert_error(r, 400, param)
        # the daemon is fine afterwards
        self.chat(schema_body(PERSON, max_tokens=5))

    def test_metrics_count_compiles_hits_and_masks(self):
        before = self.client().metrics()
        schema = json.loads(json.dumps(PERSON))
        schema["properties"]["name"]["maxLength"] = 10
        self.chat(schema_body(schema))
        self.chat(schema_body(schema))
        after = self.client().metrics()

        def delta(name):
            return after.get(name, 0) - before.get(name, 0)
        self.assertEqual(delta("gpt2d_grammar_compiles_total"), 1)
        self.assertGreaterEqual(
            delta('gpt2d_grammar_cache_lookups_total{result="hit"}'), 1)
        self.assertGreater(
            delta('gpt2d_grammar_masks_total{result="cached"}'), 0)
        self.assertGreater(after["gpt2d_grammar_cache_entries"], 0)
        self.assertGreater(after["gpt2d_grammar_cache_bytes"], 0)


def main(argv):
    return run_module(__name__, argv, "structured_tests",
                      os.environ.get("GPT2D_STRUCTURED_SUMMARY"))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
