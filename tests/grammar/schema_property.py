#!/usr/bin/env python3
"""schema_property.py — property tests of the schema, regex and choice
compilers (src/grammar/json_schema.c, regex_gbnf.c, choices_gbnf.c) against
independent references: python3-jsonschema (Draft 2020-12 with its format
checker, plus RFC 3339 checks for date-time and time, which Debian's
jsonschema leaves unchecked), Python's re, and the independent GBNF
recognizer tests/reference/gbnf_recognizer.py.

For each random schema (every supported keyword, nesting, anyOf, $ref
recursion, nullable types) the compiled grammar must
  - have no dead part (every prefix it allows can be finished);
  - accept every canonical valid instance a generator makes (compact JSON,
    keys in schema order, json.dumps(ensure_ascii=False) strings, canonical
    numbers): completeness;
  - accept only valid texts: its own random samples and every mutation it
    accepts (edits, dropped and added keys, other spellings with
    ensure_ascii=True or white space) validate: soundness.
Schemas with no instance must be refused (exit 2, a param).
For random regexes: the raw grammar accepts a string iff re.fullmatch does,
the pattern grammar (a JSON string) iff re.search finds a match in the
decoded string, apart from characters the documented semantics sets aside
(where only soundness is asserted).

With --sampler (the gram branch's tests/grammar/grammar_sample) and
--tokenizer (GPT-2's vocab.json and merges.txt), also through the real
engine: every grammar is sampled over GPT-2's tokens with random logits at
temperatures 0, 1 and 2, and every answer that ends by itself ("stop")
must validate (schemas) or match (regexes); and the engine's verdict on
each candidate text (grammar_sample --check) must equal the recognizer's.

Usage: schema_property.py --tool BUILD/tests/grammar/schema_to_gbnf
                          [--seed N] [--schemas N] [--regexes N]
                          [--sampler BUILD/tests/grammar/grammar_sample
                           --tokenizer DIR [--samples K]]
Exit status 0 when every property holds; the first failures are printed.
"""
import argparse
import datetime
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import unicodedata

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "reference"))
from gbnf_recognizer import Grammar  # noqa: E402

import jsonschema  # noqa: E402

try:
    BASE_CHECKER = jsonschema.Draft202012Validator.FORMAT_CHECKER
except AttributeError:  # jsonschema < 4.18
    from jsonschema._format import draft202012_format_checker as BASE_CHECKER

RFC3339_TIME = re.compile(
    r"([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]+)?"
    r"([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])\Z", re.ASCII)


def check_time(s):
    if not isinstance(s, str):
        return True
    return RFC3339_TIME.match(s) is not None


def check_datetime(s):
    """RFC 3339 date-time: the grammar of section 5.6 and a real date."""
    if not isinstance(s, str):
        return True
    m = re.match(r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt](.*)\Z", s, re.ASCII)
    if not m or not check_time(m.group(4)):
        return False
    try:
        datetime.date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
    except ValueError:
        return False
    return True


CHECKER = jsonschema.FormatChecker()
for name in BASE_CHECKER.checkers:
    CHECKER.checkers[name] = BASE_CHECKER.checkers[name]
CHECKER.checkers["date-time"] = (check_datetime, ())
CHECKER.checkers["time"] = (check_time, ())


def is_valid(schema, value):
    v = jsonschema.Draft202012Validator(schema, format_checker=CHECKER)
    return v.is_valid(value)


def compact(v, ascii_=False):
    return json.dumps(v, separators=(",", ":"), ensure_ascii=ascii_)


# ---------------------------------------------------------------- tool

class Tool:
    def __init__(self, path, tmp):
        self.path = path
        self.tmp = tmp
        self.n = 0

    def run(self, flag, content, extra=()):
        self.n += 1
        f = os.path.join(self.tmp, "in%d" % self.n)
        with open(f, "w", encoding="utf-8") as fh:
            fh.write(content)
        p = subprocess.run([self.path, flag, f, *extra], capture_output=True)
        os.unlink(f)
        out = p.stdout.decode("utf-8")
        if p.returncode == 0:
            return out, None
        if p.returncode == 2:
            return None, json.loads(out)
        raise RuntimeError("tool failed (%d): %s" % (p.returncode, p.stderr))


# ---------------------------------------------------------------- numbers

