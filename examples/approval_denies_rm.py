"""Approval: every tool call passes through `can_use_tool` first; this one refuses `rm`, and the
model reads why.

    python examples/approval_denies_rm.py [--offline]
"""

from __future__ import annotations

from typing import Any

from _offline import agents_model, openai_base_url
from agents import Agent, Runner

from hutch import Sandbox
from hutch.integrations.openai_agents import sandbox_tools
from hutch.integrations.scripted_model import answer, call
from hutch.integrations.tools import Allow, Deny


def can_use_tool(name: str, tool_input: dict[str, Any]) -> Allow | Deny:
    if name == "bash" and "rm " in f" {tool_input['command']} ":
        return Deny("Deleting files needs a human: ask the user instead.")
    return Allow()


SCRIPT = [call("bash", command="rm -rf /home/user/project"),
          answer("I was not allowed to delete /home/user/project; please confirm you want it gone.")]

sandbox = Sandbox.create("approval-example")
try:
    sandbox.files.write("/home/user/project/README", "keep me")
    with openai_base_url(SCRIPT) as base_url:
        agent = Agent(name="cleaner", instructions="Tidy the sandbox.", model=agents_model(base_url),
                      tools=sandbox_tools(sandbox, can_use_tool=can_use_tool))
        print(Runner.run_sync(agent, "Delete /home/user/project.").final_output)
    print("still there:", sandbox.files.read_text("/home/user/project/README"))
finally:
    sandbox.kill()
