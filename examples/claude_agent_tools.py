"""The Claude Agent SDK with the sandbox's tools as an in-process SDK MCP server.

With ANTHROPIC_API_KEY and the Claude Code CLI installed, Claude runs the task through the
sandbox's bash tool. Offline, the same server's tools are called through the official MCP
client, as Claude Code would call them.

    python examples/claude_agent_tools.py [--offline]
"""

from __future__ import annotations

import asyncio
import os
import sys

from hutch import Sandbox
from hutch.integrations.claude_agent import sandbox_tools


async def main() -> None:
    sandbox = Sandbox.create("claude-example")
    try:
        server, allowed = sandbox_tools(sandbox)
        if os.environ.get("ANTHROPIC_API_KEY") and "--offline" not in sys.argv:
            from claude_agent_sdk import ClaudeAgentOptions, query

            options = ClaudeAgentOptions(mcp_servers={"hutch": server}, allowed_tools=allowed)
            async for message in query(prompt="Run `uname -a` in the sandbox and tell me the kernel.",
                                       options=options):
                print(message)
            return
        from mcp import Client

        async with Client(server["instance"]) as client:
            print("tools:", [t.name for t in (await client.list_tools()).tools], "allowed as", allowed)
            result = await client.call_tool("bash", {"command": "uname -sr"})
            print(result.content[0].text)
    finally:
        sandbox.kill()


asyncio.run(main())