def canonical_number_ok(text):
    """The documented number spelling: no exponent, no -0, no trailing
    fraction zero, at most 15 digits."""
    if not re.fullmatch(r"-?(0|[1-9][0-9]*)(\.[0-9]*[1-9])?", text):
        return False
    if text == "-0":
        return False
    return sum(ch.isdigit() for ch in text) <= 15


def canonical_number_ok_all(v):
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return True
    if isinstance(v, (int, float)):
        return canonical_number_ok(compact(v))
    if isinstance(v, list):
        return all(canonical_number_ok_all(x) for x in v)
    return all(canonical_number_ok_all(x) for x in v.values())


def random_decimal(rng, lo=None, hi=None, integer=False):
    """A canonical decimal text, roughly within [lo, hi] (not guaranteed)."""
    from decimal import Decimal
    a = Decimal(str(lo)) if lo is not None else Decimal(-10 ** rng.randint(1, 6))
    b = Decimal(str(hi)) if hi is not None else Decimal(10 ** rng.randint(1, 6))
    if a > b:
        a, b = b, a
    scale = 1 if integer else 10 ** rng.choice([0, 1, 2, 3])
    span = int((b - a) * scale)
    v = a + Decimal(rng.randint(0, max(span, 0))) / scale
    return v


def decimal_text(d, integer=False):
    from decimal import Decimal
    if integer:
        d = d.to_integral_value()
    t = format(d.normalize(), "f")
    if "." in t:
        t = t.rstrip("0").rstrip(".")
    if t in ("-0", ""):
        t = "0"
    return t


# ---------------------------------------------------------------- schemas

PATTERNS = [  # (pattern, example strings that contain a match)
    (r"^[a-z]+$", ["abc", "z"]),
    (r"^\d{3}-\d{4}$", ["555-1234"]),
    (r"ab", ["ab", "xaby", "\"ab\\"]),
    (r"^(red|green|blue)$", ["red", "blue"]),
    (r"^[A-Z][a-z]*( [A-Z][a-z]*)*$", ["Ada", "Ada Lovelace"]),
    (r"x\.y", ["x.y", "ax.yb"]),
    (r"^\w+@\w+\.com$", ["a@b.com"]),
    (r"^[^\s]+$", ["é€x", "\"q\""]),
    (r"^(a|b)?c{2,3}$", ["cc", "acc", "bccc"]),
    (r"[0-9]$", ["x1", "9"]),
    (r"^\S*$", ["", "abc", "\u00e9"]),
]
FORMATS = ["date", "date-time", "time", "uuid", "email", "ipv4"]


def format_example(rng, fmt):
    if fmt == "date":
        d = datetime.date(1, 1, 1) + datetime.timedelta(days=rng.randint(0, 3652058))
        return d.isoformat()
    if fmt in ("time", "date-time"):
        t = "%02d:%02d:%02d" % (rng.randint(0, 23), rng.randint(0, 59), rng.randint(0, 59))
        if rng.random() < 0.5:
            t += "." + "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 6)))
        t += rng.choice(["Z", "+05:30", "-11:00"])
        if fmt == "time":
            return t
        return format_example(rng, "date") + "T" + t
    if fmt == "uuid":
        h = "".join(rng.choice("0123456789abcdefABCDEF") for _ in range(32))
        return "%s-%s-%s-%s-%s" % (h[:8], h[8:12], h[12:16], h[16:20], h[20:])
    if fmt == "email":
        return rng.choice(["a@b.co", "first.last+x@mail.example.org", "x_y@h-1.io"])
    if fmt == "ipv4":
        return ".".join(str(rng.choice([0, 1, 9, 10, 99, 100, 199, 200, 249, 250, 255]))
                        for _ in range(4))
    raise AssertionError(fmt)


TEXT_CHARS = ["a", "b", "Z", "0", " ", "\"", "\\", "/", "\n", "\t", "\x01", "\x1f",
              "\x7f", "é", "€", "中", "\U0001F600", "\u2028"]


def random_text(rng, lo=0, hi=None):
    hi = hi if hi is not None else lo + 6
    n = rng.randint(lo, min(hi, lo + 8))
    return "".join(rng.choice(TEXT_CHARS) for _ in range(n))


