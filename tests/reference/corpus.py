#!/usr/bin/env python3
"""corpus.py — the English text the small test models are trained on.

The corpus is Debian's `fortunes` package (/usr/share/games/fortunes): about
2.5 MB of short English texts (quotations, jokes, definitions, verse) in
plain text, one file per theme, texts separated by lines holding `%`.  Why
it: it is in Debian main on every architecture (so any machine that can
install our build dependencies can train), it is modern, varied English
rather than one author's or one era's, and its texts are short documents,
each a natural unit to hold out.  Licence: the collection is distributed
under the BSD licence of fortune-mod (see /usr/share/doc/fortunes/copyright);
it is not public domain, and individual texts quote their authors.
Training here makes weights on the user's own machine for tests and a
demo; they are never committed or shipped.  (Debian's bible-kjv-text is
public domain but 400 years old in its English; not chosen.)

Held out: every HELDOUT_EVERY-th text in a fixed order (the files sorted by
name, the texts in file order), never trained on.  `ascii-art` is left out
(pictures, not prose).  Texts are joined with GPT-2's <|endoftext|> (50256)
before each, as GPT-2's own training data was.

    corpus.py VOCAB_DIR [--heldout-text FILE]   token counts; the held-out
                                                text written to FILE

Importable: documents(), split(), tokens(), digest().
"""

import hashlib
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import gpt2_bpe  # noqa: E402

FORTUNES = os.environ.get("GPT2D_FORTUNES", "/usr/share/games/fortunes")
EXCLUDED = ("ascii-art",)
HELDOUT_EVERY = 20


def files(root=FORTUNES):
    """The corpus files, sorted: data files only (no .dat index, no .u8
    links), none excluded."""
    if not os.path.isdir(root):
        raise FileNotFoundError(
            "%s: missing (install the Debian package fortunes)" % root)
    out = []
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if "." in name or name in EXCLUDED or not os.path.isfile(path):
            continue
        out.append(path)
    if not out:
        raise FileNotFoundError("%s: no fortune files" % root)
    return out


def documents(root=FORTUNES):
    """Every text, in order: stripped of surrounding blank lines, tabs kept."""
    docs = []
    for path in files(root):
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        for piece in text.split("\n%\n"):
            piece = piece.strip("\n")
            if piece.strip() and piece != "%":
                docs.append(piece)
    return docs


def split(docs):
    """(training texts, held-out texts)."""
    train = [d for i, d in enumerate(docs) if i % HELDOUT_EVERY != 0]
    held = [d for i, d in enumerate(docs) if i % HELDOUT_EVERY == 0]
    return train, held


def tokens(enc, docs):
    """One stream: <|endoftext|> then the text, for each text."""
    ids = []
    for d in docs:
        ids.append(gpt2_bpe.EOT_ID)
        ids.extend(enc.encode(d))
    return ids


def heldout_text(held):
    """The held-out texts as one file, <|endoftext|> between them (what
    bench/quality.py scores)."""
    return "".join("<|endoftext|>" + d + "\n" for d in held)


def digest(root=FORTUNES):
    """sha256 over the corpus files' names and bytes: part of a trained
    model's cache key."""
    h = hashlib.sha256()
    for path in files(root):
        h.update(os.path.basename(path).encode() + b"\0")
        with open(path, "rb") as f:
            h.update(f.read())
    return h.hexdigest()


def main(argv):
    if len(argv) not in (2, 4) or (len(argv) == 4 and
                                   argv[2] != "--heldout-text"):
        print(__doc__.split("\n\n")[-2], file=sys.stderr)
        return 2
    enc = gpt2_bpe.Encoder(argv[1])
    train, held = split(documents())
    print("texts: %d training, %d held out; tokens: %d training, %d held out"
          % (len(train), len(held), len(tokens(enc, train)),
             len(tokens(enc, held))))
    if len(argv) == 4:
        with open(argv[3], "w", encoding="utf-8") as f:
            f.write(heldout_text(held))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
