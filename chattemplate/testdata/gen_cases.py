#!/usr/bin/env python3
"""Writes cases.json: each template in templates/ rendered over a few conversations
by Python's Jinja2 with the settings of transformers' apply_chat_template, the
reference every chat template is written against. The Go tests hold the package
to these strings. Not run by the tests; rerun by hand after changing the templates
or the conversations:

    cd chattemplate/testdata && python3 gen_cases.py

Needs python3 with jinja2 (Debian: python3-jinja2; written with Jinja2 3.1.6).
Before writing, it checks its own output against outputs published by other
projects for the same template and conversation (llama.cpp, mistral.rs), so a
reference that drifted from theirs fails here instead of in the Go tests.
"""
import datetime
import json
import os

import jinja2
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

# The clock strftime_now reads; the Go tests pass the same instant.
NOW = datetime.datetime(2024, 7, 26, 12, 0, 0)


class Generation(Extension):
    """{% generation %} marks assistant text for training masks; it renders its body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.Scope(body).set_lineno(lineno)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def render(source, messages, add_generation_prompt, bos, eos):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[Generation, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: NOW.strftime(fmt)
    try:
        out = env.from_string(source).render(
            messages=messages, tools=None, documents=None,
            add_generation_prompt=add_generation_prompt, bos_token=bos, eos_token=eos)
        return out, None
    except jinja2.exceptions.TemplateError as e:
        return None, str(e)


def msgs(*pairs):
    return [{"role": r, "content": c} for r, c in pairs]


# llama.cpp's and mistral.rs's test conversation, so that their published outputs
# can be compared; the padded assistant turn shows which templates strip content.
WITH_SYSTEM = msgs(
    ("system", "You are a helpful assistant"),
    ("user", "Hello"),
    ("assistant", "Hi there"),
    ("user", "Who are you"),
    ("assistant", "   I am an assistant   "),
    ("user", "Another question"),
)
NO_SYSTEM = WITH_SYSTEM[1:]
# Content a template must pass through untouched: Jinja syntax, quotes, newlines,
# non-ASCII, and text that looks like the markers.
TRICKY = msgs(
    ("user", "Привет {{ messages }} {% if %} \"quoted\" 'single'\n日本語 🙂\n<|im_end|> [/INST] </s>"),
)
NOT_ALTERNATING = msgs(("user", "Hello"), ("user", "Anyone there?"))
UNKNOWN_ROLE = msgs(("user", "Hello"), ("tool", "42"))

# name, template file, BOS text, EOS text (the tokenizer's), and where it comes from.
TEMPLATES = [
    ("chatml", "chatml.jinja", "<s>", "<|im_end|>"),
    ("llama-2-chat", "llama-2-chat.jinja", "<s>", "</s>"),
    ("llama-3-instruct", "llama-3-instruct.jinja", "<|begin_of_text|>", "<|eot_id|>"),
    ("llama-3.1-instruct", "llama-3.1-instruct.jinja", "<|begin_of_text|>", "<|eot_id|>"),
    ("llama-3.2-instruct", "llama-3.2-instruct.jinja", "<|begin_of_text|>", "<|eot_id|>"),
    ("mistral-7b-instruct-v0.1", "mistral-7b-instruct-v0.1.jinja", "<s>", "</s>"),
    ("mixtral-8x7b-instruct-v0.1", "mixtral-8x7b-instruct-v0.1.jinja", "<s>", "</s>"),
    ("mistral-nemo-instruct-2407", "mistral-nemo-instruct-2407.jinja", "<s>", "</s>"),
    ("zephyr", "zephyr.jinja", "<s>", "</s>"),
    ("qwen1.5-chat", "qwen1.5-chat.jinja", "", "<|im_end|>"),
    ("qwen2-instruct", "qwen2-instruct.jinja", "", "<|im_end|>"),
    ("qwen2.5-instruct", "qwen2.5-instruct.jinja", "", "<|im_end|>"),
    ("qwen3", "qwen3.jinja", "", "<|im_end|>"),
    ("phi-3-mini", "phi-3-mini.jinja", "<s>", "<|endoftext|>"),
    ("phi-3-small", "phi-3-small.jinja", "<|endoftext|>", "<|endoftext|>"),
    ("smollm2-instruct", "smollm2-instruct.jinja", "<|im_start|>", "<|im_end|>"),
    ("gemma-it", "gemma-it.jinja", "<bos>", "<eos>"),
    ("gemma-3-it", "gemma-3-it.jinja", "<bos>", "<eos>"),
    ("olmo-2-instruct", "olmo-2-instruct.jinja", "<|endoftext|>", "<|endoftext|>"),
    ("granite-3.0-instruct", "granite-3.0-instruct.jinja", "<|end_of_text|>", "<|end_of_text|>"),
    ("deepseek-llm-chat", "deepseek-llm-chat.jinja", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    ("deepseek-coder-instruct", "deepseek-coder-instruct.jinja", "<｜begin▁of▁sentence｜>", "<|EOT|>"),
    ("deepseek-r1", "deepseek-r1.jinja", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
]

CONVERSATIONS = [
    ("system", WITH_SYSTEM),
    ("no-system", NO_SYSTEM),
    ("tricky", TRICKY),
    ("not-alternating", NOT_ALTERNATING),
    ("unknown-role", UNKNOWN_ROLE),
]

# Small templates, each on one feature chat templates use, rendered over SHORT.
# Whitespace control, string literals and braces are what New's rewrite (rewrite.go)
# takes over from the library, so they get the most cases.
SHORT = msgs(("user", "Hi"), ("assistant", "Yo"))
SNIPPETS = [
    ("ws-dash-across-expr", "Effort: {{ 'Max' }}{%- if true %} x{% endif -%}  \n  y"),
    ("ws-lstrip-indent", "a\n    {% if true %}\n    b\n    {% endif %}\nc"),
    ("ws-lstrip-after-expr", "a\n  {{ 'x' }}{% if true %}y{% endif %}\nz"),
    ("ws-trim-after-expr", "{% if true %}{{ 'x' }}\nz{% endif %}"),
    ("ws-comment", "a\n  {# c #}\nb {#- c -#} c\n{# c #}d"),
    ("ws-plus", "a\n  {%+ if true %}b{% endif +%}\nc"),
    ("ws-raw", "x {% raw %}{{ not evaluated }} {% if %}{% endraw %}\ny"),
    ("ws-raw-dash", "x {%- raw -%}  {{ a }}  {%- endraw -%}  y"),
    ("ws-trailing-newline", "a\n"),
    ("ws-two-trailing-newlines", "a\n\n"),
    ("ws-crlf", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\nc"),
    ("ws-expr-dash", "a  {{- 'b' -}}  c\n\n{{ 'd' }}"),
    ("ws-for-indent", "{% for m in messages %}\n  {{ m.role }}\n{% endfor %}"),
    ("ws-macro", "{% macro f(x) -%}\n  [{{ x }}]\n{%- endmacro %}\n{{ f(1) }}{{ f(2) }}"),
    ("ws-block-start-line", "  {% if true %}x{% endif %}"),
    ("ws-set-block", "{% set x %}\n  hello {{ 'w' }}\n{% endset %}[{{ x }}]"),
    ("ws-tab-lstrip", "a\n\t \t{% if true %}b{% endif %}"),
    ("ws-dash-multi-newline", "{% if true -%}\n\n   x{%- endif %}"),
    ("lit-escapes", "{{ 'a\\x41\\u00e9\\t|\\r|\\\\|\\'|\\\"|\\q|\\101' }}"),
    ("lit-double", "{{ \"it's \\\"q\\\" }}\" }}"),
    ("lit-braces", "{{ {'a': {'b': 1}} }}|{{ '}}' }}|{% set d = {'x': {'y': 2}} %}{{ d.x.y }}"),
    ("lit-newline", "{{ 'a\nb' }}"),
    ("numbers", "{{ 1 }} {{ 1.5 }} {{ 3/2 }} {{ 7//2 }} {{ 7%3 }} {{ -1 }} {{ 2 ** 10 }}"),
    ("str-methods", "{% set s = '  Hello World  ' %}[{{ s.strip() }}][{{ s.lstrip() }}][{{ s.rstrip() }}][{{ s.upper() }}][{{ s.lower() }}][{{ s.title() }}][{{ s.strip().split(' ') }}][{{ s.split() }}][{{ s.startswith('  H') }}][{{ s.endswith('d') }}][{{ s.replace('l', 'L') }}][{{ s.find('o') }}][{{ s.count('l') }}][{{ s.strip('  Hd') }}]"),
    ("str-slice", "{{ 'hello'[1:3] }}|{{ 'hello'[::-1] }}|{{ 'hello'[-1] }}|{{ [1,2,3][::-1] }}|{{ [1,2,3][1:] }}|{{ 'h\u00e9llo'[1] }}"),
    ("str-in", "{{ 'ell' in 'hello' }}|{{ 1 in [1,2] }}|{{ 'a' in {'a': 1} }}|{{ 'x' not in 'abc' }}|{{ 'a' ~ 1 ~ true }}"),
    ("filters", "{{ '  a  ' | trim }}|{{ [1,2] | length }}|{{ 'abc' | length }}|{{ x | default('d') }}|{{ '' | default('d', true) }}|{{ [3,1,2] | sort }}|{{ [1,2] | join(',') }}|{{ ['a','b'] | first }}|{{ ['a','b'] | last }}|{{ 'ab' | upper }}|{{ 'AB' | lower }}|{{ [1,1,2] | unique | list }}|{{ 'x' | string }}|{{ '3' | int + 1 }}|{{ 'xxaxx' | trim('x') }}|{{ 'ab' | capitalize }}"),
    ("tojson", "{{ {'b': 1, 'a': [1, 2.5, none, true, 'x\"\u00e9<>&']} | tojson }}|{{ '\u00e9' | tojson }}|{{ [1,2] | tojson(indent=2) }}|{{ {'a': 1} | tojson(separators=(',', ':')) }}"),
    ("attr-filters", "{% set l = [{'r': 'user', 'c': 'a'}, {'r': 'sys', 'c': 'b'}] %}{{ l | selectattr('r', 'equalto', 'user') | list | length }}|{{ l | rejectattr('r', 'equalto', 'user') | map(attribute='c') | join }}|{{ l | map(attribute='r') | list }}|{% for k, v in {'b': 1, 'a': 2} | dictsort %}{{ k }}{{ v }}{% endfor %}|{% for k, v in {'z': 1, 'a': 2} | items %}{{ k }}{% endfor %}"),
    ("tests", "{{ x is defined }}|{{ none is none }}|{{ 1 is number }}|{{ 'a' is string }}|{{ {} is mapping }}|{{ [] is iterable }}|{{ 'a' is iterable }}|{{ [] is sequence }}|{{ 2 is even }}|{{ 3 is odd }}|{{ true is boolean }}|{{ 1 is integer }}|{{ 1.0 is float }}|{{ x is undefined }}|{{ 'a' is lower }}|{{ 1 is eq(1) }}"),
    ("loop-vars", "{% for x in ['a','b','c'] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.previtem }}{{ loop.nextitem }}|{% endfor %}"),
    ("loop-else-break", "{% for x in [] %}x{% else %}empty{% endfor %}|{% for x in [1,2,3,4] %}{% if x == 3 %}{% break %}{% endif %}{% if x == 1 %}{% continue %}{% endif %}{{ x }}{% endfor %}"),
    ("loop-filter", "{% for x in [1,2,3,4] if x is even %}{{ x }}{{ loop.index }}{% endfor %}"),
    ("loop-dict", "{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}{% for k in {'a': 1} %}{{ k }}{% endfor %}"),
    ("namespace", "{% set ns = namespace(a=1, b='x') %}{% for i in range(3) %}{% set ns.a = ns.a + i %}{% endfor %}{{ ns.a }}{{ ns.b }}"),
    ("scoping", "{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}{{ x }}|{% if true %}{% set y = 3 %}{% endif %}{{ y }}"),
    ("macro-defaults", "{% macro f(a, b='d', c='') %}{{ a }}{{ b }}{{ c }}{% endmacro %}{{ f(1) }}|{{ f(1, 2) }}|{{ f(1, c=3) }}"),
    ("macro-call", "{% macro w() %}[{{ caller() }}]{% endmacro %}{% call w() %}in{% endcall %}"),
    ("macro-recursive", "{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(5) }}"),
    ("filter-block", "{% filter upper %}abc {{ 'd' }}{% endfilter %}"),
    ("cond-expr", "{{ 'a' if true else 'b' }}|{{ 'a' if false }}|{{ 1 if none is none else 2 }}"),
    ("dict-methods", "{% set d = {'a': 1} %}{{ d.get('a') }}|{{ d.get('z', 'dflt') }}|{{ d.keys() | list }}|{{ d.values() | list }}|{{ d['a'] }}|{{ d.a }}"),
    ("strftime", "{{ strftime_now('%Y-%m-%d %H:%M:%S %d %b %B %a %A %-d %j %p %I %y') }}"),
    ("raise-in-macro", "{% macro f() %}{{ raise_exception('bad ' ~ 1) }}{% endmacro %}{{ f() }}"),
    ("messages", "{{ messages[0]['role'] }}|{{ messages[0].content }}|{{ messages | length }}|{{ messages[-1].role }}|{{ messages[5] is defined }}|{{ messages[0].tool_calls is defined }}|{{ 'tool_calls' in messages[0] }}|{{ messages | map(attribute='role') | join(', ') }}"),
    ("globals", "{{ bos_token }}|{{ eos_token }}|{{ add_generation_prompt }}|{{ tools is none }}|{{ documents is none }}|{{ enable_thinking is defined }}"),
    ("generation", "{% generation %}gen {{ 1 }}{% endgeneration %}"),
    ("dict-order", "{{ dict(zeta=1, alpha=[1, 2], mid=dict(b=1, a='x'), k4=4, k5=5, k6=6, k7=7, k8=8, k9=9, k10=10, k11=11, k12=12) | tojson }}|{{ dict() | tojson }}|{% set ns = namespace(z=1, a=2) %}{% set ns.a = ns.a + ns.z %}{{ ns.a }}"),
    ("logic", "{{ not true }}|{{ not none }}|{{ not [] }}|{{ -(1+2) }}|{{ 1 == 1.0 }}|{{ 'a' < 'b' }}|{{ '-' * 3 }}|{{ true and 'x' }}|{{ false or 'y' }}"),
]

# Outputs other projects publish for one of the cases above (template, conversation,
# add_generation_prompt=True, BOS, EOS), copied from their tests.
PUBLISHED = [
    # mistral.rs, mistralrs-core/src/pipeline/mod.rs test_chat_templates (MIT),
    # generated there with transformers' apply_chat_template.
    ("chatml", WITH_SYSTEM, "<s>", "</s>", "mistral.rs",
     "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\nHi there<|im_end|>\n<|im_start|>user\nWho are you<|im_end|>\n<|im_start|>assistant\n   I am an assistant   <|im_end|>\n<|im_start|>user\nAnother question<|im_end|>\n<|im_start|>assistant\n"),
    ("llama-2-chat", WITH_SYSTEM, "<s>", "</s>", "mistral.rs",
     "<s>[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST] Hi there </s><s>[INST] Who are you [/INST] I am an assistant </s><s>[INST] Another question [/INST]"),
    ("mixtral-8x7b-instruct-v0.1", NO_SYSTEM, "<s>", "</s>", "mistral.rs",
     "<s>[INST] Hello [/INST]Hi there</s>[INST] Who are you [/INST]   I am an assistant   </s>[INST] Another question [/INST]"),
    ("gemma-it", NO_SYSTEM, "<bos>", "<eos>", "mistral.rs",
     "<bos><start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\nHi there<end_of_turn>\n<start_of_turn>user\nWho are you<end_of_turn>\n<start_of_turn>model\nI am an assistant<end_of_turn>\n<start_of_turn>user\nAnother question<end_of_turn>\n<start_of_turn>model\n"),
    # llama.cpp, tests/test-chat-template.cpp (MIT).
    ("llama-3-instruct", WITH_SYSTEM, "", "", "llama.cpp",
     "<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWho are you<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nI am an assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nAnother question<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"),
    ("phi-3-small", WITH_SYSTEM, "", "", "llama.cpp",
     "<|system|>\nYou are a helpful assistant<|end|>\n<|user|>\nHello<|end|>\n<|assistant|>\nHi there<|end|>\n<|user|>\nWho are you<|end|>\n<|assistant|>\n   I am an assistant   <|end|>\n<|user|>\nAnother question<|end|>\n<|assistant|>\n"),
    ("deepseek-coder-instruct", WITH_SYSTEM, "", "", "llama.cpp",
     "You are a helpful assistant### Instruction:\nHello\n### Response:\nHi there\n<|EOT|>\n### Instruction:\nWho are you\n### Response:\n   I am an assistant   \n<|EOT|>\n### Instruction:\nAnother question\n### Response:\n"),
]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    sources = {}
    for name, file, _, _ in TEMPLATES:
        with open(os.path.join(here, "templates", file), encoding="utf-8", newline="") as f:
            sources[name] = f.read()

    for name, conv, bos, eos, who, want in PUBLISHED:
        got, err = render(sources[name], conv, True, bos, eos)
        if got != want:
            raise SystemExit(f"{name}: the reference disagrees with {who}:\n got {got!r} ({err})\nwant {want!r}")

    cases = []
    for name, file, bos, eos in TEMPLATES:
        for conv_name, conv in CONVERSATIONS:
            for agp in (True, False):
                out, err = render(sources[name], conv, agp, bos, eos)
                case = {
                    "name": f"{name}/{conv_name}/{'gen' if agp else 'nogen'}",
                    "template": file,
                    "bos_token": bos,
                    "eos_token": eos,
                    "add_generation_prompt": agp,
                    "messages": conv,
                }
                if err is not None:
                    case["want_error"] = err
                else:
                    case["want"] = out
                cases.append(case)

    for name, source in SNIPPETS:
        out, err = render(source, SHORT, True, "<s>", "</s>")
        case = {"name": "feature/" + name, "source": source, "bos_token": "<s>", "eos_token": "</s>",
                "add_generation_prompt": True, "messages": SHORT}
        if err is not None:
            case["want_error"] = err
        else:
            case["want"] = out
        cases.append(case)

    doc = {
        "about": "Generated by gen_cases.py: each template rendered by Jinja2 " + jinja2.__version__
        + " with transformers' apply_chat_template settings; strftime_now reads " + NOW.isoformat() + ".",
        "now": NOW.isoformat() + "Z",
        "cases": cases,
    }
    with open(os.path.join(here, "cases.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{len(cases)} cases, {sum('want_error' in c for c in cases)} of them errors; "
          f"{len(PUBLISHED)} published outputs agree")


if __name__ == "__main__":
    main()
