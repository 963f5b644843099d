#!/usr/bin/env python3
"""gpt2_bpe.py — GPT-2's byte-level BPE in plain Python, an independent
reference for the C tokenizer and the trainer's tokenizer.

    gpt2_bpe.py VOCAB_DIR [TEXT_FILE]     prints the ids of TEXT_FILE (stdin)
    gpt2_bpe.py --check VOCAB_DIR CORPUS_JSON EXPECTED_JSON

VOCAB_DIR holds vocab.json and merges.txt (GPT-2's encoder.json and
vocab.bpe).  The pre-tokenizer is GPT-2's pattern

    's|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+

written out by hand, since Python's re has no \\p{L}: letters and numbers
are unicodedata's categories L* and N*, whitespace is JavaScript's \\s (the
reference the C tokenizer is checked against, npm gpt-3-encoder, runs this
pattern in JavaScript, whose \\s differs from str.isspace()).  Each piece's
UTF-8 bytes are mapped to GPT-2's printable characters and merged by rank.

--check encodes every case of tests/tokenizer/corpus.json as
tests/tokenizer/js_reference.js does (split on the literal <|endoftext|>,
each piece encoded alone, joined with 50256) and compares with the JS
reference's ids (EXPECTED_JSON, written by tests/data/fetch-tokenizer.sh);
exit 0 when every case agrees, 1 with the cases that differ.
"""

import json
import os
import sys
import unicodedata

EOT_TEXT = "<|endoftext|>"
EOT_ID = 50256

# JavaScript's \s: WhiteSpace and LineTerminator of ECMA-262.
JS_SPACE = frozenset("\t\n\v\f\r \u00a0\u1680\u2028\u2029\u202f\u205f"
                     "\u3000\ufeff" + "".join(chr(c) for c in
                                              range(0x2000, 0x200b)))
CONTRACTIONS = ("s", "t", "re", "ve", "m", "ll", "d")


def is_letter(c):
    return unicodedata.category(c)[0] == "L"


def is_number(c):
    return unicodedata.category(c)[0] == "N"


def is_space(c):
    return c in JS_SPACE


def is_other(c):
    return not (is_space(c) or is_letter(c) or is_number(c))


def pretokenize(text):
    """The pattern's matches, left to right (it matches every character)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        j = match_at(text, i)
        out.append(text[i:j])
        i = j
    return out


def run(text, i, pred):
    while i < len(text) and pred(text[i]):
        i += 1
    return i


def match_at(text, i):
    """End of the pattern's match at i: the alternatives in order."""
    n = len(text)
    if text[i] == "'":
        for c in CONTRACTIONS:
            if text.startswith(c, i + 1):
                return i + 1 + len(c)
    # ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+'
    for pred in (is_letter, is_number, is_other):
        k = i + 1 if text[i] == " " and i + 1 < n and pred(text[i + 1]) \
            else i
        j = run(text, k, pred)
        if j > k:
            return j
    # '\s+(?!\S)': the whitespace run, less its last character when
    # something other than whitespace follows; else '\s+'
    j = run(text, i, is_space)
    if j < n and j - 1 > i:
        return j - 1
    return j


def bytes_to_unicode():
    """GPT-2's map of the 256 bytes to printable characters."""
    bs = (list(range(ord("!"), ord("~") + 1)) +
          list(range(ord("\u00a1"), ord("\u00ac") + 1)) +
          list(range(ord("\u00ae"), ord("\u00ff") + 1)))
    cs = bs[:]
    extra = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


class Encoder:
    def __init__(self, vocab_dir):
        with open(os.path.join(vocab_dir, "vocab.json"), encoding="utf-8") as f:
            self.encoder = json.load(f)
        self.decoder = {v: k for k, v in self.encoder.items()}
        with open(os.path.join(vocab_dir, "merges.txt"), encoding="utf-8") as f:
            lines = f.read().split("\n")
        merges = [tuple(line.split(" ")) for line in lines[1:]
                  if line and not line.startswith("#version")]
        self.ranks = {m: r for r, m in enumerate(merges)}
        self.byte_encoder = bytes_to_unicode()
        self.byte_decoder = {v: k for k, v in self.byte_encoder.items()}
        self.cache = {}

    def bpe(self, word):
        if word in self.cache:
            return self.cache[word]
        parts = list(word)
        while len(parts) > 1:
            best, at = None, -1
            for k in range(len(parts) - 1):
                r = self.ranks.get((parts[k], parts[k + 1]))
                if r is not None and (best is None or r < best):
                    best, at = r, k
            if best is None:
                break
            first, second = parts[at], parts[at + 1]
            merged, k = [], 0
            while k < len(parts):   # every occurrence of the pair, left first
                if k + 1 < len(parts) and parts[k] == first and \
                        parts[k + 1] == second:
                    merged.append(first + second)
                    k += 2
                else:
                    merged.append(parts[k])
                    k += 1
            parts = merged
        self.cache[word] = parts
        return parts

    def encode(self, text):
        """Ids of text, <|endoftext|> in it taken as text."""
        ids = []
        for piece in pretokenize(text):
            mapped = "".join(self.byte_encoder[b]
                             for b in piece.encode("utf-8"))
            ids.extend(self.encoder[t] for t in self.bpe(mapped))
        return ids

    def encode_with_eot(self, text):
        """As js_reference.js: literal <|endoftext|> becomes 50256."""
        ids = []
        for k, piece in enumerate(text.split(EOT_TEXT)):
            if k > 0:
                ids.append(EOT_ID)
            ids.extend(self.encode(piece))
        return ids

    def decode(self, ids):
        text = "".join(self.decoder[i] for i in ids)
        return bytes(self.byte_decoder[c] for c in text).decode(
            "utf-8", errors="replace")


def check(vocab_dir, corpus_path, expected_path):
    enc = Encoder(vocab_dir)
    with open(corpus_path, encoding="utf-8") as f:
        corpus = json.load(f)
    with open(expected_path, encoding="utf-8") as f:
        expected = json.load(f)
    bad = []
    for case in corpus:
        got = enc.encode_with_eot(case["text"])
        if got != expected[case["name"]]:
            bad.append(case["name"])
        elif enc.decode(got) != case["text"]:
            bad.append(case["name"] + " (decode)")
    if len(expected) != len(corpus):
        bad.append("expected.json has %d cases, the corpus %d"
                   % (len(expected), len(corpus)))
    for name in bad:
        print("gpt2_bpe.py: differs from the JS reference: %s" % name,
              file=sys.stderr)
    print("gpt2_bpe.py: %d of %d cases agree with the JS reference"
          % (len(corpus) - len(bad), len(corpus)))
    return 1 if bad else 0


def main(argv):
    if len(argv) == 5 and argv[1] == "--check":
        return check(argv[2], argv[3], argv[4])
    if len(argv) in (2, 3):
        enc = Encoder(argv[1])
        src = open(argv[2], encoding="utf-8") if len(argv) == 3 else sys.stdin
        print(" ".join(str(i) for i in enc.encode(src.read())))
        return 0
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