class SchemaGen:
    def __init__(self, rng):
        self.rng = rng
        self.defs = {}

    def annotate(self, s):
        if self.rng.random() < 0.2:
            s["description"] = "a field"
        if self.rng.random() < 0.1:
            s["title"] = "T"
        return s

    def number(self, integer):
        rng = self.rng
        s = {"type": "integer" if integer else "number"}
        lo = hi = None
        if rng.random() < 0.6:
            lo = rng.choice([0, -5, 3, 1.5, -2.25, 0.1, 100, -1000000]) if not integer or rng.random() < 0.7 \
                else rng.choice([0.5, -3.5])
            s[rng.choice(["minimum", "exclusiveMinimum"])] = lo
        if rng.random() < 0.6:
            base = lo if lo is not None else 0
            hi = base + rng.choice([0, 1, 2.5, 10, 0.75, 1000, 123456.789])
            s[rng.choice(["maximum", "exclusiveMaximum"])] = hi
        return s

    def string(self):
        rng = self.rng
        s = {"type": "string"}
        r = rng.random()
        if r < 0.3:
            lo = rng.randint(0, 3)
            if rng.random() < 0.7:
                s["minLength"] = lo
            if rng.random() < 0.7:
                s["maxLength"] = lo + rng.randint(0, 4)
        elif r < 0.55:
            s["pattern"] = rng.choice(PATTERNS)[0]
        elif r < 0.75:
            s["format"] = rng.choice(FORMATS)
        elif r < 0.85:
            # beside minLength / maxLength: kept to them, maybe as a subset
            s[rng.choice(["pattern", "format"])] = None
            if "pattern" in s:
                s["pattern"] = rng.choice(PATTERNS)[0]
            else:
                s["format"] = rng.choice(["email", "date-time", "uuid"])
            lo = rng.randint(0, 4)
            if rng.random() < 0.5:
                s["minLength"] = lo
            s["maxLength"] = lo + rng.choice([0, 2, 5, 12, 40])
        return s

    def enum(self):
        rng = self.rng
        pool = ["a", "b c", "é", "q\"uote", 1, 2.5, -3, True, False, None, "",
                {"k": 1}, [1, "x"]]
        vals = rng.sample(pool, rng.randint(1, 4))
        if rng.random() < 0.2:
            # beside a pattern or format: only the values that match
            pat, examples = rng.choice(PATTERNS)
            vals = examples + ["zz9", "\n", 7]
            if rng.random() < 0.5:
                return {"enum": vals, "pattern": pat}
            return {"enum": ["2024-02-29", "2023-02-29", "a@b.co", "x"],
                    "format": rng.choice(["date", "email"])}
        if rng.random() < 0.3:
            return {"const": vals[0]}
        s = {"enum": vals}
        if rng.random() < 0.3:
            s["type"] = rng.choice(["string", ["string", "null"], "number"])
        return s

    def gen(self, depth=0):
        rng = self.rng
        kinds = ["string", "integer", "number", "boolean", "null", "enum"]
        if depth < 3:
            kinds += ["object", "object", "array", "anyOf", "ref", "nullable"]
        k = rng.choice(kinds)
        if k == "string":
            s = self.string()
        elif k in ("integer", "number"):
            s = self.number(k == "integer")
        elif k == "boolean":
            s = {"type": "boolean"}
        elif k == "null":
            s = {"type": "null"}
        elif k == "enum":
            s = self.enum()
        elif k == "object":
            s = self.obj(depth)
        elif k == "array":
            s = {"type": "array", "items": self.gen(depth + 1)}
            if rng.random() < 0.5:
                s["minItems"] = rng.randint(0, 2)
            if rng.random() < 0.5:
                s["maxItems"] = s.get("minItems", 0) + rng.randint(0, 3)
            if rng.random() < 0.1:
                del s["items"]
        elif k == "anyOf":
            s = {"anyOf": [self.gen(depth + 1) for _ in range(rng.randint(1, 3))]}
        elif k == "nullable":
            inner = rng.choice([self.string(), self.number(True), {"type": "boolean"}])
            inner["type"] = [inner["type"], "null"]
            s = inner
        else:
            s = self.ref(depth)
        return self.annotate(s)

    def obj(self, depth):
        rng = self.rng
        if rng.random() < 0.1:
            s = {"type": "object"}
            if rng.random() < 0.5:
                s["additionalProperties"] = rng.choice([{"type": "integer"}, {"type": "string"}])
            return s
        props = {}
        for i in range(rng.randint(0, 4)):
            props["p%d" % i if rng.random() < 0.8 else "k %d" % i] = self.gen(depth + 1)
        req = [k for k in props if rng.random() < 0.5]
        s = {"type": "object", "properties": props}
        if req:
            s["required"] = req
        if rng.random() < 0.6:
            s["additionalProperties"] = False
        return s

    def ref(self, depth):
        rng = self.rng
        if self.defs and rng.random() < 0.4:
            name = rng.choice(sorted(self.defs))
        elif rng.random() < 0.5:
            name = "Node%d" % len(self.defs)
            self.defs[name] = None
            # a recursive list/tree: the recursion is optional
            self.defs[name] = {"type": "object", "properties": {
                "v": self.gen(depth + 2),
                "next": {"anyOf": [{"$ref": "#/$defs/" + name}, {"type": "null"}]}
                if rng.random() < 0.5 else {"$ref": "#/$defs/" + name},
            }, "required": ["v"], "additionalProperties": False}
        else:
            name = "D%d" % len(self.defs)
            self.defs[name] = None
            self.defs[name] = self.gen(depth + 1)
        return {"$ref": "#/$defs/" + name}

    def schema(self):
        root = self.gen(0)
        if self.defs:
            if "$ref" in root or not isinstance(root, dict):
                root = {"anyOf": [root]} if "$ref" in root else root
            root = dict(root)
            root["$defs"] = self.defs
        return root


