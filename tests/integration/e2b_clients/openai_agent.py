"""An OpenAI Agents SDK agent whose sandbox is the SDK's own E2B extension, pointed at hutch.

Run by tests/integration/test_e2b_integrations.py with the python of .cache/e2b-openai-agents
(`openai-agents[e2b]==0.24.0`, which pins e2b 2.31.0) and only E2B_API_KEY, E2B_API_URL,
E2B_SANDBOX_URL, OPENAI_BASE_URL and OPENAI_API_KEY set: the model is hutch's scripted model on
loopback, the box a hutch box. `python openai_agent.py <pause|kill> <tag>` prints one JSON object.

The agent is a SandboxAgent with the Shell capability only (exec_command and write_stdin, run over
E2B's pty calls). The default Filesystem capability's apply_patch is a Responses-API custom tool,
which the Chat Completions model the scripted server speaks cannot carry. The manifest writes a
file through E2B's files API; the model writes another and runs a command through exec_command.

The workspace root is /home/user/workspace, not the SDK's default /workspace: the extension makes
its root with E2B's MakeDir as the box's default user ("user"). envd runs as root and makes any
directory for any user (then chowns it); hutch holds a user's file calls to the user's rights, so
MakeDir("/workspace") as "user" is permission_denied there and the session would not start.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from agents import OpenAIChatCompletionsModel, RunConfig, Runner, set_tracing_disabled
from agents.extensions.sandbox.e2b import E2BSandboxClient, E2BSandboxClientOptions
from agents.sandbox import Manifest, SandboxAgent, SandboxRunConfig
from agents.sandbox.capabilities import Shell
from agents.sandbox.entries import File
from openai import AsyncOpenAI

ON_EXIT = sys.argv[1] if len(sys.argv) > 1 else "pause"
TAG = sys.argv[2] if len(sys.argv) > 2 else ""
ROOT = "/home/user/workspace"


async def main() -> dict[str, Any]:
    set_tracing_disabled(True)  # traces would go to OpenAI; the scripted model is the only peer
    model = OpenAIChatCompletionsModel(model="scripted", openai_client=AsyncOpenAI(
        base_url=os.environ["OPENAI_BASE_URL"], api_key=os.environ["OPENAI_API_KEY"]))
    agent = SandboxAgent(
        name="e2b-coder", instructions="Work in the sandbox.", model=model, capabilities=[Shell()],
        default_manifest=Manifest(root=ROOT, entries={"greeting.txt": File(content=b"hello from the manifest\n")}))
    options = E2BSandboxClientOptions(sandbox_type="e2b", timeout=300, metadata={"suite": "openai-agents", "tag": TAG},
                                      pause_on_exit=ON_EXIT == "pause", workspace_persistence="tar")
    result = await Runner.run(agent, "Write calc.py, run it and report what it printed.",
                              run_config=RunConfig(sandbox=SandboxRunConfig(client=E2BSandboxClient(), options=options)))
    return {"final_output": result.final_output}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main())), flush=True)
    os._exit(0)  # not the interpreter's own exit: see code_interpreter.py
