#!/usr/bin/env python3
"""Writes tool_cases.json: the tool-calling templates of Qwen 2.5, Qwen 3, Llama 3.1
and Mistral Nemo rendered by Jinja2 (transformers' settings, as gen_cases.py) with
`tools` and a conversation holding an assistant's tool call and the tool's result.
Not run by the tests; rerun by hand:

    cd chattemplate/testdata && python3 gen_tool_cases.py

The tool's keys are in sorted order at every level: Llama 3.1 writes tools with
tojson(indent=4), which the Go library sorts (see doc.go).
"""
import json

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

from gen_cases import Generation, raise_exception, tojson

TOOL = {"function": {"description": "Get the current weather in a city",
                     "name": "get_weather",
                     "parameters": {"properties": {"city": {"description": "The city, e.g. Paris", "type": "string"}},
                                    "required": ["city"], "type": "object"}},
        "type": "function"}

CALL = {"id": "abc123XYZ", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}

CONVERSATIONS = {
    "question": [{"role": "user", "content": "What is the weather in Paris?"}],
    "round_trip": [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [CALL]},
        {"role": "tool", "content": "Sunny, 21 C", "tool_call_id": "abc123XYZ"},
    ],
}

TEMPLATES = {
    "qwen2.5-instruct.jinja": ("", "<|im_end|>"),
    "qwen3.jinja": ("", "<|im_end|>"),
    "llama-3.1-instruct.jinja": ("<|begin_of_text|>", "<|eot_id|>"),
    "mistral-nemo-instruct-2407.jinja": ("<s>", "</s>"),
}


def render(source, messages, bos, eos):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[Generation, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env.from_string(source).render(messages=messages, tools=[TOOL], documents=None,
                                          add_generation_prompt=True, bos_token=bos, eos_token=eos)


def main():
    cases = []
    for tmpl, (bos, eos) in TEMPLATES.items():
        source = open(f"templates/{tmpl}").read()
        for name, conv in CONVERSATIONS.items():
            cases.append({"name": f"{tmpl[:-6]}/{name}", "template": tmpl, "bos_token": bos, "eos_token": eos,
                          "messages": conv, "want": render(source, conv, bos, eos)})
    with open("tool_cases.json", "w") as f:
        json.dump({"tool": TOOL, "cases": cases}, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
