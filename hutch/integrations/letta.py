"""The sandbox's tools for Letta, as client-side tools: Letta's agent asks for a tool call, this
process runs it in the box and hands the result back.

    tools = sandbox_tools(sandbox)
    tools.schemas              # [{"name", "description", "parameters"}]: register them as client tools
    tools.execute(name, args)  # the text to return to the agent (await tools.execute_async(...))

For a Letta server that runs tools itself, attach `hutch mcp serve` as an MCP server instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hutch.integrations.tools import AnySandbox, CanUseTool, ToolSpec, invoke, run_blocking, specs


@dataclass
class LettaTools:
    sandbox: AnySandbox
    can_use_tool: CanUseTool | None = None
    run_code: bool = False  # run_code too, for a box of hutch/code-interpreter

    @property
    def tools(self) -> tuple[ToolSpec, ...]:
        return specs(self.run_code)

    @property
    def schemas(self) -> list[dict[str, Any]]:
        return [{"name": s.name, "description": s.description, "parameters": s.parameters} for s in self.tools]

    async def execute_async(self, name: str, arguments: dict[str, Any] | str) -> str:
        spec = next((s for s in self.tools if s.name == name), None)
        if spec is None:
            return f"error: no tool {name!r}"
        return await invoke(spec, self.sandbox, arguments, self.can_use_tool)

    def execute(self, name: str, arguments: dict[str, Any] | str) -> str:
        """With the blocking Sandbox."""
        return run_blocking(self.execute_async(name, arguments))


def sandbox_tools(sandbox: AnySandbox, can_use_tool: CanUseTool | None = None, run_code: bool = False) -> LettaTools:
    return LettaTools(sandbox, can_use_tool, run_code)
