#!/usr/bin/env python3
"""Reference outputs for Kimi's split pattern, from Python tiktoken (the library Kimi's
tokenization_kimi.py uses) and Python's `regex` module. Run where `tiktoken` and `regex` are
installed (pip install tiktoken regex); standard library otherwise.

Inputs: an OpenAI o200k_base.tiktoken ranks file (node tests/text/reference_tiktoken.mjs OUT_DIR
writes one) and tests/fixtures/text/corpus.json + corpus_invalid.json.
Outputs (compact JSON, one entry per corpus string, null for the invalid-UTF-8 ones):
  tests/fixtures/text/kimi_pattern_o200k_ids.json  ids from tiktoken.Encoding(pat_str=Kimi's pattern,
                                                   mergeable_ranks=o200k_base, no special tokens)
  tests/fixtures/text/kimi_pattern_pieces.json     the regex pieces (regex.findall with the same pattern)

Usage: python3 tools/make_kimi_split_reference.py build/text-ref/o200k_base.tiktoken [tests/fixtures/text]
"""
import base64
import json
import os
import sys

import regex
import tiktoken
from tiktoken.load import load_tiktoken_bpe

# Verbatim from tokenization_kimi.py (docs: model-spec-k2.md section 5.1).
KIMI_PAT_STR = "|".join([
    r"""[\p{Han}]+""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    ranks_path = sys.argv[1]
    fixtures = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "text")
    with open(os.path.join(fixtures, "corpus.json")) as f:
        corpus = [base64.b64decode(s) for s in json.load(f)]
    with open(os.path.join(fixtures, "corpus_invalid.json")) as f:
        invalid = set(json.load(f))

    enc = tiktoken.Encoding(name="kimi_o200k", pat_str=KIMI_PAT_STR,
                            mergeable_ranks=load_tiktoken_bpe(ranks_path), special_tokens={})
    # Python's `regex` uses VERSION0 by default, where && is literal; VERSION1 enables set operations.
    pattern = regex.compile(KIMI_PAT_STR, flags=regex.V1)

    ids, pieces = [], []
    for i, data in enumerate(corpus):
        if i in invalid:
            ids.append(None)
            pieces.append(None)
            continue
        text = data.decode("utf-8")
        ids.append(enc.encode(text, allowed_special=set(), disallowed_special=()))
        parts = pattern.findall(text)
        if "".join(parts) != text:
            print(f"warning: corpus[{i}]: the regex pieces do not cover the text", file=sys.stderr)
        pieces.append(parts)

    for name, data in (("kimi_pattern_o200k_ids.json", ids), ("kimi_pattern_pieces.json", pieces)):
        path = os.path.join(fixtures, name)
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(data, f, separators=(",", ":"))
        os.replace(tmp, path)
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
