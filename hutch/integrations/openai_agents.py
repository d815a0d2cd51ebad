"""The sandbox's tools for the OpenAI Agents SDK: `Agent(tools=sandbox_tools(sandbox))`."""

from __future__ import annotations

from typing import Any

from hutch.integrations._extra import missing
from hutch.integrations.tools import AnySandbox, CanUseTool, ToolSpec, invoke, specs

try:
    from agents import FunctionTool
    from agents.tool_context import ToolContext
except ImportError as e:  # pragma: no cover - depends on the extra
    raise missing("openai-agents", e) from e


def _tool(spec: ToolSpec, sandbox: AnySandbox, can_use_tool: CanUseTool | None) -> FunctionTool:
    async def on_invoke(_ctx: ToolContext[Any], arguments: str) -> str:
        return await invoke(spec, sandbox, arguments, can_use_tool)

    # not strict: optional inputs (cwd, timeout) stay optional
    return FunctionTool(name=spec.name, description=spec.description, params_json_schema=spec.parameters,
                        on_invoke_tool=on_invoke, strict_json_schema=False)


def sandbox_tools(sandbox: AnySandbox, can_use_tool: CanUseTool | None = None,
                  run_code: bool = False) -> list[FunctionTool]:
    """bash, write_file and read_file against `sandbox` (Sandbox or AsyncSandbox); with `run_code`,
    run_code too, for a box of hutch/code-interpreter."""
    return [_tool(spec, sandbox, can_use_tool) for spec in specs(run_code)]