# ---------------------------------------------------------------- instances

class InstanceGen:
    """Canonical valid instances: the shape json_schema.h promises."""

    def __init__(self, rng, root):
        self.rng = rng
        self.root = root

    def resolve(self, ref):
        assert ref.startswith("#")
        node = self.root
        for part in ref[1:].split("/")[1:]:
            node = node[part.replace("~1", "/").replace("~0", "~")]
        return node

    def gen(self, s, depth=0):
        rng = self.rng
        if depth > 40:  # a schema only infinite values satisfy
            raise Impossible()
        if s is True or s == {}:
            return self.free(depth)
        if "$ref" in s:
            return self.gen(self.resolve(s["$ref"]), depth + 1)
        if "anyOf" in s:
            alts = list(s["anyOf"])
            rng.shuffle(alts)
            for a in alts:
                try:
                    return self.gen(a, depth + 1)
                except Impossible:
                    continue
            raise Impossible()
        if "const" in s or "enum" in s:
            vals = [s["const"]] if "const" in s else list(s["enum"])
            vals = [v for v in vals if is_valid({k: v2 for k, v2 in s.items()
                                                if k not in ("enum", "const")}, v)]
            if not vals:
                raise Impossible()
            return rng.choice(vals)
        t = s.get("type")
        types = t if isinstance(t, list) else [t] if t else \
            ["null", "boolean", "integer", "string"]
        rng.shuffle(types)
        for ty in types:
            try:
                return self.typed(s, ty, depth)
            except Impossible:
                continue
        raise Impossible()

    def free(self, depth):
        rng = self.rng
        r = rng.random()
        if depth < 3 and r < 0.15:
            return {random_text(rng, 1, 3): self.free(depth + 1) for _ in range(rng.randint(0, 2))}
        if depth < 3 and r < 0.3:
            return [self.free(depth + 1) for _ in range(rng.randint(0, 2))]
        return rng.choice([None, True, False, 0, -7, 3.25, "x", random_text(rng)])

    def typed(self, s, ty, depth):
        rng = self.rng
        if ty == "null":
            return None
        if ty == "boolean":
            return rng.choice([True, False])
        if ty in ("integer", "number"):
            for _ in range(50):
                lo = s.get("minimum", s.get("exclusiveMinimum"))
                hi = s.get("maximum", s.get("exclusiveMaximum"))
                d = random_decimal(rng, lo, hi, ty == "integer")
                if rng.random() < 0.2 and lo is not None:
                    d = random_decimal(rng, lo, lo, ty == "integer")
                text = decimal_text(d, ty == "integer")
                v = json.loads(text)
                if is_valid(s, v) and canonical_number_ok(text):
                    return v
            raise Impossible()
        if ty == "string":
            lo = s.get("minLength", 0)
            hi = s.get("maxLength", 10 ** 6)
            if "pattern" in s or "format" in s:
                if "pattern" in s:
                    cands = [e for p, ex in PATTERNS if p == s["pattern"] for e in ex]
                else:
                    cands = [format_example(rng, s["format"]) for _ in range(5)]
                cands = [e for e in cands if lo <= len(e) <= hi]
                if not cands:
                    raise Impossible()
                return rng.choice(cands)
            lo = s.get("minLength", 0)
            hi = s.get("maxLength", lo + 6)
            if lo > hi:
                raise Impossible()
            return random_text(rng, lo, hi)
        if ty == "array":
            lo = s.get("minItems", 0)
            hi = s.get("maxItems", lo + 3)
            if lo > hi:
                raise Impossible()
            n = rng.randint(lo, min(hi, lo + 3))
            items = s.get("items", True)
            if n > 0 and depth > 8:
                raise Impossible()
            return [self.gen(items, depth + 1) for _ in range(n)]
        if ty == "object":
            props = s.get("properties")
            req = s.get("required", [])
            if props is None and not req:
                extra = s.get("additionalProperties", True)
                return {random_text(rng, 0, 3): self.gen(extra, depth + 1) if extra is not True
                        else self.free(depth + 1) for _ in range(rng.randint(0, 2))}
            out = {}
            for k, sub in (props or {}).items():
                if k in req or (depth < 6 and rng.random() < 0.5):
                    try:
                        out[k] = self.gen(sub, depth + 1)
                    except Impossible:
                        if k in req:
                            raise
            for k in req:
                if k not in out:
                    out[k] = self.free(depth + 1)
            return out
        raise Impossible()


