#!/usr/bin/env python3
"""gbnf_recognizer.py — a small, independent GBNF recognizer and sampler.

The structured-output tests check the GBNF that src/grammar/json_schema.c,
regex_gbnf.c and choices_gbnf.c write without trusting the C engine: this
module parses GBNF text (llama.cpp's language: rules `name ::= ...`,
"literals" and [classes] with \\x \\u \\U \\n \\t \\r \\\\ \\" \\[ \\] \\- escapes,
`.`, groups, | * + ? {m} {m,} {m,n}, # comments) and

  accepts(grammar, text)    whether the whole text is in the language
                            (sets of end positions, memoised per rule and
                            position: exact for any ambiguity)
  dead_parts(grammar)       sub-expressions that derive no finite string
                            (a grammar with one can lead a sampler into a
                            state it cannot finish)
  sample(grammar, rng)      a random string of the language (shortest
                            completions once a length budget is spent)

Texts are Python strings: characters are code points.  Only the standard
library is used.
"""
import random
import sys

sys.setrecursionlimit(100000)


class GbnfError(Exception):
    pass


# An expression is a tuple:
#   ("lit", str)  ("cls", negated, [(lo, hi)...])  ("any",)  ("ref", name)
#   ("seq", [e...])  ("alt", [e...])  ("rep", e, min, max or None)


class Parser:
    def __init__(self, text):
        self.s = text
        self.i = 0

    def error(self, msg):
        line = self.s.count("\n", 0, self.i) + 1
        raise GbnfError("line %d: %s" % (line, msg))

    def skip(self, newlines=True):
        while self.i < len(self.s):
            c = self.s[self.i]
            if c == "#":
                while self.i < len(self.s) and self.s[self.i] != "\n":
                    self.i += 1
            elif c in " \t\r" or (newlines and c == "\n"):
                self.i += 1
            else:
                break

    def name(self):
        j = self.i
        while j < len(self.s) and (self.s[j].isascii() and (self.s[j].isalnum() or self.s[j] in "-_")):
            j += 1
        if j == self.i:
            self.error("a rule name expected at %r" % self.s[self.i:self.i + 10])
        n = self.s[self.i:j]
        self.i = j
        return n

    def char(self):
        c = self.s[self.i]
        if c != "\\":
            self.i += 1
            return c
        e = self.s[self.i + 1]
        self.i += 2
        simple = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"',
                  "[": "[", "]": "]", "-": "-"}
        if e in simple:
            return simple[e]
        width = {"x": 2, "u": 4, "U": 8}.get(e)
        if width is None:
            self.error("unknown escape \\" + e)
        h = self.s[self.i:self.i + width]
        self.i += width
        v = int(h, 16)
        if 0xD800 <= v <= 0xDFFF or v > 0x10FFFF:
            self.error("bad code point %x" % v)
        return chr(v)

    def primary(self):
        self.skip()
        c = self.s[self.i]
        if c == '"':
            self.i += 1
            out = []
            while self.s[self.i] != '"':
                out.append(self.char())
            self.i += 1
            return ("lit", "".join(out))
        if c == "[":
            self.i += 1
            neg = False
            if self.s[self.i] == "^":
                neg = True
                self.i += 1
            ranges = []
            while self.s[self.i] != "]":
                lo = self.char()
                hi = lo
                if self.s[self.i] == "-" and self.s[self.i + 1] != "]":
                    self.i += 1
                    hi = self.char()
                ranges.append((ord(lo), ord(hi)))
            self.i += 1
            return ("cls", neg, ranges)
        if c == ".":
            self.i += 1
            return ("any",)
        if c == "(":
            self.i += 1
            e = self.alternatives(inside=True)
            self.skip()
            if self.s[self.i] != ")":
                self.error("')' expected")
            self.i += 1
            return e
        return ("ref", self.name())

    def postfix(self, e):
        while self.i < len(self.s):
            c = self.s[self.i]
            if c == "*":
                e = ("rep", e, 0, None)
            elif c == "+":
                e = ("rep", e, 1, None)
            elif c == "?":
                e = ("rep", e, 0, 1)
            elif c == "{":
                j = self.s.index("}", self.i)
                body = self.s[self.i + 1:j]
                if "," in body:
                    a, b = body.split(",")
                    e = ("rep", e, int(a), int(b) if b.strip() else None)
                else:
                    e = ("rep", e, int(body), int(body))
                self.i = j
            else:
                break
            self.i += 1
        return e

    def at_rule_start(self):
        j = self.i
        while j < len(self.s) and (self.s[j].isascii() and (self.s[j].isalnum() or self.s[j] in "-_")):
            j += 1
        k = j
        while k < len(self.s) and self.s[k] in " \t":
            k += 1
        return j > self.i and self.s.startswith("::=", k)

    def sequence(self, inside):
        items = []
        while True:
            self.skip(newlines=inside)
            if self.i >= len(self.s):
                break
            c = self.s[self.i]
            if c in "|)" or c == "\n":
                break
            if not inside and self.at_rule_start():
                break
            items.append(self.postfix(self.primary()))
        return ("seq", items)

    def alternatives(self, inside=False):
        alts = [self.sequence(inside)]
        while True:
            self.skip(newlines=inside)
            if self.i < len(self.s) and self.s[self.i] == "|":
                self.i += 1
                alts.append(self.sequence(inside))
            else:
                break
        return ("alt", alts)

    def grammar(self):
        rules = {}
        while True:
            self.skip()
            if self.i >= len(self.s):
                break
            n = self.name()
            self.skip()
            if not self.s.startswith("::=", self.i):
                self.error("'::=' expected after " + n)
            self.i += 3
            if n in rules:
                self.error("rule %s defined twice" % n)
            rules[n] = self.alternatives()
        return rules


