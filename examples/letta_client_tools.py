"""Letta client-side tools: register the schemas with a Letta agent, and run each tool call it
asks for in the sandbox. Here the loop is shown without a Letta server: the tool calls come
from a scripted model (offline) or OpenAI (with a key), as a Letta agent would send them.

    python examples/letta_client_tools.py [--offline]
"""

from __future__ import annotations

import json

from _offline import MODEL, openai_base_url
from openai import OpenAI

from hutch import Sandbox
from hutch.integrations.letta import sandbox_tools
from hutch.integrations.scripted_model import answer, call

SCRIPT = [call("bash", command="nproc; free -m | head -2"), answer("The sandbox has its CPUs and memory listed above.")]

sandbox = Sandbox.create("letta-example")
try:
    tools = sandbox_tools(sandbox)
    print("schemas to register:", [s["name"] for s in tools.schemas])
    with openai_base_url(SCRIPT) as base_url:
        client = OpenAI(base_url=base_url, api_key="offline" if base_url else None)
        messages: list = [{"role": "user", "content": "How many CPUs and how much memory does the sandbox have?"}]
        functions = [{"type": "function", "function": s} for s in tools.schemas]
        while (reply := client.chat.completions.create(model=MODEL, messages=messages, tools=functions)
               .choices[0].message).tool_calls:
            messages.append(reply.model_dump(exclude_none=True))
            for tc in reply.tool_calls:
                result = tools.execute(tc.function.name, tc.function.arguments)
                print(f"[{tc.function.name}] {json.loads(tc.function.arguments)} ->", result.splitlines()[0])
                messages.append({"role": "tool", "tool_call_id": tc.id, "content": result})
    print(reply.content)
finally:
    sandbox.kill()