class Impossible(Exception):
    pass


# ---------------------------------------------------------------- mutations

def mutations(rng, value, text):
    out = []
    alphabet = ["0", "1", "9", "-", ".", "e", "\"", ",", "}", "]", "{", "[", ":", " ",
                "a", "\\", "n", "u", "t", "null", "true", "é"]
    for _ in range(12):
        t = list(text)
        op = rng.randint(0, 3)
        i = rng.randint(0, max(len(t) - 1, 0))
        if op == 0 and t:
            del t[i]
        elif op == 1:
            t.insert(i, rng.choice(alphabet))
        elif op == 2 and len(t) > 1:
            j = min(i + 1, len(t) - 1)
            t[i], t[j] = t[j], t[i]
        else:
            t[i:i + rng.randint(0, 3)] = [rng.choice(alphabet)]
        out.append("".join(t))
    out.append(compact(value, ascii_=True))
    out.append(json.dumps(value))  # with spaces
    if isinstance(value, dict):
        items = list(value.items())
        if len(items) > 1:
            out.append(compact(dict(reversed(items))))
        if items:
            out.append(compact(dict(items[1:])))
        out.append(compact(dict(items + [("zz", 1)])))
    if isinstance(value, list):
        out.append(compact(value + value[:1]))
        out.append(compact(value[1:]))
    return out


# ---------------------------------------------------------------- the engine

class Sampler:
    """The C engine through grammar_sample (tests/grammar/grammar_sample.c on
    the gram branch): samples over GPT-2's tokens, and --check verdicts."""

    def __init__(self, path, tokenizer, tmp, samples):
        self.path = path
        self.tokenizer = tokenizer
        self.tmp = tmp
        self.samples = samples
        self.n = 0

    def _file(self, gbnf):
        self.n += 1
        f = os.path.join(self.tmp, "g%d.gbnf" % self.n)
        with open(f, "w", encoding="utf-8") as fh:
            fh.write(gbnf)
        return f

    def sample(self, gbnf, seed):
        """[(text or None when not UTF-8, finish)] at temperatures 0, 1, 2."""
        f = self._file(gbnf)
        p = subprocess.run([self.path, "--tokenizer", self.tokenizer, "--gbnf", f,
                            "--seed", str(seed), "--temperature", "0,1,2",
                            "--count", str(self.samples), "--max-tokens", "96"],
                           capture_output=True)
        os.unlink(f)
        if p.returncode != 0:
            raise RuntimeError("grammar_sample exit %d: %s" % (
                p.returncode, p.stderr.decode(errors="replace")[:500]))
        out = []
        for line in p.stdout.decode().splitlines():
            d = json.loads(line)
            raw = d["text"].encode("latin-1")
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                text = None
            out.append((text, d["finish"]))
        return out

    def accepts(self, gbnf, texts):
        f = self._file(gbnf)
        lines = "".join(t.encode("utf-8").hex() + "\n" for t in texts)
        p = subprocess.run([self.path, "--tokenizer", self.tokenizer, "--gbnf", f,
                            "--check"], input=lines.encode(), capture_output=True)
        os.unlink(f)
        if p.returncode != 0:
            raise RuntimeError("grammar_sample --check exit %d: %s" % (
                p.returncode, p.stderr.decode(errors="replace")[:500]))
        return [json.loads(line)["accepts"] for line in p.stdout.decode().splitlines()]


