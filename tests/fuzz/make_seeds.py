#!/usr/bin/env python3
"""make_seeds.py — writes the real-input seeds into tests/fuzz/corpus/.

Seeds are real inputs, so the fuzzer starts from what the daemon meets:
  completion_request/  the request bodies of tests/unit/test_api.c and
                       tests/unit/test_chat.c (their C string literals) and of
                       tests/integration/api_tests.py (every field, valid and
                       invalid), plus /tokenize, /detokenize
  inspect_request/     the request bodies of tests/unit/test_inspect.c and
                       the shapes of tests/integration/api_tests.py's
                       T10Inspect (every field, valid and invalid)
  tokenizer/           every text of tests/tokenizer/corpus.json, plus a few
                       hostile byte strings
  grammar/             the grammars of tests/unit/test_grammar.c (its C string
                       literals that define a rule), each alone and followed
                       by a NUL and texts that steer fuzz_grammar.c's walk
  json_schema/         the schemas of tests/unit/test_json_schema.c and the
                       patterns of tests/unit/test_regex_gbnf.c
  multipart/           the /v1/files upload the OpenAI Python SDK (httpx)
                       sends, with and without a Content-Type line before it,
                       and the shapes of tests/unit/test_multipart.c: quoted
                       and escaped parameters, padding, empty parts, data
                       holding "--" and NULs, a preamble and an epilogue
  safetensors/         the header (+ a little data) of each fixture model when
                       --models DIR is given, and complete micro models for the
                       fixed config fuzz_safetensors.c loads against (F32 tied,
                       F16, BF16, "transformer." prefix with attn.bias buffers
                       and an untied lm_head, misaligned data)

Usage: make_seeds.py [--models BUILD/tests/data/models]
Only the standard library is needed.  File names are content hashes, as
libFuzzer names its own corpus files, so re-running is idempotent.
"""
import argparse
import hashlib
import json
import os
import re
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))


