"""Every file in examples/ runs, offline (the scripted model in place of an LLM), against the
test server, and prints what its guide says it shows."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hutch import Sandbox
from tests.integration.support import Env

EXAMPLES = Path(__file__).parents[2] / "examples"
EXPECTED = {
    "agent_bash_tool.py": ["Debian with Python 3.11"],
    "write_run_read.py": ["[bash] exit code: 0", "file: [2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47]"],
    "streaming_tool_calls.py": ["tool output: ['exit code: 0', 'stdout:', 'step 1']", "final: Counted to three"],
    "conversation_box.py": ["agent: Noted.", "between turns the box is paused", "agent: Your favourite number is 7.",
                            "cleaned up 1 box"],
    "approval_denies_rm.py": ["I was not allowed", "still there: keep me"],
    "mcp_agent.py": ["2**10 is 1024."],
    "letta_client_tools.py": ["schemas to register: ['bash', 'spawn', 'write_file', 'read_file']", "[bash] {'command':"],
    "claude_agent_tools.py": ["tools: ['bash', 'spawn', 'write_file', 'read_file']", "Linux"],
}


def test_every_example_is_listed() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("*.py") if not p.name.startswith("_")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_runs_offline(name: str, env: Env) -> None:
    before = {i.id for i in Sandbox.list()}
    environ = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")}
    environ.update(HUTCH_API_KEY=env.key_a, HUTCH_BASE_URL=env.url)
    r = subprocess.run([sys.executable, str(EXAMPLES / name), "--offline"], capture_output=True, text=True,
                       env=environ, timeout=300, cwd=EXAMPLES.parent)
    assert r.returncode == 0, r.stderr[-3000:]
    for line in EXPECTED[name]:
        assert line in r.stdout, f"{line!r} not in:\n{r.stdout}"
    assert {i.id for i in Sandbox.list()} == before, "the example cleaned up its boxes"
