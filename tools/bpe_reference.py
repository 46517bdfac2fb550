#!/usr/bin/env python3
"""Reference GPT-2 BPE encoder and generator of tests/data/gpt2-bpe/golden_random.json.

A straight port of OpenAI's gpt-2/src/encoder.py (bytes_to_unicode, get_pairs, bpe, encode),
with the same pre-tokenizer pattern compiled by the third-party `regex` module, as encoder.py
does. This is a developer tool, not run in CI: `pip install regex` first.

The random strings mix scripts, whitespace runs, contractions (upper and lower case), numbers,
punctuation, combining marks and code points from every plane. Only code points that Python's
unicodedata (the source of src/model/unicode_tables.h) and the `regex` module classify alike are used,
since the two may follow different Unicode versions.

    python3 tools/bpe_reference.py golden            write golden_random.json (2000 cases)
    python3 tools/bpe_reference.py encode "text"     print the ids of one string
"""
import argparse
import json
import os
import random
import sys
import unicodedata

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "data", "gpt2-bpe")
PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(2 ** 8):
        if b not in bs:
            bs.append(b)
            cs.append(2 ** 8 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def get_pairs(word):
    return set(zip(word, word[1:]))


class Encoder:
    def __init__(self, encoder, bpe_merges):
        import regex
        self.encoder = encoder
        self.byte_encoder = bytes_to_unicode()
        self.bpe_ranks = dict(zip(bpe_merges, range(len(bpe_merges))))
        self.cache = {}
        self.pat = regex.compile(PATTERN)

    def bpe(self, token):
        if token in self.cache:
            return self.cache[token]
        word = tuple(token)
        pairs = get_pairs(word)
        if not pairs:
            return token
        while True:
            bigram = min(pairs, key=lambda pair: self.bpe_ranks.get(pair, float("inf")))
            if bigram not in self.bpe_ranks:
                break
            first, second = bigram
            new_word = []
            i = 0
            while i < len(word):
                try:
                    j = word.index(first, i)
                    new_word.extend(word[i:j])
                    i = j
                except ValueError:
                    new_word.extend(word[i:])
                    break
                if word[i] == first and i < len(word) - 1 and word[i + 1] == second:
                    new_word.append(first + second)
                    i += 2
                else:
                    new_word.append(word[i])
                    i += 1
            word = tuple(new_word)
            if len(word) == 1:
                break
            pairs = get_pairs(word)
        word = " ".join(word)
        self.cache[token] = word
        return word

    def encode(self, text):
        ids = []
        for token in self.pat.findall(text):
            token = "".join(self.byte_encoder[b] for b in token.encode("utf-8"))
            ids.extend(self.encoder[t] for t in self.bpe(token).split(" "))
        return ids


def load_encoder():
    with open(os.path.join(DATA, "encoder.json"), encoding="utf-8") as f:
        encoder = json.load(f)
    with open(os.path.join(DATA, "vocab.bpe"), encoding="utf-8") as f:
        lines = f.read().split("\n")[1:-1]
    return Encoder(encoder, [tuple(line.split()) for line in lines])


def agreeing_code_points():
    """Code points that unicodedata (14.0 on Python 3.11) and `regex` put in the same class."""
    import regex
    ws = set(range(9, 14)) | {0x20, 0x85, 0xA0, 0x1680, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000} | set(range(0x2000, 0x200B))
    out = []
    for cp in range(0x110000):
        c = chr(cp)
        cat = unicodedata.category(c)
        if cat == "Cs":
            continue
        mine = "S" if cp in ws else cat[0] if cat[0] in "LN" else "O"
        theirs = "S" if regex.match(r"\s", c) else "L" if regex.match(r"\p{L}", c) else \
            "N" if regex.match(r"\p{N}", c) else "O"
        if mine == theirs:
            out.append(c)
    return out


WORDS = ("the of and to in is it that was he she they we you I for on with as at by this have "
         "from or one had not but what all were when there can an your which their said if do will "
         "Hello World GPT Transformer naïve café résumé Ångström Straße").split()
CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve", "'M", "'LL", "'D",
                "n't", "N'T", "'", "''", "'x"]
SPACES = [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n", "\u00a0", "\u3000", "\u2028", "\x85", "\x0b",
          "\x0c", "\x1c", "\x1f", " \t ", "\u2009", "\u200a\u200a"]
SNIPPETS = ["Καλημέρα κόσμε", "Привет, мир!", "你好，世界。", "こんにちは世界", "안녕하세요", "مرحبا بالعالم",
            "नमस्ते दुनिया", "שלום עולם", "สวัสดีชาวโลก", "😀😃😄 👍🏽 👨‍👩‍👧‍👦 🇫🇷", "e\u0301 a\u0308 n\u0303",
            "①②③ ½ ¾ Ⅻ ٣٤٥ ९८", "def f(x):\n    return x**2  # square\n", "if (a && b) { c[i] += 1; }",
            "https://example.com/a?b=c&d=e", "$1,234.56", "3.14159e-10", "<|endoftext|>", "<|endoftext", "... ?! ---"]


def random_string(rng, cps):
    parts = []
    for _ in range(rng.randint(1, 12)):
        r = rng.random()
        if r < 0.25:
            w = rng.choice(WORDS)
            parts.append(w.upper() if rng.random() < 0.15 else w)
        elif r < 0.38:
            parts.append(rng.choice(CONTRACTIONS))
        elif r < 0.55:
            parts.append(rng.choice(SPACES) * rng.randint(1, 3))
        elif r < 0.63:
            parts.append(str(rng.randint(0, 10 ** rng.randint(1, 15))))
        elif r < 0.70:
            parts.append("".join(rng.choice("!\"#$%&()*+,-./:;<=>?@[\\]^_`{|}~'") for _ in range(rng.randint(1, 5))))
        elif r < 0.80:
            parts.append(rng.choice(SNIPPETS))
        elif r < 0.95:
            parts.append("".join(rng.choice(cps) for _ in range(rng.randint(1, 6))))
        else:
            parts.append(rng.choice(["a", "ab", "0", " ", "!", "é", "\n", "ab "]) * rng.randint(20, 200))
    return "".join(parts)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("golden", help="write the random golden file")
    g.add_argument("--out", default=os.path.join(DATA, "golden_random.json"), help="output path")
    g.add_argument("--count", type=int, default=2000, help="number of random strings")
    g.add_argument("--seed", type=int, default=1234, help="random seed (the file is reproducible)")
    e = sub.add_parser("encode", help="print the ids of TEXT")
    e.add_argument("text", help="text to encode")
    args = parser.parse_args()
    try:
        import regex  # noqa: F401
    except ImportError:
        sys.exit("bpe_reference: needs the `regex` module: pip install regex")
    enc = load_encoder()
    if args.command == "encode":
        print(json.dumps(enc.encode(args.text)))
        return
    rng = random.Random(args.seed)
    cps = agreeing_code_points()
    with open(args.out, "w", encoding="utf-8") as f:
        f.write("[\n")
        for k in range(args.count):
            text = random_string(rng, cps)
            sep = ",\n" if k + 1 < args.count else "\n"
            f.write(json.dumps({"text": text, "ids": enc.encode(text)}, ensure_ascii=False) + sep)
        f.write("]\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