def write_seed(target, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    name = hashlib.sha1(data).hexdigest()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- completion requests ----

C_STRING = re.compile(r'"((?:[^"\\\n]|\\.)*)"')


def c_unescape(s):
    out = bytearray()
    i = 0
    while i < len(s):
        c = s[i]
        if c != "\\":
            out += c.encode("utf-8")
            i += 1
            continue
        e = s[i + 1]
        i += 2
        if e in "\"\\'?":
            out += e.encode()
        elif e == "n":
            out += b"\n"
        elif e == "t":
            out += b"\t"
        elif e == "r":
            out += b"\r"
        elif e == "0":
            out += b"\0"
        elif e == "x":
            m = re.match(r"[0-9a-fA-F]{1,2}", s[i:])
            out.append(int(m.group(0), 16))
            i += len(m.group(0))
        else:
            out += ("\\" + e).encode()
    return bytes(out)


def bodies_from_unit_test(name):
    """Adjacent C string literals joined, kept when they look like JSON."""
    text = open(os.path.join(SRC, "tests/unit", name), encoding="utf-8").read()
    # test_chat.c splices its one-message MSG between literals
    text = text.replace('" MSG "',
                        r'\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]')
    bodies = []
    pos = 0
    while True:
        m = C_STRING.search(text, pos)
        if not m:
            break
        parts = [m.group(1)]
        end = m.end()
        while True:
            n = re.compile(r'\s*"((?:[^"\\\n]|\\.)*)"').match(text, end)
            if not n:
                break
            parts.append(n.group(1))
            end = n.end()
        pos = end
        body = c_unescape("".join(parts))
        if body.lstrip().startswith((b"{", b"[")):
            bodies.append(body)
    return bodies


def bodies_from_api_tests():
    """The shapes tests/integration/api_tests.py sends, field by field."""
    ok = [
        {"prompt": "Hello world"},
        {"prompt": "The quick brown fox", "max_tokens": 4, "temperature": 0},
        {"prompt": ["Hello", "Hello world"], "max_tokens": 6, "temperature": 0, "n": 2},
        {"prompt": [15496, 995], "max_tokens": 8, "temperature": 0},
        {"prompt": [[15496, 995], [464, 2068]], "max_tokens": 5},
        {"model": "tiny", "prompt": "Hi", "max_tokens": 2, "user": "u-1"},
        {"prompt": "Hi", "max_tokens": 8, "temperature": 0.7, "top_p": 0.9,
         "top_k": 40, "min_p": 0.05, "seed": 11},
        {"prompt": "Hi", "max_tokens": 8, "presence_penalty": 1.5,
         "frequency_penalty": -0.5, "repetition_penalty": 1.3},
        {"prompt": "Hi", "max_tokens": 5, "logit_bias": {"50256": -100, "262": 100}},
        {"prompt": "Hi", "max_tokens": 10, "stop": "\n"},
        {"prompt": "Hi", "max_tokens": 10, "stop": ["éé", " the", "\n\n", "."]},
        {"prompt": "Hi", "max_tokens": 6, "n": 3, "logprobs": 1},
        {"prompt": "Hi", "max_tokens": 6, "n": 1, "best_of": 3},
        {"prompt": "Hi", "max_tokens": 6, "n": 2, "best_of": 3, "logprobs": 5},
        {"prompt": "Scoring this text", "max_tokens": 0, "echo": True, "logprobs": 0},
        {"prompt": "Hi", "max_tokens": 4, "echo": True, "logprobs": 3},
        {"prompt": "Hi", "max_tokens": 7, "stream": True},
        {"prompt": "Hi", "max_tokens": 7, "stream": True,
         "stream_options": {"include_usage": True}},
        {"prompt": "Hi", "max_tokens": 3, "temperature": 0, "session_id": "conv-1.a_b:c"},
        {"prompt": "Hi", "suffix": "", "max_tokens": 1},
        {"prompt": "Hi", "max_tokens": 1, "temperature": None, "top_p": None,
         "logit_bias": None, "seed": None, "stream": None, "stop": None},
        {"prompt": "x" * 60, "max_tokens": 1},
        {"prompt": "\u00e9\u4e2d\U0001F600 <|endoftext|> end", "max_tokens": 2},
    ]
    base = {"prompt": "Hello", "max_tokens": 2}
    wrong_types = {
        "prompt": [5, {"a": 1}, [1, "a"], [[1], "a"], True],
        "max_tokens": ["ten", 2.5, True],
        "temperature": ["hot"], "top_p": ["x"], "n": ["2", 1.5],
        "best_of": ["3"], "stop": [3, ["a", 4]], "presence_penalty": ["x"],
        "frequency_penalty": [[1]], "logit_bias": [[1], "x", {"15": "up"}],
        "seed": ["x", 1.5], "user": [5], "echo": ["yes"], "logprobs": ["1", 1.5],
        "stream": ["yes"], "stream_options": ["x"], "top_k": ["x"],
        "min_p": ["x"], "repetition_penalty": ["x"], "session_id": [5],
    }
    out_of_range = [
        ("temperature", 2.5), ("temperature", -0.1), ("top_p", 1.5),
        ("top_p", -0.1), ("n", 0), ("n", -1), ("best_of", 0), ("logprobs", 6),
        ("logprobs", -1), ("max_tokens", -1), ("logit_bias", {"15": 101}),
        ("logit_bias", {"15": -100.5}), ("logit_bias", {"abc": 1}),
        ("logit_bias", {"99999": 1}), ("stop", ["a", "b", "c", "d", "e"]),
        ("prompt", [1, 99999]), ("prompt", [-1]), ("prompt", []),
        ("prompt", [[]]), ("presence_penalty", 2.5), ("frequency_penalty", -2.5),
        ("min_p", 1.5), ("min_p", -0.5), ("top_k", -1),
        ("repetition_penalty", 0), ("repetition_penalty", -1), ("n", 1000),
        ("stop", ""), ("stop", ["a", ""]), ("session_id", ""),
        ("session_id", "x" * 200), ("suffix", "there"), ("max_tokens", 100),
    ]
    bodies = [json.dumps(b).encode() for b in ok]
    for param, values in wrong_types.items():
        for v in values:
            bodies.append(json.dumps(dict(base, **{param: v})).encode())
    for param, v in out_of_range:
        bodies.append(json.dumps(dict(base, **{param: v})).encode())
    bodies += [b"{not json", b"", b"[1, 2]", b'"just a string"',
               b'{"prompt": "a", "prompt": "b"}',
               b'{"prompt": "nul \\u0000 inside"}',
               b'{"prompt": "\xff\xfe invalid utf-8"}',
               b'{"prompt": [[[[[[[[[[1]]]]]]]]]]}',
               b'{"prompt": "Hi", "stream": false, "stream_options": {}}',
               b'{"prompt": "Hi", "logit_bias": {"\\t5": 1, "007": 2}}',
               b'{"prompt": "Hi", "max_tokens": 1e400}',
               b'{"prompt": "Hi", "seed": -1, "top_k": 2147483648}']
    # /tokenize and /detokenize bodies (the same target parses them).
    bodies += [json.dumps(b).encode() for b in (
        {"content": "Hello world"}, {"content": 5},
        {"content": "caf\u00e9 \u4e2d\u6587 <|endoftext|>"},
        {"tokens": [15496, 995]}, {"tokens": [15496, 60000]},
        {"tokens": [171, 120]}, {"tokens": []})]
    return bodies


def messages_bodies():
    """Anthropic's Messages bodies (messages_tests.py's shapes): system as a
    string and as blocks, joined turns, a prefill, stop_sequences, the
    refused blocks and fields."""
    user = {"role": "user", "content": "Hi"}
    bodies = [
        {"model": "tiny", "max_tokens": 4, "messages": [user]},
        {"max_tokens": 4, "system": "Be brief.", "temperature": 0.5,
         "top_k": 40, "top_p": 0.9, "seed": 1, "stream": True,
         "messages": [user, {"role": "assistant", "content": "Hello"},
                      {"role": "user", "content": [
                          {"type": "text", "text": "a"},
                          {"type": "text", "text": "b"}]}]},
        {"max_tokens": 4, "system": [{"type": "text", "text": "S",
                                      "cache_control": {"type": "ephemeral"}}],
         "messages": [user, user, {"role": "assistant", "content": "Pre"}],
         "stop_sequences": ["\n", " the"], "metadata": {"user_id": "u"}},
        {"max_tokens": 4, "messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "data": ""}}]}]},
        {"max_tokens": 4, "messages": [user], "thinking": {"type": "disabled"},
         "tool_choice": {"type": "none"}, "tools": []},
        {"messages": [user], "tools": [{"name": "f", "input_schema": {}}]},
    ]
    return [json.dumps(b).encode() for b in bodies]


def responses_bodies():
    """POST /v1/responses bodies (api_tests' T13Responses shapes), and
    ones that are also a stored response's record (the fuzz target reads
    the body as the previous response too): a conversation, an output of
    a message and a call, truncation "auto" over the fuzz context."""
    said = {"type": "message", "id": "msg_1", "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "Hello",
                         "annotations": [], "logprobs": []}]}
    call = {"type": "function_call", "id": "fc_1", "call_id": "call_1",
            "name": "f", "arguments": "{}", "status": "completed"}
    bodies = [
        {"input": "Hi", "max_output_tokens": 4, "instructions": "Be brief."},
        {"input": [{"role": "user", "content": "Hi"}, said,
                   {"role": "user", "content": [
                       {"type": "input_text", "text": "more"}]}],
         "truncation": "auto", "store": False},
        {"input": [call, {"type": "function_call_output",
                          "call_id": "call_1", "output": "42"}],
         "tools": [{"type": "function", "name": "f", "parameters": {}}]},
        {"input": "Again", "previous_response_id": "resp_0",
         "conversation": [{"type": "message", "id": "msg_0", "role": "user",
                           "status": "completed",
                           "content": [{"type": "input_text",
                                        "text": "word " * 40}]}],
         "response": {"output": [said]}, "truncation": "auto",
         "max_output_tokens": 8, "cache_salt": "s"},
        {"input": "x", "previous_response_id": 5},
        {"input": "x", "previous_response_id": "r", "session_id": "s"},
        {"input": "x", "truncation": "middle"},
    ]
    return [json.dumps(b).encode() for b in bodies]


