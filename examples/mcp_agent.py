"""An agent with hutch's MCP server attached (`hutch mcp serve` over stdio): the model creates
its own sandbox, runs code in it and deletes it, through MCP tools.

    python examples/mcp_agent.py [--offline]
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

from _offline import agents_model, openai_base_url
from agents import Agent, Runner
from agents.mcp import MCPServerStdio

from hutch.integrations.scripted_model import answer, call, text_of


def the_box(messages: list[dict]) -> str:
    return next(json.loads(text_of(m))["id"] for m in messages if m.get("role") == "tool" and '"id"' in text_of(m))


SCRIPT = [call("sandbox_create", name="mcp-example"),
          lambda messages: call("sandbox_exec", sandbox_id=the_box(messages), command="python3 -c 'print(2**10)'"),
          lambda messages: call("sandbox_kill", sandbox_id=the_box(messages)),
          answer("2**10 is 1024.")]


async def main() -> None:
    server = MCPServerStdio(params={"command": sys.executable, "args": ["-m", "hutch.cli", "mcp", "serve"],
                                    "env": dict(os.environ)}, client_session_timeout_seconds=120)
    async with server, asyncio.timeout(600):
        with openai_base_url(SCRIPT) as base_url:
            agent = Agent(name="mcp-user", instructions="Use the hutch tools: create a sandbox, compute in it, "
                                                        "then kill it.", mcp_servers=[server], model=agents_model(base_url))
            print((await Runner.run(agent, "What is 2**10? Compute it in a sandbox.")).final_output)


asyncio.run(main())
