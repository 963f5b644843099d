#!/usr/bin/env python3
"""gbnf_reference.py — an independent recognizer for GBNF, llama.cpp's
grammar language, written from the language's description (not from
src/grammar/): the tests' oracle for what a grammar accepts.

The grammar is read into productions over code points (literals are
sequences of characters, classes are sets of code points, `.` is any
character), groups and repetitions become fresh nonterminals, and text is
recognized by an Earley parser over the text's code points (left recursion,
ambiguity and empty rules are all fine for Earley).  Alternatives that can
never finish (they use a rule with no finite text, or an empty class) are
dropped first, so that "some Earley item survives" means "the text so far
can still be completed".

    g = Grammar(text)               # ValueError on a malformed grammar
    g.accepts(b"...")               # the bytes are one whole answer
    g.viable(b"...")                # the bytes begin some answer (a last
                                    # character may be cut short)
    g.complete(b"...")              # accepts, and nothing may follow
    g.generate(rng, budget)         # a random answer (bytes), or None

The language, as llama.cpp reads it:
  rule       name ::= alternatives, ended by a newline (or the end)
  name       letters, digits and '-'
  literal    "..." with escapes \\n \\t \\r \\\\ \\" \\[ \\] \\- \\xHH \\uHHHH
             \\UHHHHHHHH; every escape is a code point
  class      [...] of characters and a-b ranges, ^ first negates;
             a '-' just before ']' is itself
  any        . is any character
  group      ( alternatives ), across lines
  repeat     * + ? {m} {m,} {m,n} after an item: the whole last item
             (a literal entire; after a repetition, that repetition)
  layout     spaces, tabs, # comments; a newline ends a rule except
             inside parentheses and just after '::=' or '|'
Run as a program it recognizes stdin against a grammar file:
    gbnf_reference.py GRAMMAR < text    (prints accepts / viable / no)
"""

import sys

MAX_CP = 0x10FFFF


class Terminal:
    """A set of code points: ranges, possibly negated; `any` is every one."""

    __slots__ = ("ranges", "negated")

    def __init__(self, ranges, negated):
        self.ranges = tuple(ranges)
        self.negated = negated

    def __contains__(self, cp):
        hit = any(lo <= cp <= hi for lo, hi in self.ranges)
        return hit != self.negated

    def intersects(self, lo, hi):
        """Whether some character in [lo, hi] (no surrogates) is in the set."""
        if not self.negated:
            return any(a <= hi and lo <= b for a, b in self.ranges)
        # negated: some point of [lo, hi] outside every range
        covered = sorted((max(a, lo), min(b, hi)) for a, b in self.ranges
                         if a <= hi and lo <= b)
        at = lo
        for a, b in covered:
            if a > at:
                return True
            at = max(at, b + 1)
        return at <= hi

    def is_empty(self):
        if self.negated:
            return not self.intersects(0, 0xD7FF) and not self.intersects(0xE000, MAX_CP)
        return all(lo > hi for lo, hi in self.ranges) or not any(
            not (0xD800 <= lo and hi <= 0xDFFF) for lo, hi in self.ranges)

    def sample(self, rng):
        """A random character of the set (not a surrogate), or None."""
        for _ in range(200):
            if not self.negated and self.ranges and rng.random() < 0.9:
                lo, hi = rng.choice(self.ranges)
                cp = rng.randint(lo, min(hi, MAX_CP))
            else:
                cp = rng.choice([rng.randint(0x20, 0x7E), rng.randint(0, 0x7FF),
                                 rng.randint(0, 0xFFFF), rng.randint(0, MAX_CP)])
            if 0xD800 <= cp <= 0xDFFF:
                continue
            if cp in self:
                return cp
        return None


ANY = Terminal([], True)