def inspect_bodies():
    """POST /v1/inspect: each field valid and invalid, near the fuzz
    target's limits (12 layers, 48 tokens, 2000 attention probabilities)."""
    ok = [
        {"prompt": "The cat sat on the mat"},
        {"prompt": "The cat sat on the", "attention": True, "logit_lens": 3,
         "layers": [0, 5, 11]},
        {"prompt": [464, 3797, 3332], "logit_lens": 5, "layers": [11, 0]},
        {"prompt": "x", "attention": True, "logit_lens": 0},
        {"prompt": list(range(100, 110)), "attention": True, "layers": [1, 0]},
        {"prompt": list(range(100, 148)), "logit_lens": 1},
        {"prompt": "Hi", "cache_salt": "tenant-1", "model": "gpt2", "user": "u"},
        {"prompt": "Hi", "cache_salt": "s" * 256},
        {"prompt": "\u00e9\u4e2d\U0001F600 <|endoftext|> end", "logit_lens": 2},
        {"prompt": [50256, 188, 171, 120], "logit_lens": 5, "attention": True,
         "layers": [3]},
        {"prompt": "Hi", "attention": None, "logit_lens": None, "layers": None,
         "cache_salt": None},
    ]
    base = {"prompt": "Hello"}
    bad = [("logit_lens", 9), ("logit_lens", -1), ("logit_lens", 2.5),
           ("attention", "yes"), ("attention", 1), ("layers", 3), ("layers", []),
           ("layers", [0, 12]), ("layers", [-1]), ("layers", ["0"]),
           ("layers", [3, 3]), ("layers", list(range(13))), ("prompt", 7),
           ("prompt", ""), ("prompt", []), ("prompt", [1, 50257]),
           ("prompt", ["a"]), ("prompt", [[1]]), ("prompt", list(range(100, 149))),
           ("prompt", list(range(100, 165))), ("model", 5), ("user", []),
           ("cache_salt", ""), ("cache_salt", 7), ("cache_salt", "s" * 257)]
    bodies = [json.dumps(b).encode() for b in ok]
    bodies += [json.dumps(dict(base, **{k: v})).encode() for k, v in bad]
    bodies.append(json.dumps({"prompt": list(range(100, 115)),
                              "attention": True}).encode())
    bodies += [b"{not json", b"", b"[1]", b'{"logit_lens": 1}',
               b'{"prompt": "a", "prompt": "b"}',
               b'{"prompt": "nul \\u0000 inside"}',
               b'{"prompt": "\xff\xfe invalid utf-8", "logit_lens": 1}']
    return bodies