class Grammar:
    def __init__(self, text, start="root"):
        self.rules = Parser(text).grammar()
        self.start = start
        for r in self.referenced():
            if r not in self.rules:
                raise GbnfError("rule %s is used but not defined" % r)
        if start not in self.rules:
            raise GbnfError("no rule " + start)
        self._short = None

    def referenced(self):
        out = set()

        def walk(e):
            k = e[0]
            if k == "ref":
                out.add(e[1])
            elif k in ("seq", "alt"):
                for x in e[1]:
                    walk(x)
            elif k == "rep":
                walk(e[1])
        for e in self.rules.values():
            walk(e)
        return out

    # ---- recognition ----

    def accepts(self, text):
        memo = {}

        def rule(name, pos):
            key = (name, pos)
            if key in memo:
                if memo[key] is None:
                    raise GbnfError("left recursion through " + name)
                return memo[key]
            memo[key] = None
            r = ends(self.rules[name], pos)
            memo[key] = r
            return r

        def ends(e, pos):
            k = e[0]
            if k == "lit":
                s = e[1]
                return frozenset([pos + len(s)]) if text.startswith(s, pos) else frozenset()
            if k == "cls":
                if pos >= len(text):
                    return frozenset()
                c = ord(text[pos])
                inside = any(lo <= c <= hi for lo, hi in e[2])
                return frozenset([pos + 1]) if inside != e[1] else frozenset()
            if k == "any":
                return frozenset([pos + 1]) if pos < len(text) else frozenset()
            if k == "ref":
                return rule(e[1], pos)
            if k == "seq":
                cur = {pos}
                for x in e[1]:
                    nxt = set()
                    for p in cur:
                        nxt |= ends(x, p)
                    cur = nxt
                    if not cur:
                        break
                return frozenset(cur)
            if k == "alt":
                out = set()
                for x in e[1]:
                    out |= ends(x, pos)
                return frozenset(out)
            if k == "rep":
                x, lo, hi = e[1], e[2], e[3]

                def step(ps):
                    nxt = set()
                    for p in ps:
                        nxt |= ends(x, p)
                    return nxt
                cur = {pos}
                for _ in range(lo):
                    cur = step(cur)
                    if not cur:
                        return frozenset()
                out = set(cur)
                if hi is None:
                    frontier = cur
                    while frontier:
                        frontier = step(frontier) - out
                        out |= frontier
                else:
                    for _ in range(lo, hi):
                        nxt = step(cur)
                        if not nxt or nxt == cur:
                            break
                        out |= nxt
                        cur = nxt
                return frozenset(out)
            raise AssertionError(k)

        return len(text) in rule(self.start, 0)

    # ---- analysis ----

    def shortest(self):
        """Length of the shortest string each rule derives (None: none)."""
        if self._short is not None:
            return self._short
        INF = float("inf")
        short = {n: INF for n in self.rules}

        def ln(e):
            k = e[0]
            if k == "lit":
                return len(e[1])
            if k in ("cls", "any"):
                return 1 if (k == "any" or class_nonempty(e)) else INF
            if k == "ref":
                return short[e[1]]
            if k == "seq":
                return sum(ln(x) for x in e[1])
            if k == "alt":
                return min((ln(x) for x in e[1]), default=INF)
            if k == "rep":
                return 0 if e[2] == 0 else e[2] * ln(e[1])
        changed = True
        while changed:
            changed = False
            for n, e in self.rules.items():
                v = ln(e)
                if v < short[n]:
                    short[n] = v
                    changed = True
        self._short = (short, ln)
        return self._short

    def dead_parts(self):
        """Descriptions of reachable sub-expressions that derive nothing."""
        short, ln = self.shortest()
        dead = []
        seen = set()

        def walk(e, where):
            k = e[0]
            if ln(e) == float("inf"):
                dead.append(where + ": " + repr(e)[:120])
                return
            if k == "ref":
                if e[1] not in seen:
                    seen.add(e[1])
                    walk(self.rules[e[1]], e[1])
            elif k in ("seq", "alt"):
                for x in e[1]:
                    walk(x, where)
            elif k == "rep":
                if e[3] != 0:
                    walk(e[1], where)
        seen.add(self.start)
        walk(self.rules[self.start], self.start)
        return dead

    # ---- sampling ----

    def sample(self, rng, budget=200):
        """A random string of the language; past `budget` characters each
        choice takes the shortest way out."""
        short, ln = self.shortest()
        out = []

        def gen(e):
            k = e[0]
            over = len(out) >= budget
            if k == "lit":
                out.append(e[1])
            elif k == "cls":
                out.append(pick_class(e, rng))
            elif k == "any":
                out.append(chr(rng.choice([0x20, 0x41, 0x7A, 0xE9, 0x4E2D, 0x1F600])))
            elif k == "ref":
                gen(self.rules[e[1]])
            elif k == "seq":
                for x in e[1]:
                    gen(x)
            elif k == "alt":
                opts = [x for x in e[1] if ln(x) != float("inf")]
                if over:
                    best = min(ln(x) for x in opts)
                    opts = [x for x in opts if ln(x) == best]
                gen(rng.choice(opts))
            elif k == "rep":
                x, lo, hi = e[1], e[2], e[3]
                if ln(x) == float("inf"):
                    return
                n = lo
                if not over:
                    top = hi if hi is not None else lo + 4
                    n = rng.randint(lo, max(lo, min(top, lo + 6)))
                    if hi is not None and rng.random() < 0.2:
                        n = rng.choice([lo, hi]) if hi - lo < 50 else lo
                for _ in range(n):
                    gen(x)
        gen(self.rules[self.start])
        return "".join(out)


def class_nonempty(e):
    if not e[1]:
        return any(lo <= hi for lo, hi in e[2])
    return True


def pick_class(e, rng):
    neg, ranges = e[1], e[2]
    if not neg:
        lo, hi = rng.choice(ranges)
        # favour the ends and ASCII, never a surrogate
        cands = [lo, hi, rng.randint(lo, hi)]
        c = rng.choice(cands)
        if 0xD800 <= c <= 0xDFFF:
            c = lo if not (0xD800 <= lo <= 0xDFFF) else 0xE000
        return chr(c)
    while True:
        c = rng.choice([rng.randint(0x20, 0x7E), rng.randint(0, 0x10FFFF), 0xE9])
        if 0xD800 <= c <= 0xDFFF:
            continue
        if not any(lo <= c <= hi for lo, hi in ranges):
            return chr(c)


if __name__ == "__main__":
    # usage: gbnf_recognizer.py GRAMMAR_FILE TEXT_FILE  -> prints accept/reject
    g = Grammar(open(sys.argv[1], encoding="utf-8").read())
    t = open(sys.argv[2], encoding="utf-8").read()
    print("accept" if g.accepts(t) else "reject")