class Reader:
    """The grammar's text, read left to right; errors raise ValueError."""

    def __init__(self, text):
        self.s = text
        self.i = 0
        self.rules = {}   # name -> list of alternatives (lists of symbols)
        self.defined = set()
        self.fresh = 0

    def fail(self, what):
        line = self.s.count("\n", 0, self.i) + 1
        raise ValueError("line %d: %s" % (line, what))

    def peek(self, k=0):
        j = self.i + k
        return self.s[j] if j < len(self.s) else ""

    def blank(self, newlines):
        while self.i < len(self.s):
            c = self.s[self.i]
            if c in " \t" or (newlines and c in "\r\n"):
                self.i += 1
            elif c == "#":
                while self.i < len(self.s) and self.s[self.i] not in "\r\n":
                    self.i += 1
            else:
                return

    def name(self):
        j = self.i
        while self.i < len(self.s) and (self.s[self.i].isascii() and
                                        (self.s[self.i].isalnum() or self.s[self.i] == "-")):
            self.i += 1
        return self.s[j:self.i]

    def new_symbol(self, alternatives):
        self.fresh += 1
        sym = "\0%d" % self.fresh  # no GBNF name has a NUL
        self.rules[sym] = alternatives
        return sym

    def char(self):
        c = self.peek()
        if c == "":
            self.fail("end of text inside a literal or class")
        self.i += 1
        if c != "\\":
            return ord(c)
        e = self.peek()
        self.i += 1
        simple = {"n": 10, "t": 9, "r": 13, "\\": 92, '"': 34, "[": 91, "]": 93, "-": 45}
        if e in simple:
            return simple[e]
        width = {"x": 2, "u": 4, "U": 8}.get(e)
        if width is None:
            self.fail("unknown escape \\%s" % e)
        digits = self.s[self.i:self.i + width]
        if len(digits) != width or any(d not in "0123456789abcdefABCDEF" for d in digits):
            self.fail("bad hex escape")
        self.i += width
        cp = int(digits, 16)
        if cp > MAX_CP or 0xD800 <= cp <= 0xDFFF:
            self.fail("escape is not a character")
        return cp

    def item(self):
        """One item as a list of symbols (a literal may be several)."""
        c = self.peek()
        if c == '"':
            self.i += 1
            out = []
            while self.peek() != '"':
                if self.peek() == "":
                    self.fail("unclosed literal")
                out.append(Terminal([(self.char(),) * 2], False))
            self.i += 1
            return out
        if c == "[":
            self.i += 1
            negated = self.peek() == "^"
            if negated:
                self.i += 1
            ranges = []
            while self.peek() != "]":
                if self.peek() == "":
                    self.fail("unclosed class")
                lo = self.char()
                hi = lo
                if self.peek() == "-" and self.peek(1) not in ("]", ""):
                    self.i += 1
                    hi = self.char()
                    if hi < lo:
                        self.fail("backwards range")
                ranges.append((lo, hi))
            self.i += 1
            return [Terminal(ranges, negated)]
        if c == ".":
            self.i += 1
            return [ANY]
        if c == "(":
            self.i += 1
            self.blank(True)
            alts = self.alternatives(True)
            if self.peek() != ")":
                self.fail("expecting )")
            self.i += 1
            return [self.new_symbol(alts)]
        if c and c.isascii() and (c.isalnum() or c == "-"):
            return [self.name()]
        return None

    def repeat(self, unit, lo, hi):
        """unit{lo,hi} (hi None: unbounded) as symbols."""
        if len(unit) == 1:
            x = unit[0]
        else:
            x = self.new_symbol([list(unit)])
        out = [x] * lo
        if hi is None:
            # N ::= (nothing) | N x   (left recursive: Earley's favourite)
            n = self.new_symbol([[]])
            self.rules[n].append([n, x])
            out.append(n)
        elif hi > lo:
            # N ::= (nothing) | x | x x | ... up to hi - lo copies
            out.append(self.new_symbol([[x] * k for k in range(hi - lo + 1)]))
        return out

    def number(self):
        j = self.i
        while self.peek().isdigit() and self.peek().isascii():
            self.i += 1
        if j == self.i:
            self.fail("expecting a number")
        return int(self.s[j:self.i])

    def sequence(self, nested):
        seq = []
        unit_start = None
        while True:
            c = self.peek()
            if c in ("*", "+", "?", "{"):
                if unit_start is None or unit_start == len(seq):
                    self.fail("nothing to repeat")
                self.i += 1
                if c == "*":
                    lo, hi = 0, None
                elif c == "+":
                    lo, hi = 1, None
                elif c == "?":
                    lo, hi = 0, 1
                else:
                    self.blank(nested)
                    lo = self.number()
                    self.blank(nested)
                    if self.peek() == "}":
                        hi = lo
                    elif self.peek() == ",":
                        self.i += 1
                        self.blank(nested)
                        hi = self.number() if self.peek().isdigit() else None
                        self.blank(nested)
                        if self.peek() != "}":
                            self.fail("expecting }")
                    else:
                        self.fail("expecting , or }")
                    self.i += 1
                    if hi is not None and hi < lo:
                        self.fail("repetition's most below its least")
                unit = seq[unit_start:]
                del seq[unit_start:]
                seq.extend(self.repeat(unit, lo, hi))
                self.blank(nested)
                continue
            start = len(seq)
            got = self.item()
            if got is None:
                return seq
            seq.extend(got)
            unit_start = start
            self.blank(nested)

    def alternatives(self, nested):
        alts = [self.sequence(nested)]
        while self.peek() == "|":
            self.i += 1
            self.blank(True)
            alts.append(self.sequence(nested))
        return alts

    def grammar(self):
        if "\0" in self.s:
            self.fail("NUL")
        self.blank(True)
        if self.i == len(self.s):
            self.fail("empty grammar")
        while self.i < len(self.s):
            name = self.name()
            if not name:
                self.fail("expecting a rule name")
            if name in self.defined:
                self.fail("rule defined twice")
            self.defined.add(name)
            self.blank(False)
            if self.s[self.i:self.i + 3] != "::=":
                self.fail("expecting ::=")
            self.i += 3
            self.blank(True)
            self.rules[name] = self.alternatives(False)
            if self.peek() not in ("\n", "\r", ""):
                self.fail("expecting the end of the rule")
            self.blank(True)
        for alts in self.rules.values():
            for alt in alts:
                for sym in alt:
                    if isinstance(sym, str) and sym not in self.rules:
                        self.fail("undefined rule %s" % sym)
        if "root" not in self.rules:
            self.fail("no root")
        return self.rules