def engine_checks(sampler, gbnf, g, texts, valid, fails, stats, what, seed):
    """Samples must be valid; the engine's verdicts must be the recognizer's."""
    if sampler is None:
        return
    try:
        drawn = sampler.sample(gbnf, seed)
    except RuntimeError as e:
        fails.add("the engine failed", subject=what, error=str(e), gbnf=gbnf[:3000])
        return
    for text, finish in drawn:
        stats["engine_samples"] += 1
        if finish != "stop":
            continue
        stats["engine_stops"] += 1
        if text is None or not valid(text):
            fails.add("the engine's finished answer is invalid", subject=what, text=text)
    texts = list(dict.fromkeys(texts))[:60]
    try:
        verdicts = sampler.accepts(gbnf, texts)
    except RuntimeError as e:
        fails.add("the engine failed", subject=what, error=str(e), gbnf=gbnf[:3000])
        return
    for t, got in zip(texts, verdicts):
        stats["engine_verdicts"] += 1
        if got != g.accepts(t):
            fails.add("the engine and the recognizer disagree", subject=what, text=t,
                      engine=got)


# ---------------------------------------------------------------- the checks

class Failures:
    def __init__(self):
        self.items = []

    def add(self, what, **kw):
        self.items.append((what, kw))
        if len(self.items) <= 15:
            print("FAIL:", what, json.dumps(kw, ensure_ascii=False)[:1500])


def json_or_none(text):
    try:
        return json.loads(text)
    except ValueError:
        return None


def lossy(schema):
    """A pattern or format beside minLength / maxLength somewhere: the
    grammar keeps a subset of the strings (regex_length.h)."""
    if isinstance(schema, dict):
        if ("pattern" in schema or "format" in schema) and \
                ("minLength" in schema or "maxLength" in schema):
            return True
        return any(lossy(v) for v in schema.values())
    if isinstance(schema, list):
        return any(lossy(v) for v in schema)
    return False


def strings_in(v):
    if isinstance(v, str):
        yield v
    elif isinstance(v, list):
        for x in v:
            yield from strings_in(x)
    elif isinstance(v, dict):
        for k, x in v.items():
            yield k
            yield from strings_in(x)


def dollar_before_newline(schema, value):
    """Python's re lets `$` match before a final newline, so jsonschema
    accepts "a\n" for ^a$; the documented `$` is the end of the text (as in
    ECMA-262), and the grammar refuses it."""
    pats = [p for p in strings_in(schema) if p.endswith("$")]
    return bool(pats) and any(x.endswith("\n") for x in strings_in(value))


