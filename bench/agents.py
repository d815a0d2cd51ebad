"""Agent tools: what a tool call costs beside the SDK call it makes, in the same run.

    .venv/bin/python -m bench.agents [-n 50]

`commands.run("true")` through the SDK (the floor), the same through the `bash` tool of the
OpenAI Agents SDK integration (the approval hook and result formatting on top), and
`sandbox_exec` through `hutch mcp serve` over stdio with the official MCP client (a connect
per call, since the MCP server holds no box between calls).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

from bench.common import bench_env, main_for, stats
from hutch import AsyncSandbox
from hutch.integrations.tools import TOOLS, Allow, invoke
from hutch.node import base_image
from hutch.services.config import DEFAULT_CACHE_DIR
from tests.integration.support import ClientArgs


async def _measure(n: int, kw: ClientArgs) -> dict[str, list[float]]:
    from mcp import Client, StdioServerParameters

    sb = await AsyncSandbox.create("bench-agents", **kw)
    bash = next(t for t in TOOLS if t.name == "bash")
    out: dict[str, list[float]] = {"sdk_run_true": [], "tool_bash_true": [], "mcp_sandbox_exec_true": []}
    try:
        for _ in range(n):
            t = time.perf_counter()
            await sb.commands.run("true")
            out["sdk_run_true"].append(time.perf_counter() - t)
            t = time.perf_counter()
            await invoke(bash, sb, {"command": "true"}, lambda _n, _a: Allow())
            out["tool_bash_true"].append(time.perf_counter() - t)
        params = StdioServerParameters(command=sys.executable, args=["-m", "hutch.cli", "mcp", "serve"],
                                       env={**os.environ, "HUTCH_API_KEY": kw["api_key"], "HUTCH_BASE_URL": kw["base_url"]})
        async with Client(params) as client:
            for _ in range(n):
                t = time.perf_counter()
                await client.call_tool("sandbox_exec", {"sandbox_id": sb.id, "command": "true"})
                out["mcp_sandbox_exec_true"].append(time.perf_counter() - t)
    finally:
        await sb.kill()
    return out


def measure(n: int) -> tuple[dict[str, dict[str, float]], list[tuple[str, str]], dict[str, float]]:
    rootfs = base_image.build(DEFAULT_CACHE_DIR)
    with bench_env(rootfs) as (kw, _raw):
        samples = asyncio.run(_measure(n, kw))
    figures = {name: stats(values) for name, values in samples.items()}
    return figures, [("tool_bash_true", "sdk_run_true"), ("mcp_sandbox_exec_true", "sdk_run_true")], {}


def main() -> None:
    main_for("agents", measure)


if __name__ == "__main__":
    main()
