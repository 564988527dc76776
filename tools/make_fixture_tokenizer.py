#!/usr/bin/env python3
"""A tiny Kimi-format tokenizer (tiktoken.model + tokenizer_config.json) for the k2_tiny fixture,
so that text prompts and chat can be tested end to end on a model whose vocabulary is 320.

Base tokens: the 256 single bytes, then 40 multi-byte pieces common in Python code (ranks
256..295). Special tokens follow Kimi's layout relative to the first special id (296): [BOS] +0,
[EOS] +1, <|im_end|> +2, <|im_user|> +3, <|im_assistant|> +4, <|im_system|> +10, <|im_middle|> +17.

Usage: python3 tools/make_fixture_tokenizer.py tests/fixtures/k2_tiny
"""
import base64
import json
import os
import sys

PIECES = ["  ", "    ", "de", "def", " f", "(x", "):", "\n ", "in", "re", "ret", "return", "se", "self",
          "th", "the", "an", "er", "on", "at", "or", "es", "en", " t", " a", " s", " i", "ing", "im",
          "import", "for", " in", "if", " =", "==", "()", "):\n", "x)", "pr", "print"]
SPECIALS = {0: "[BOS]", 1: "[EOS]", 2: "<|im_end|>", 3: "<|im_user|>", 4: "<|im_assistant|>",
            10: "<|im_system|>", 17: "<|im_middle|>"}


def main():
    out = sys.argv[1]
    tokens = [bytes([b]) for b in range(256)] + [p.encode() for p in PIECES]
    assert len(set(tokens)) == len(tokens)
    with open(os.path.join(out, "tiktoken.model"), "w") as f:
        for rank, t in enumerate(tokens):
            f.write(f"{base64.b64encode(t).decode()} {rank}\n")
    first = len(tokens)
    decoder = {str(first + k): {"content": v, "special": True, "lstrip": False, "rstrip": False,
                                "normalized": False, "single_word": False} for k, v in SPECIALS.items()}
    config = {"added_tokens_decoder": decoder, "bos_token": "[BOS]", "eos_token": "[EOS]",
              "tokenizer_class": "TikTokenTokenizer", "model_max_length": 512}
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=1)
    print(f"{len(tokens)} base tokens, specials from {first}")


if __name__ == "__main__":
    main()