# ---- safetensors ----

MICRO = {"n_layer": 1, "n_embd": 4, "n_ctx": 4, "vocab": 8}


def json_schema_seeds():
    """Schemas (JSON-looking literals) and regexes (every short literal)."""
    seeds = bodies_from_unit_test("test_json_schema.c")
    text = open(os.path.join(SRC, "tests/unit/test_regex_gbnf.c"),
                encoding="utf-8").read()
    for m in C_STRING.finditer(text):
        lit = c_unescape(m.group(1))
        if 0 < len(lit) <= 40:
            seeds.append(lit)
    return seeds


def micro_tensors(prefix="", untied=False, buffers=False):
    C, V, T = MICRO["n_embd"], MICRO["vocab"], MICRO["n_ctx"]
    shapes = [("wte.weight", [V, C]), ("wpe.weight", [T, C])]
    layer = [("ln_1.weight", [C]), ("ln_1.bias", [C]),
             ("attn.c_attn.weight", [C, 3 * C]), ("attn.c_attn.bias", [3 * C]),
             ("attn.c_proj.weight", [C, C]), ("attn.c_proj.bias", [C]),
             ("ln_2.weight", [C]), ("ln_2.bias", [C]),
             ("mlp.c_fc.weight", [C, 4 * C]), ("mlp.c_fc.bias", [4 * C]),
             ("mlp.c_proj.weight", [4 * C, C]), ("mlp.c_proj.bias", [C])]
    shapes += [("h.0." + n, s) for n, s in layer]
    shapes += [("ln_f.weight", [C]), ("ln_f.bias", [C])]
    if buffers:
        shapes.append(("h.0.attn.bias", [1, 1, T, T]))
    out = [(prefix + n, s) for n, s in shapes]
    if untied:
        out.append(("lm_head.weight", [V, C]))
    return out


