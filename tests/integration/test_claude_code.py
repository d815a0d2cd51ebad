"""The Claude Agent SDK driving the real Claude Code CLI, offline: the CLI runs in a network
namespace of its own with only loopback, where a stand-in for Anthropic's API
(tests/integration/anthropic_model.py) answers it, so it can reach nothing else. The sandbox's tools run in
this process (the SDK's in-process MCP server) against a real box."""

from __future__ import annotations

import asyncio
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from hutch import Sandbox
from tests.integration.support import Env, needs_installed

CLAUDE = Path(__file__).parents[2] / ".cache/claude-code/node_modules/.bin/claude"
INNER = r'''
import os, subprocess, sys
subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
model = subprocess.Popen([sys.executable, os.environ["HUTCH_TEST_MODEL"], "8787", os.environ["HUTCH_TEST_COMMAND"]],
                         stdout=subprocess.PIPE, text=True)
assert model.stdout.readline().strip() == "ready"
os.execv(os.environ["HUTCH_TEST_CLAUDE"], [os.environ["HUTCH_TEST_CLAUDE"], *sys.argv[1:]])
'''


@pytest.mark.skipif(shutil.which("unshare") is None, reason="no unshare(1) here to give the CLI a network of its own")
def test_claude_code_runs_the_sandbox_bash_tool(env: Env, tmp_path: Path) -> None:
    needs_installed(f"the Claude Code CLI at {CLAUDE}", CLAUDE.exists())
    from claude_agent_sdk import AssistantMessage, ClaudeAgentOptions, ResultMessage, TextBlock, query

    from hutch.integrations.claude_agent import sandbox_tools

    (tmp_path / "inner.py").write_text(INNER)
    wrapper = tmp_path / "claude-offline"
    wrapper.write_text(f"#!/bin/sh\nexec unshare --net -- {sys.executable} {tmp_path / 'inner.py'} \"$@\"\n")
    wrapper.chmod(0o755)
    (tmp_path / "home").mkdir()
    sandbox = Sandbox.create("claude-code")
    try:
        server, allowed = sandbox_tools(sandbox)
        options = ClaudeAgentOptions(
            mcp_servers={"hutch": server}, allowed_tools=allowed, cli_path=str(wrapper), max_turns=4,
            setting_sources=[], env={
                "ANTHROPIC_BASE_URL": "http://127.0.0.1:8787", "ANTHROPIC_API_KEY": "offline", "HOME": str(tmp_path / "home"),
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1",
                "HUTCH_TEST_MODEL": str(Path(__file__).parent / "anthropic_model.py"), "HUTCH_TEST_CLAUDE": str(CLAUDE),
                "HUTCH_TEST_COMMAND": "uname -s; echo made-by-claude > /tmp/claude.txt; cat /tmp/claude.txt"})

        async def run() -> list[Any]:
            return [m async for m in query(prompt="Run a command in the sandbox.", options=options)]

        messages = asyncio.run(asyncio.wait_for(run(), 180))
    finally:
        kept = sandbox.files.read("/tmp/claude.txt") if sandbox.get_info().status == "active" else b""
        audit = [(e.op, e.detail) for e in sandbox.get_audit_log().entries]
        sandbox.kill()
    texts = [b.text for m in messages if isinstance(m, AssistantMessage) for b in m.content if isinstance(b, TextBlock)]
    assert any("Linux" in t and "made-by-claude" in t for t in texts), texts
    assert isinstance(messages[-1], ResultMessage) and not messages[-1].is_error
    assert kept == b"made-by-claude\n"
    assert ("exec", "uname -s; echo made-by-claude > /tmp/claude.txt; cat /tmp/claude.txt") in audit