def _utf8_chars(data):
    """(code points, partial): the complete characters of strict UTF-8, and
    the range (lo, hi) of the characters the trailing cut-short bytes could
    still become (None when nothing is left over).  Raises ValueError on
    bytes that no valid UTF-8 text begins with."""
    cps, i, n = [], 0, len(data)
    while i < n:
        b = data[i]
        if b < 0x80:
            cps.append(b)
            i += 1
            continue
        # continuation bytes needed, and the second byte's range (it keeps
        # out overlong forms, surrogates and what lies past U+10FFFF)
        if 0xC2 <= b <= 0xDF:
            need, second = 1, (0x80, 0xBF)
        elif 0xE0 <= b <= 0xEF:
            need = 2
            second = {0xE0: (0xA0, 0xBF), 0xED: (0x80, 0x9F)}.get(b, (0x80, 0xBF))
        elif 0xF0 <= b <= 0xF4:
            need = 3
            second = {0xF0: (0x90, 0xBF), 0xF4: (0x80, 0x8F)}.get(b, (0x80, 0xBF))
        else:
            raise ValueError("invalid UTF-8 at byte %d" % i)
        got = list(data[i + 1:i + 1 + need])
        for k, c in enumerate(got):
            lo, hi = second if k == 0 else (0x80, 0xBF)
            if not lo <= c <= hi:
                raise ValueError("invalid UTF-8 at byte %d" % (i + 1 + k))

        def decode(tail):
            cp = b & (0x7F >> (need + 1))
            for c in got + tail:
                cp = cp << 6 | (c & 0x3F)
            return cp

        if len(got) == need:
            cps.append(decode([]))
            i += 1 + need
            continue
        # cut short: the smallest and largest completions
        low = [second[0] if len(got) == 0 else 0x80] + [0x80] * (need - len(got) - 1)
        high = [second[1] if len(got) == 0 else 0xBF] + [0xBF] * (need - len(got) - 1)
        return cps, (decode(low), decode(high))
    return cps, None


