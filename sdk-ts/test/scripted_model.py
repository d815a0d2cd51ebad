"""hutch's scripted model (hutch.integrations.scripted_model), served for the TypeScript tests.

    python scripted_model.py SCRIPT_JSON

SCRIPT_JSON is a list of steps: {"call": tool, "args": {...}} for a tool call, {"answer": text}
for a final answer, or {"answer_with_last_tool_result": prefix} for an answer that quotes the last
tool result it was given. Prints the server's base URL (OpenAI's Chat Completions API) on the first
line, serves until its stdin closes, then prints every tool result it was given, as JSON.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from hutch.integrations.scripted_model import ScriptedModel, Step, answer, call, text_of


def _quoting(prefix: str) -> Any:
    def step(messages: list[dict[str, Any]]) -> Step:
        results = [text_of(m) for m in messages if m.get("role") == "tool"]
        return answer(prefix + (results[-1] if results else "(no tool result)"))
    return step


def _step(d: dict[str, Any]) -> Any:
    if "call" in d:
        return call(d["call"], **d.get("args", {}))
    if "answer_with_last_tool_result" in d:
        return _quoting(d["answer_with_last_tool_result"])
    return answer(d["answer"])


def main() -> None:
    script = [_step(d) for d in json.loads(sys.argv[1])]
    with ScriptedModel(script) as model:
        print(model.url, flush=True)
        sys.stdin.read()
        print(json.dumps({"tool_results": model.tool_results(), "requests": len(model.requests)}), flush=True)


if __name__ == "__main__":
    main()
