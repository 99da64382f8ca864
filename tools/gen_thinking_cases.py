#!/usr/bin/env python3
"""Writes tests/unit/chat_thinking_cases.json: message lists rendered by the real Qwen3-VL-Thinking
chat template (tests/fixtures/tokenizer/qwen3vl_thinking_chat_template.jinja) with Jinja2 set up as
transformers' apply_chat_template sets it up (trim_blocks, lstrip_blocks, tojson without ASCII
escaping). test_chat renders the same messages with the C renderer and compares. Needs python3-jinja2
(Debian); only for regenerating the file, not for `make test`."""
import json
import os

from jinja2.sandbox import ImmutableSandboxedEnvironment

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)
tmpl_path = os.path.join(root, "tests/fixtures/tokenizer/qwen3vl_thinking_chat_template.jinja")
out_path = os.path.join(root, "tests/unit/chat_thinking_cases.json")

env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
env.filters["tojson"] = lambda x, **kw: json.dumps(x, ensure_ascii=False)
tmpl = env.from_string(open(tmpl_path, encoding="utf-8").read())

IMG = {"type": "image_url", "image_url": {"url": "a.png"}}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather now",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
CALL = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}

cases = [
    ("one user turn", [{"role": "user", "content": "Hi"}], None, True),
    ("no generation prompt", [{"role": "user", "content": "Hi"}], None, False),
    ("system and image", [{"role": "system", "content": "Be brief."},
                          {"role": "user", "content": [IMG, {"type": "text", "text": "What is it?"}]}], None, True),
    ("earlier reasoning dropped from content",
     [{"role": "user", "content": "2+2?"},
      {"role": "assistant", "content": "<think>\nadd them\n</think>\n\n4"},
      {"role": "user", "content": "and 3+3?"}], None, True),
    ("earlier reasoning_content dropped",
     [{"role": "user", "content": "2+2?"},
      {"role": "assistant", "content": "4", "reasoning_content": "add them"},
      {"role": "user", "content": "and 3+3?"}], None, True),
    ("close tag only",
     [{"role": "user", "content": "q"},
      {"role": "assistant", "content": "thinking...\n\n</think>\n\nanswer"},
      {"role": "user", "content": "q2"}], None, True),
    ("reasoning kept after the last query (tool loop)",
     [{"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": "", "reasoning_content": "\nI should call the tool.\n", "tool_calls": [CALL]},
      {"role": "tool", "content": "sunny"}], TOOLS, True),
    ("tool loop with content and two calls",
     [{"role": "system", "content": "S"},
      {"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": "<think>\nneed data\n</think>\n\nChecking.", "tool_calls": [CALL, CALL]},
      {"role": "tool", "content": "sunny"}, {"role": "tool", "content": "warm"}], TOOLS, True),
    ("assistant after the query without reasoning",
     [{"role": "user", "content": "q"},
      {"role": "assistant", "content": "", "tool_calls": [CALL]},
      {"role": "tool", "content": "r"},
      {"role": "assistant", "content": "done"}], TOOLS, False),
    ("final assistant turn gets a think block",
     [{"role": "user", "content": "q"}, {"role": "assistant", "content": "partial"}], None, False),
    ("later system message kept",
     [{"role": "user", "content": "a"}, {"role": "system", "content": "s2"}, {"role": "user", "content": "b"}], None, True),
    ("user text that looks like a tool response is not a query",
     [{"role": "user", "content": "q"},
      {"role": "assistant", "content": "<think>r</think>x"},
      {"role": "user", "content": "<tool_response>\nout\n</tool_response>"}], None, True),
    ("content parts in assistant",
     [{"role": "user", "content": "q"},
      {"role": "assistant", "content": [{"type": "text", "text": "<think>\nr\n"}, {"type": "text", "text": "</think>\n\nA"}]},
      {"role": "user", "content": "q2"}], None, True),
]

out = []
for name, messages, tools, agp in cases:
    text = tmpl.render(messages=messages, tools=tools, add_generation_prompt=agp)
    out.append({"name": name, "messages": messages, "tools": tools, "add_generation_prompt": agp, "prompt": text})
with open(out_path, "w", encoding="utf-8") as f:
    json.dump(out, f, ensure_ascii=False, indent=1)
    f.write("\n")
print(f"wrote {len(out)} cases to {out_path}")
