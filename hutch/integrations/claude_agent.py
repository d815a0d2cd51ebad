"""The sandbox's tools for the Claude Agent SDK, as an in-process SDK MCP server:

    server, allowed = sandbox_tools(sandbox)
    ClaudeAgentOptions(mcp_servers={"hutch": server}, allowed_tools=allowed)
"""

from __future__ import annotations

from typing import Any

from hutch.integrations._extra import missing
from hutch.integrations.tools import AnySandbox, CanUseTool, ToolSpec, invoke, specs

try:
    from claude_agent_sdk import SdkMcpTool, create_sdk_mcp_server, tool
    from claude_agent_sdk.types import McpSdkServerConfig
except ImportError as e:  # pragma: no cover - depends on the extra
    raise missing("claude-agent", e) from e

SERVER_NAME = "hutch"


def _tool(spec: ToolSpec, sandbox: AnySandbox, can_use_tool: CanUseTool | None) -> SdkMcpTool[Any]:
    async def handler(args: dict[str, Any]) -> dict[str, Any]:
        text = await invoke(spec, sandbox, args, can_use_tool)
        failed = text.startswith(("error:", "denied:"))
        return {"content": [{"type": "text", "text": text}], **({"is_error": True} if failed else {})}

    result: SdkMcpTool[Any] = tool(spec.name, spec.description, spec.parameters)(handler)
    return result


def sandbox_tools(sandbox: AnySandbox, can_use_tool: CanUseTool | None = None,
                  name: str = SERVER_NAME, run_code: bool = False) -> tuple[McpSdkServerConfig, list[str]]:
    """The SDK MCP server holding bash, write_file and read_file (and, with `run_code`, run_code
    for a box of hutch/code-interpreter), and the tool names to allow (`mcp__hutch__bash`, ...)."""
    tools = specs(run_code)
    server = create_sdk_mcp_server(name=name, tools=[_tool(spec, sandbox, can_use_tool) for spec in tools])
    return server, [f"mcp__{name}__{spec.name}" for spec in tools]