def safetensors_file(tensors, dtype="F32", pad=0):
    """tensors: [(name, shape)]; values are small deterministic numbers."""
    size = {"F32": 4, "F16": 2, "BF16": 2}[dtype]
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for k, (name, shape) in enumerate(tensors):
        n = 1
        for d in shape:
            n *= d
        vals = [((i * 7 + k * 3) % 11 - 5) / 8.0 for i in range(n)]
        if dtype == "F32":
            blob = struct.pack("<%df" % n, *vals)
        elif dtype == "F16":
            blob = struct.pack("<%de" % n, *vals)
        else:   # BF16: the top half of each F32
            blob = b"".join(struct.pack("<f", v)[2:] for v in vals)
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [off, off + n * size]}
        blobs.append(blob)
        off += n * size
    h = json.dumps(header).encode() + b" " * pad
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def raw_file(tensors, data_size):
    """tensors: {name: (dtype, shape, begin, end)}, offsets as given."""
    header = {n: {"dtype": d, "shape": s, "data_offsets": [b, e]}
              for n, (d, s, b, e) in tensors.items()}
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + bytes(data_size)


def safetensors_seeds(models_dir):
    seeds = [
        safetensors_file(micro_tensors()),
        safetensors_file(micro_tensors(), "F16"),
        safetensors_file(micro_tensors(), "BF16"),
        safetensors_file(micro_tensors("transformer.", untied=True, buffers=True)),
        safetensors_file(micro_tensors(), pad=1),        # F32 data misaligned
        safetensors_file(micro_tensors()[:5]),           # tensors missing
        struct.pack("<Q", 2) + b"{}",
        raw_file({"a": ("F32", [2], 0, 8), "b": ("F32", [2], 4, 12)}, 12),
        raw_file({"a": ("F32", [2], 0, 8), "b": ("F32", [2], 8, 16),
                  "z": ("F32", [0], 8, 8)}, 16),
        struct.pack("<Q", 1 << 40) + b"{}",
    ]
    if models_dir and os.path.isdir(models_dir):
        for name in sorted(os.listdir(models_dir)):
            path = os.path.join(models_dir, name, "model.safetensors")
            if not os.path.isfile(path):
                continue
            with open(path, "rb") as f:
                n = struct.unpack("<Q", f.read(8))[0]
                seeds.append(struct.pack("<Q", n) + f.read(n) + f.read(64))
    return seeds


def grammar_seeds():
    """test_grammar.c's grammars, alone and with steering bytes."""
    steering = [b"", b"\0", b"\0ab", b'\0{"a": [1, -2.5e3, true]}',
                b"\0\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80xyz"]
    grammars = [t for t in bodies_from_unit_test_all("test_grammar.c")
                if b"::=" in t and b"\0" not in t]
    seeds = []
    for i, text in enumerate(grammars):
        seeds.append(text)
        seeds.append(text + steering[1 + i % (len(steering) - 1)])
    return seeds


def bodies_from_unit_test_all(name):
    """Adjacent C string literals joined, every one."""
    text = open(os.path.join(SRC, "tests/unit", name), encoding="utf-8").read()
    out, pos = [], 0
    literal = re.compile(r'\s*"((?:[^"\\\n]|\\.)*)"')
    while True:
        m = C_STRING.search(text, pos)
        if not m:
            return out
        parts, end = [m.group(1)], m.end()
        while True:
            n = literal.match(text, end)
            if not n:
                break
            parts.append(n.group(1))
            end = n.end()
        pos = end
        out.append(c_unescape("".join(parts)))