def check_schema(tool, rng, schema, fails, stats, strict=False, sampler=None):
    text = json.dumps(schema)
    gbnf, err = tool.run("--json-schema", text, ["--strict"] if strict else [])
    if err is not None:
        stats["refused"] += 1
        # a refusal must name a param under the schema
        if not err.get("param", "").startswith("schema"):
            fails.add("refusal without a param", schema=schema, err=err)
        # every keyword the generator writes is supported: a refusal must
        # mean no value satisfies the schema (within the documented bounds)
        inst = InstanceGen(rng, schema)
        for _ in range(20):
            try:
                v = inst.gen(schema)
            except Impossible:
                continue
            if is_valid(schema, v) and canonical_number_ok_all(v):
                fails.add("refused a schema that has an instance", schema=schema,
                          err=err, instance=v)
                break
        if os.environ.get("SHOW_REFUSED"):
            print("refused:", json.dumps(schema)[:300], err)
        return
    try:
        g = Grammar(gbnf)
    except Exception as e:  # noqa: BLE001
        fails.add("grammar does not parse", schema=schema, error=str(e), gbnf=gbnf[:2000])
        return
    dead = g.dead_parts()
    if dead:
        fails.add("dead parts", schema=schema, dead=dead[:3])
    stats["compiled"] += 1
    inst = InstanceGen(rng, schema)
    tried = []
    for _ in range(6):
        try:
            v = inst.gen(schema)
        except Impossible:
            continue
        if not is_valid(schema, v):
            continue  # the generator is approximate; the validator decides
        t = compact(v)
        tried.append(t)
        stats["instances"] += 1
        if not g.accepts(t):
            if lossy(schema):
                stats["lossy_refusals"] += 1  # documented: a subset
            elif dollar_before_newline(schema, v):
                stats["dollar_quirk"] += 1  # Python's $ before a final \n
            else:
                fails.add("a canonical valid instance is refused", schema=schema, text=t)
        for m in mutations(rng, v, t):
            tried.append(m)
            stats["mutations"] += 1
            if g.accepts(m):
                mv = json_or_none(m)
                if mv is None and m not in ("null",):
                    fails.add("accepted text is not JSON", schema=schema, text=m)
                elif not is_valid(schema, mv):
                    fails.add("accepted text is invalid", schema=schema, text=m)
                else:
                    stats["mutations_accepted"] += 1
    for _ in range(6):
        s = g.sample(rng)
        stats["samples"] += 1
        v = json_or_none(s)
        if v is None and s != "null":
            fails.add("sample is not JSON", schema=schema, text=s)
        elif not is_valid(schema, v):
            fails.add("sample is invalid", schema=schema, text=s)

    def valid(text):
        v = json_or_none(text)
        return (v is not None or text == "null") and is_valid(schema, v)
    engine_checks(sampler, gbnf, g, tried, valid, fails, stats, schema,
                  rng.randint(0, 10 ** 6))


# -- regexes

def disputed(text):
    """Characters the documented regex semantics sets aside (regex_parse.h):
    \\d \\w \\s mean their ASCII (ECMA-262) sets while their negations leave
    out whatever Python's Unicode classes would count, and `.` excludes CR,
    U+2028 and U+2029 too; so a string holding a non-ASCII letter, number
    or space, one of those, or a character Python's Unicode database does
    not know may be refused where Python's re would match it."""
    for ch in text:
        o = ord(ch)
        if ch in "\r\x1c\x1d\x1e\x1f\x85\ufeff\u2028\u2029":
            return True
        if o > 127 and (ch.isalnum() or ch.isspace() or
                        unicodedata.category(ch)[0] in "LNC"):
            return True
        if o > 127 and not any(lo <= o <= hi for lo, hi in NON_WORD_BLOCKS):
            return True  # a negated \\w (or \\d) keeps to these blocks
    return False


NON_WORD_BLOCKS = [(0xA0, 0xBF), (0xD7, 0xD7), (0xF7, 0xF7), (0x2000, 0x206F),
                   (0x20A0, 0x20CF), (0x2190, 0x23FF), (0x2500, 0x27BF),
                   (0x3000, 0x3003), (0x1F300, 0x1FAFF)]


def random_regex(rng, depth=0):
    atoms = ["a", "b", "-", "\\.", "é", " ", "[a-c]", "[^ab]", "\\d", "\\w", "\\s",
             "\\D", "\\W", "\\S", ".", "[0-9a-f]", "x", "\\\\", "\""]
    if depth < 2:
        atoms += ["(" + random_regex(rng, depth + 1) + ")",
                  "(?:" + random_regex(rng, depth + 1) + ")"]
    out = []
    for _ in range(rng.randint(1, 4)):
        a = rng.choice(atoms)
        # groups repeat only a bounded number of times: Python's backtracking
        # on nested unbounded repetitions is exponential
        q = rng.choice(["", "?", "{2}", "{0,2}"] if a.startswith("(") else
                       ["", "", "", "*", "+", "?", "{2}", "{0,2}", "{1,}", "*?"])
        out.append(a + q)
    body = "".join(out)
    if rng.random() < 0.3:
        body += "|" + "".join(rng.choice(atoms) for _ in range(rng.randint(0, 2)))
    return body


def regex_candidates(rng, g, n):
    chars = ["a", "b", "c", "x", "-", ".", "é", " ", "0", "7", "\\", "\"", "\n", "\t",
             "\r", "\u0663", "\u2028", "_", "Z", "\x1c", "\u00a0", "中"]
    out = [g.sample(rng, budget=12) for _ in range(n)]
    out = [s for s in out if len(s) <= 24]
    for _ in range(n):
        out.append("".join(rng.choice(chars) for _ in range(rng.randint(0, 5))))
    more = []
    for s in out[:n]:
        if s:
            i = rng.randrange(len(s))
            more.append(s[:i] + rng.choice(chars) + s[i + 1:])
            more.append(s[:i] + s[i + 1:])
    return out + more


