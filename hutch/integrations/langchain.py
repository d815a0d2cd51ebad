"""The sandbox's tools for LangChain: `model.bind_tools(sandbox_tools(sandbox))`, agents, graphs."""

from __future__ import annotations

from typing import Any

from hutch.integrations._extra import missing
from hutch.integrations.tools import AnySandbox, CanUseTool, ToolSpec, invoke, run_blocking, specs
from hutch.sdk import AsyncSandbox

try:
    from langchain_core.tools import StructuredTool
except ImportError as e:  # pragma: no cover - depends on the extra
    raise missing("langchain", e) from e


def _tool(spec: ToolSpec, sandbox: AnySandbox, can_use_tool: CanUseTool | None) -> StructuredTool:
    async def coroutine(**kwargs: Any) -> str:
        return await invoke(spec, sandbox, kwargs, can_use_tool)

    def func(**kwargs: Any) -> str:
        # The blocking Sandbox is used from a loop of its own; an AsyncSandbox belongs to its
        # caller's loop and is only awaited (ainvoke).
        return run_blocking(coroutine(**kwargs))

    return StructuredTool.from_function(func=None if isinstance(sandbox, AsyncSandbox) else func, coroutine=coroutine,
                                        name=spec.name, description=spec.description, args_schema=spec.parameters)


def sandbox_tools(sandbox: AnySandbox, can_use_tool: CanUseTool | None = None,
                  run_code: bool = False) -> list[StructuredTool]:
    """bash, write_file and read_file against `sandbox` (and, with `run_code`, run_code for a box of
    hutch/code-interpreter): `invoke` with a Sandbox, `ainvoke` with either."""
    return [_tool(spec, sandbox, can_use_tool) for spec in specs(run_code)]