def multipart_seeds():
    """Content-Type NUL body, or a body alone (boundary "b")."""
    b = b"a0f3c9e14b7d2e6f8a1b3c5d7e9f0a2b"
    jsonl = (b'{"custom_id": "r1", "method": "POST", "url": "/v1/completions"}\n'
             b'{"custom_id": "r2", "method": "POST", "url": "/v1/completions"}\n')
    sdk = (b"--" + b + b"\r\n"
           b'Content-Disposition: form-data; name="purpose"\r\n\r\n'
           b"batch\r\n--" + b + b"\r\n"
           b'Content-Disposition: form-data; name="file"; filename="in.jsonl"\r\n'
           b"Content-Type: application/octet-stream\r\n\r\n"
           + jsonl + b"\r\n--" + b + b"--\r\n")
    ct = b"multipart/form-data; boundary=" + b
    cd = b'Content-Disposition: form-data; name="a"\r\n'
    bodies = [
        sdk.replace(b, b"b"),
        sdk.replace(b, b"b").replace(b"application/octet-stream",
                                     b"application/jsonl"),
        b"--b--\r\n",
        b"preamble\r\n--b \t\r\n" + cd + b"\r\n\r\n--b\r\n" + cd
        + b"\r\n--b--\r\nepilogue",
        b"--b\r\ncontent-disposition: FORM-DATA ; NAME=one;filename=a.txt\r\n"
        b"X-Other: x\r\nCONTENT-TYPE:  text/plain; charset=utf-8 \r\n\r\n1\r\n"
        b'--b\r\nContent-Disposition: form-data; name="q\\"uote"; '
        b'filename="C:\\\\x.jsonl"; filename*=UTF-8\'\'y\r\n\r\n2\r\n--b--',
        b"--b\r\n" + cd + b"\r\na\0b\r\n--bound\r\n--bX\r\nx--b\r\n-\r\n"
        b"--\r\n\r\n--b--",
        b"--b\r\n\r\nv\r\n--b--",
        b"--b\r\n" + cd + cd + b"\r\nv\r\n--b--",
        b"--b\r\n" + cd + b" folded\r\n\r\nv\r\n--b--",
        b"--b\r\nX-Pad: " + b"p" * 1020 + b"\r\n" + cd + b"\r\nv\r\n--b--",
        b"--b\n" + cd.replace(b"\r", b"") + b"\nv\n--b--\n",
    ]
    # A body holding a NUL needs the Content-Type line before it.
    seeds = [ct + b"\0" + sdk] + [b"multipart/form-data; boundary=b\0" + x
                                  for x in bodies if b"\0" in x or x is bodies[0]]
    bodies = [x for x in bodies if b"\0" not in x]
    seeds += bodies
    seeds += [c + b"\0" + bodies[2] for c in (
        b"Multipart/Form-Data ;charset=utf-8; BOUNDARY = \"b\" ;",
        b'multipart/form-data; boundary="a b:c=d/e?(f)"',
        b'multipart/form-data; boundary="x\\-y"',
        b"multipart/form-data; boundary=" + b"z" * 71,
        b"multipart/form-data; boundary=\"\"", b"application/json",
        b"multipart/form-data; boundary=\"b\"; boundary=b")]
    return seeds


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", help="BUILD/tests/data/models (fixture headers)")
    args = ap.parse_args()

    for body in (bodies_from_unit_test("test_api.c") + bodies_from_unit_test("test_chat.c")
                 + bodies_from_api_tests() + messages_bodies()
                 + responses_bodies()):
        write_seed("completion_request", body)
    for body in bodies_from_unit_test("test_inspect.c") + inspect_bodies():
        write_seed("inspect_request", body)

    corpus = json.load(open(os.path.join(SRC, "tests/tokenizer/corpus.json"),
                            encoding="utf-8"))
    texts = [c["text"].encode("utf-8") for c in corpus]
    texts += [b"\xff\xfe\xc3(\xe2\x82 \xf0\x9f\x98", b"a\0b\0\0 c",
              b"<|endoftext|><|endoftext|>", b"<|endoftext", b"x<|endoftext|>y",
              b" " * 40 + b"x", b"'s'll'VE'd 're", b"a" * 300,
              "\u0130\u0131 \u00df\u1e9e \u2028\u00a0".encode()]
    for t in texts:
        write_seed("tokenizer", t)

    for g in grammar_seeds():
        write_seed("grammar", g)

    for s in safetensors_seeds(args.models):
        write_seed("safetensors", s)
    for s in json_schema_seeds():
        write_seed("json_schema", s)
    for s in multipart_seeds():
        write_seed("multipart", s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
