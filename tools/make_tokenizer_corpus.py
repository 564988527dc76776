#!/usr/bin/env python3
"""The tokenizer test corpus: tests/fixtures/text/corpus.json, a JSON array of base64-encoded byte
strings (base64 so that invalid UTF-8 can be carried). Deterministic; standard library only.

Categories: prose, mixed scripts, CJK, emoji and ZWJ sequences, combining marks, whitespace runs,
digits, code, contractions, very long words, special-token text, and invalid UTF-8 (the last are
marked by index in corpus_invalid.json: reference tokenizers that take Unicode strings skip them).

Usage: python3 tools/make_tokenizer_corpus.py tests/fixtures/text
"""
import base64
import json
import os
import random
import sys

PROSE = [
    "The quick brown fox jumps over the lazy dog.",
    "It was the best of times, it was the worst of times.",
    "Mixture-of-Experts models route each token to a few experts.",
    "  Leading spaces, trailing spaces   ",
    "HELLO World, hello WORLD; Hello, world!",
    "e-mail: someone@example.com, URL: https://example.org/path?q=1&x=2#frag",
    "Prices: $3.50, €4,99, £10 — and 50% off!!!",
    "\"Quoted\" and 'single' and `backtick` and «guillemets».",
]
SCRIPTS = [
    "Привет, мир! Как дела?", "Γειά σου Κόσμε", "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया",
    "สวัสดีชาวโลก", "Xin chào thế giới", "Ողջույն աշխարհ", "გამარჯობა მსოფლიო", "ሰላም ልዑል",
    "Zürich Straße Œuvre naïve façade", "İstanbul ılık ĞÜŞÖÇ", "Dobrý den, Příliš žluťoučký kůň",
]
CJK = [
    "你好，世界！今天天气很好。", "我爱自然语言处理和机器学习", "日本語のテキストとカタカナ、ひらがな。",
    "東京都渋谷区神南一丁目", "한국어 텍스트입니다. 안녕하세요!", "中文English混合text测试123",
    "「引用」『二重』（括弧）【見出し】", "繁體中文與简体中文", "ｆｕｌｌ　ｗｉｄｔｈ　ＡＢＣ　１２３",
]
EMOJI = [
    "😀😃😄😁", "👍🏽👍🏿", "👨‍👩‍👧‍👦 family", "🏳️‍🌈 flag", "🇯🇵🇺🇸🇩🇪", "❤️‍🔥", "🧑🏻‍💻 coding",
    "1️⃣2️⃣3️⃣", "I ❤ Unicode ✓ ✗ ☃ ★", "👩🏽‍🚀🚀 to the 🌕",
]
COMBINING = [
    "e\u0301 a\u0300 o\u0302 u\u0308", "Z\u0351\u0358\u0364a\u0336\u0301l\u0315g\u0489o\u0327",
    "\u1100\u1161\u11a8", "q\u0307\u0323", "n\u0303o\u0303", "\u0915\u094d\u0937", "ক্ষ",
]
WHITESPACE = [
    " " * 17, "\t\t\tindent", "a\n\n\nb", "line\r\nline\r\n", "  \n  \n", "\u00a0nbsp\u00a0",
    "\u2003em\u2002en\u2009thin", " \t \n \r \x0b \x0c ", "word" + " " * 40 + "word", "\n" * 12,
]
DIGITS = [
    "0", "12", "123", "1234", "1234567890123", "3.14159265358979", "1,000,000", "2026-12-02",
    "+1 (555) 010-9999", "0x7fffffff", "1e-5", "٣٤٥ ١٢", "１２３４", "Ⅻ ⅷ ½ ²³",
]
CODE = [
    "def f(x):\n    return x * 2\n", "for (int i = 0; i < n; ++i) { sum += a[i]; }",
    "{\"key\": [1, 2, 3], \"nested\": {\"a\": null}}", "import numpy as np\nprint(np.arange(10))",
    "#include <stdio.h>\nint main(void) { puts(\"hi\"); }", "SELECT * FROM t WHERE id = 42;",
    "    if x:\n        pass\n    else:\n        raise ValueError('bad')\n", "x+=1;y-=2;z*=3;w/=4",
    "<div class=\"a\">text</div>", "fn main() -> Result<(), Box<dyn Error>> { Ok(()) }",
    "$ ls -la | grep '^d' && echo done", "a_b_c __init__ __name__ == '__main__'",
]
CONTRACTIONS = [
    "don't", "I'LL", "they'RE", "we've", "she'd", "it's", "I'M", "you'll", "can't won't shouldn't",
    "O'Reilly's", "'s 't 're 've 'm 'll 'd", "DON'T STOP", "rock'n'roll",
]
SPECIALS = ["<|im_end|>", "<|im_user|>user<|im_middle|>hi<|im_end|>", "[BOS]", "<|endoftext|>", "<|im_start|>"]
INVALID = [
    b"\xff", b"\xc3", b"abc\x80def", b"\xe4\xbd", b"\xf0\x9f\x98", b"\xc0\xaf", b"\xed\xa0\x80",
    b"ok\xfe\xfeok", b"\x80\x80\x80", "naïve".encode() + b"\xa0", b"\xf4\x90\x80\x80", b"\xe2\x28\xa1",
]


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/text"
    rng = random.Random(20261202)
    pools = [PROSE, SCRIPTS, CJK, EMOJI, COMBINING, WHITESPACE, DIGITS, CODE, CONTRACTIONS]
    items = [s for pool in pools for s in pool] + SPECIALS
    items += ["a" * 1000, "supercalifragilisticexpialidocious" * 20, "日本" * 300, "😀" * 200, "x" + "1" * 500]
    while len(items) < 560:   # random mixtures of two to five pieces
        parts = [rng.choice(rng.choice(pools)) for _ in range(rng.randint(2, 5))]
        seps = [rng.choice(["", " ", "  ", "\n", "\t", ", ", "\r\n"]) for _ in parts]
        items.append("".join(p + s for p, s in zip(parts, seps)))
    data = [s.encode("utf-8") for s in items]
    invalid_at = []
    for i, b in enumerate(INVALID):
        invalid_at.append(len(data))
        data.append(b)
        invalid_at.append(len(data))
        data.append(rng.choice(items).encode("utf-8") + b + rng.choice(items).encode("utf-8"))
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "corpus.json"), "w") as f:
        json.dump([base64.b64encode(b).decode() for b in data], f, indent=0)
    with open(os.path.join(out, "corpus_invalid.json"), "w") as f:
        json.dump(invalid_at, f)
    print(f"{len(data)} strings, {len(invalid_at)} with invalid UTF-8")


if __name__ == "__main__":
    main()