def check_regex(tool, rng, pattern, fails, stats, sampler=None):
    gbnf, err = tool.run("--regex", pattern)
    try:
        compiled = re.compile(pattern)
    except re.error:
        compiled = None
    if err is not None:
        stats["regex_refused"] += 1
        return
    if compiled is None:
        fails.add("a pattern Python refuses was compiled", pattern=pattern)
        return
    g = Grammar(gbnf)
    if g.dead_parts():
        fails.add("dead parts (regex)", pattern=pattern)
    stats["regexes"] += 1
    cands = regex_candidates(rng, g, 8)
    engine_checks(sampler, gbnf, g, cands,
                  lambda t: compiled.fullmatch(t) is not None, fails, stats,
                  pattern, rng.randint(0, 10 ** 6))
    for s in cands:
        got = g.accepts(s)
        want = compiled.fullmatch(s) is not None
        stats["regex_strings"] += 1
        if got and not want:
            fails.add("raw grammar accepts what re.fullmatch refuses", pattern=pattern, text=s)
        elif want and not got and not disputed(s):
            fails.add("raw grammar refuses what re.fullmatch accepts", pattern=pattern, text=s)
    # as a JSON Schema pattern (a search in the decoded string)
    anchored = pattern
    gbnf, err = tool.run("--pattern", pattern)
    if err is not None:
        fails.add("pattern refused but regex compiled", pattern=pattern, err=err)
        return
    g = Grammar(gbnf)
    if g.dead_parts():
        fails.add("dead parts (pattern)", pattern=pattern)
    py = re.compile(re.sub(r"\$$", r"\\Z", anchored) if not anchored.endswith("\\$") else anchored)
    for s in regex_candidates(rng, g, 6):
        # s is a JSON string's text when sampled; otherwise a raw candidate
        for text in ([s] if s.startswith("\"") else [compact(s), compact(s, True)]):
            got = g.accepts(text)
            v = json_or_none(text)
            want = isinstance(v, str) and compact(v) == text and py.search(v) is not None
            stats["pattern_strings"] += 1
            if got and not (isinstance(v, str) and py.search(v)):
                fails.add("pattern grammar accepts a non-match", pattern=pattern, text=text)
            elif want and not got and not disputed(v):
                fails.add("pattern grammar refuses a match", pattern=pattern, text=text)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--schemas", type=int, default=200)
    ap.add_argument("--regexes", type=int, default=150)
    ap.add_argument("--sampler")
    ap.add_argument("--tokenizer")
    ap.add_argument("--samples", type=int, default=2)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    fails = Failures()
    stats = {k: 0 for k in ("compiled", "refused", "instances", "mutations",
                            "mutations_accepted", "samples", "regexes", "regex_refused",
                            "regex_strings", "pattern_strings", "engine_samples",
                            "engine_stops", "engine_verdicts", "lossy_refusals",
                            "dollar_quirk")}
    with tempfile.TemporaryDirectory() as tmp:
        tool = Tool(args.tool, tmp)
        sampler = None
        if args.sampler:
            sampler = Sampler(args.sampler, args.tokenizer, tmp, args.samples)
        for i in range(args.schemas):
            schema = SchemaGen(rng).schema()
            check_schema(tool, rng, schema, fails, stats, strict=(i % 3 == 0),
                         sampler=sampler)
        for i in range(args.regexes):
            check_regex(tool, rng, random_regex(rng), fails, stats, sampler=sampler)
    print("stats:", json.dumps(stats))
    print("%d failures" % len(fails.items))
    return 1 if fails.items else 0


def main_with_a_deep_stack():
    """The recognizer recurses as deep as the grammar nests (its recursion
    limit is raised to match); the main thread's 8 MiB C stack overflowed on
    some seeds (a segfault), so the checks run on a thread with 1 GiB."""
    import threading
    result = []
    threading.stack_size(1 << 30)
    worker = threading.Thread(target=lambda: result.append(main()))
    worker.start()
    worker.join()
    return result[0] if result else 1


if __name__ == "__main__":
    sys.exit(main_with_a_deep_stack())
