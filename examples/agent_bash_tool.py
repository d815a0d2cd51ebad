"""An agent with a sandboxed bash tool (OpenAI Agents SDK): every command the model emits runs in
a hutch box, never on this machine.

    python examples/agent_bash_tool.py [--offline]
"""

from __future__ import annotations

from _offline import agents_model, openai_base_url
from agents import Agent, Runner

from hutch import Sandbox
from hutch.integrations.openai_agents import sandbox_tools
from hutch.integrations.scripted_model import answer, call

SCRIPT = [call("bash", command="cat /etc/os-release | head -1; python3 --version"),
          answer("The sandbox runs Debian with Python 3.11.")]

sandbox = Sandbox.create("bash-tool-example")
try:
    with openai_base_url(SCRIPT) as base_url:
        agent = Agent(name="sysadmin", instructions="Answer by running commands in the sandbox with bash.",
                      tools=sandbox_tools(sandbox), model=agents_model(base_url))
        result = Runner.run_sync(agent, "Which OS and Python version does the sandbox run?")
    print(result.final_output)
finally:
    sandbox.kill()
