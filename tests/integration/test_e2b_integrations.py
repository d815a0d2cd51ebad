"""Integrations built on E2B, unmodified, against hutch's E2B API and offline.

The OpenAI Agents SDK's E2B sandbox extension (`agents.extensions.sandbox.e2b`, installed by
`openai-agents[e2b]==0.24.0`, which pins e2b 2.31.0) lives in .cache/e2b-openai-agents (made by
scripts/test). tests/integration/e2b_clients/openai_agent.py runs there in a subprocess with only the three E2B
variables and OPENAI_BASE_URL/OPENAI_API_KEY set; the model is hutch's scripted model on loopback.
"""

from __future__ import annotations

import json
import secrets
import subprocess
from pathlib import Path
from typing import Any

import pytest

from hutch import Sandbox
from hutch.integrations.scripted_model import ScriptedModel, answer, call
from tests.integration.support import Env, needs_installed

ROOT = Path(__file__).resolve().parents[2]
AGENT = Path(__file__).resolve().parent / "e2b_clients" / "openai_agent.py"
WORKSPACE = "/home/user/workspace"
CALC = "import pathlib\nprint(pathlib.Path('greeting.txt').read_text().strip(), 6 * 7)\n"


def run_agent(env: Env, model: ScriptedModel, on_exit: str, tag: str) -> dict[str, Any]:
    python = ROOT / ".cache" / "e2b-openai-agents" / "bin" / "python"
    needs_installed(f"openai-agents[e2b] in {python.parent.parent}", python.exists())
    variables = {"PATH": "/usr/local/bin:/usr/bin:/bin", "E2B_API_KEY": env.server.e2b_key(),
                 "E2B_API_URL": f"{env.url}/e2b", "E2B_SANDBOX_URL": f"{env.url}/e2b/envd",
                 "OPENAI_BASE_URL": model.url, "OPENAI_API_KEY": "offline", "OPENAI_AGENTS_DISABLE_TRACING": "1"}
    done = subprocess.run([str(python), str(AGENT), on_exit, tag], env=variables, capture_output=True, text=True,
                          timeout=300)
    lines = [x for x in done.stdout.splitlines() if x.startswith("{")]
    assert done.returncode == 0 and lines, f"the agent failed:\n{done.stdout}\n{done.stderr[-6000:]}"
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def script() -> list[Any]:
    return [call("exec_command", cmd=f"cat > calc.py <<'EOF'\n{CALC}EOF"),
            call("exec_command", cmd="python3 calc.py | tee out.txt; whoami; pwd"),
            answer("it printed the greeting and 42")]


@pytest.mark.parametrize("on_exit", ["pause", "kill"])
def test_openai_agents_sdk_e2b_sandbox(env: Env, on_exit: str) -> None:
    tag = secrets.token_hex(4)
    with ScriptedModel(script()) as model:
        out = run_agent(env, model, on_exit, tag)
    assert out["final_output"] == "it printed the greeting and 42"
    results = model.tool_results()
    assert len(results) == 2 and all("Process exited with code 0" in r for r in results), results
    # the command's output reached the model: the manifest's file, the model's script, the box user
    assert results[1].endswith("Output:\nhello from the manifest 42\nuser\n/home/user/workspace\n"), results[1]
    boxes = Sandbox.list(metadata={"suite": "openai-agents", "tag": tag})
    if on_exit == "kill":
        assert boxes == []  # the extension killed it at the end of the run
        return
    assert [b.status for b in boxes] == ["paused"]  # pause_on_exit
    box = Sandbox.connect(boxes[0].id)  # resumes it
    try:
        assert box.files.read(f"{WORKSPACE}/greeting.txt") == b"hello from the manifest\n"  # E2B's files API
        assert box.files.read(f"{WORKSPACE}/calc.py").decode() == CALC  # written by the model's command
        assert box.files.read(f"{WORKSPACE}/out.txt") == b"hello from the manifest 42\n"
    finally:
        box.kill()