class Grammar:
    def __init__(self, text):
        rules = Reader(text).grammar()
        self._prune(rules)
        self.rules = rules
        self.nullable = self._nullable()
        self._finals = {}  # text -> _final's answer (asked thrice a text)

    @staticmethod
    def _prune(rules):
        """Drops alternatives that use something with no finite text."""
        productive = set()
        changed = True
        while changed:
            changed = False
            for name, alts in rules.items():
                if name in productive:
                    continue
                for alt in alts:
                    if all((s in productive) if isinstance(s, str) else not s.is_empty()
                           for s in alt):
                        productive.add(name)
                        changed = True
                        break
        if "root" not in productive:
            raise ValueError("the grammar matches no text")
        for name in list(rules):
            if name not in productive:
                del rules[name]
                continue
            rules[name] = [alt for alt in rules[name]
                           if all((s in productive) if isinstance(s, str) else not s.is_empty()
                                  for s in alt)]

    def _nullable(self):
        null = set()
        changed = True
        while changed:
            changed = False
            for name, alts in self.rules.items():
                if name not in null and any(
                        all(isinstance(s, str) and s in null for s in alt) for alt in alts):
                    null.add(name)
                    changed = True
        return null

    # ---- Earley ----

    def _chart(self, cps):
        """The Earley sets for the code points: len(cps) + 1 of them, or
        fewer when one comes out empty.  An item is (rule, alternative,
        dot, origin); each set also files its items by the rule they wait
        for, for completion."""
        rules = dict(self.rules)
        rules["\0start"] = [["root"]]
        sets, waiting = [], []
        todo = [("\0start", 0, 0, 0)]
        for pos in range(len(cps) + 1):
            cur, wait = set(todo), {}
            sets.append(cur)
            waiting.append(wait)
            scanned = set()
            while todo:
                item = todo.pop()
                name, a, dot, origin = item
                alt = rules[name][a]
                if dot == len(alt):
                    advanced = waiting[origin].get(name, ())
                    news = [(n2, a2, d2 + 1, o2) for (n2, a2, d2, o2) in advanced]
                else:
                    sym = alt[dot]
                    if not isinstance(sym, str):
                        if pos < len(cps) and cps[pos] in sym:
                            scanned.add((name, a, dot + 1, origin))
                        continue
                    wait.setdefault(sym, []).append(item)
                    news = [(sym, k, 0, pos) for k in range(len(rules[sym]))]
                    if sym in self.nullable:  # Aycock and Horspool
                        news.append((name, a, dot + 1, origin))
                for new in news:
                    if new not in cur:
                        cur.add(new)
                        todo.append(new)
            if pos == len(cps):
                break
            if not scanned:
                return sets
            todo = list(scanned)
        return sets

    def _final(self, data):
        """(the last Earley set or None, the cut-short range or None)."""
        if data in self._finals:
            return self._finals[data]
        if len(self._finals) > 256:
            self._finals.clear()
        self._finals[data] = got = self._final_uncached(data)
        return got

    def _final_uncached(self, data):
        try:
            cps, partial = _utf8_chars(data)
        except ValueError:
            return None, None
        sets = self._chart(cps)
        if len(sets) < len(cps) + 1:
            return None, None
        return sets[-1], partial

    def _alt(self, name, a):
        return ["root"] if name == "\0start" else self.rules[name][a]

    def accepts(self, data):
        last, partial = self._final(bytes(data))
        return last is not None and partial is None and ("\0start", 0, 1, 0) in last

    def viable(self, data):
        last, partial = self._final(bytes(data))
        if last is None:
            return False
        if partial is None:
            return True
        lo, hi = partial
        for name, a, dot, _ in last:
            alt = self._alt(name, a)
            if dot < len(alt) and not isinstance(alt[dot], str):
                if alt[dot].intersects(lo, hi):
                    return True
        return False

    def complete(self, data):
        """Accepts, and no character may follow."""
        last, partial = self._final(bytes(data))
        if last is None or partial is not None or ("\0start", 0, 1, 0) not in last:
            return False
        for name, a, dot, _ in last:
            alt = self._alt(name, a)
            if dot < len(alt) and not isinstance(alt[dot], str):
                if not alt[dot].is_empty():
                    return False
        return True

    # ---- generating ----

    def _min_depth(self):
        depth = {}
        changed = True
        while changed:
            changed = False
            for name, alts in self.rules.items():
                for alt in alts:
                    if all(not isinstance(s, str) or s in depth for s in alt):
                        d = 1 + max([depth[s] for s in alt if isinstance(s, str)] or [0])
                        if d < depth.get(name, 1 << 30):
                            depth[name] = d
                            changed = True
        return depth

    def generate(self, rng, budget=60):
        """A random text of the language (bytes), or None when the draw ran
        past `budget` symbols."""
        depth = self._min_depth()
        out = []
        steps = [0]

        def expand(name, room):
            alts = self.rules[name]
            fits = [alt for alt in alts
                    if all(depth[s] < room for s in alt if isinstance(s, str))]
            alt = rng.choice(fits if fits and (room < 6 or rng.random() < 0.7) else alts)
            for sym in alt:
                steps[0] += 1
                if steps[0] > budget * 20:
                    raise OverflowError
                if isinstance(sym, str):
                    expand(sym, room - 1)
                else:
                    cp = sym.sample(rng)
                    if cp is None:
                        raise OverflowError
                    out.append(chr(cp))

        try:
            expand("root", max(depth["root"] + 3, 8))
        except (OverflowError, RecursionError):
            return None
        return "".join(out).encode("utf-8")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: gbnf_reference.py GRAMMAR < text")
    with open(sys.argv[1], encoding="utf-8") as f:
        g = Grammar(f.read())
    data = sys.stdin.buffer.read()
    print("accepts" if g.accepts(data) else "viable" if g.viable(data) else "no")


if __name__ == "__main__":
    main()
